//go:build !linux

package etcdclient

const rawReads = false

// read is a plain read. Not knowing whether it waited, it never lets Read
// coalesce: each change is read as it comes.
func (c *watchConn) read(p []byte) (int, error) {
	return c.Conn.Read(p)
}

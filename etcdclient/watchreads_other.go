//go:build !linux

package etcdclient

import (
	"syscall"
	"time"
)

const rawReads = false

// tcpOptions sets nothing off Linux, where gRPC sets no TCP_USER_TIMEOUT
// either; the dialer keeps Go's own keepalive there.
func tcpOptions(time.Duration) func(string, string, syscall.RawConn) error { return nil }

// read is a plain read. Not knowing whether it waited, it never lets Read
// coalesce: each change is read as it comes.
func (c *watchConn) read(p []byte) (int, error) {
	return c.Conn.Read(p)
}

// holdMark sets none: off Linux Read never coalesces.
func holdMark(syscall.RawConn) int { return 0 }

func (c *watchConn) hold() {}

// windowTimer is none off Linux: windows sleep with time.Sleep.
type windowTimer struct{}

func newWindowTimer() *windowTimer                { return nil }
func (t *windowTimer) sleep(d time.Duration) bool { return false }
func (t *windowTimer) close()                     {}

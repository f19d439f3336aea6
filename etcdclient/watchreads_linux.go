package etcdclient

import (
	"errors"
	"io"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const rawReads = true

// tcpOptions is the dialer's Control: what gRPC's own dialer and transport
// would set on the socket.
func tcpOptions(userTimeout time.Duration) func(string, string, syscall.RawConn) error {
	return func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = errors.Join(
				unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1),
				unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(userTimeout.Milliseconds())))
		})
		return errors.Join(err, serr)
	}
}

// hold sets the socket's receive low-water mark (SO_RCVLOWAT) to n bytes:
// Linux signals a TCP socket readable, and so wakes the poller's thread,
// only once n bytes are queued, while a read that does not block still
// returns what is there. Setting it back to 1 signals what is queued.
// Raw, for the reason read is. A socket that ignores the mark (a unix
// socket) costs only the wakes.
func (c *watchConn) hold(n int) {
	if c.rc == nil {
		return
	}
	v := int32(n)
	_ = c.rc.Control(func(fd uintptr) {
		unix.RawSyscall6(unix.SYS_SETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_RCVLOWAT,
			uintptr(unsafe.Pointer(&v)), unsafe.Sizeof(v), 0)
	})
}

func (c *watchConn) read(p []byte) (int, error) {
	if c.rc == nil || len(p) == 0 {
		return c.Conn.Read(p) // not knowing whether it waited, never coalesces
	}
	var n int
	var errno unix.Errno
	err := c.rc.Read(func(fd uintptr) bool {
		for {
			// Raw: a read of a non-blocking socket never blocks, and the
			// entersyscall a plain read makes wakes the scheduler's
			// monitor thread (WatchReads says why that matters).
			r, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			switch e {
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				c.waited = true
				return false // the poller waits, and calls again
			}
			n, errno = int(r), e
			return true
		}
	})
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, os.NewSyscallError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

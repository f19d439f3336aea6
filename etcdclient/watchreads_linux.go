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

// holdMark is the receive low-water mark (SO_RCVLOWAT) of a TCP watch
// socket through a coalescing window. Linux (4.18 on) signals a socket
// readable only once that many bytes are queued, or on its end or an
// error, so the segments of a burst do not wake the poller's thread one by
// one; a read that does not block still returns what is queued. Any size
// well past a window's changes will do, but a mark the kernel finds too
// big for the receive buffer grows the buffer (6.18 doubled it, to 258
// KiB, for this one), and some kernels also clamp the receive window to
// the mark for good: so 32 KiB, and at most a quarter of the buffer.
func holdMark(rc syscall.RawConn) int {
	mark := 32 << 10
	_ = rc.Control(func(fd uintptr) {
		if buf, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF); err == nil {
			mark = min(mark, buf/4)
		}
	})
	return mark
}

// hold raises the socket's low-water mark for a window.
func (c *watchConn) hold() {
	if c.mark <= 1 {
		return
	}
	_ = c.rc.Control(func(fd uintptr) {
		c.held = setMark(fd, c.mark) == 0
	})
}

// setMark sets SO_RCVLOWAT. Raw, for the reason read is.
func setMark(fd uintptr, n int) unix.Errno {
	v := int32(n)
	_, _, e := unix.RawSyscall6(unix.SYS_SETSOCKOPT, fd, unix.SOL_SOCKET, unix.SO_RCVLOWAT,
		uintptr(unsafe.Pointer(&v)), unsafe.Sizeof(v), 0)
	return e
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
				if c.held {
					// The mark is lowered only now that nothing is
					// queued: lowering it over queued data signals the
					// socket readable, which would wake the poller's
					// thread for data this goroutine is about to read
					// itself. Then once more for what came in between.
					setMark(fd, 1)
					c.held = false
					continue
				}
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

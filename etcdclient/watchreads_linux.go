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
	if c.mark <= 1 || c.held {
		return // none, or still raised: a window that found data lowers it only once one finds none
	}
	_ = c.rc.Control(func(fd uintptr) {
		c.held = setMark(fd, c.mark) == 0
	})
}

// windowTimer is a timerfd that a window waits on through the poller. A
// window waited out with time.Sleep woke the frontend's threads four
// times: the Go timer made the scheduler's monitor (sysmon) sleep only
// until it and then once more while the reading ran, and the poller,
// which sleeps in whole milliseconds rounded down, woke early and slept
// again. A timerfd is no Go timer: the poller sleeps until it fires, to
// the nanosecond, and the monitor sleeps on until the next Go timer (the
// store's checks, a second or so away). bench/changecpu measures the
// difference (bench/README.md, stop 41).
type windowTimer struct {
	f  *os.File
	rc syscall.RawConn
}

// newWindowTimer returns a timer, or nil where the kernel refuses one
// (a seccomp profile, say): the windows then sleep as they did.
func newWindowTimer() *windowTimer {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), "watch-window-timer") // non-blocking: the poller waits for it
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil
	}
	return &windowTimer{f: f, rc: rc}
}

// sleep waits d, or until the timer is closed (the connection is), and
// reports false only if the kernel would not arm it: the caller sleeps
// then. Raw system calls, for the reason read makes them raw.
func (t *windowTimer) sleep(d time.Duration) bool {
	if t == nil {
		return false
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	var errno unix.Errno
	if err := t.rc.Control(func(fd uintptr) {
		_, _, errno = unix.RawSyscall6(unix.SYS_TIMERFD_SETTIME, fd, 0, uintptr(unsafe.Pointer(&spec)), 0, 0, 0)
	}); err != nil {
		return true // closed
	}
	if errno != 0 {
		return false
	}
	var expirations [8]byte
	_ = t.rc.Read(func(fd uintptr) bool {
		for {
			_, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&expirations[0])), uintptr(len(expirations)))
			if e != unix.EINTR {
				return e != unix.EAGAIN // EAGAIN: not yet; the poller waits, and calls again
			}
		}
	})
	return true
}

func (t *windowTimer) close() {
	if t != nil {
		t.f.Close()
	}
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

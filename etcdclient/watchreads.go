package etcdclient

import (
	"context"
	"net"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
)

// WatchReads is the dial option of dnsd's watch clients. A change read
// alone costs a frontend more in waking up than in the change itself: the
// poller's thread switch, and the Go scheduler's monitor thread (sysmon),
// which every system call wakes from its sleep and which then polls every
// 20 us for a while. On the 2-vCPU VM those switches were most of a
// change's 185-235 us (bench/README.md, stop 34). So each connection's
// reads:
//
//   - go to the kernel without telling the scheduler they might block: the
//     socket is non-blocking, and the poller does the waiting;
//   - after a read that had to wait for data, wait coalesce before the
//     next, so that the rest of a burst of changes is read, and the
//     frontend woken, once. The first change of a burst is read at once;
//     the ones after it wait at most coalesce.
//
// coalesce 0 keeps the raw reads and reads each change as it comes. Off
// Linux the reads are plain and never coalesce.
func WatchReads(coalesce time.Duration) grpc.DialOption {
	return grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		network, address := target(addr)
		c, err := d.DialContext(ctx, network, address)
		if err != nil {
			return nil, err
		}
		return newWatchConn(c, coalesce), nil
	})
}

// target is the network and address of a gRPC address. clientv3 hands
// unix endpoints to gRPC as "unix:" or "unix://" addresses, which gRPC's
// own dialer understands and package net does not.
func target(addr string) (network, address string) {
	if rest, ok := strings.CutPrefix(addr, "unix://"); ok {
		return "unix", rest
	}
	if rest, ok := strings.CutPrefix(addr, "unix:"); ok {
		return "unix", rest
	}
	return "tcp", addr
}

// watchConn is a connection read as WatchReads says. gRPC reads it from
// one goroutine only, so its fields need no lock.
type watchConn struct {
	net.Conn
	rc       syscall.RawConn // nil off Linux
	coalesce time.Duration
	waited   bool // the last read found no data and waited for the poller
	full     bool // the last read filled the buffer: more is likely there
}

func newWatchConn(c net.Conn, coalesce time.Duration) *watchConn {
	w := &watchConn{Conn: c, coalesce: coalesce}
	if sc, ok := c.(syscall.Conn); ok && rawReads {
		w.rc, _ = sc.SyscallConn()
	}
	return w
}

func (c *watchConn) Read(p []byte) (int, error) {
	if c.waited && !c.full && c.coalesce > 0 {
		time.Sleep(c.coalesce)
	}
	c.waited = false
	n, err := c.read(p)
	c.full = n == len(p)
	return n, err
}

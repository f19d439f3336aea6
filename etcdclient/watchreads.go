package etcdclient

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/etcdns/etcdns/config"
)

// WatchReads is the dial option of dnsd's watch clients (the watch, its
// progress requests, and the liveness and lag probes). A change read alone
// costs a frontend more in waking up than in the change itself: the
// poller's thread switch, and the Go scheduler's monitor thread (sysmon),
// which a system call made through entersyscall wakes from its sleep and
// which then polls every 20 us for a while. On the 2-vCPU VM those
// switches were most of a change's 210-225 us (bench/README.md, stop 34).
// So each connection's reads:
//
//   - go to the kernel without telling the scheduler they might block: the
//     socket is non-blocking, and the poller does the waiting;
//   - after a read that had to wait for a change (the first after a quiet
//     spell), wait coalesce before the next, so that the rest of a burst
//     of changes is read, and the frontend woken, once (through the window
//     the socket's low-water mark is raised: see holdMark). A window that
//     brought a change or more opens the next at once: the changes are
//     still coming, and each window reads all that came in it. A read
//     that brought less than a change (a progress answer, a liveness
//     read's reply) opens none: what arrives next is read as it comes.
//     Nothing that has arrived waits longer than coalesce.
//
// coalesce 0 keeps the raw reads and reads each change as it comes. Off
// Linux the reads are plain and never coalesce.
//
// c is the settings the clients are dialled with. gRPC sets the socket's
// TCP_USER_TIMEOUT to its keepalive timeout only on a *net.TCPConn, which
// this connection is not, so the dialer sets it (and the kernel's
// keepalive, as gRPC's own dialer does): a member that stops acknowledging
// is still cut off by the kernel within the timeout. Unlike gRPC's dialer
// it ignores HTTPS_PROXY: dnsd's watch connects to etcd directly.
//
// conns, if not nil, keeps the connections open and counts what they
// read (WatchConns).
func WatchReads(c config.Etcd, coalesce time.Duration, conns *WatchConns) grpc.DialOption {
	return grpc.WithContextDialer(watchDialer(dialTimeout(c), coalesce, conns))
}

// WatchConns are the connections a WatchReads option dialled and has not
// seen closed.
type WatchConns struct {
	received atomic.Uint64
	mu       sync.Mutex
	open     map[*watchConn]bool
}

// Received is every byte the connections have read: what a frontend
// costs its etcd member or proxy in bandwidth (docs/fleet.md).
func (w *WatchConns) Received() uint64 { return w.received.Load() }

// Reset closes every open connection; gRPC dials again for the next
// request. Through an address that balances connections (a Service in
// front of etcd grpc-proxies) the new one may reach another proxy: a
// watch moved on the same endpoint otherwise stays on the same connection,
// the same proxy and its same upstream watch.
func (w *WatchConns) Reset() {
	w.mu.Lock()
	open := w.open
	w.open = nil
	w.mu.Unlock()
	for c := range open {
		c.Close()
	}
}

func (w *WatchConns) add(c *watchConn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.open == nil {
		w.open = map[*watchConn]bool{}
	}
	w.open[c] = true
}

func (w *WatchConns) remove(c *watchConn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.open, c)
}

func watchDialer(userTimeout, coalesce time.Duration, conns *WatchConns) func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		network, address := target(addr)
		var d net.Dialer
		if ctl := tcpOptions(userTimeout); ctl != nil && network == "tcp" {
			d.Control, d.KeepAlive = ctl, -1 // the kernel's keepalive, as gRPC's dialer has it
		}
		c, err := d.DialContext(ctx, network, address)
		if err != nil {
			return nil, err
		}
		w := newWatchConn(c, network, coalesce)
		if conns != nil {
			w.conns = conns
			conns.add(w)
		}
		return w, nil
	}
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
	open     bool // the last read brought a change after a wait or a window: the next waits a window
	// mark is the socket's receive low-water mark through a window (0:
	// none is set), and held says it is set. See holdMark.
	mark int
	held bool
	// timer is what a window waits on where the poller can wait for it
	// (Linux: see windowTimer); nil: time.Sleep.
	timer *windowTimer
	// conns counts the bytes read and keeps the connection open until it
	// is closed (WatchReads); nil: none.
	conns *WatchConns
}

func newWatchConn(c net.Conn, network string, coalesce time.Duration) *watchConn {
	w := &watchConn{Conn: c, coalesce: coalesce}
	if sc, ok := c.(syscall.Conn); ok && rawReads {
		w.rc, _ = sc.SyscallConn()
	}
	if w.rc != nil && network == "tcp" && coalesce > 0 {
		w.mark = holdMark(w.rc)
		w.timer = newWindowTimer()
	}
	return w
}

// Close closes the connection and the window's timer, which wakes a Read
// waiting out a window.
func (c *watchConn) Close() error {
	if c.conns != nil {
		c.conns.remove(c)
	}
	c.timer.close()
	return c.Conn.Close()
}

func (c *watchConn) Read(p []byte) (int, error) {
	window := c.coalesce > 0 && !c.full && c.open
	if window {
		// Each segment arriving in the window would still wake the
		// poller's thread, for nothing: no goroutine waits on the socket
		// while this one sleeps. That was a thread switch a change
		// (bench/changecpu, stop 35). read lowers the mark again.
		c.hold()
		if !c.timer.sleep(c.coalesce) {
			time.Sleep(c.coalesce)
		}
	}
	c.waited = false
	n, err := c.read(p)
	if c.conns != nil && n > 0 {
		c.conns.received.Add(uint64(n))
	}
	c.full = n == len(p)
	// A change read after a wait is likely the first of a burst; one read
	// after a window, that the changes are still coming (without that the
	// change after each window came alone: two wakes for every window's
	// worth of a steady stream, not one). What is smaller than a change (a
	// progress answer, a liveness read's reply or its trailers, a ping)
	// opens none: an idle frontend paid an empty window, a wake and two
	// system calls, for each reply to its liveness read (stop 38's strace).
	c.open = (c.waited || window) && n >= changeMin
	return n, err
}

// changeMin is the least a read must bring to open a window: under one
// change's HTTP/2 frame (a watch response with one event is 150-250
// bytes), over a progress answer's or a unary reply's.
const changeMin = 128

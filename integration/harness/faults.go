package harness

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Start starts a process again after Stop or Kill, with the same arguments,
// appending to the same log, and waits for readiness. Unlike Restart it
// leaves the time in between to the test: an etcd kept down for a minute,
// for example, then brought back on its data directory and ports.
func (p *Process) Start() {
	p.t.Helper()
	select {
	case <-p.Done():
	default:
		p.t.Fatalf("%s: Start while it is still running", p.Name)
	}
	p.start()
}

// Compact compacts e's history up to its current revision and returns that
// revision. The compaction is physical (it returns once the old revisions
// are gone), so a watch from any earlier revision fails with ErrCompacted.
func (e *Etcd) Compact(t testing.TB) int64 {
	t.Helper()
	cli := e.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := cli.Get(ctx, "/", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	rev := r.Header.Revision
	if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("compacting etcd at revision %d: %v", rev, err)
	}
	return rev
}

// Proxy forwards TCP connections from a loopback port to a target, and can
// cut them or hold what they carry: a way to separate one client from a
// server that others still reach, without pausing either.
type Proxy struct {
	Addr string // 127.0.0.1:port, dial this instead of the target

	target string
	l      net.Listener

	mu    sync.Mutex
	held  *sync.Cond // on mu; broadcast when hold or cut changes
	hold  bool
	cut   bool
	conns map[net.Conn]bool
}

// StartProxy listens on a free loopback port and forwards to target
// (host:port) until the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: l.Addr().String(), target: target, l: l, conns: map[net.Conn]bool{}}
	p.held = sync.NewCond(&p.mu)
	go p.serve()
	t.Cleanup(func() {
		l.Close()
		p.Cut()
	})
	return p
}

// Hold stops forwarding in both directions without closing anything: what
// either side sends waits in the proxy and the socket buffers, in order,
// until Release. A request sent meanwhile is in flight for as long as the
// test wants, and reaches the server whenever Release lets it.
func (p *Proxy) Hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold = true
	p.held.Broadcast()
}

// Release forwards what Hold kept, and everything after it.
func (p *Proxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold = false
	p.held.Broadcast()
}

// Cut closes every forwarded connection and, until Restore, closes new ones
// as soon as they are accepted: the client sees its server go away and
// every reconnect fail at once, as when the server's host is down.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.held.Broadcast()
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// Restore lets connections through again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

func (p *Proxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go p.forward(c)
	}
}

func (p *Proxy) forward(c net.Conn) {
	if !p.track(c) {
		c.Close()
		return
	}
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil || !p.track(up) {
		c.Close()
		if up != nil {
			up.Close()
		}
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		p.copy(dst, src)
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done // either side ending ends both
	c.Close()
	up.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

// copy forwards src to dst until either fails, waiting while held.
func (p *Proxy) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.hold && !p.cut {
				p.held.Wait()
			}
			p.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// track registers a connection for Cut, or reports false while cut.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	p.conns[c] = true
	return true
}

package server

import (
	"bufio"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// TCP bounds (RFC 7766 section 6.2: a server may close idle connections
// and limit how many it keeps). A client that holds a connection without
// finishing a query within the idle time loses it, so connections cannot
// be parked; past the maximum a new connection is closed at once, so
// memory stays bounded whatever the clients do.
const (
	defaultTCPIdle     = 10 * time.Second
	defaultTCPMaxConns = 1024
	tcpWriteTimeout    = 5 * time.Second

	// maxPending is how many octets of responses to pipelined queries are
	// held before they are written, whether or not more queries wait.
	maxPending = 64 << 10
)

// tcpServer accepts and serves DNS over TCP: one goroutine per
// connection, answering its queries in order through a worker of its own.
type tcpServer struct {
	s        *Server
	ln       net.Listener
	idle     time.Duration
	maxConns int

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup

	// turns starts each connection's rotation where the last one's did
	// not: a client that opens a connection a question (one that asks
	// again over TCP after a truncated answer: a large RRset) would
	// otherwise get the same record first every time.
	turns atomic.Uint32
}

func (t *tcpServer) serve() error {
	for {
		c, err := t.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			// Out of file descriptors and the like: wait, as
			// net/http does, rather than spin.
			t.s.log.Warn("accepting a TCP connection failed", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if !t.track(c) {
			t.s.tcpRefused.Inc()
			c.Close()
			continue
		}
		go t.conn(c)
	}
}

// track registers c, false when the server is full or shutting down.
func (t *tcpServer) track(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || len(t.conns) >= t.maxConns {
		return false
	}
	if t.conns == nil {
		t.conns = make(map[net.Conn]struct{})
	}
	t.conns[c] = struct{}{}
	t.wg.Add(1)
	t.s.tcpConns.Inc()
	return true
}

func (t *tcpServer) untrack(c net.Conn) {
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
	t.s.tcpConns.Dec()
	t.wg.Done()
}

// shutdown stops accepting and makes every connection end after the
// query it is answering, then waits for them.
func (t *tcpServer) shutdown() {
	t.ln.Close()
	t.mu.Lock()
	t.closed = true
	for c := range t.conns {
		_ = c.SetReadDeadline(time.Now())
	}
	t.mu.Unlock()
	t.wg.Wait()
}

// conn serves one connection. Queries a client pipelines are read from
// one buffer and their responses written together when the next message
// is not whole in it (or maxPending octets wait), so a busy connection
// costs a system call per burst, not two per query, and no response waits
// on a message still on its way.
func (t *tcpServer) conn(c net.Conn) {
	defer t.untrack(c)
	defer c.Close()
	w := &worker{s: t.s, tcp: true, in: make([]byte, 512), out: make([]byte, 0, 512), turn: t.turns.Add(1)}
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		w.from = a.AddrPort()
	}
	r := bufio.NewReader(c)
	// pending is a pooled buffer while responses wait, nil while the
	// connection waits for queries: an idle connection holds no response
	// memory, and a busy one does not allocate per burst (large answers
	// would otherwise cost more in allocation than in answering).
	var held *[]byte
	var pending []byte
	release := func() { // back to the pool, unless a burst grew it too large to keep
		if held != nil && cap(pending) <= 4*maxPending {
			*held = pending[:0]
			pendingPool.Put(held)
		}
		held, pending = nil, nil
	}
	defer release()
	flush := func(idle bool) bool {
		if len(pending) > 0 {
			_ = c.SetWriteDeadline(time.Now().Add(tcpWriteTimeout))
			if _, err := c.Write(pending); err != nil {
				return false
			}
		}
		pending = pending[:0]
		if idle {
			release()
		}
		return true
	}
	l := make([]byte, 2) // once: an array here would escape to the heap per query
	// Only an answer moves the idle deadline: a client sending messages
	// that get none (empty frames, garbage) would otherwise hold its
	// connection, and one of tcp-max-connections, for ever.
	answered := true
	for {
		if !buffered(r) {
			if !flush(true) {
				return
			}
			// Under the lock: a shutdown between its check and the
			// deadline would otherwise have its deadline undone.
			t.mu.Lock()
			closed := t.closed
			if !closed && answered {
				closed = c.SetReadDeadline(time.Now().Add(t.idle)) != nil
				answered = false
			}
			t.mu.Unlock()
			if closed {
				return
			}
		}
		if _, err := io.ReadFull(r, l); err != nil {
			return
		}
		var out []byte
		if n := int(be16(l)); n > maxQuery {
			// Skipped, not read: a connection must not pin 64 KiB for a
			// message no query needs, nor dnsd parse it.
			if _, err := io.ReadFull(r, w.in[:12]); err != nil {
				return
			}
			if _, err := r.Discard(n - 12); err != nil {
				return
			}
			out = w.oversized(w.in[:12], n)
		} else {
			if cap(w.in) < n {
				w.in = make([]byte, maxQuery)
			}
			if _, err := io.ReadFull(r, w.in[:n]); err != nil {
				return
			}
			out = w.handle(w.in[:n])
		}
		if out != nil {
			answered = true
			if held == nil {
				held = pendingPool.Get().(*[]byte)
				pending = (*held)[:0]
			}
			pending = append(pending, byte(len(out)>>8), byte(len(out)))
			pending = append(pending, out...)
		}
		// A client pipelining questions for large answers without reading
		// them would otherwise grow pending without end; one that does
		// not read blocks this write and loses the connection after
		// tcpWriteTimeout.
		if len(pending) >= maxPending && !flush(false) {
			return
		}
	}
}

// pendingPool holds the response buffers of connections between bursts.
var pendingPool = sync.Pool{New: func() any {
	b := make([]byte, 0, 2*maxPending)
	return &b
}}

// buffered reports whether r holds the next message whole, length and all.
func buffered(r *bufio.Reader) bool {
	if r.Buffered() < 2 {
		return false
	}
	l, _ := r.Peek(2)
	return r.Buffered() >= 2+int(be16(l))
}

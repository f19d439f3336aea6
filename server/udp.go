package server

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/etcdns/etcdns/server/answer"
	"github.com/etcdns/etcdns/server/snap"
)

// cacheLimit bounds the responses kept per snapshot; random 0x20 spellings
// do not reach the cache, but random names could.
const cacheLimit = 1 << 16

// respCache holds packed responses computed from one snapshot. A new
// snapshot gets a new, empty cache, so no entry outlives its data.
type respCache struct {
	snap *snap.Snapshot
	mu   sync.RWMutex
	m    map[string]*cached
}

type cached struct {
	wire    []byte
	counter prometheus.Counter // queries_total{qtype, rcode} of this answer

	searched []prometheus.Counter // the autopath counters of the search that made it
}

func (s *Server) cacheFor(sn *snap.Snapshot) *respCache {
	c := s.cache.Load()
	if c != nil && c.snap == sn {
		return c
	}
	nc := &respCache{snap: sn, m: make(map[string]*cached)}
	if s.cache.CompareAndSwap(c, nc) {
		return nc
	}
	if c = s.cache.Load(); c.snap == sn {
		return c
	}
	return nc // a newer snapshot won; this query's cache dies with it
}

// udpWorker is one reader of one socket, with its own buffers: a query is
// answered on the goroutine that read it, no goroutine or buffer per
// packet.
type udpWorker struct {
	s       *Server
	in, out []byte
	key     []byte

	pc   *net.UDPConn   // where forwarded answers are written later; nil: forward inline
	from netip.AddrPort // the client of the datagram being handled

	opts     *answer.Options      // autopath.go
	searched []prometheus.Counter // bumped by the query being handled
}

// handle returns the response to one datagram, or nil to stay silent.
func (w *udpWorker) handle(b []byte) []byte {
	s := w.s
	start := time.Now()
	sn := s.snapshot()
	q, fast := parseQuery(b)
	var c *respCache
	if fast && sn != nil {
		c = s.cacheFor(sn)
		w.key = cacheKey(w.key, b, q)
		c.mu.RLock()
		e := c.m[string(w.key)]
		c.mu.RUnlock()
		if e != nil && len(e.wire) <= q.size {
			out := append(w.out[:0], e.wire...)
			out[0], out[1] = b[0], b[1]
			out[2] = out[2]&^0x01 | b[2]&0x01 // RD echoed
			out[3] = out[3]&^0x10 | b[3]&0x10 // CD echoed
			w.out = out
			e.counter.Inc()
			for _, c := range e.searched {
				c.Inc()
			}
			s.latency.Observe(time.Since(start).Seconds())
			return out
		}
	}

	if len(b) < 12 || b[2]&0x80 != 0 {
		return nil // no header to answer, or a response: never reply
	}
	req := new(dns.Msg)
	if err := req.Unpack(b); err != nil {
		// As miekg/dns does: FORMERR with the header's id and opcode.
		m := &dns.Msg{MsgHdr: dns.MsgHdr{Id: be16(b), Response: true, Opcode: int(b[2]>>3) & 0xf, Rcode: dns.RcodeFormatError}}
		out, _ := m.PackBuffer(w.out[:0])
		s.count(nil, m, start)
		return out
	}
	size := q.size
	if !fast {
		size = answer.Size(req, true)
	}
	w.searched = w.searched[:0]
	m, personal := answer.AnswerFrom(sn, req, w.options(), s.rot.Add(1), answer.Client{Addr: w.from.Addr().Unmap()})
	if m == nil {
		return nil
	}
	// A forwarded answer never enters the cache: it would outlive its
	// TTL and reach clients the allow list turns away.
	var ask func() *dns.Msg
	servers, under := s.stubbed(sn, req, m, w.from.Addr())
	switch {
	case servers != nil:
		ask = func() *dns.Msg { return s.stubs.Forward(context.Background(), req, servers) }
	case !under && s.forwards(sn, req, m, w.from.Addr()):
		ask = func() *dns.Msg { return s.fwd.Forward(context.Background(), req) }
	}
	forwarded := ask != nil
	if forwarded {
		switch {
		case w.pc == nil:
			m = ask()
		case s.forwardUDP(w.pc, w.from, req, size, start, ask):
			return nil
		default:
			// Every slot taken: the client tries again or elsewhere.
			m.Rcode, m.Authoritative, m.Answer, m.Ns = dns.RcodeServerFailure, false, nil, nil
		}
	}
	out, m, whole := s.pack(m, size, w.out[:0])
	if out == nil {
		return nil
	}
	w.out = out
	counter := s.count(req, m, start)
	if c != nil && whole && !forwarded && !personal && !under && s.cacheable(m) {
		c.mu.Lock()
		if len(c.m) < cacheLimit {
			c.m[string(w.key)] = &cached{wire: append([]byte(nil), out...), counter: counter, searched: slices.Clone(w.searched)}
		}
		c.mu.Unlock()
	}
	return out
}

// forwardUDP answers req with ask (upstreams, a stub domain's
// nameservers) on a goroutine of its own, so a slow upstream holds up the
// queries waiting on it and never the socket's reader. It is false when
// maxForwarding queries wait already.
func (s *Server) forwardUDP(pc *net.UDPConn, to netip.AddrPort, req *dns.Msg, size int, start time.Time, ask func() *dns.Msg) bool {
	select {
	case s.slots <- struct{}{}:
	default:
		return false
	}
	s.forwarding.Add(1)
	go func() {
		defer s.forwarding.Done()
		defer func() { <-s.slots }()
		b, m, _ := s.pack(ask(), size, nil)
		if b != nil {
			_, _ = pc.WriteToUDPAddrPort(b, to)
			s.count(req, m, start)
		}
	}()
	return true
}

// cacheable is false for answers that differ per query: rotated RRsets,
// and refusals once forwarding is on, which depend on the client and RD,
// neither of them in the cache key.
func (s *Server) cacheable(m *dns.Msg) bool {
	if s.fwd != nil && m.Rcode == dns.RcodeRefused {
		return false
	}
	if !s.opts.Rotate {
		return true
	}
	for i := 1; i < len(m.Answer); i++ {
		a, b := m.Answer[i-1].Header(), m.Answer[i].Header()
		if a.Rrtype == b.Rrtype && a.Name == b.Name {
			return false
		}
	}
	return true
}

// serveUDP reads and answers until the socket's read deadline is set in
// the past, then returns; the socket stays open for the caller to close,
// so the answer being written when shutdown starts still goes out.
func (s *Server) serveUDP(pc *net.UDPConn) error {
	w := &udpWorker{s: s, in: make([]byte, 4096), out: make([]byte, 0, 4096), pc: pc}
	for {
		n, addr, err := pc.ReadFromUDPAddrPort(w.in)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			s.log.Warn("reading a UDP query failed", "err", err)
			continue
		}
		w.from = addr
		if out := w.handle(w.in[:n]); out != nil {
			_, _ = pc.WriteToUDPAddrPort(out, addr)
		}
	}
}

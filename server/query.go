package server

import (
	"context"
	"hash/maphash"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/etcdns/etcdns/server/answer"
	"github.com/etcdns/etcdns/server/snap"
)

// The response cache: packed responses computed from one snapshot, so a
// repeated question costs a lookup and a copy. A new snapshot gets a new,
// empty cache, so no entry outlives its data.
const (
	// cacheLimit bounds the entries per snapshot: random names could
	// otherwise grow it without end.
	cacheLimit  = 1 << 16
	cacheShards = 64

	// rotations is how many orders of a multi-record answer are cached.
	// Query i of a worker gets order i mod rotations, each starting at a
	// record rotStride apart, so the first record still spreads over large
	// RRsets and cycles exactly through small ones.
	rotations = 8
	rotStride = 2654435761 // a prime near 2^32/phi
)

var cacheSeed = maphash.MakeSeed()

type respCache struct {
	snap   *snap.Snapshot
	shards [cacheShards]cacheShard
}

type cacheShard struct {
	mu sync.RWMutex
	m  map[string]*cached
	_  [32]byte // a cache line each: readers on two cores must not share one
}

type cached struct {
	// orders holds one packed response, or rotations of them for an
	// answer that rotates, filled as queries ask for each.
	orders  []atomic.Pointer[[]byte]
	counter prometheus.Counter // queries_total{qtype, rcode} of this answer

	searched []prometheus.Counter // the autopath counters of the search that made it
}

func (c *respCache) shard(key []byte) *cacheShard {
	return &c.shards[maphash.Bytes(cacheSeed, key)%cacheShards]
}

func (c *respCache) get(key []byte) *cached {
	sh := c.shard(key)
	sh.mu.RLock()
	e := sh.m[string(key)]
	sh.mu.RUnlock()
	return e
}

// put returns the entry for key, made from e if there was none.
func (c *respCache) put(key []byte, e *cached) *cached {
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if old := sh.m[string(key)]; old != nil {
		return old
	}
	if sh.m == nil {
		sh.m = make(map[string]*cached)
	}
	if len(sh.m) < cacheLimit/cacheShards {
		sh.m[string(key)] = e
	}
	return e
}

func (s *Server) cacheFor(sn *snap.Snapshot) *respCache {
	c := s.cache.Load()
	if c != nil && c.snap == sn {
		return c
	}
	nc := &respCache{snap: sn}
	if s.cache.CompareAndSwap(c, nc) {
		return nc
	}
	if c = s.cache.Load(); c.snap == sn {
		return c
	}
	return nc // a newer snapshot won; this query's cache dies with it
}

// worker answers the queries of one UDP socket reader or one TCP
// connection, on the goroutine that read them, with its own buffers: no
// goroutine or buffer per query.
type worker struct {
	s       *Server
	in, out []byte
	key     []byte
	tcp     bool
	turn    uint32 // this worker's query counter, for rotation

	pc   *net.UDPConn   // where forwarded answers are written later; nil: forward inline
	from netip.AddrPort // the client of the query being handled

	opts     *answer.Options      // autopath.go
	searched []prometheus.Counter // bumped by the query being handled
}

// handle returns the response to one query message, or nil to stay
// silent. The response is in w.out, valid until the next call.
func (w *worker) handle(b []byte) []byte {
	s := w.s
	start := time.Now()
	sn := s.snapshot()
	q, fast := parseQuery(b)
	if w.tcp {
		q.size = dns.MaxMsgSize
	}
	w.turn++
	rot := w.turn
	var c *respCache
	var e *cached
	order := 0
	if fast && sn != nil {
		c = s.cacheFor(sn)
		w.key = cacheKey(w.key, b, q)
		order = int(w.turn % rotations)
		rot = uint32(order) * rotStride
		if e = c.get(w.key); e != nil {
			if len(e.orders) == 1 {
				order = 0
			}
			if p := e.orders[order].Load(); p != nil {
				out := append(w.out[:0], *p...)
				out[0], out[1] = b[0], b[1]
				out[2] = out[2]&^0x01 | b[2]&0x01 // RD echoed
				out[3] = out[3]&^0x10 | b[3]&0x10 // CD echoed
				if q.mixed {
					copy(out[12:q.qend-4], b[12:q.qend-4]) // 0x20: the question as asked
				}
				w.out = out
				e.counter.Inc()
				for _, c := range e.searched {
					c.Inc()
				}
				s.latency.Observe(time.Since(start).Seconds())
				return out
			}
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
		size = answer.Size(req, !w.tcp)
	}
	w.searched = w.searched[:0]
	m, personal := answer.AnswerFrom(sn, req, w.options(), rot, answer.Client{Addr: w.from.Addr().Unmap()})
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
	rotates := s.rotates(m) // before pack: Fit may empty the answer
	out, m, _ := s.pack(m, size, w.out[:0])
	if out == nil {
		return nil
	}
	w.out = out
	counter := s.count(req, m, start)
	if c != nil && !forwarded && !personal && !under && s.cacheable(m) {
		if e == nil {
			n := 1
			if rotates {
				n = rotations
			}
			e = c.put(w.key, &cached{orders: make([]atomic.Pointer[[]byte], n), counter: counter, searched: slices.Clone(w.searched)})
		}
		if len(e.orders) == 1 {
			order = 0
		}
		// The key holds the question in lowercase, and so does the
		// cached question section; a 0x20 query's own spelling is copied
		// over it on the way out.
		wire := slices.Clone(out)
		copy(wire[12:q.qend-4], w.key)
		e.orders[order].CompareAndSwap(nil, &wire)
	}
	return out
}

// cacheable is false for answers that differ by who asks and how:
// refusals once forwarding is on depend on the client and RD, neither of
// them in the cache key.
func (s *Server) cacheable(m *dns.Msg) bool {
	return s.fwd == nil || m.Rcode != dns.RcodeRefused
}

// rotates reports whether m holds an RRset of more than one record that
// the engine turned by the query counter.
func (s *Server) rotates(m *dns.Msg) bool {
	if !s.opts.Rotate {
		return false
	}
	for i := 1; i < len(m.Answer); i++ {
		a, b := m.Answer[i-1].Header(), m.Answer[i].Header()
		if a.Rrtype == b.Rrtype && a.Name == b.Name {
			return true
		}
	}
	return false
}

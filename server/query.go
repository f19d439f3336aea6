package server

import (
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

// The response cache: packed responses, so a repeated question costs a
// lookup and a copy. It outlives snapshots, but no entry outlives its
// data: an entry is served from a newer snapshot than the one it was
// built or last checked in only once a check (carry) finds that every node
// its answer was read from is unchanged there; under a steady trickle of
// changes most answers stand, and building them again after each change
// would cost far more than the check.
const (
	// cacheLimit bounds the entries and cacheBytes what they hold, keys
	// and responses: a flood of random names, each a NXDOMAIN of its own,
	// would otherwise grow the cache until the next snapshot. Once full,
	// each new entry evicts one. At the limits a cache holds about 27 MiB
	// of heap for 65,536 NXDOMAINs (TestCacheFloodItem7 logs it: 438
	// bytes an entry, 391 accounted), or 32 MiB of large answers. Under
	// a small memory limit both shrink (cacheBounds).
	cacheLimit  = 1 << 16
	cacheBytes  = 32 << 20
	cacheShards = 64

	// entryCost is what an entry holds besides its key and responses: its
	// index and ring slots, the entry, its slices and allocation
	// rounding; measured, so the bytes accounted are about the heap used
	// (BenchmarkCacheFill: 360 bytes of heap for an answer of one A
	// record, about 350 accounted). A NXDOMAIN's entry also keeps the name
	// asked, about 48 bytes more.
	entryCost = 224

	// rotations is how many orders of a multi-record answer are cached.
	// Query i of a worker gets order i mod rotations, each starting at a
	// record rotStride apart, so the first record, (order x rotStride) mod
	// n, cycles through a small RRset and takes rotations places in a
	// large one. rotStride is a prime below 2^32/rotations, so the product
	// never wraps a uint32: a prime near 2^32/phi did from order 2 on, and
	// of 5 records one never came first, of 7 three.
	rotations = 8
	rotStride = 331804423
)

// cacheBounds returns the cache's bounds, entries and bytes, under the
// memory limit the runtime was given (GOMEMLIMIT; math.MaxInt64 when there
// is none): cacheLimit and cacheBytes, or an eighth of the limit when that
// is less, so a small frontend's cache cannot outgrow what it was allowed
// (a flood of NXDOMAINs fills a full-size cache to about 24 MiB). Entries
// shrink in proportion, at least one a shard and a lock each.
func cacheBounds(memLimit int64) [2]int64 {
	bytes := min(cacheBytes, max(memLimit/8, minCacheBytes))
	return [2]int64{max(cacheShards, cacheLimit*bytes/cacheBytes), bytes}
}

// minCacheBytes is the least cache a memory limit leaves: a few thousand
// answers, the working set of a small cluster.
const minCacheBytes = 1 << 20

var cacheSeed = maphash.MakeSeed()

type respCache struct {
	bytes     atomic.Int64 // accounted: keys, responses and entryCost each
	evictions prometheus.Counter
	kept      prometheus.Counter // entries carried to a newer snapshot
	dropped   prometheus.Counter // entries a newer snapshot changed
	// The bounds: cacheLimit and cacheBytes but in tests. Bytes are
	// checked under one shard's lock, so stores racing in two shards may
	// pass maxBytes by a response each.
	maxEntries, maxBytes int64
	_                    [64]byte // bytes, written on every store, off the first shard's index line
	shards               [cacheShards]cacheShard
}

// cacheShard is one lock's share of the cache. Its entries also sit in
// ring, swept by hand when one must go (CLOCK): an entry asked for since
// the hand last passed gets another round, one that was not goes. A flood
// of one-off names so evicts its own entries, and a name clients keep
// asking survives it as long as it is asked once per sweep, about every
// cacheLimit new entries.
type cacheShard struct {
	idx  index // lookups take no lock (cacheindex.go)
	mu   sync.Mutex
	ring []*cached
	hand int
	_    [64]byte // the next shard's index on another cache line
}

// A cache full of small entries is tens of MiB, and each of an entry's
// objects sits among the garbage of the queries that missed, which the
// collector frees around it but cannot move. So an entry is few objects:
// an answer that does not rotate has its order in the entry, and so are
// the answer's reads (with room for the one node most answers read): two
// allocations fewer a miss.
type cached struct {
	// The packed response, or for an answer that rotates, rotations of
	// them, filled as queries ask for each (orders).
	one     [1]atomic.Pointer[[]byte]
	rotated *[rotations]atomic.Pointer[[]byte] // nil: the answer does not rotate
	counter *queryCell                         // the counts of this answer (metrics.go)

	searched *[]prometheus.Counter // the autopath counters of the search that made it; nil: none

	// gen is the newest cacheView the answer is known to stand in: a
	// number, since holding that snapshot would keep it, and all it no
	// longer shares with the current one, alive. reads is what the answer
	// was built from, to check it against a newer snapshot (carry).
	gen   atomic.Uint64
	reads answer.Reads

	// Set before the entry enters the index, and never after.
	key  string
	hash uint64 // of key: its shard and its place in the shard's index

	// Set and read under the shard's lock.
	size int32 // accounted bytes: at most its rotations' responses of maxBytes/16 each, and its key
	slot int32 // index in the shard's ring; -1 once removed

	used atomic.Bool // asked for since the hand last passed
}

// orders returns the entry's responses: one, or one for each rotation.
func (e *cached) orders() []atomic.Pointer[[]byte] {
	if e.rotated != nil {
		return e.rotated[:]
	}
	return e.one[:]
}

// replayed is what w.replay counts again for a query the entry answers.
func (e *cached) replayed() []prometheus.Counter {
	if e.searched == nil {
		return nil
	}
	return *e.searched
}

// shard returns key's shard and hash.
func (c *respCache) shard(key []byte) (*cacheShard, uint64) {
	h := maphash.Bytes(cacheSeed, key)
	return &c.shards[h%cacheShards], h
}

// shardLimit is how many entries one shard holds at most.
func (c *respCache) shardLimit() int { return int(c.maxEntries / cacheShards) }

// get returns the entry for key that stands in sn, the snapshot of view
// gen, or nil.
func (c *respCache) get(key []byte, sn *snap.Snapshot, gen uint64) *cached {
	sh, h := c.shard(key)
	e := sh.idx.get(h, key)
	if e == nil || e.gen.Load() != gen && !c.carry(sh, e, sn, gen) {
		return nil
	}
	if !e.used.Load() {
		e.used.Store(true) // only when clear: a hot entry's line stays shared between cores
	}
	return e
}

// carry brings e to view gen, newer than the one it was built or last
// carried in, when its answer stands in that view's snapshot sn
// (answer.Reads.Stands): then its responses are kept, with the new serial
// in the SOA they hold, and the first query to ask after a change pays a
// few map lookups instead of building the answer again. Otherwise e is
// dropped. False when e does not stand in sn, or e has moved on to a newer
// view than gen, which takes the full path.
func (c *respCache) carry(sh *cacheShard, e *cached, sn *snap.Snapshot, gen uint64) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	switch at := e.gen.Load(); {
	case at == gen:
		return true // another query carried it
	case e.slot < 0 || at > gen:
		return false
	}
	serial, ok := e.reads.Stands(sn)
	if ok && e.reads.HasSOA() {
		orders := e.orders()
		for i := range orders {
			if p := orders[i].Load(); p != nil {
				w := slices.Clone(*p) // queries may be copying the old one
				if ok = setSOASerial(w, serial); !ok {
					break
				}
				orders[i].Store(&w)
			}
		}
	}
	if !ok {
		c.remove(sh, e)
		c.dropped.Inc()
		return false
	}
	e.gen.Store(gen)
	c.kept.Inc()
	return true
}

// store caches wire, built from the snapshot of view gen, as order of the
// entry at key, which is fresh if there is none or the one there is of an
// older view, and returns the entry. When the cache is full it evicts to
// make room; when it cannot, or a response is too large to be worth a
// sixteenth of the cache, the entry or response is left out.
func (c *respCache) store(key []byte, fresh *cached, order int, wire []byte, gen uint64) *cached {
	sh, h := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.idx.get(h, key)
	if at := e.genOr(gen); at != gen {
		if at > gen {
			return e // built from an older snapshot than e's
		}
		c.remove(sh, e)
		e = nil
	}
	if e == nil {
		e = fresh
		e.gen.Store(gen)
		k := string(key)
		size := int32(len(k) + entryCost)
		if !c.room(sh, size, nil) {
			e.slot = -1 // never in the shard
			return e
		}
		e.key, e.hash, e.size, e.slot = k, h, size, int32(len(sh.ring))
		sh.idx.put(e, c.shardLimit())
		sh.ring = append(sh.ring, e)
		c.bytes.Add(int64(size))
	}
	if e.rotated == nil {
		order = 0
	}
	if size := int32(len(wire)); e.orders()[order].Load() == nil && c.room(sh, size, e) {
		e.orders()[order].Store(&wire)
		e.size += size
		c.bytes.Add(int64(size))
	}
	return e
}

// room evicts entries of sh other than keep until size more bytes fit in
// the cache and, for a new entry (keep nil), one more entry in sh.
func (c *respCache) room(sh *cacheShard, size int32, keep *cached) bool {
	if int64(size) > c.maxBytes/16 {
		return false
	}
	for keep == nil && sh.idx.live >= c.shardLimit() || c.bytes.Load()+int64(size) > c.maxBytes {
		if !c.evict(sh, keep) {
			return false
		}
	}
	return true
}

// evict drops the first entry of sh at or after the hand that was not
// asked for since the hand last passed, clearing the marks it passes; keep
// stays. False when sh holds nothing else.
func (c *respCache) evict(sh *cacheShard, keep *cached) bool {
	n := len(sh.ring)
	if n == 0 || n == 1 && sh.ring[0] == keep {
		return false
	}
	// Two rounds clear every mark; hits racing the sweep could set them
	// again, so past that the hand takes what it finds.
	for i := 0; ; i++ {
		if sh.hand >= len(sh.ring) {
			sh.hand = 0
		}
		e := sh.ring[sh.hand]
		if e != keep {
			if !e.used.Load() || i >= 2*n {
				break
			}
			e.used.Store(false)
		}
		sh.hand++
	}
	c.remove(sh, sh.ring[sh.hand])
	c.evictions.Inc()
	return true
}

// remove takes e out of sh: the ring's last entry takes its slot.
func (c *respCache) remove(sh *cacheShard, e *cached) {
	last := len(sh.ring) - 1
	moved := sh.ring[last]
	sh.ring[e.slot], moved.slot = moved, e.slot
	sh.ring[last] = nil
	sh.ring = sh.ring[:last]
	e.slot = -1
	sh.idx.drop(e)
	c.bytes.Add(-int64(e.size))
}

// entries counts the cache's entries, for its gauge.
func (c *respCache) entries() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		n += sh.idx.live
		sh.mu.Unlock()
	}
	return n
}

// genOr is e's view, or gen for no entry.
func (e *cached) genOr(gen uint64) uint64 {
	if e == nil {
		return gen
	}
	return e.gen.Load()
}

// cacheView is the snapshot queries are answered from, the cache they use
// and the view's number, which goes up by one with each new snapshot:
// comparing one pointer tells a query whether anything changed. It holds
// the snapshot's Mark, not the snapshot: the view outlives its snapshot
// until the next query, and an idle frontend would keep the snapshot the
// store last replaced, and all it does not share with the current one.
type cacheView struct {
	snap  snap.Mark
	cache *respCache
	gen   uint64
}

// cacheFor returns the cache for queries answered from sn and the number
// of sn's view, or nil for a query that read sn just before a newer one
// came. The cache goes on from one snapshot to the next, its entries
// checked as they are asked for (carry); only a change of stub domains,
// which entries do not record, starts an empty one.
func (s *Server) cacheFor(sn *snap.Snapshot) (*respCache, uint64) {
	v := s.cache.Load()
	if v != nil && v.snap.Of(sn) {
		return v.cache, v.gen
	}
	for {
		switch {
		case v == nil:
		case sn.Rev < v.snap.Rev:
			return nil, 0
		case sn.Rev == v.snap.Rev && sn != s.snapshot():
			// The same records, in a snapshot the store has since
			// replaced (packed, or relisted at the same revision): the
			// view stays with the current one, so that the old
			// snapshot's memory goes.
			return v.cache, v.gen
		}
		nv := &cacheView{snap: sn.Mark(), gen: 1}
		if v != nil && v.snap.SameStubs(sn) {
			nv.cache, nv.gen = v.cache, v.gen+1
		} else {
			nv.cache = &respCache{evictions: s.cacheEvictions, kept: s.cacheKept, dropped: s.cacheDropped,
				maxEntries: s.cacheLimits[0], maxBytes: s.cacheLimits[1]}
		}
		if s.cache.CompareAndSwap(v, nv) {
			return nv.cache, nv.gen
		}
		if v = s.cache.Load(); v.snap.Of(sn) {
			return v.cache, v.gen
		}
	}
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
	// asked is the address the client sent it to, where a wildcard
	// socket learns it (on Linux): its answer leaves from there.
	asked source
	// outside is the Outside of the query being answered, made anew for
	// each (respond).
	outside answer.Outside

	opts     *answer.Options      // autopath.go
	searched []prometheus.Counter // bumped by the query being handled

	// A UDP batch's answers leave in one sendmmsg, so the batch's time is
	// each one's latency: the clock is read at the batch's two ends, not
	// twice per query, which costs a cached answer a measurable share.
	// Its counts are added once per cell too, just before it is sent:
	// every core answering the same question adds to the same counter,
	// and adding once per query made that counter's cache line bounce
	// between cores.
	batchStart time.Time     // zero: handle counts and times each query itself
	tallies    []tally       // answers since batchStart, for addBatch and endBatch
	searches   []searchTally // searches replayed since batchStart, for addBatch
	pf         int           // protocol and family of the query being handled (pfOf)
}

// tally is a number of answers counted in one cell, of one protocol and
// family.
type tally struct {
	c  *queryCell
	pf int
	n  uint64
}

// searchTally is a number of searches counted in one counter.
type searchTally struct {
	c prometheus.Counter
	n uint64
}

// startBatch and endBatch bracket a batch of queries, and handle tallies
// the answers in between. addBatch adds the tallies to their cells before
// the answers are sent, so that a client that has its answer sees it
// counted; endBatch, once they are sent, observes the batch's latency once
// per answer, and the worker counts each answer as it comes again.
func (w *worker) startBatch() { w.batchStart = time.Now() }

func (w *worker) addBatch() {
	for _, t := range w.tallies {
		t.c.n[t.pf].Add(t.n)
	}
	for _, t := range w.searches {
		t.c.Add(float64(t.n))
	}
	w.searches = w.searches[:0]
}

func (w *worker) endBatch() {
	if len(w.tallies) > 0 {
		d := time.Since(w.batchStart)
		for _, t := range w.tallies {
			t.c.lat.observeN(d, t.n)
		}
		w.tallies = w.tallies[:0]
	}
	w.batchStart = time.Time{}
}

// now is when the query being handled was read: the batch's start, or
// the clock.
func (w *worker) now() time.Time {
	if w.batchStart.IsZero() {
		return time.Now()
	}
	return w.batchStart
}

// count counts one answer in c, and its latency in c's zone, now or at
// the batch's end.
func (w *worker) count(start time.Time, c *queryCell) {
	if w.batchStart.IsZero() {
		c.answered(w.pf, start)
		return
	}
	for i := range w.tallies {
		if t := &w.tallies[i]; t.c == c && t.pf == w.pf {
			t.n++
			return
		}
	}
	w.tallies = append(w.tallies, tally{c, w.pf, 1}) // a batch's cells are few; the slice is kept
}

// replay counts the searches of a cached answer again, now or at the
// batch's end.
func (w *worker) replay(searched []prometheus.Counter) {
	if w.batchStart.IsZero() {
		for _, c := range searched {
			c.Inc()
		}
		return
	}
next:
	for _, c := range searched {
		for i := range w.searches {
			if w.searches[i].c == c {
				w.searches[i].n++
				continue next
			}
		}
		w.searches = append(w.searches, searchTally{c, 1})
	}
}

// respond answers the query b: the response to send, or nil for none
// (silence, or a UDP answer an upstream sends later: forwardUDP). The
// response is in w.out, valid until the next call.
func (w *worker) respond(b []byte) []byte {
	s := w.s
	start := w.now()
	sn := s.snapshot()
	w.pf = pfOf(w.tcp, w.from.Addr())
	q, fast := parseQuery(b)
	if w.tcp {
		q.size = dns.MaxMsgSize
	}
	w.turn++
	rot := w.turn
	var c *respCache
	var gen uint64
	var e *cached
	order := 0
	if fast && sn != nil {
		c, gen = s.cacheFor(sn)
		w.key = cacheKey(w.key, b, q)
		order = int(w.turn % rotations)
		rot = uint32(order) * rotStride
	}
	if c != nil {
		if e = c.get(w.key, sn, gen); e != nil {
			if e.rotated == nil {
				order = 0
			}
			if p := e.orders()[order].Load(); p != nil {
				out := append(w.out[:0], *p...)
				out[0], out[1] = b[0], b[1]
				out[2] = out[2]&^0x01 | b[2]&0x01 // RD echoed
				out[3] = out[3]&^0x10 | b[3]&0x10 // CD echoed
				if q.mixed {
					copy(out[12:q.qend-4], b[12:q.qend-4]) // 0x20: the question as asked
				}
				w.out = out
				w.count(start, e.counter)
				w.replay(e.replayed())
				return out
			}
		}
	}

	if !fast {
		if v, qend := screen(b, !w.tcp); v != accept {
			return w.reject(b, v, qend, start)
		}
	}
	req := new(dns.Msg)
	if err := req.Unpack(b); err != nil {
		// What screen lets through and miekg/dns still turns down: the
		// data of a record or an option it checks.
		return w.reject(b, formErr, plainQuestion(b), start)
	}
	size := q.size
	if !fast {
		size = answer.Size(req, !w.tcp)
	}
	w.searched = w.searched[:0]
	// The entry is made before the answer, to hold its reads.
	var fresh *cached
	var reads *answer.Reads
	if c != nil {
		fresh = new(cached)
		reads = &fresh.reads
	}
	client := answer.Client{Addr: w.from.Addr().Unmap()}
	if (s.fwd != nil || s.stubs != nil) && sn != nil {
		// A CNAME's target in no zone (an ExternalName's), and a SkyDNS
		// answer's SRV and MX glue, are chased for this client (chase.go).
		// The worker's own: a miss allocates nothing for it, and chase
		// copies what it keeps.
		w.outside = answer.Outside{Upstreams: s.fwd != nil}
		client.Outside = &w.outside
	}
	m, personal := answer.AnswerTracked(sn, req, w.options(), rot, client, reads)
	if m == nil {
		return nil
	}
	// A forwarded answer never enters the cache: it would outlive its
	// TTL and reach clients the allow list turns away. Nor does a chased
	// one, an answer of ours holding records from outside (personal).
	var ask func() *dns.Msg
	var cached *dns.Msg // the forwarding cache's answer: no upstream to wait for
	chased := false
	servers, under := s.stubbed(sn, req, m, w.from.Addr())
	switch {
	case servers != nil:
		ask = func() *dns.Msg { return s.stubs.Forward(s.upstream, req, servers) }
	case !under && s.forwards(sn, req, m, w.from.Addr()):
		ask = func() *dns.Msg { return s.fwd.Forward(s.upstream, req) }
		cached = s.fwd.Cached(req)
	case !under && client.Outside != nil && len(client.Outside.Asked) > 0:
		ask = s.chase(sn, req, client, rot)
		chased = ask != nil
	}
	forwarded := ask != nil && !chased
	if ask != nil {
		switch {
		case cached != nil:
			// No slot: a flood to a dead upstream that takes every one
			// must not turn away what the cache holds.
			m = cached
		case w.pc == nil:
			m = ask()
		case s.forwardUDP(w.pc, w.from, w.asked, sn, req, len(b), size, start, forwarded, ask):
			return nil
		case chased:
			// Every slot taken: the answer without what is outside, as
			// when the upstreams fail.
		default:
			// Every slot taken: the client tries again or elsewhere.
			m.Rcode, m.Authoritative, m.Answer, m.Ns = dns.RcodeServerFailure, false, nil, nil
		}
	}
	rotates := s.rotates(m) // before pack: Fit may cut the answer
	out, m, _ := s.pack(m, size, w.out[:0])
	if out == nil {
		return nil
	}
	w.out = out
	counter := s.cell(sn, req, m, forwarded, ask != nil && cached == nil && w.pc == nil)
	w.count(start, counter)
	if c != nil && ask == nil && !personal && !under && s.cacheable(sn, m) && (e == nil || e.orders()[order].Load() == nil) {
		// A fresh entry, also when e exists: an eviction may have taken
		// it from the cache since it was found.
		rotated := rotates
		switch {
		case e != nil:
			rotated = e.rotated != nil
			fresh.counter, fresh.searched = e.counter, e.searched
		default:
			fresh.counter = counter
			if len(w.searched) > 0 {
				searched := slices.Clone(w.searched)
				fresh.searched = &searched
			}
		}
		if rotated {
			fresh.rotated = new([rotations]atomic.Pointer[[]byte])
		}
		// The key holds the question in lowercase, and so does the
		// cached question section; a 0x20 query's own spelling is copied
		// over it on the way out.
		wire := slices.Clone(out)
		copy(wire[12:q.qend-4], w.key)
		c.store(w.key, fresh, order, wire, gen)
	}
	return out
}

// reject answers a message screen or miekg/dns turned down: its header
// with QR set, its id, opcode, RD and CD, the rcode, and its question
// when that is plain; nothing else of it, which may be junk, but for an
// OPT record of dnsd's own to a sound message with one (NOTIMP). Built
// in w.out, it allocates nothing.
func (w *worker) reject(b []byte, v verdict, qend int, start time.Time) []byte {
	var counter *queryCell
	var rcode byte
	switch v {
	case formErr:
		rcode, counter = dns.RcodeFormatError, w.s.formErrs
	case notImp, notImpEDNS:
		rcode, counter = dns.RcodeNotImplemented, w.s.notImps
	default:
		return nil
	}
	out := append(w.out[:0], b[0], b[1], 0x80|b[2]&0x79, b[3]&0x10|rcode, 0, 0, 0, 0, 0, 0, 0, 0)
	if qend > 0 {
		out[5] = 1
		out = append(out, b[12:qend]...)
	}
	if v == notImpEDNS {
		// An OPT of the root: dnsd's payload size, version 0, no flags,
		// no options.
		out[11] = 1
		out = append(out, 0, 0, byte(dns.TypeOPT), byte(answer.EDNSSize>>8), byte(answer.EDNSSize&0xff), 0, 0, 0, 0, 0, 0)
	}
	w.out = out
	w.count(start, counter)
	return out
}

// oversized answers a message of size bytes, more than maxQuery, from its
// header alone: FORMERR, unless it is a response.
func (w *worker) oversized(hdr []byte, size int) []byte {
	if len(hdr) < 12 || hdr[2]&0x80 != 0 {
		return nil
	}
	w.pf = pfOf(w.tcp, w.from.Addr())
	start := w.now()
	out := w.reject(hdr, formErr, 0, start)
	if m, ok := w.s.logs(out); ok {
		w.s.logQuery(w.from, w.tcp, nil, size, m, out, time.Since(start))
	}
	return out
}

// cacheable is false for answers that differ by who asks and how:
// refusals, and a reverse zone's NXDOMAIN, once forwarding is on depend on
// the client and RD, neither of them in the cache key.
func (s *Server) cacheable(sn *snap.Snapshot, m *dns.Msg) bool {
	return s.fwd == nil || m.Rcode != dns.RcodeRefused && !fallsThrough(sn, m)
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

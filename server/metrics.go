package server

import (
	"net/netip"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/etcdns/etcdns/server/snap"
)

// Query metrics, in dnsd's own names and in the CoreDNS names that
// operators' dashboards and alerts already use (plugin/metrics in CoreDNS
// 1.11), from one set of counters: an answer costs one atomic add for its
// counts and two for its latency, whichever names are scraped, and a UDP
// batch's latency costs two per cell it counted in, not per answer.
//
// CoreDNS's labels mean here what they mean there, as if each dnsd zone
// were a server block of its own and "." the block catching every other
// name: server is dns://<dnsd.listen>, zone the served zone holding the
// question's name (with its final dot) or "." for any other name, view is
// always empty, proto udp or tcp, family 1 (IPv4) or 2 (IPv6), type the
// question type among those CoreDNS names (others are "other"). plugin in
// responses_total is the part that wrote the answer: "etcd" for an answer
// from the served records (CoreDNS's etcd plugin on the same keys), "forward"
// for an upstream's or a stub domain's answer, "" for what dnsd refuses or
// rejects itself.

// Protocol and family of a query: the index of its count in a queryCell.
const (
	pfUDP4 = iota
	pfUDP6
	pfTCP4
	pfTCP6
	pfCount
)

var pfLabels = [pfCount][2]string{{"udp", "1"}, {"udp", "2"}, {"tcp", "1"}, {"tcp", "2"}}

// The answer-time buckets: dnsd's own (finer, down to microseconds) and
// CoreDNS's plugin.TimeBuckets. Observations land in the slots of their
// union, so both histograms are exact.
var (
	ownBuckets     = prometheus.ExponentialBuckets(5e-6, 2.5, 12) // 5µs .. about 1.2s
	corednsBuckets = prometheus.ExponentialBuckets(0.00025, 2, 16)
	unionBuckets   = func() []float64 {
		u := slices.Concat(ownBuckets, corednsBuckets)
		slices.Sort(u)
		u = slices.Compact(u)
		if len(u) >= len(latCell{}.slots) {
			panic("server: more answer-time buckets than latCell has slots")
		}
		return u
	}()
)

// corednsTypes are the question types CoreDNS's metrics name
// (plugin/metrics/vars/monitor.go); any other is "other".
var corednsTypes = map[string]bool{
	"AAAA": true, "A": true, "CNAME": true, "DNSKEY": true, "DS": true, "MX": true, "NSEC3": true,
	"NSEC": true, "NS": true, "PTR": true, "RRSIG": true, "SOA": true, "SRV": true, "TXT": true,
	"HTTPS": true, "IXFR": true, "AXFR": true, "ANY": true,
}

// latCell is one zone's answer times to one question type (CoreDNS's
// type label), of answers from memory or of an upstream's: a count per
// slot of unionBuckets (the last slot is +Inf) and their sum in
// nanoseconds.
type latCell struct {
	zone, typ string
	upstream  bool
	slots     [32]atomic.Uint64
	sumNs     atomic.Uint64
}

func (l *latCell) observeN(d time.Duration, n uint64) {
	if d < 0 {
		d = 0
	}
	i := sort.SearchFloat64s(unionBuckets, d.Seconds())
	l.slots[i].Add(n)
	l.sumNs.Add(uint64(d) * n)
}

// queryCell counts the answers of one zone, question type, rcode and
// plugin, by protocol and family.
type queryCell struct {
	key cellKey
	lat *latCell
	n   [pfCount]atomic.Uint64
}

type cellKey struct {
	zone, qtype, rcode, plugin string
	waited                     bool // on an upstream: a forwarded, stub or chased answer not from the forwarding cache
}

func (c *queryCell) inc(pf int) { c.n[pf].Add(1) }

// answered counts one answer over pf that took since start, at once.
func (c *queryCell) answered(pf int, start time.Time) {
	c.inc(pf)
	c.lat.observeN(time.Since(start), 1)
}

// queryMetrics holds the cells, created on an answer's slow path and
// summed when scraped.
type queryMetrics struct {
	server atomic.Pointer[string] // the server label: dns://<listen address>

	mu    sync.Mutex
	cells map[cellKey]*queryCell
	lats  map[latKey]*latCell

	queries, requests, responses, ownLat, cdLat *prometheus.Desc
}

func newQueryMetrics() *queryMetrics {
	q := &queryMetrics{
		cells: map[cellKey]*queryCell{},
		lats:  map[latKey]*latCell{},
		queries: prometheus.NewDesc("etcdns_dnsd_queries_total",
			"DNS queries answered, by question type and response code.", []string{"qtype", "rcode"}, nil),
		ownLat: prometheus.NewDesc("etcdns_dnsd_query_duration_seconds",
			"Time from a query read to its response; the queries of one UDP batch share the batch's time, read to sent. source: upstream for an answer that waited on one (forwarded, a stub domain's, or a SkyDNS answer chased outside the zones), memory for the rest.", []string{"source"}, nil),
		requests: prometheus.NewDesc("coredns_dns_requests_total",
			"Counter of DNS requests made per zone, protocol and family (CoreDNS's name; see server/metrics.go for the labels).",
			[]string{"server", "zone", "view", "proto", "family", "type"}, nil),
		responses: prometheus.NewDesc("coredns_dns_responses_total",
			"Counter of response status codes (CoreDNS's name).", []string{"server", "zone", "view", "rcode", "plugin"}, nil),
		cdLat: prometheus.NewDesc("coredns_dns_request_duration_seconds",
			"Histogram of the time (in seconds) each request took per zone (CoreDNS's name and buckets).",
			[]string{"server", "zone", "view", "type"}, nil),
	}
	def := "dns://"
	q.server.Store(&def)
	return q
}

// cell returns the cell of key, made on first use.
func (q *queryMetrics) cell(key cellKey) *queryCell {
	q.mu.Lock()
	defer q.mu.Unlock()
	if c := q.cells[key]; c != nil {
		return c
	}
	lk := latKey{key.zone, corednsType(key.qtype), key.waited}
	l := q.lats[lk]
	if l == nil {
		l = &latCell{zone: lk.zone, typ: lk.typ, upstream: lk.upstream}
		q.lats[lk] = l
	}
	c := &queryCell{key: key, lat: l}
	q.cells[key] = c
	return c
}

func (q *queryMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{q.queries, q.ownLat, q.requests, q.responses, q.cdLat} {
		ch <- d
	}
}

func (q *queryMetrics) Collect(ch chan<- prometheus.Metric) {
	server := *q.server.Load()
	q.mu.Lock()
	cells := make([]*queryCell, 0, len(q.cells))
	for _, c := range q.cells {
		cells = append(cells, c)
	}
	lats := make([]*latCell, 0, len(q.lats))
	for _, l := range q.lats {
		lats = append(lats, l)
	}
	q.mu.Unlock()

	own := map[[2]string]uint64{}
	req := map[[4]string]uint64{}
	resp := map[[3]string]uint64{}
	for _, c := range cells {
		var total uint64
		for pf := range pfCount {
			n := c.n[pf].Load()
			total += n
			req[[4]string{c.key.zone, pfLabels[pf][0], pfLabels[pf][1], corednsType(c.key.qtype)}] += n
		}
		own[[2]string{c.key.qtype, c.key.rcode}] += total
		resp[[3]string{c.key.zone, c.key.rcode, c.key.plugin}] += total
	}
	for k, n := range own {
		ch <- prometheus.MustNewConstMetric(q.queries, prometheus.CounterValue, float64(n), k[0], k[1])
	}
	for k, n := range req {
		if n > 0 {
			ch <- prometheus.MustNewConstMetric(q.requests, prometheus.CounterValue, float64(n), server, k[0], "", k[1], k[2], k[3])
		}
	}
	for k, n := range resp {
		ch <- prometheus.MustNewConstMetric(q.responses, prometheus.CounterValue, float64(n), server, k[0], "", k[1], k[2])
	}

	// CoreDNS's histogram is a zone's, upstream or not; dnsd's own is
	// split by where the answer came from, so that a slow upstream does
	// not read as a slow dnsd (EtcdnsDnsdLatencyHigh).
	type sums struct {
		slots []uint64
		ns    uint64
	}
	add := func(m map[[2]string]*sums, k [2]string, l *latCell) {
		s := m[k]
		if s == nil {
			s = &sums{slots: make([]uint64, len(unionBuckets)+1)}
			m[k] = s
		}
		for i := range s.slots {
			s.slots[i] += l.slots[i].Load()
		}
		s.ns += l.sumNs.Load()
	}
	zones, sources := map[[2]string]*sums{}, map[[2]string]*sums{{"memory"}: nil}
	for _, l := range lats {
		add(zones, [2]string{l.zone, l.typ}, l)
		source := "memory"
		if l.upstream {
			source = "upstream"
		}
		add(sources, [2]string{source}, l)
	}
	for k, s := range zones {
		count, buckets := cumulative(s.slots, corednsBuckets)
		ch <- prometheus.MustNewConstHistogram(q.cdLat, count, float64(s.ns)/1e9, buckets, server, k[0], "", k[1])
	}
	for k, s := range sources {
		if s == nil {
			s = &sums{slots: make([]uint64, len(unionBuckets)+1)}
		}
		count, buckets := cumulative(s.slots, ownBuckets)
		ch <- prometheus.MustNewConstHistogram(q.ownLat, count, float64(s.ns)/1e9, buckets, k[0])
	}
}

type latKey struct {
	zone, typ string
	upstream  bool
}

// corednsType is CoreDNS's type label of a question type.
func corednsType(qtype string) string {
	if corednsTypes[qtype] {
		return qtype
	}
	return "other"
}

// cumulative turns counts per slot of unionBuckets into a histogram's
// cumulative counts at bounds, a subset of them.
func cumulative(slots []uint64, bounds []float64) (uint64, map[float64]uint64) {
	out := make(map[float64]uint64, len(bounds))
	var run uint64
	j := 0
	for i, ub := range unionBuckets {
		run += slots[i]
		if j < len(bounds) && bounds[j] == ub {
			out[ub] = run
			j++
		}
	}
	return run + slots[len(unionBuckets)], out
}

// zoneLabel is CoreDNS's zone label of a question's name: the served zone
// holding it, or ".".
func zoneLabel(sn *snap.Snapshot, req *dns.Msg) string {
	if req == nil || len(req.Question) != 1 {
		return "."
	}
	if z := zoneOf(sn, req.Question[0].Name); z != nil {
		return z.Name + "."
	}
	return "."
}

// pfOf is the protocol and family index of a query from client; an
// IPv4-mapped address is IPv4.
func pfOf(tcp bool, client netip.Addr) int {
	pf := pfUDP4
	if tcp {
		pf = pfTCP4
	}
	if client.Is6() && !client.Is4In6() {
		pf++
	}
	return pf
}

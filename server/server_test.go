package server

import (
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/etcdns/etcdns/server/answer"
	"github.com/etcdns/etcdns/server/snap"
)

var zones = []snap.Config{
	{Name: "cluster.local", Prefix: "/skydns", TTL: 5},
	{Name: "in-addr.arpa", Prefix: "/skydns", TTL: 5},
}

var opts = answer.Options{
	Pods: answer.PodsInsecure, Rotate: true,
	SOA: answer.SOA{Mname: "ns.dns", Rname: "hostmaster", TTL: 5, Refresh: 7200, Retry: 1800, Expire: 86400, Minimum: 5},
}

// testSnapshot holds one service and a headless one with n endpoints.
func testSnapshot(t testing.TB, n int) *snap.Snapshot {
	kvs := []snap.KV{
		{Key: "/skydns/local/cluster/svc/default/kubernetes/x", Value: []byte(`{"host":"10.96.0.1"}`)},
		{Key: "/skydns/arpa/in-addr/10/96/0/1", Value: []byte(`{"host":"kubernetes.default.svc.cluster.local"}`)},
	}
	for i := range n {
		kvs = append(kvs, snap.KV{
			Key:   fmt.Sprintf("/skydns/local/cluster/svc/default/big/e%d", i),
			Value: []byte(fmt.Sprintf(`{"host":"10.4.%d.%d"}`, i/250, i%250+1)),
		})
	}
	s, errs := snap.Build(zones, 9, kvs)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return s
}

func newServer(t testing.TB, s *snap.Snapshot) *Server {
	return New(func() *snap.Snapshot { return s }, opts, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func TestServeUDPAndTCP(t *testing.T) {
	srv := newServer(t, testSnapshot(t, 300))
	l, stop, done := start(t, srv, "127.0.0.1:0")
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()

	ask := func(net, name string, edns uint16) *dns.Msg {
		t.Helper()
		m := new(dns.Msg).SetQuestion(name, dns.TypeA)
		if edns > 0 {
			m.SetEdns0(edns, false)
		}
		c := &dns.Client{Net: net, Timeout: 2 * time.Second, UDPSize: 65535}
		var r *dns.Msg
		var err error
		for range 20 { // the servers start asynchronously
			if r, _, err = c.Exchange(m, l.Addr); err == nil {
				return r
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("%s %s: %v", net, name, err)
		return nil
	}
	for _, network := range []string{"udp", "tcp"} {
		r := ask(network, "kubernetes.default.svc.cluster.local.", 0)
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || !r.Authoritative {
			t.Fatalf("%s: %v", network, r)
		}
	}
	// The header, the question, the OPT record and 73 A records of 16
	// octets fill 1232; the other 227 wait for TCP.
	r := ask("udp", "big.default.svc.cluster.local.", 1232)
	if !r.Truncated || len(r.Answer) != 73 {
		t.Fatalf("300 records over UDP: TC=%v answer=%d, want TC and the 73 that fit", r.Truncated, len(r.Answer))
	}
	r = ask("tcp", "big.default.svc.cluster.local.", 1232)
	if r.Truncated || len(r.Answer) != 300 {
		t.Fatalf("300 records over TCP: TC=%v answer=%d", r.Truncated, len(r.Answer))
	}
	r = ask("udp", "example.com.", 0)
	if r.Rcode != dns.RcodeRefused || r.RecursionAvailable {
		t.Fatalf("outside the zones: %v", r)
	}

	// Garbage and responses get no crash; the server keeps answering.
	c, err := (&dns.Client{Net: "udp"}).Dial(l.Addr)
	if err != nil {
		t.Fatal(err)
	}
	for _, junk := range [][]byte{{}, {1}, make([]byte, 11), {0, 1, 0x80, 0, 0, 1, 0, 0, 0, 0, 0, 0}, []byte(strings.Repeat("\xff", 600))} {
		c.Conn.Write(junk)
	}
	c.Close()
	if r := ask("udp", "kubernetes.default.svc.cluster.local.", 0); len(r.Answer) != 1 {
		t.Fatalf("after garbage: %v", r)
	}
}

func TestOps(t *testing.T) {
	s := testSnapshot(t, 2)
	ready := make(chan struct{})
	reg := prometheus.NewRegistry()
	srv := New(func() *snap.Snapshot { return s }, opts, reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	h := httptest.NewServer(Ops{Gatherer: reg, Ready: ready, Snapshot: func() *snap.Snapshot { return s }}.Handler())
	defer h.Close()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(h.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz before the load: %d", code)
	}
	close(ready)
	if code, _ := get("/readyz"); code != http.StatusOK {
		t.Fatalf("readyz after the load: %d", code)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Fatalf("healthz: %d", code)
	}
	code, body := get("/debug/records?name=kubernetes.default.svc.cluster.local.")
	if code != http.StatusOK || !strings.Contains(body, "key /skydns/local/cluster/svc/default/kubernetes/x A {\"host\":\"10.96.0.1\"}") {
		t.Fatalf("debug/records: %d\n%s", code, body)
	}
	if _, body := get("/debug/records?name=svc.cluster.local"); !strings.Contains(body, "empty non-terminal") {
		t.Fatalf("debug/records of a non-terminal:\n%s", body)
	}
	nope, _ := new(dns.Msg).SetQuestion("nope.cluster.local.", dns.TypeA).Pack()
	(&worker{s: srv, tcp: true}).handle(nope)
	if _, body := get("/metrics"); !strings.Contains(body, `etcdns_dnsd_queries_total{qtype="A",rcode="NXDOMAIN"} 1`) || !strings.Contains(body, `etcdns_dnsd_query_duration_seconds_count{source="memory"} 1`) {
		t.Fatalf("metrics:\n%s", body)
	}
	// A scraper that offers gzip gets the page plain (see Handler).
	req, _ := http.NewRequest(http.MethodGet, h.URL+"/metrics", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if enc := resp.Header.Get("Content-Encoding"); enc != "" || !strings.Contains(string(b), "etcdns_dnsd_queries_total") {
		t.Fatalf("metrics asked with gzip: Content-Encoding %q, body %.60q", enc, b)
	}
}

// The response cache lives and dies with its snapshot, and echoes each
// query's own id and flags.
func TestCacheFollowsSnapshot(t *testing.T) {
	cur := testSnapshot(t, 0)
	srv := New(func() *snap.Snapshot { return cur }, opts, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	w := &worker{s: srv}
	ask := func(id uint16, rd bool) *dns.Msg {
		t.Helper()
		q := new(dns.Msg).SetQuestion("kubernetes.default.svc.cluster.local.", dns.TypeA)
		q.Id, q.RecursionDesired = id, rd
		b, _ := q.Pack()
		var m dns.Msg
		if err := m.Unpack(w.handle(b)); err != nil {
			t.Fatal(err)
		}
		return &m
	}
	if m := ask(1, true); len(m.Answer) != 1 || m.Id != 1 || !m.RecursionDesired {
		t.Fatalf("first: %v", m)
	}
	if m := ask(2, false); len(m.Answer) != 1 || m.Id != 2 || m.RecursionDesired {
		t.Fatalf("cached: %v", m)
	}
	next, _ := snap.Build(zones, 10, nil)
	cur = next
	if m := ask(3, true); m.Rcode != dns.RcodeNameError || m.Id != 3 {
		t.Fatalf("after the snapshot changed: %v", m)
	}
}

// Readers on several sockets share the cache while snapshots change under
// them; run with -race.
func TestCacheConcurrent(t *testing.T) {
	var cur atomic.Pointer[snap.Snapshot]
	cur.Store(testSnapshot(t, 3))
	srv := New(cur.Load, opts, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	q, _ := new(dns.Msg).SetQuestion("kubernetes.default.svc.cluster.local.", dns.TypeA).Pack()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &worker{s: srv}
			for range 2000 {
				var m dns.Msg
				if err := m.Unpack(w.handle(q)); err != nil || len(m.Answer) != 1 {
					t.Errorf("answer %v, %v", &m, err)
					return
				}
			}
		}()
	}
	for i := range 50 {
		cur.Store(testSnapshot(t, i%5))
	}
	wg.Wait()
}

// The answers of a UDP batch are counted before they are sent (the first
// built, the others from the cache), and timed once, when the batch ends,
// each in the latency histogram.
func TestBatchTimesEachAnswer(t *testing.T) {
	sn := testSnapshot(t, 3)
	reg := prometheus.NewRegistry()
	srv := New(func() *snap.Snapshot { return sn }, opts, reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	w := srv.newUDPWorker(nil)
	q, err := new(dns.Msg).SetQuestion("nope.cluster.local.", dns.TypeA).Pack()
	if err != nil {
		t.Fatal(err)
	}
	observed := func() uint64 {
		return histogramCount(t, reg, "etcdns_dnsd_query_duration_seconds")
	}
	counted := func() uint64 {
		return counterSum(t, reg, "coredns_dns_requests_total") + counterSum(t, reg, "etcdns_dnsd_queries_total")
	}
	w.startBatch()
	for range 3 {
		if w.handle(q) == nil {
			t.Fatal("no answer")
		}
	}
	w.addBatch()
	if n := counted(); n != 6 {
		t.Fatalf("%d counts for a batch of 3 answers, want 3 in each of two counters", n)
	}
	if n := observed(); n != 0 {
		t.Fatalf("%d latencies observed before the batch ended", n)
	}
	w.endBatch()
	if n, c := observed(), counted(); n != 3 || c != 6 {
		t.Fatalf("%d latencies observed and %d counts for a batch of 3 answers", n, c)
	}
}

func TestCacheBoundsFollowMemoryLimit(t *testing.T) {
	for _, c := range []struct {
		limit int64
		want  [2]int64
	}{
		{math.MaxInt64, [2]int64{cacheLimit, cacheBytes}}, // no GOMEMLIMIT
		{1 << 30, [2]int64{cacheLimit, cacheBytes}},       // an eighth is more than the default
		{64 << 20, [2]int64{cacheLimit / 4, 8 << 20}},     // a node-local frontend
		{4 << 20, [2]int64{cacheLimit / 32, minCacheBytes}},
	} {
		if got := cacheBounds(c.limit); got != c.want {
			t.Errorf("GOMEMLIMIT %d: bounds %v, want %v", c.limit, got, c.want)
		}
	}
}

// histogramCount is the sample count of the histogram name, and
// counterSum the value of the counter name, summed over their label sets.
func histogramCount(t *testing.T, reg prometheus.Gatherer, name string) uint64 {
	return metricSum(t, reg, name, func(m *dto.Metric) float64 { return float64(m.GetHistogram().GetSampleCount()) })
}

func counterSum(t *testing.T, reg prometheus.Gatherer, name string) uint64 {
	return metricSum(t, reg, name, func(m *dto.Metric) float64 { return m.GetCounter().GetValue() })
}

func metricSum(t *testing.T, reg prometheus.Gatherer, name string, value func(*dto.Metric) float64) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.Metric {
				n += value(m)
			}
		}
	}
	return uint64(n)
}

// A message that does not pack (a record no message can carry) goes out
// as SERVFAIL, not silence, and keeps the OPT record an EDNS query's
// answer must have.
func TestUnpackableAnswerIsServfailWithOPT(t *testing.T) {
	srv := newServer(t, testSnapshot(t, 1))
	req := new(dns.Msg).SetQuestion("s.example.org.", dns.TypeSRV).SetEdns0(1232, false)
	m := new(dns.Msg).SetReply(req)
	m.Answer = []dns.RR{&dns.SRV{Hdr: dns.RR_Header{Name: "s.example.org.", Rrtype: dns.TypeSRV, Class: dns.ClassINET, Ttl: 30}, Target: "y..s.example.org."}}
	m.Extra = append(m.Extra, req.IsEdns0())
	wire, _, _ := srv.pack(m, 1232, nil)
	var r dns.Msg
	if err := r.Unpack(wire); err != nil {
		t.Fatal(err)
	}
	if r.Rcode != dns.RcodeServerFailure || len(r.Answer) != 0 || r.IsEdns0() == nil || len(r.Question) != 1 {
		t.Fatalf("got %v, want SERVFAIL with the question and an OPT record", &r)
	}
}

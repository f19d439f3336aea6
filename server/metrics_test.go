package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/etcdns/etcdns/internal/testdns"
	"github.com/etcdns/etcdns/server/forward"
	"github.com/etcdns/etcdns/server/snap"
)

// The CoreDNS names count what CoreDNS's metrics plugin would for the
// same queries, and dnsd's own names keep counting the same answers: a
// dashboard on either shows the same traffic.
func TestCoreDNSMetrics(t *testing.T) {
	sn := testSnapshot(t, 3)
	reg := prometheus.NewRegistry()
	srv := New(func() *snap.Snapshot { return sn }, opts, reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	l, stop, done := start(t, srv, "127.0.0.1:0")
	defer func() { stop(); <-done }()

	ask := func(network, name string, qtype uint16) {
		t.Helper()
		m := new(dns.Msg).SetQuestion(name, qtype)
		c := &dns.Client{Net: network, Timeout: 2 * time.Second}
		var err error
		for range 20 { // the servers start asynchronously
			if _, _, err = c.Exchange(m, l.Addr); err == nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("%s %s: %v", network, name, err)
	}
	ask("udp", "kubernetes.default.svc.cluster.local.", dns.TypeA)
	ask("udp", "kubernetes.default.svc.cluster.local.", dns.TypeA) // from the response cache
	ask("tcp", "kubernetes.default.svc.cluster.local.", dns.TypeA)
	ask("udp", "1.0.96.10.in-addr.arpa.", dns.TypePTR)
	ask("udp", "nope.default.svc.cluster.local.", dns.TypeNAPTR)
	ask("udp", "example.com.", dns.TypeA)
	// A message with no question: FORMERR, written by dnsd itself.
	c, err := (&dns.Client{Net: "udp"}).Dial(l.Addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte{0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 512)); err != nil {
		t.Fatalf("no FORMERR: %v", err)
	}
	c.Close()

	server := `server="dns://` + l.Addr + `"`
	wants := []string{
		`coredns_dns_requests_total{family="1",proto="udp",` + server + `,type="A",view="",zone="cluster.local."} 2`,
		`coredns_dns_requests_total{family="1",proto="tcp",` + server + `,type="A",view="",zone="cluster.local."} 1`,
		`coredns_dns_requests_total{family="1",proto="udp",` + server + `,type="PTR",view="",zone="in-addr.arpa."} 1`,
		`coredns_dns_requests_total{family="1",proto="udp",` + server + `,type="other",view="",zone="cluster.local."} 1`,
		`coredns_dns_requests_total{family="1",proto="udp",` + server + `,type="A",view="",zone="."} 1`,
		`coredns_dns_requests_total{family="1",proto="udp",` + server + `,type="other",view="",zone="."} 1`,
		`coredns_dns_responses_total{plugin="etcd",rcode="NOERROR",` + server + `,view="",zone="cluster.local."} 3`,
		`coredns_dns_responses_total{plugin="etcd",rcode="NXDOMAIN",` + server + `,view="",zone="cluster.local."} 1`,
		`coredns_dns_responses_total{plugin="",rcode="REFUSED",` + server + `,view="",zone="."} 1`,
		`coredns_dns_responses_total{plugin="",rcode="FORMERR",` + server + `,view="",zone="."} 1`,
		`coredns_dns_request_duration_seconds_count{` + server + `,type="A",view="",zone="cluster.local."} 3`,
		`coredns_dns_request_duration_seconds_count{` + server + `,type="other",view="",zone="cluster.local."} 1`,
		`coredns_dns_request_duration_seconds_count{` + server + `,type="A",view="",zone="."} 1`,
		`coredns_dns_request_duration_seconds_count{` + server + `,type="other",view="",zone="."} 1`,
		`coredns_dns_request_duration_seconds_bucket{` + server + `,type="A",view="",zone="cluster.local.",le="0.00025"}`,
		`coredns_dns_request_duration_seconds_bucket{` + server + `,type="A",view="",zone="cluster.local.",le="8.192"} 3`,
		`etcdns_dnsd_queries_total{qtype="A",rcode="NOERROR"} 3`,
		`etcdns_dnsd_queries_total{qtype="none",rcode="FORMERR"} 1`,
		`etcdns_dnsd_query_duration_seconds_bucket{source="memory",le="5e-06"}`,
		`etcdns_dnsd_query_duration_seconds_count{source="memory"} 7`,
	}
	// A batch of UDP replies has its latencies observed once it is sent
	// (endBatch), so the client can read a reply before the duration
	// histogram counts it: the page is read again until it shows every
	// count.
	var body string
	var lacks []string
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		rec := httptest.NewRecorder()
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		body, lacks = rec.Body.String(), nil
		for _, want := range wants {
			if !strings.Contains(body, want+"\n") && !strings.Contains(body, want+" ") {
				lacks = append(lacks, want)
			}
		}
		if len(lacks) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, want := range lacks {
		t.Errorf("/metrics lacks %s", want)
	}
	// Six datagrams, each read by one socket of the group, each socket
	// with its series.
	if n := counterSum(t, reg, "etcdns_dnsd_udp_socket_queries_total"); n != 6 {
		t.Errorf("%d UDP datagrams counted by socket, want 6", n)
	}
	if n := strings.Count(body, "etcdns_dnsd_udp_socket_queries_total{socket="); n != len(l.udp) {
		t.Errorf("%d socket series for %d sockets", n, len(l.udp))
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
}

// Both histograms are exact: every bound of each is a bound of the slots.
func TestLatencyBuckets(t *testing.T) {
	var l latCell
	for _, d := range []time.Duration{3 * time.Microsecond, 200 * time.Microsecond, 250 * time.Microsecond, 3 * time.Millisecond, 20 * time.Second} {
		l.observeN(d, 2)
	}
	slots := make([]uint64, len(unionBuckets)+1)
	for i := range slots {
		slots[i] = l.slots[i].Load()
	}
	count, own := cumulative(slots, ownBuckets)
	_, cd := cumulative(slots, corednsBuckets)
	if count != 10 || own[5e-6] != 2 || own[ownBuckets[len(ownBuckets)-1]] != 8 || cd[0.00025] != 6 || cd[0.004] != 8 || len(own) != len(ownBuckets) || len(cd) != len(corednsBuckets) {
		t.Errorf("count %d, own %v, coredns %v", count, own, cd)
	}
	if got := l.sumNs.Load(); got != 2*uint64(3*time.Microsecond+200*time.Microsecond+250*time.Microsecond+3*time.Millisecond+20*time.Second) {
		t.Errorf("sum %d ns", got)
	}
}

// dnsd's own answer-time histogram tells answers that waited on an
// upstream from the rest (its own, and the forwarding cache's), which
// EtcdnsDnsdLatencyHigh leaves out; CoreDNS's per-zone one holds both, as
// CoreDNS's does.
func TestLatencyBySource(t *testing.T) {
	sn := testSnapshot(t, 0)
	reg := prometheus.NewRegistry()
	srv := New(func() *snap.Snapshot { return sn }, opts, reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	up, _ := testdns.Upstream(t)
	f, err := forward.New(forward.Config{Upstreams: []netip.AddrPort{up}, Timeout: time.Second, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Listen: "127.0.0.1:1", CacheSize: 100, MaxTTL: 30}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	srv.SetForwarder(f)
	w := &worker{s: srv, tcp: true, from: netip.MustParseAddrPort("127.0.0.1:5300")}
	for _, name := range []string{"kubernetes.default.svc.cluster.local.", "example.com.", "example.org.", "8.8.8.8.in-addr.arpa.", "example.com."} {
		b, _ := new(dns.Msg).SetQuestion(name, dns.TypeA).Pack()
		if w.handle(b) == nil {
			t.Fatalf("%s: no answer", name)
		}
	}
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{
		`etcdns_dnsd_query_duration_seconds_count{source="memory"} 2`, // the second example.com from the forwarding cache
		`etcdns_dnsd_query_duration_seconds_count{source="upstream"} 3`,
		`coredns_dns_request_duration_seconds_count{server="dns://",type="A",view="",zone="."} 3`,
		`coredns_dns_request_duration_seconds_count{server="dns://",type="A",view="",zone="in-addr.arpa."} 1`,
	} {
		if !strings.Contains(rec.Body.String(), want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if t.Failed() {
		for _, l := range strings.Split(rec.Body.String(), "\n") {
			if strings.Contains(l, "_count") {
				t.Log(l)
			}
		}
	}
}

// TestServerLabelIsTheListenAddress: CoreDNS's server label is the
// address as configured (dns://:53), not as bound (dns://[::]:53), so a
// dashboard's server filter carries over; a port 0 is given as bound.
func TestServerLabelIsTheListenAddress(t *testing.T) {
	probe, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(probe.LocalAddr().String())
	probe.Close()
	for addr, want := range map[string]string{":" + port: "dns://:" + port, "127.0.0.1:0": ""} {
		l, err := Listen(addr)
		if err != nil {
			t.Skipf("%s: %v", addr, err) // the port was taken meanwhile
		}
		if want == "" {
			want = "dns://" + l.Addr
		}
		srv := New(func() *snap.Snapshot { return testSnapshot(t, 0) }, opts, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ctx, l) }()
		for deadline := time.Now().Add(2 * time.Second); *srv.qm.server.Load() != want && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		if got := *srv.qm.server.Load(); got != want {
			t.Errorf("listening on %s: server label %q, want %q", addr, got, want)
		}
		cancel()
		<-done
	}
}

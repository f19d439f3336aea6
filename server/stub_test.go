package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/etcdns/etcdns/server/forward"
	"github.com/etcdns/etcdns/server/snap"
	"github.com/etcdns/etcdns/server/store"
)

// stubServer is a nameserver for a stub domain on a loopback port, UDP
// and TCP, answering every A question with 10.9.9.9 and remembering what
// it was asked.
type stubServer struct {
	addr string
	mu   sync.Mutex
	got  []*dns.Msg
}

func (s *stubServer) asked() []*dns.Msg {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*dns.Msg(nil), s.got...)
}

func startStubServer(t *testing.T) *stubServer {
	t.Helper()
	s := &stubServer{}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		s.mu.Lock()
		s.got = append(s.got, req.Copy())
		s.mu.Unlock()
		m := new(dns.Msg).SetReply(req)
		m.Authoritative = true
		m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: req.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30}, A: net.IPv4(10, 9, 9, 9)}}
		w.WriteMsg(m)
	})
	// A free UDP port's TCP twin may be taken (a client's ephemeral port):
	// try another, as Listen does.
	var pc net.PacketConn
	var l net.Listener
	var err error
	for try := 0; try < 10; try++ {
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		s.addr = pc.LocalAddr().String()
		if l, err = net.Listen("tcp", s.addr); err == nil {
			break
		}
		pc.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: l, Handler: h}} {
		go srv.ActivateAndServe()
		t.Cleanup(func() { srv.Shutdown() })
	}
	return s
}

// stubKV is the key and value of one nameserver of domain under
// cluster.local.
func stubKV(domain, id, addr string) snap.KV {
	labels := strings.Split(domain, ".")
	k := "/skydns/local/cluster/dns/stub"
	for i := len(labels) - 1; i >= 0; i-- {
		k += "/" + labels[i]
	}
	ap := netip.MustParseAddrPort(addr)
	return snap.KV{Key: k + "/" + id, Value: []byte(fmt.Sprintf(`{"host":%q,"port":%d}`, ap.Addr(), ap.Port()))}
}

func newStubs(t *testing.T, reg prometheus.Registerer, listen string, allow ...string) *forward.Stubs {
	t.Helper()
	var prefixes []netip.Prefix
	for _, a := range allow {
		prefixes = append(prefixes, netip.MustParsePrefix(a))
	}
	st, err := forward.NewStubs(forward.StubConfig{
		Timeout: 500 * time.Millisecond, Allow: prefixes, Listen: listen, Option: 65002, Cluster: "c1",
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, reg)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func counter(t *testing.T, reg prometheus.Gatherer, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			if label == "" || len(m.Label) > 0 && m.Label[0].GetValue() == label {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func sourceCluster(m *dns.Msg) (string, bool) {
	opt := m.IsEdns0()
	if opt == nil {
		return "", false
	}
	for _, o := range opt.Option {
		if l, ok := o.(*dns.EDNS0_LOCAL); ok && l.Code == 65002 {
			return string(l.Data), true
		}
	}
	return "", false
}

// TestStubDomains serves a stub domain outside the zones over UDP and
// TCP: its names go to the stub's nameserver, with the source-cluster
// option, RD or not; a question that already carries the option, a
// nameserver that is dnsd itself and a dead nameserver each stay here.
func TestStubDomains(t *testing.T) {
	ns := startStubServer(t)
	l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := fmt.Sprintf("127.0.0.1:%d", func() int {
		c, _ := net.ListenPacket("udp", "127.0.0.1:0")
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).Port
	}())
	sn, errs := snap.Build(zones, 1, []snap.KV{
		{Key: "/skydns/local/cluster/svc/default/kubernetes/x", Value: []byte(`{"host":"10.96.0.1"}`)},
		stubKV("myfed.svc.federation", "ns1", ns.addr),
		stubKV("self.svc.federation", "ns1", l.Addr),
		stubKV("dead.svc.federation", "ns1", dead),
	})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	reg := prometheus.NewRegistry()
	srv := New(func() *snap.Snapshot { return sn }, opts, reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	srv.SetStubs(newStubs(t, reg, l.Addr, "127.0.0.0/8"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	defer func() { cancel(); <-done }()

	ask := func(network, name string, rd bool, opts ...dns.EDNS0) *dns.Msg {
		t.Helper()
		m := new(dns.Msg).SetQuestion(name, dns.TypeA)
		m.RecursionDesired = rd
		if len(opts) > 0 {
			m.SetEdns0(1232, false)
			m.IsEdns0().Option = opts
		}
		c := &dns.Client{Net: network, Timeout: 3 * time.Second}
		var r *dns.Msg
		for range 20 { // the servers start asynchronously
			if r, _, err = c.Exchange(m, l.Addr); err == nil {
				return r
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("%s %s: %v", network, name, err)
		return nil
	}

	for i, network := range []string{"udp", "tcp"} {
		r := ask(network, "Web.NS.myfed.svc.federation.", false)
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].Header().Name != "Web.NS.myfed.svc.federation." || !r.Authoritative {
			t.Fatalf("%s: %v", network, r)
		}
		got := ns.asked()
		if len(got) != i+1 {
			t.Fatalf("%s: the stub's nameserver was asked %d times, want %d", network, len(got), i+1)
		}
		if c, ok := sourceCluster(got[i]); !ok || c != "c1" || got[i].RecursionDesired {
			t.Errorf("%s: the nameserver got source cluster %q (%v), RD %v", network, c, ok, got[i].RecursionDesired)
		}
	}
	if r := ask("udp", "kubernetes.default.svc.cluster.local.", false); len(r.Answer) != 1 {
		t.Errorf("a name of the zone: %v", r)
	}

	// The client's own options stay here; its source-cluster option marks
	// a question some server stub-forwarded already.
	before := len(ns.asked())
	r := ask("udp", "web.ns.myfed.svc.federation.", true, &dns.EDNS0_LOCAL{Code: 65002, Data: []byte("other")})
	if r.Rcode != dns.RcodeRefused || len(ns.asked()) != before {
		t.Errorf("a looped question: %s, nameserver asked %d more times", dns.RcodeToString[r.Rcode], len(ns.asked())-before)
	}
	if got := counter(t, reg, "etcdns_dnsd_stub_loops_total", ""); got != 1 {
		t.Errorf("loops counted %v, want 1", got)
	}
	ask("udp", "web.ns.myfed.svc.federation.", true, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0123456789abcdef"})
	if got := ns.asked(); len(got) != before+1 || len(got[before].IsEdns0().Option) != 1 {
		t.Errorf("the client's cookie went to the stub: %v", got[len(got)-1].IsEdns0())
	}

	if r := ask("udp", "x.self.svc.federation.", true); r.Rcode != dns.RcodeRefused {
		t.Errorf("a stub whose nameserver is dnsd: %v", r)
	}
	if got := counter(t, reg, "etcdns_dnsd_stub_self_skips_total", ""); got != 1 {
		t.Errorf("self skips counted %v, want 1", got)
	}
	if r := ask("tcp", "x.dead.svc.federation.", true); r.Rcode != dns.RcodeServerFailure {
		t.Errorf("a dead nameserver: %v", r)
	}
	if got := counter(t, reg, "etcdns_dnsd_stub_queries_total", "ok"); got != 3 {
		t.Errorf("ok stub queries %v, want 3", got)
	}
}

// A stub domain inside a zone: allowed clients get the stub's answer every
// time, never one cached from the zone's data, and clients outside the
// allow list get the zone's own answer.
func TestStubDomainInZoneIsNeverCached(t *testing.T) {
	ns := startStubServer(t)
	sn, errs := snap.Build(zones, 1, []snap.KV{
		{Key: "/skydns/local/cluster/svc/corp/www/x", Value: []byte(`{"host":"10.1.1.1"}`)},
		stubKV("corp.svc.cluster.local", "ns1", ns.addr),
	})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	srv := newServer(t, sn)
	srv.SetStubs(newStubs(t, prometheus.NewRegistry(), "127.0.0.1:53", "127.0.0.0/8"))
	w := &worker{s: srv} // no socket: forwarded questions are answered inline
	ask := func(from string) *dns.Msg {
		t.Helper()
		w.from = netip.MustParseAddrPort(from)
		q, _ := new(dns.Msg).SetQuestion("www.corp.svc.cluster.local.", dns.TypeA).Pack()
		var m dns.Msg
		if err := m.Unpack(w.handle(q)); err != nil {
			t.Fatal(err)
		}
		return &m
	}
	for range 2 {
		if m := ask("192.0.2.1:5353"); len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "10.1.1.1" {
			t.Fatalf("a client outside the allow list: %v", m)
		}
	}
	for i := range 2 {
		if m := ask("127.0.0.1:5353"); len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "10.9.9.9" {
			t.Fatalf("an allowed client, query %d: %v", i, m)
		}
	}
	if n := len(ns.asked()); n != 2 {
		t.Fatalf("the stub's nameserver was asked %d times, want 2", n)
	}
	if m := ask("192.0.2.1:5353"); m.Answer[0].(*dns.A).A.String() != "10.1.1.1" {
		t.Fatalf("a stub's answer reached a client outside the allow list: %v", m)
	}
}

func TestDebugRecordsShowsStubs(t *testing.T) {
	sn, _ := snap.Build(zones, 1, []snap.KV{
		stubKV("myfed.svc.federation", "ns1", "10.0.0.1:53"),
		{Key: "/skydns/local/cluster/dns/stub/federation/svc/myfed/ns2", Value: []byte(`{"host":"ns.example.com"}`)},
	})
	h := Ops{Snapshot: func() *snap.Snapshot { return sn }, Malformed: func(owner string) []store.Malformed {
		if owner != "myfed.svc.federation" {
			return nil
		}
		return []store.Malformed{{Key: "/skydns/local/cluster/dns/stub/federation/svc/myfed/ns2", Err: "host must be an IP address"}}
	}}.Handler()
	for name, want := range map[string][]string{
		"myfed.svc.federation": {
			"myfed.svc.federation: in stub domain myfed.svc.federation, answered by its nameservers",
			"stub /skydns/local/cluster/dns/stub/federation/svc/myfed/ns1 10.0.0.1:53",
			"in no served zone",
			"skipped /skydns/local/cluster/dns/stub/federation/svc/myfed/ns2",
		},
		"web.ns.myfed.svc.federation": {"in stub domain myfed.svc.federation"},
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/debug/records?name="+name, nil))
		for _, s := range want {
			if !strings.Contains(w.Body.String(), s) {
				t.Errorf("%s: %q missing from\n%s", name, s, w.Body.String())
			}
		}
	}
}

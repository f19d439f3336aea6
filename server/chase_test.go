package server

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/etcdns/etcdns/internal/testdns"
	"github.com/etcdns/etcdns/server/snap"
)

// chaseSnapshot is a SkyDNS zone whose names point out of every zone, to
// the upstreams' names and to a stub domain's, beside cluster.local.
func chaseSnapshot(t *testing.T, stubNS string) *snap.Snapshot {
	t.Helper()
	kvs := []snap.KV{
		{Key: "/skydns/test/skydns/ext/x", Value: []byte(`{"host":"www.example.net"}`)},
		{Key: "/skydns/test/skydns/srv/x", Value: []byte(`{"host":"sip.example.net","port":5060}`)},
		{Key: "/skydns/test/skydns/fed/x", Value: []byte(`{"host":"web.ns.myfed.svc.federation"}`)},
		{Key: "/skydns/local/cluster/svc/default/kubernetes/x", Value: []byte(`{"host":"10.96.0.1"}`)},
	}
	if stubNS != "" {
		kvs = append(kvs, stubKV("myfed.svc.federation", "ns1", stubNS))
	}
	sn, errs := snap.Build(append([]snap.Config{{Name: "skydns.test", Prefix: "/skydns", TTL: 300, SkyDNS: true}}, zones...), 1, kvs)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return sn
}

// A SkyDNS CNAME or SRV target in no zone is resolved through the
// upstreams when the client could have it forwarded (allowed, RD set),
// and the answer is the CNAME then the upstream's records, NOERROR, as
// CoreDNS's etcd plugin answers with forward behind it; otherwise, or
// when the upstreams fail, the CNAME alone. Such answers are never cached:
// an allowed client never gets one built for another, and each asks the
// upstream.
func TestSkyDNSChaseThroughUpstream(t *testing.T) {
	up, asked := testdns.Upstream(t)
	srv := newServer(t, chaseSnapshot(t, ""))
	withForwarding(t, srv, up, "10.0.0.0/8")
	ask := func(from string, tcp, rd bool, name string, qtype uint16) []string {
		t.Helper()
		w := &worker{s: srv, tcp: tcp, from: netip.MustParseAddrPort(from)}
		q := new(dns.Msg).SetQuestion(name, qtype)
		q.Id, q.RecursionDesired = 77, rd
		b, _ := q.Pack()
		var m dns.Msg
		if err := m.Unpack(w.handle(b)); err != nil {
			t.Fatal(err)
		}
		if m.Rcode != dns.RcodeSuccess || !m.Authoritative || m.Id != 77 {
			t.Errorf("%s %s from %s: %s aa=%v", name, dns.TypeToString[qtype], from, dns.RcodeToString[m.Rcode], m.Authoritative)
		}
		return append(rrStrings(m.Answer), rrStrings(m.Extra)...)
	}
	alone := "ext.skydns.test. 300 IN CNAME www.example.net."
	chased := alone + "|www.example.net. 60 IN A 192.0.2.53"
	check := func(what string, got []string, want string) {
		t.Helper()
		if strings.Join(got, "|") != want {
			t.Errorf("%s: %q, want %q", what, got, want)
		}
	}
	for _, tcp := range []bool{false, true} {
		// The refused shapes first, each twice: a cached one would then
		// reach the allowed client.
		for range 2 {
			check(fmt.Sprintf("without RD, TCP %v", tcp), ask("10.1.2.3:5300", tcp, false, "ext.skydns.test.", dns.TypeA), alone)
			check(fmt.Sprintf("outside forward-allow, TCP %v", tcp), ask("192.0.2.1:5300", tcp, true, "ext.skydns.test.", dns.TypeA), alone)
		}
		check(fmt.Sprintf("allowed, TCP %v", tcp), ask("10.1.2.3:5300", tcp, true, "ext.skydns.test.", dns.TypeA), chased)
		check(fmt.Sprintf("allowed again, TCP %v", tcp), ask("10.1.2.3:5300", tcp, true, "ext.skydns.test.", dns.TypeA), chased)
		check(fmt.Sprintf("outside forward-allow after an allowed one, TCP %v", tcp), ask("192.0.2.1:5300", tcp, true, "ext.skydns.test.", dns.TypeA), alone)
	}
	if n := asked.Load(); n != 4 {
		t.Errorf("the upstream was asked %d times; want 4, once per allowed question", n)
	}
	// SRV glue: A and AAAA of the target (this upstream answers A to both).
	check("SRV glue", ask("10.1.2.3:5300", false, true, "srv.skydns.test.", dns.TypeSRV),
		"srv.skydns.test. 300 IN SRV 10 100 5060 sip.example.net.|sip.example.net. 60 IN A 192.0.2.53|sip.example.net. 60 IN A 192.0.2.53")
	// A name the snapshot knows no stub domain for goes upstream.
	before := asked.Load()
	check("a federation name, no stub domain", ask("10.1.2.3:5300", false, true, "fed.skydns.test.", dns.TypeA),
		"fed.skydns.test. 300 IN CNAME web.ns.myfed.svc.federation.|web.ns.myfed.svc.federation. 60 IN A 192.0.2.53")
	if asked.Load() != before+1 {
		t.Errorf("asked %d, want %d", asked.Load(), before+1)
	}

	// The upstream gone: the CNAME alone, NOERROR, as CoreDNS answers
	// when forward fails.
	dead := newServer(t, chaseSnapshot(t, ""))
	withForwarding(t, dead, netip.MustParseAddrPort(deadAddr(t)), "10.0.0.0/8")
	srv = dead
	check("dead upstream", ask("10.1.2.3:5300", true, true, "ext.skydns.test.", dns.TypeA), alone)

	// Over the sockets: the UDP answer comes from a goroutine of its own.
	on := newServer(t, chaseSnapshot(t, ""))
	withForwarding(t, on, up, "127.0.0.0/8")
	at := serve(t, on, "127.0.0.1:0")
	for _, network := range []string{"udp", "tcp"} {
		q := new(dns.Msg).SetQuestion("ext.skydns.test.", dns.TypeA)
		r, _, err := (&dns.Client{Net: network, Timeout: 2 * time.Second}).Exchange(q, at)
		if err != nil {
			t.Fatal(err)
		}
		check("over "+network, rrStrings(r.Answer), chased)
	}
}

// A target in a stub domain goes to the stub's nameservers, with the
// source-cluster option, never to the upstreams.
func TestSkyDNSChaseIntoStubDomain(t *testing.T) {
	ns := startStubServer(t)
	up, asked := testdns.Upstream(t)
	srv := newServer(t, chaseSnapshot(t, ns.addr))
	withForwarding(t, srv, up, "127.0.0.0/8")
	srv.SetStubs(newStubs(t, prometheus.NewRegistry(), "127.0.0.1:1", "127.0.0.0/8"))
	at := serve(t, srv, "127.0.0.1:0")
	q := new(dns.Msg).SetQuestion("fed.skydns.test.", dns.TypeA)
	r, _, err := (&dns.Client{Net: "tcp", Timeout: 2 * time.Second}).Exchange(q, at)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(rrStrings(r.Answer), "|"), "fed.skydns.test. 300 IN CNAME web.ns.myfed.svc.federation.|web.ns.myfed.svc.federation. 30 IN A 10.9.9.9"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := ns.asked(); len(got) != 1 {
		t.Errorf("the stub's nameserver was asked %d times, want 1", len(got))
	} else if c, ok := sourceCluster(got[0]); !ok || c != "c1" {
		t.Errorf("the stub's nameserver got source cluster %q (%v)", c, ok)
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("the upstream was asked %d times, want 0", n)
	}
}

// Without forwarding, stub domains still on (as dnsd always runs): a
// target in a stub domain is resolved there, and an answer whose target
// could go nowhere is the CNAME alone and cached as before.
func TestSkyDNSChaseWithoutForwarding(t *testing.T) {
	ns := startStubServer(t)
	srv := newServer(t, chaseSnapshot(t, ns.addr))
	srv.SetStubs(newStubs(t, prometheus.NewRegistry(), "127.0.0.1:1", "127.0.0.0/8"))
	ask := func(name string) string {
		t.Helper()
		w := &worker{s: srv, tcp: true, from: netip.MustParseAddrPort("127.0.0.1:5300")}
		q := new(dns.Msg).SetQuestion(name, dns.TypeA)
		b, _ := q.Pack()
		var m dns.Msg
		if err := m.Unpack(w.handle(b)); err != nil {
			t.Fatal(err)
		}
		return strings.Join(rrStrings(m.Answer), "|")
	}
	entries := func() int {
		if v := srv.cache.Load(); v != nil {
			return v.cache.entries()
		}
		return 0
	}
	if got, want := ask("ext.skydns.test."), "ext.skydns.test. 300 IN CNAME www.example.net."; got != want || entries() != 1 {
		t.Errorf("a target in no zone: %q (want %q), %d cached (want 1)", got, want, entries())
	}
	want := "fed.skydns.test. 300 IN CNAME web.ns.myfed.svc.federation.|web.ns.myfed.svc.federation. 30 IN A 10.9.9.9"
	for i := range 2 {
		if got := ask("fed.skydns.test."); got != want || entries() != 1 || len(ns.asked()) != i+1 {
			t.Errorf("a target in a stub domain, %d: %q (want %q), %d cached (want 1), nameserver asked %d times", i, got, want, entries(), len(ns.asked()))
		}
	}
}

// deadAddr is a loopback UDP port nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().String()
}

func rrStrings(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		if rr.Header().Rrtype != dns.TypeOPT {
			out = append(out, strings.Join(strings.Fields(rr.String()), " "))
		}
	}
	return out
}

// Before the first load there is no snapshot: with stub domains on (as
// dnsd always runs) a query is answered SERVFAIL, and the process lives.
func TestNoSnapshotYetWithStubs(t *testing.T) {
	srv := newServer(t, nil)
	srv.SetStubs(newStubs(t, prometheus.NewRegistry(), "127.0.0.1:1", "127.0.0.0/8"))
	w := &worker{s: srv, from: netip.MustParseAddrPort("127.0.0.1:5300")}
	b, _ := new(dns.Msg).SetQuestion("web.ns.svc.cluster.local.", dns.TypeA).Pack()
	var m dns.Msg
	if err := m.Unpack(w.handle(b)); err != nil {
		t.Fatal(err)
	}
	if m.Rcode != dns.RcodeServerFailure {
		t.Errorf("rcode %s, want SERVFAIL", dns.RcodeToString[m.Rcode])
	}
}

// An ExternalName's CNAME is followed for the client, as spec 000 2.5's
// answer and CoreDNS's kubernetes plugin give it (a pod's stub resolver
// does not follow a CNAME): to a name in no zone through the upstreams,
// when the client could have it forwarded; into another zone dnsd serves
// (a SkyDNS one here) from memory. Otherwise the CNAME alone.
func TestExternalNameIsFollowed(t *testing.T) {
	up, asked := testdns.Upstream(t)
	kvs := []snap.KV{
		{Key: "/skydns/local/cluster/svc/default/foo/x", Value: []byte(`{"host":"www.example.com"}`)},
		{Key: "/skydns/local/cluster/svc/default/sky/x", Value: []byte(`{"host":"www.skydns.test"}`)},
		{Key: "/skydns/test/skydns/www/x", Value: []byte(`{"host":"10.1.1.1"}`)},
	}
	sn, errs := snap.Build(append([]snap.Config{{Name: "skydns.test", Prefix: "/skydns", TTL: 300, SkyDNS: true}}, zones...), 1, kvs)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	srv := newServer(t, sn)
	withForwarding(t, srv, up, "10.0.0.0/8")
	ask := func(from string, tcp, rd bool, name string) string {
		t.Helper()
		w := &worker{s: srv, tcp: tcp, from: netip.MustParseAddrPort(from)}
		q := new(dns.Msg).SetQuestion(name, dns.TypeA)
		q.RecursionDesired = rd
		b, _ := q.Pack()
		var m dns.Msg
		if err := m.Unpack(w.handle(b)); err != nil {
			t.Fatal(err)
		}
		if m.Rcode != dns.RcodeSuccess || !m.Authoritative {
			t.Errorf("%s from %s: %s aa=%v", name, from, dns.RcodeToString[m.Rcode], m.Authoritative)
		}
		return strings.Join(rrStrings(m.Answer), "|")
	}
	alone := "foo.default.svc.cluster.local. 5 IN CNAME www.example.com."
	for _, tcp := range []bool{false, true} {
		for _, c := range []struct {
			what, from string
			rd         bool
			want       string
		}{
			{"without RD", "10.1.2.3:5300", false, alone},
			{"outside forward-allow", "192.0.2.1:5300", true, alone},
			{"allowed", "10.1.2.3:5300", true, alone + "|www.example.com. 60 IN A 192.0.2.53"},
			{"outside forward-allow after an allowed one", "192.0.2.1:5300", true, alone},
		} {
			if got := ask(c.from, tcp, c.rd, "foo.default.svc.cluster.local."); got != c.want {
				t.Errorf("%s, TCP %v: %q, want %q", c.what, tcp, got, c.want)
			}
		}
	}
	if n := asked.Load(); n != 2 {
		t.Errorf("the upstream was asked %d times, want 2 (once per allowed question)", n)
	}
	if got, want := ask("192.0.2.1:5300", true, false, "sky.default.svc.cluster.local."),
		"sky.default.svc.cluster.local. 5 IN CNAME www.skydns.test.|www.skydns.test. 300 IN A 10.1.1.1"; got != want {
		t.Errorf("into a SkyDNS zone: %q, want %q", got, want)
	}
}

//go:build integration

package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdns/etcdns/integration/harness"
)

// skydnsValues is SkyDNS-layout data as its writers leave it: CoreDNS's
// own etcd plugin test data (lookup, other, group, cname), kube2sky's
// service/SRV/headless layout, and external-dns's coredns provider's
// values (random leaves, targetstrip 1, owner text merged in).
var skydnsValues = [][2]string{
	// CoreDNS plugin/etcd tests.
	{"/skydns/test/skydns/region1/dev/server1/a", `{"host":"dev.server1","port":8080}`},
	{"/skydns/test/skydns/region1/prod/server1/a", `{"host":"10.0.0.1","port":8080}`},
	{"/skydns/test/skydns/region1/prod/server1/b", `{"host":"10.0.0.2","port":8080}`},
	{"/skydns/test/skydns/region1/prod/server6/b", `{"host":"::1","port":8080}`},
	{"/skydns/test/skydns/region1/prod/server1/txt/a", `{"text":"sometext"}`},
	{"/skydns/test/skydns/region1/prod/server1/txt/b", `{"text":"moretext"}`},
	{"/skydns/test/skydns/region1/prod/cname", `{"host":"unresolvable.skydns.test"}`},
	{"/skydns/test/skydns/priority", `{"host":"priority.server1","priority":333,"port":8080}`},
	{"/skydns/test/skydns/region1/sub/a", `{"host":"sub.server1"}`},
	{"/skydns/test/skydns/region1/sub/b", `{"host":"sub.server2","port":80}`},
	{"/skydns/test/skydns/region1/sub/c", `{"host":"10.0.0.1","port":8080}`},
	{"/skydns/test/skydns/targetstrip/a", `{"host":"10.0.0.1","port":8080,"targetstrip":1}`},
	{"/skydns/test/skydns/cname/b", `{"host":"a.cname.skydns.test"}`},
	{"/skydns/test/skydns/cname/a", `{"host":"b.cname.skydns.test"}`},
	{"/skydns/test/skydns/dns/ns/a", `{"host":"10.0.0.2"}`},
	{"/skydns/test/skydns/dns/ns/b", `{"host":"10.0.0.3"}`},
	{"/skydns/test/skydns/dns/ns/c/ns1", `{"host":"10.0.0.4","targetstrip":1}`},
	{"/skydns/test/skydns/mail/a", `{"host":"mx.skydns.test","priority":50,"mail":true}`},
	{"/skydns/test/skydns/mail/b", `{"host":"mx.miek.nl","priority":50,"mail":true}`},
	{"/skydns/test/skydns/mx/a", `{"host":"a.ipaddr.skydns.test","priority":30,"mail":true}`},
	{"/skydns/test/skydns/mx2/a", `{"host":"a.ipaddr.skydns.test","mail":true}`},
	{"/skydns/test/skydns/mx2/b", `{"host":"b.ipaddr.skydns.test","mail":true}`},
	{"/skydns/test/skydns/ipaddr/a", `{"host":"172.16.1.1"}`},
	{"/skydns/test/skydns/ipaddr/b", `{"host":"172.16.1.2"}`},
	{"/skydns/test/skydns/large600", `{"text":"` + strings.Repeat("0", 600) + `"}`},
	{"/skydns/test/skydns/dom/a", `{"host":"127.0.0.1","group":"g1"}`},
	{"/skydns/test/skydns/dom/sub/b", `{"host":"127.0.0.2","group":"g1"}`},
	{"/skydns/test/skydns/dom1/a", `{"host":"127.0.0.1","group":"g1"}`},
	{"/skydns/test/skydns/dom1/sub/b", `{"host":"127.0.0.2","group":"g2"}`},
	{"/skydns/test/skydns/region2/cname1", `{"host":"cname2.region2.skydns.test"}`},
	{"/skydns/test/skydns/region2/cname2", `{"host":"endpoint.region2.skydns.test"}`},
	{"/skydns/test/skydns/region2/endpoint", `{"host":"10.240.0.1"}`},
	{"/skydns/test/skydns/region3/endpoint", `{"text":"SOME-RECORD-TEXT"}`},
	{"/skydns/test/skydns/region3/cname1", `{"host":"endpoint.region3.skydns.test"}`},
	// kube2sky: a service, its SRV children, a headless service's endpoints.
	{"/skydns/test/skydns/svc/default/web/4a2b", `{"host":"10.96.0.10","priority":10,"weight":10,"ttl":30}`},
	{"/skydns/test/skydns/svc/default/web/_tcp/_http/9c1d", `{"host":"web.default.svc.skydns.test","port":80,"priority":10,"weight":10,"ttl":30}`},
	{"/skydns/test/skydns/svc/default/db/pod-0", `{"host":"10.1.0.5","ttl":30}`},
	{"/skydns/test/skydns/svc/default/db/pod-1", `{"host":"10.1.0.6","ttl":30}`},
	// external-dns coredns provider.
	{"/skydns/test/skydns/app/1a2b3c4d", `{"host":"10.2.0.1","text":"\"heritage=external-dns,external-dns/owner=default\"","targetstrip":1}`},
	{"/skydns/test/skydns/app/5e6f7a8b", `{"host":"10.2.0.2","text":"\"heritage=external-dns,external-dns/owner=default\"","targetstrip":1}`},
	{"/skydns/test/skydns/alias/0c0ffee0", `{"host":"app.skydns.test","targetstrip":1}`},
	{"/skydns/test/skydns/extern/0badc0de", `{"host":"www.example.net","targetstrip":1}`},
	{"/skydns/arpa/in-addr/10/2/0/1", `{"host":"app.skydns.test"}`},
}

var skydnsQuestions = []struct {
	name  string
	qtype uint16
}{
	{"a.server1.dev.region1.skydns.test.", dns.TypeSRV},
	{"a.SERVer1.dEv.region1.skydns.tEst.", dns.TypeSRV},
	{"doesnotexist.skydns.test.", dns.TypeA},
	{"a.server1.prod.region1.skydns.test.", dns.TypeA},
	{"a.server1.prod.region1.skydns.test.", dns.TypeSRV},
	{"b.server6.prod.region1.skydns.test.", dns.TypeAAAA},
	{"server1.prod.region1.skydns.test.", dns.TypeA},
	{"priority.skydns.test.", dns.TypeSRV},
	{"sub.region1.skydns.test.", dns.TypeSRV},
	{"targetstrip.skydns.test.", dns.TypeSRV},
	{"cname.prod.region1.skydns.test.", dns.TypeA},
	{"txt.server1.prod.region1.skydns.test.", dns.TypeTXT},
	{"*.region1.skydns.test.", dns.TypeSRV},
	{"prod.*.skydns.test.", dns.TypeSRV},
	{"prod.any.skydns.test.", dns.TypeSRV},
	{"a.cname.skydns.test.", dns.TypeA},
	{"a.server1.dev.region1.skydns.test.", dns.TypeTXT},
	{"a.server1.dev.region1.skydns.test.", dns.TypeHINFO},
	{"a.server1.nonexistent.region1.skydns.test.", dns.TypeHINFO},
	{"skydns.test.", dns.TypeNS},
	{"a.skydns.test.", dns.TypeNS},
	{"ns.dns.skydns.test.", dns.TypeA},
	{"skydns.test.", dns.TypeA},
	{"a.server1.dev.region1.skydns.test.", dns.TypeMX},
	{"a.mail.skydns.test.", dns.TypeMX},
	{"mx2.skydns.test.", dns.TypeMX},
	{"large600.skydns.test.", dns.TypeTXT},
	{"dom.skydns.test.", dns.TypeA},
	{"dom1.skydns.test.", dns.TypeA},
	{"cname1.region2.skydns.test.", dns.TypeA},
	{"cname1.region2.skydns.test.", dns.TypeCNAME},
	{"cname1.region3.skydns.test.", dns.TypeTXT},
	{"endpoint.region3.skydns.test.", dns.TypeCNAME},
	{"web.default.svc.skydns.test.", dns.TypeA},
	{"web.default.svc.skydns.test.", dns.TypeSRV},
	{"_http._tcp.web.default.svc.skydns.test.", dns.TypeSRV},
	{"db.default.svc.skydns.test.", dns.TypeA},
	{"pod-0.db.default.svc.skydns.test.", dns.TypeA},
	{"app.skydns.test.", dns.TypeA},
	{"app.skydns.test.", dns.TypeTXT},
	{"app.skydns.test.", dns.TypeSRV},
	{"alias.skydns.test.", dns.TypeA},
	{"extern.skydns.test.", dns.TypeA},
	{"1.0.2.10.in-addr.arpa.", dns.TypePTR},
	{"2.0.2.10.in-addr.arpa.", dns.TypePTR},
}

// skydnsView is a response as compared: rcode, flags that matter, and
// each section sorted, the SOA's serial (a clock in CoreDNS, the etcd
// revision in dnsd) left out.
func skydnsView(m *dns.Msg) string {
	sec := func(rrs []dns.RR) string {
		var out []string
		for _, rr := range rrs {
			if rr.Header().Rrtype == dns.TypeOPT {
				continue
			}
			if s, ok := rr.(*dns.SOA); ok {
				c := *s
				c.Serial = 0
				rr = &c
			}
			out = append(out, strings.Join(strings.Fields(rr.String()), " "))
		}
		slices.Sort(out)
		return strings.Join(out, "\n  ")
	}
	return fmt.Sprintf("%s aa=%t\nanswer:\n  %s\nauthority:\n  %s\nadditional:\n  %s",
		dns.RcodeToString[m.Rcode], m.Authoritative, sec(m.Answer), sec(m.Ns), sec(m.Extra))
}

// TestSkyDNSMatchesCoreDNS writes SkyDNS-layout data into a real etcd and
// asks the same questions of dnsd (the zone declared :skydns) and of
// CoreDNS 1.11.4's etcd plugin on the same keys: every answer must be the
// same. Then a change in etcd must show up in dnsd.
func TestSkyDNSMatchesCoreDNS(t *testing.T) {
	etcd := harness.StartEtcd(t)
	cli := etcd.Client(t)
	ctx := context.Background()
	for _, kv := range skydnsValues {
		if _, err := cli.Put(ctx, kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	d := startDnsd(t, etcd, "--dnsd.zones=skydns.test=/skydns:skydns,in-addr.arpa=/skydns:skydns")
	c := harness.StartCoreDNS(t, fmt.Sprintf(`.:{{.Port}} {
	bind 127.0.0.1
	etcd skydns.test in-addr.arpa {
		path /skydns
		endpoint %s
	}
}
`, etcd.Endpoint))

	same := 0
	for _, q := range skydnsQuestions {
		want := skydnsView(dnsdAsk(t, "udp", c.Addr, q.name, q.qtype, 1232))
		got := skydnsView(dnsdAsk(t, "udp", d.Addr, q.name, q.qtype, 1232))
		if got != want {
			t.Errorf("%s %s:\ndnsd:    %s\ncoredns: %s", q.name, dns.TypeToString[q.qtype], got, want)
			continue
		}
		same++
	}
	t.Logf("%d of %d questions answered the same", same, len(skydnsQuestions))
	// Two answers spelled out, so a comparison of two empty answers
	// cannot pass unnoticed: a CNAME out of the zone is answered alone
	// (CoreDNS asks itself, is REFUSED, keeps the CNAME), and
	// external-dns's leaves answer their parent.
	for q, want := range map[string]string{
		"a.server1.dev.region1.skydns.test. TXT": "a.server1.dev.region1.skydns.test. 300 IN CNAME dev.server1.",
		"alias.skydns.test. A":                   "alias.skydns.test. 300 IN CNAME app.skydns.test.\n  app.skydns.test. 300 IN A 10.2.0.1",
	} {
		name, qt, _ := strings.Cut(q, " ")
		v := skydnsView(dnsdAsk(t, "udp", d.Addr, name, dns.StringToType[qt], 0))
		if !strings.Contains(v, want) {
			t.Errorf("%s: %s\nwant it to hold %s", q, v, want)
		}
	}

	// A change: a new target of app, and one removed.
	dnsdAsk(t, "udp", d.Addr, "app.skydns.test.", dns.TypeA, 0) // cached before the change
	if _, err := cli.Put(ctx, "/skydns/test/skydns/app/9f9f9f9f", `{"host":"10.2.0.3","targetstrip":1}`); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(ctx, "/skydns/test/skydns/app/1a2b3c4d"); err != nil {
		t.Fatal(err)
	}
	want := "A aa=true\nanswer:\n  app.skydns.test. 300 IN A 10.2.0.2\n  app.skydns.test. 300 IN A 10.2.0.3"
	dnsdWithin(t, 5*time.Second, "the changed app.skydns.test.", func() bool {
		v := skydnsView(dnsdAsk(t, "udp", d.Addr, "app.skydns.test.", dns.TypeA, 0))
		return strings.HasPrefix(strings.Replace(v, "NOERROR", "A", 1), want)
	})
	if got, want := skydnsView(dnsdAsk(t, "udp", d.Addr, "app.skydns.test.", dns.TypeA, 1232)),
		skydnsView(dnsdAsk(t, "udp", c.Addr, "app.skydns.test.", dns.TypeA, 1232)); got != want {
		t.Errorf("after the change:\ndnsd:    %s\ncoredns: %s", got, want)
	}
}

// skydnsCompat is the section of docs/compatibility.md on SkyDNS zones,
// written by writeMatrix after the generated table.
const skydnsCompat = `
## SkyDNS zones

A zone declared ` + "`zone=prefix:skydns`" + ` in ` + "`dnsd.zones`" + ` is answered as CoreDNS 1.11's etcd plugin
answers it, quirks included, where the plugin contradicts what the writing tool meant: a
parent answers with every record of its subtree, CNAME and PTR questions read the exact key
only, a value with a name host and text (external-dns's TXT registry up to v0.17) is TXT, never
a CNAME or SRV/MX target, and ` + "`any`" + ` is a wildcard label. CoreDNS's own etcd plugin
tests run as dnsd tests (server/skydns/coredns_test.go) and every case passes, two of them
with what a running CoreDNS answers rather than the plugin alone (a name in no zone: REFUSED,
not the test's SERVFAIL; a CNAME out of the zone: kept, as the running server keeps it), and
TestSkyDNSMatchesCoreDNS (integration/skydns_test.go) asks dnsd and CoreDNS the same 45
questions on the same keys and requires the same answers. CNAME, SRV and MX targets outside
every zone are resolved through the upstreams as CoreDNS resolves them through its own server:
TestSkyDNSChaseMatchesCoreDNS (integration/skydns_chase_test.go) gives dnsd and CoreDNS (etcd
plus forward) the same Knot as upstream and requires the same 11 answers, with Knot up and
with it gone. TestSkyDNSEdgesMatchCoreDNS adds what 30,000 random questions against CoreDNS
found: a truncated UDP answer carries the same records, and where CoreDNS sends no reply at all
(a target that a key or host with an empty label names, the apex NS with nothing under
dns/ns) dnsd answers.
What differs (malformed values are skipped, not SERVFAIL; leased keys' TTL; the SOA serial;
AXFR; who may have targets resolved outside) is listed in
[skydns.md](skydns.md#what-differs-and-why).
`

// TestSkyDNSEdgesMatchCoreDNS: the edges a run of random trees against
// CoreDNS 1.11.4 found. A large answer over UDP carries the records that
// fit and TC, as CoreDNS's does; a null value is a name with no records,
// as in CoreDNS. Where CoreDNS sends no reply at all (the apex NS with
// nothing under dns/ns, an SRV whose target a key with an empty segment
// names), dnsd answers, leaving out only the record that cannot be sent.
func TestSkyDNSEdgesMatchCoreDNS(t *testing.T) {
	etcd := harness.StartEtcd(t)
	cli := etcd.Client(t)
	ctx := context.Background()
	for i := 1; i <= 80; i++ {
		if _, err := cli.Put(ctx, fmt.Sprintf("/skydns/test/skydns/big/k%02d", i), fmt.Sprintf(`{"host":"10.1.0.%d"}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range map[string]string{
		"/skydns/test/skydns/empty/x": `null`,
		"/skydns/test/skydns/d//y":    `{"host":"10.0.0.5","port":80}`,
		"/skydns/test/skydns/d/ok":    `{"host":"10.0.0.6","port":80}`,
	} {
		if _, err := cli.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	// Keys with an etcd lease (a registration its writer keeps alive), one
	// read by the load and one by the watch: without a ttl of their own
	// they answer skydns.LeaseTTL, not the zone's 300.
	lease, err := cli.Grant(ctx, 3600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/skydns/test/skydns/leased/a", `{"host":"10.0.0.7"}`, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	d := startDnsd(t, etcd, "--dnsd.zones=skydns.test=/skydns:skydns", "--dnsd.rotate=false")
	if _, err := cli.Put(ctx, "/skydns/test/skydns/leased/b", `{"host":"10.0.0.8"}`, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/skydns/test/skydns/leased/c", `{"host":"10.0.0.9","ttl":10}`, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() error {
		r := dnsdAsk(t, "udp", d.Addr, "leased.skydns.test.", dns.TypeA, 1232)
		if got, want := slices.Sorted(slices.Values(dnsdStrings(r.Answer))), []string{"leased.skydns.test. 10 IN A 10.0.0.9", "leased.skydns.test. 30 IN A 10.0.0.7", "leased.skydns.test. 30 IN A 10.0.0.8"}; !slices.Equal(got, want) {
			return fmt.Errorf("leased keys: %s, want %v", skydnsView(r), want)
		}
		return nil
	})
	c := harness.StartCoreDNS(t, fmt.Sprintf(`.:{{.Port}} {
	bind 127.0.0.1
	etcd skydns.test {
		path /skydns
		endpoint %s
	}
}
`, etcd.Endpoint))

	for _, q := range []struct {
		name  string
		qtype uint16
		edns  uint16
		tc    bool
		n     int // answer records
	}{
		{"big.skydns.test.", dns.TypeA, 0, true, 29},      // 512 octets
		{"big.skydns.test.", dns.TypeA, 1232, true, 74},   // less the OPT record
		{"empty.skydns.test.", dns.TypeA, 1232, false, 0}, // NODATA
		{"d.skydns.test.", dns.TypeA, 1232, false, 2},     // d//y's address too
	} {
		got := dnsdAsk(t, "udp", d.Addr, q.name, q.qtype, q.edns)
		want := dnsdAsk(t, "udp", c.Addr, q.name, q.qtype, q.edns)
		what := fmt.Sprintf("%s %s, EDNS %d", q.name, dns.TypeToString[q.qtype], q.edns)
		if got.Truncated != q.tc || len(got.Answer) != q.n || got.Rcode != dns.RcodeSuccess {
			t.Errorf("%s: dnsd TC %v, %d records, %s; want TC %v, %d records", what, got.Truncated, len(got.Answer), dns.RcodeToString[got.Rcode], q.tc, q.n)
		}
		if got.Truncated != want.Truncated || !slices.Equal(dnsdStrings(got.Answer), dnsdStrings(want.Answer)) || got.Rcode != want.Rcode {
			t.Errorf("%s:\ndnsd:    TC %v %s\ncoredns: TC %v %s", what, got.Truncated, skydnsView(got), want.Truncated, skydnsView(want))
		}
	}
	if r := dnsdAsk(t, "tcp", d.Addr, "big.skydns.test.", dns.TypeA, 0); r.Truncated || len(r.Answer) != 80 {
		t.Errorf("over TCP: TC %v, %d records; want all 80", r.Truncated, len(r.Answer))
	}

	// CoreDNS sends nothing for these two; dnsd answers them.
	if r := dnsdAsk(t, "udp", d.Addr, "skydns.test.", dns.TypeNS, 1232); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 || len(r.Ns) != 1 {
		t.Errorf("apex NS with nothing under dns/ns: %s; want NODATA", skydnsView(r))
	}
	r := dnsdAsk(t, "udp", d.Addr, "d.skydns.test.", dns.TypeSRV, 1232)
	if got := dnsdStrings(r.Answer); !slices.Equal(got, []string{"d.skydns.test. 300 IN SRV 10 50 80 ok.d.skydns.test."}) {
		t.Errorf("SRV beside a key with an empty segment: %s", skydnsView(r))
	}
}

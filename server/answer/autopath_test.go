package answer

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/server/snap"
)

// The docs page's example (spec 002): a pod in namespace test looks up
// data.prod (service data in namespace prod) and web (a service of its
// own namespace). Its search path is test.svc.cluster.local,
// svc.cluster.local, cluster.local.
const (
	apSearch  = "test.svc.cluster.local,svc.cluster.local,cluster.local"
	apData    = "data.prod.svc.cluster.local. 5 IN A 10.96.1.1"
	apWeb     = "web.test.svc.cluster.local. 5 IN A 10.96.2.2"
	apNeg     = "ap.k8s.io. 5 IN SOA ns.dns.ap.k8s.io. hostmaster.ap.k8s.io. 1 7200 1800 86400 5"
	apOption  = 65001
	inTest    = "10.244.1.5" // a pod of namespace test
	inTest6   = "fd00::1:5"  // its IPv6 address
	inProd    = "10.244.2.5"
	hostNet   = "10.0.0.1" // hostNetwork pods of test and kube-system
	notPod    = "10.9.9.9"
	cnameData = " 5 IN CNAME data.prod.svc.cluster.local."
	cnameWeb  = " 5 IN CNAME web.test.svc.cluster.local."
)

func autopathFixture(t *testing.T) *snap.Snapshot {
	b := builder(t, "c1")
	recs := []keys.Record{b.Version()}
	add := func(r []keys.Record, errs []error) {
		t.Helper()
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		recs = append(recs, r...)
	}
	add(b.Service(service("prod", "data", "10.96.1.1"), nil))
	add(b.Service(service("test", "web", "10.96.2.2"), nil))
	add(b.Service(service("prod", "web", "10.96.2.3"), nil))
	add(b.Service(externalName("test", "ext", "www.example.com"), nil))
	add(b.Pod(pod("test", "client", inTest, inTest6)))
	add(b.Pod(pod("prod", "other", inProd)))
	add(b.Pod(pod("test", "agent", hostNet)))
	add(b.Pod(pod("kube-system", "proxy", hostNet)))
	return build(t, recs)
}

func apOptions() Options {
	o := testOptions
	o.Pods = PodsVerified
	o.Autopath = Autopath{Suffix: true, Option: apOption, Client: true}
	return o
}

func searchOption(data string) func(*dns.Msg) {
	return func(m *dns.Msg) {
		m.SetEdns0(1232, false)
		opt := m.IsEdns0()
		opt.Option = append(opt.Option, &dns.EDNS0_LOCAL{Code: apOption, Data: []byte(data)})
	}
}

type search struct {
	form  Form
	found bool
}

func TestAutopath(t *testing.T) {
	s := autopathFixture(t)
	pos := "qr aa rd"
	formerr := want{rcode: dns.RcodeFormatError, flags: "qr rd"}
	refused := want{rcode: dns.RcodeRefused, flags: "qr rd"}
	for _, c := range []struct {
		name     string
		q        string
		qtype    uint16
		client   string
		req      func(*dns.Msg)
		opts     func(*Options)
		want     want
		personal bool
		searched []search
	}{
		// The required cases: one query each, in each form.
		{name: "suffix: data.prod from test", q: "data.prod.search.test.cluster.local.ap.k8s.io.", qtype: dns.TypeA, client: inTest,
			want:     want{flags: pos, orderedAnswer: true, answer: []string{"data.prod.search.test.cluster.local.ap.k8s.io." + cnameData, apData}},
			searched: []search{{FormSuffix, true}}},
		{name: "suffix: web from test", q: "web.search.test.cluster.local.ap.k8s.io.", qtype: dns.TypeA, client: inTest,
			want:     want{flags: pos, orderedAnswer: true, answer: []string{"web.search.test.cluster.local.ap.k8s.io." + cnameWeb, apWeb}},
			searched: []search{{FormSuffix, true}}},
		{name: "option: data.prod from test", q: "data.prod.", qtype: dns.TypeA, client: inTest, req: searchOption(apSearch),
			want:     want{flags: pos, orderedAnswer: true, answer: []string{"data.prod." + cnameData, apData}},
			personal: true, searched: []search{{FormOption, true}}},
		{name: "option: web from test", q: "web.", qtype: dns.TypeA, client: inTest, req: searchOption(apSearch),
			want:     want{flags: pos, orderedAnswer: true, answer: []string{"web." + cnameWeb, apWeb}},
			personal: true, searched: []search{{FormOption, true}}},
		{name: "client: data.prod from test", q: "data.prod.test.svc.cluster.local.", qtype: dns.TypeA, client: inTest,
			want:     want{flags: pos, orderedAnswer: true, answer: []string{"data.prod.test.svc.cluster.local." + cnameData, apData}},
			personal: true, searched: []search{{FormClient, true}}},
		{name: "client: web from test needs no search", q: "web.test.svc.cluster.local.", qtype: dns.TypeA, client: inTest,
			want: want{flags: pos, answer: []string{apWeb}}},

		// Suffix form.
		{name: "suffix: AAAA of a v4 service is the CNAME and NODATA", q: "data.prod.search.test.cluster.local.ap.k8s.io.", qtype: dns.TypeAAAA,
			want:     want{flags: pos, answer: []string{"data.prod.search.test.cluster.local.ap.k8s.io." + cnameData}, ns: []string{soaNeg}},
			searched: []search{{FormSuffix, true}}},
		{name: "suffix: 0x20 spelling is echoed", q: "DaTa.PrOd.sEaRcH.test.cluster.local.AP.k8s.io.", qtype: dns.TypeA,
			want:     want{flags: pos, orderedAnswer: true, answer: []string{"DaTa.PrOd.sEaRcH.test.cluster.local.AP.k8s.io." + cnameData, apData}},
			searched: []search{{FormSuffix, true}}},
		{name: "suffix: the namespace's own service comes first", q: "web.search.prod.cluster.local.ap.k8s.io.", qtype: dns.TypeA,
			want: want{flags: pos, orderedAnswer: true, answer: []string{
				"web.search.prod.cluster.local.ap.k8s.io. 5 IN CNAME web.prod.svc.cluster.local.", "web.prod.svc.cluster.local. 5 IN A 10.96.2.3"}},
			searched: []search{{FormSuffix, true}}},
		{name: "suffix: SRV with glue", q: "_https._tcp.data.prod.search.test.cluster.local.ap.k8s.io.", qtype: dns.TypeSRV,
			want: want{flags: pos, orderedAnswer: true, answer: []string{
				"_https._tcp.data.prod.search.test.cluster.local.ap.k8s.io. 5 IN CNAME _https._tcp.data.prod.svc.cluster.local.",
				"_https._tcp.data.prod.svc.cluster.local. 5 IN SRV 10 100 443 data.prod.svc.cluster.local."}, extra: []string{apData}},
			searched: []search{{FormSuffix, true}}},
		{name: "suffix: ExternalName is followed as asked", q: "ext.search.test.cluster.local.ap.k8s.io.", qtype: dns.TypeA,
			want: want{flags: pos, orderedAnswer: true, answer: []string{
				"ext.search.test.cluster.local.ap.k8s.io. 5 IN CNAME ext.test.svc.cluster.local.",
				"ext.test.svc.cluster.local. 5 IN CNAME www.example.com."}},
			searched: []search{{FormSuffix, true}}},
		{name: "suffix: a full name is found last", q: "data.prod.svc.cluster.local.search.test.cluster.local.ap.k8s.io.", qtype: dns.TypeA,
			want:     want{flags: pos, orderedAnswer: true, answer: []string{"data.prod.svc.cluster.local.search.test.cluster.local.ap.k8s.io." + cnameData, apData}},
			searched: []search{{FormSuffix, true}}},
		{name: "suffix: a namespace exists, as an empty non-terminal", q: "prod.search.test.cluster.local.ap.k8s.io.", qtype: dns.TypeA,
			want:     want{flags: pos, answer: []string{"prod.search.test.cluster.local.ap.k8s.io. 5 IN CNAME prod.svc.cluster.local."}, ns: []string{soaNeg}},
			searched: []search{{FormSuffix, true}}},
		{name: "suffix: CNAME question gets the CNAME alone", q: "web.search.test.cluster.local.ap.k8s.io.", qtype: dns.TypeCNAME,
			want:     want{flags: pos, answer: []string{"web.search.test.cluster.local.ap.k8s.io." + cnameWeb}},
			searched: []search{{FormSuffix, true}}},
		{name: "suffix: every name fails", q: "nope.search.test.cluster.local.ap.k8s.io.", qtype: dns.TypeA,
			want:     want{rcode: dns.RcodeNameError, flags: pos, ns: []string{apNeg}},
			searched: []search{{FormSuffix, false}}},
		{name: "suffix: a name outside the zones is the client's to ask", q: "www.example.com.search.test.cluster.local.ap.k8s.io.", qtype: dns.TypeA,
			want:     want{rcode: dns.RcodeNameError, flags: pos, ns: []string{apNeg}},
			searched: []search{{FormSuffix, false}}},
		{name: "suffix: apex SOA", q: "ap.k8s.io.", qtype: dns.TypeSOA,
			want: want{flags: pos, answer: []string{"ap.k8s.io. 30 IN SOA ns.dns.ap.k8s.io. hostmaster.ap.k8s.io. 1 7200 1800 86400 5"}}},
		{name: "suffix: apex NS", q: "ap.k8s.io.", qtype: dns.TypeNS,
			want: want{flags: pos, answer: []string{"ap.k8s.io. 30 IN NS ns.dns.ap.k8s.io."}}},
		{name: "suffix: apex A is NODATA", q: "ap.k8s.io.", qtype: dns.TypeA,
			want: want{flags: pos, ns: []string{apNeg}}},
		{name: "suffix: search.<ns> is an empty non-terminal", q: "search.test.cluster.local.ap.k8s.io.", qtype: dns.TypeA,
			want: want{flags: pos, ns: []string{apNeg}}},
		{name: "suffix: <ns>.<zone> is an empty non-terminal", q: "test.cluster.local.ap.k8s.io.", qtype: dns.TypeA,
			want: want{flags: pos, ns: []string{apNeg}}},
		{name: "suffix: the zone is an empty non-terminal", q: "cluster.local.ap.k8s.io.", qtype: dns.TypeA,
			want: want{flags: pos, ns: []string{apNeg}}},
		{name: "suffix: a tail of the zone is an empty non-terminal", q: "local.ap.k8s.io.", qtype: dns.TypeTXT,
			want: want{flags: pos, ns: []string{apNeg}}},
		{name: "suffix: malformed, no search label", q: "web.test.cluster.local.ap.k8s.io.", qtype: dns.TypeA,
			want: want{rcode: dns.RcodeNameError, flags: pos, ns: []string{apNeg}}},
		{name: "suffix: malformed, another label", q: "web.find.test.cluster.local.ap.k8s.io.", qtype: dns.TypeA,
			want: want{rcode: dns.RcodeNameError, flags: pos, ns: []string{apNeg}}},
		{name: "suffix: malformed, not a zone of ours", q: "web.search.test.example.com.ap.k8s.io.", qtype: dns.TypeA,
			want: want{rcode: dns.RcodeNameError, flags: pos, ns: []string{apNeg}}},
		{name: "suffix: malformed, a reverse zone", q: "web.search.test.in-addr.arpa.ap.k8s.io.", qtype: dns.TypeA,
			want: want{rcode: dns.RcodeNameError, flags: pos, ns: []string{apNeg}}},
		{name: "suffix: malformed, no cluster suffix", q: "foo.ap.k8s.io.", qtype: dns.TypeA,
			want: want{rcode: dns.RcodeNameError, flags: pos, ns: []string{apNeg}}},
		{name: "suffix: malformed, a namespace that is no label", q: "web.search.t\\.est.cluster.local.ap.k8s.io.", qtype: dns.TypeA,
			want: want{rcode: dns.RcodeNameError, flags: pos, ns: []string{apNeg}}},
		{name: "suffix: off is today's REFUSED", q: "data.prod.search.test.cluster.local.ap.k8s.io.", qtype: dns.TypeA,
			opts: func(o *Options) { o.Autopath.Suffix = false }, want: refused},
		{name: "suffix: k8s.io is not served", q: "k8s.io.", qtype: dns.TypeSOA, want: refused},
		{name: "suffix: class CH is refused", q: "web.search.test.cluster.local.ap.k8s.io.", qtype: dns.TypeA,
			req: func(m *dns.Msg) { m.Question[0].Qclass = dns.ClassCHAOS }, want: refused},

		// Option form.
		{name: "option: 0x20 spelling is echoed", q: "DaTa.pRoD.", qtype: dns.TypeA, req: searchOption(apSearch),
			want:     want{flags: pos, orderedAnswer: true, answer: []string{"DaTa.pRoD." + cnameData, apData}},
			personal: true, searched: []search{{FormOption, true}}},
		{name: "option: search domains outside the zones are skipped", q: "web.", qtype: dns.TypeA, req: searchOption("corp.example.com,test.svc.cluster.local."),
			want:     want{flags: pos, orderedAnswer: true, answer: []string{"web." + cnameWeb, apWeb}},
			personal: true, searched: []search{{FormOption, true}}},
		{name: "option: the name itself, found last, needs no CNAME", q: "data.prod.svc.cluster.local.", qtype: dns.TypeA, req: searchOption(apSearch),
			want: want{flags: pos, answer: []string{apData}}, personal: true, searched: []search{{FormOption, true}}},
		{name: "option: a name already searched by the client is searched again", q: "web.test.svc.cluster.local.", qtype: dns.TypeA, req: searchOption(apSearch),
			want: want{flags: pos, answer: []string{apWeb}}, personal: true, searched: []search{{FormOption, true}}},
		{name: "option: every name fails, the name in a zone", q: "nope.cluster.local.", qtype: dns.TypeA, req: searchOption(apSearch),
			want: want{rcode: dns.RcodeNameError, flags: pos, ns: []string{soaNeg}}, personal: true, searched: []search{{FormOption, false}}},
		{name: "option: every name fails, the name outside the zones", q: "nope.", qtype: dns.TypeA, req: searchOption(apSearch),
			want: refused, personal: true, searched: []search{{FormOption, false}}},
		{name: "option: empty", q: "web.", qtype: dns.TypeA, req: searchOption(""), want: formerr, personal: true},
		{name: "option: empty domain", q: "web.", qtype: dns.TypeA, req: searchOption("test.svc.cluster.local,,cluster.local"), want: formerr, personal: true},
		{name: "option: not a name", q: "web.", qtype: dns.TypeA, req: searchOption("test.svc.cluster.local, svc.cluster.local"), want: formerr, personal: true},
		{name: "option: too many domains", q: "web.", qtype: dns.TypeA, req: searchOption(strings.Repeat("cluster.local,", 32) + "cluster.local"), want: formerr, personal: true},
		{name: "option: twice", q: "web.", qtype: dns.TypeA, want: formerr, personal: true, req: func(m *dns.Msg) {
			searchOption(apSearch)(m)
			m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_LOCAL{Code: apOption, Data: []byte(apSearch)})
		}},
		{name: "option: garbage is FORMERR even for a suffix name", q: "web.search.test.cluster.local.ap.k8s.io.", qtype: dns.TypeA, req: searchOption("a..b"),
			want: formerr, personal: true},
		{name: "option: another code is ignored", q: "web.", qtype: dns.TypeA, want: refused, req: func(m *dns.Msg) {
			m.SetEdns0(1232, false).IsEdns0().Option = []dns.EDNS0{&dns.EDNS0_LOCAL{Code: apOption + 1, Data: []byte(apSearch)}}
		}},
		{name: "option: off is today's REFUSED", q: "data.prod.", qtype: dns.TypeA, req: searchOption(apSearch),
			opts: func(o *Options) { o.Autopath.Option = 0 }, want: refused},
		{name: "option: off, garbage is ignored", q: "web.test.svc.cluster.local.", qtype: dns.TypeA, req: searchOption(""),
			opts: func(o *Options) { o.Autopath.Option = 0 }, want: want{flags: pos, answer: []string{apWeb}}},
		{name: "option: a suffix name searches as its name says", q: "web.search.test.cluster.local.ap.k8s.io.", qtype: dns.TypeA, req: searchOption("prod.svc.cluster.local"),
			want:     want{flags: pos, orderedAnswer: true, answer: []string{"web.search.test.cluster.local.ap.k8s.io." + cnameWeb, apWeb}},
			searched: []search{{FormSuffix, true}}},

		// Client form.
		{name: "client: over IPv6", q: "data.prod.test.svc.cluster.local.", qtype: dns.TypeA, client: inTest6,
			want:     want{flags: pos, orderedAnswer: true, answer: []string{"data.prod.test.svc.cluster.local." + cnameData, apData}},
			personal: true, searched: []search{{FormClient, true}}},
		{name: "client: a hostNetwork pod of test", q: "data.prod.test.svc.cluster.local.", qtype: dns.TypeA, client: hostNet,
			want:     want{flags: pos, orderedAnswer: true, answer: []string{"data.prod.test.svc.cluster.local." + cnameData, apData}},
			personal: true, searched: []search{{FormClient, true}}},
		{name: "client: every name fails", q: "nope.test.svc.cluster.local.", qtype: dns.TypeA, client: inTest,
			want: want{rcode: dns.RcodeNameError, flags: pos, ns: []string{soaNeg}}, personal: true, searched: []search{{FormClient, false}}},
		{name: "client: a pod of another namespace is not searched for", q: "data.prod.test.svc.cluster.local.", qtype: dns.TypeA, client: inProd,
			want: want{rcode: dns.RcodeNameError, flags: pos, ns: []string{soaNeg}}, personal: true},
		{name: "client: no pod at all", q: "data.prod.test.svc.cluster.local.", qtype: dns.TypeA, client: notPod,
			want: want{rcode: dns.RcodeNameError, flags: pos, ns: []string{soaNeg}}, personal: true},
		{name: "client: unknown", q: "data.prod.test.svc.cluster.local.", qtype: dns.TypeA,
			want: want{rcode: dns.RcodeNameError, flags: pos, ns: []string{soaNeg}}, personal: true},
		{name: "client: a name of another shape is not searched", q: "data.prod.cluster.local.", qtype: dns.TypeA, client: inTest,
			want: want{rcode: dns.RcodeNameError, flags: pos, ns: []string{soaNeg}}},
		{name: "client: off is today's NXDOMAIN", q: "data.prod.test.svc.cluster.local.", qtype: dns.TypeA, client: inTest,
			opts: func(o *Options) { o.Autopath.Client = false }, want: want{rcode: dns.RcodeNameError, flags: pos, ns: []string{soaNeg}}},
		{name: "client: insecure pod names are no pod records", q: "data.prod.anyns.svc.cluster.local.", qtype: dns.TypeA, client: "10.1.2.3",
			opts: func(o *Options) { o.Pods = PodsInsecure }, want: want{rcode: dns.RcodeNameError, flags: pos, ns: []string{soaNeg}}, personal: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := apOptions()
			if c.opts != nil {
				c.opts(&o)
			}
			var got []search
			o.Autopath.Observe = func(f Form, found bool) { got = append(got, search{f, found}) }
			req := new(dns.Msg).SetQuestion(c.q, c.qtype)
			if c.req != nil {
				c.req(req)
			}
			var client Client
			if c.client != "" {
				client.Addr = netip.MustParseAddr(c.client)
			}
			m, personal := AnswerFrom(s, req, &o, 0, client)
			check(t, req, m, c.want)
			if personal != c.personal {
				t.Errorf("personal %v, want %v", personal, c.personal)
			}
			if !slices.Equal(got, c.searched) {
				t.Errorf("observed %v, want %v", got, c.searched)
			}
		})
	}
}

// A federated service is reached by its full name only (spec 003): no
// search domain leads to it.
func TestAutopathNeverFederates(t *testing.T) {
	b := builder(t, "c1")
	r, err := b.Address("web.prod.fed.svc.federation", "test", netip.MustParseAddr("192.0.2.1"))
	if err != nil {
		t.Fatal(err)
	}
	kvs := []snap.KV{{Key: r.Key, Value: r.Value.Encode()}}
	s, errs := snap.Build(append(slices.Clone(zones), snap.Config{Name: "federation", Prefix: "/skydns", TTL: 5}), 42, kvs)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	o := apOptions()
	o.Federation.Zone = "federation"
	for q, want := range map[string]int{
		"web.prod.fed.":                dns.RcodeRefused, // web.prod.fed.svc.federation is skipped
		"web.prod.fed.svc.federation.": dns.RcodeSuccess,
	} {
		req := new(dns.Msg).SetQuestion(q, dns.TypeA)
		searchOption("svc.federation")(req)
		if m, _ := AnswerFrom(s, req, &o, 0, Client{}); m.Rcode != want {
			t.Errorf("%s: %s, want %s\n%v", q, dns.RcodeToString[m.Rcode], dns.RcodeToString[want], m)
		}
	}
}

// BenchmarkAutopath is the cost of a search next to BenchmarkAnswer's
// plain lookups: the engine alone, a packed response out.
func BenchmarkAutopath(b *testing.B) {
	s := build(b, bigFixture(b, 1000))
	o := testOptions
	o.Autopath = Autopath{Suffix: true, Option: apOption, Client: true}
	list := searchOption("ns7.svc.cluster.local,svc.cluster.local,cluster.local")
	for _, c := range []struct {
		name, q string
		req     func(*dns.Msg)
	}{
		{"suffix found first", "svc7.search.ns7.cluster.local.ap.k8s.io.", nil},
		{"suffix found second", "svc8.ns8.search.ns7.cluster.local.ap.k8s.io.", nil},
		{"suffix NXDOMAIN", "www.example.com.search.ns7.cluster.local.ap.k8s.io.", nil},
		{"option found second", "svc8.ns8.", list},
		{"option NXDOMAIN", "www.example.com.", list},
	} {
		req := new(dns.Msg).SetQuestion(c.q, dns.TypeA)
		if c.req != nil {
			c.req(req)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 512)
			for b.Loop() {
				m := Answer(s, req, &o, 0)
				if _, err := m.PackBuffer(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A search name that is none in the most specific zone it ends in may be
// one in a zone around it: with a.example.com served inside example.com,
// NAME.search.a.example.com is namespace a's search of example.com.
func TestSuffixSearchInNestedZones(t *testing.T) {
	r := resolver{s: &snap.Snapshot{Zones: []*snap.Zone{
		{Config: snap.Config{Name: "a.example.com"}},
		{Config: snap.Config{Name: "example.com"}},
	}}}
	for name, want := range map[string][3]string{
		"web.search.a.example.com.ap.k8s.io":        {"web", "example.com", "a"},
		"web.search.b.example.com.ap.k8s.io":        {"web", "example.com", "b"},
		"web.search.ns.a.example.com.ap.k8s.io":     {"web", "a.example.com", "ns"},
		"api.web.search.ns.a.example.com.ap.k8s.io": {"api.web", "a.example.com", "ns"},
	} {
		base, zone, ns, ent := r.parseSuffix(name)
		if got := [3]string{base, zone, ns}; got != want || ent {
			t.Errorf("%s: base %q zone %q namespace %q (empty non-terminal %v), want %q", name, base, zone, ns, ent, want)
		}
	}
}

// A name of the search list, or the asked name itself, in a SkyDNS zone
// exists as its subtree does: found there, answered as the zone answers
// it; not an NXDOMAIN that the option form's client takes as final.
func TestOptionSearchFindsSkyDNSNames(t *testing.T) {
	s, errs := snap.Build([]snap.Config{
		{Name: "skydns.test", Prefix: "/skydns", TTL: 300, SkyDNS: true},
		{Name: "cluster.local", Prefix: "/skydns", TTL: 5},
	}, 1, []snap.KV{
		{Key: "/skydns/test/skydns/www/x", Value: []byte(`{"host":"10.1.1.1"}`)},
		{Key: "/skydns/local/cluster/svc/default/kubernetes/x", Value: []byte(`{"host":"10.96.0.1"}`)},
	})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	o := apOptions()
	for _, c := range []struct {
		q, list string
		rcode   int
		answer  []string
	}{
		{"www.skydns.test.", apSearch, dns.RcodeSuccess, []string{"www.skydns.test. 300 IN A 10.1.1.1"}},
		{"www.", "skydns.test," + apSearch, dns.RcodeSuccess, []string{"www. 5 IN CNAME www.skydns.test.", "www.skydns.test. 300 IN A 10.1.1.1"}},
		{"nope.skydns.test.", apSearch, dns.RcodeNameError, nil},
	} {
		m := new(dns.Msg).SetQuestion(c.q, dns.TypeA)
		searchOption(c.list)(m)
		r, _ := AnswerFrom(s, m, &o, 0, Client{})
		if got := rrStrings(r.Answer); r.Rcode != c.rcode || !slices.Equal(got, c.answer) {
			t.Errorf("%s over %s: %s %q, want %s %q", c.q, c.list, dns.RcodeToString[r.Rcode], got, dns.RcodeToString[c.rcode], c.answer)
		}
	}
}

// TestSuffixSearchMissInSkyDNSIsNotKept: the suffix form's answer is
// cached, and a name it did not find in a SkyDNS zone may be written
// later: the NXDOMAIN built from the miss does not stand once it is.
func TestSuffixSearchMissInSkyDNSIsNotKept(t *testing.T) {
	zones := []snap.Config{{Name: "cluster.local", Prefix: "/skydns", TTL: 300, SkyDNS: true}}
	kubernetes := snap.KV{Key: "/skydns/local/cluster/svc/default/kubernetes/x", Value: []byte(`{"host":"10.96.0.1"}`)}
	before, errs := snap.Build(zones, 1, []snap.KV{kubernetes})
	after, errs2 := snap.Build(zones, 2, []snap.KV{kubernetes, {Key: "/skydns/local/cluster/svc/default/web/x", Value: []byte(`{"host":"10.96.0.9"}`)}})
	if len(errs)+len(errs2) > 0 {
		t.Fatal(errs, errs2)
	}
	o := apOptions()
	m := new(dns.Msg).SetQuestion("web.search.default.cluster.local.ap.k8s.io.", dns.TypeA)
	var rd Reads
	r, personal := AnswerTracked(before, m, &o, 0, Client{}, &rd)
	if r.Rcode != dns.RcodeNameError || personal {
		t.Fatalf("before web exists: %s, personal %v; want a cacheable NXDOMAIN", dns.RcodeToString[r.Rcode], personal)
	}
	if fresh := Answer(after, m, &o, 0); fresh.Rcode != dns.RcodeSuccess || len(fresh.Answer) != 2 {
		t.Fatalf("after web is written: %v", fresh)
	}
	if _, ok := rd.Stands(after); ok {
		t.Error("the NXDOMAIN from before web was written stands after it")
	}
}

package answer

import (
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

var testOptions = Options{
	Pods: PodsInsecure,
	SOA:  SOA{Mname: "ns.dns", Rname: "hostmaster", TTL: 30, Refresh: 7200, Retry: 1800, Expire: 86400, Minimum: 5},
}

// Negative answers carry the SOA with TTL min(soa-ttl 30, minimum 5).
const (
	soaNeg     = "cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 42 7200 1800 86400 5"
	soaNegRev  = "in-addr.arpa. 5 IN SOA ns.dns.in-addr.arpa. hostmaster.in-addr.arpa. 42 7200 1800 86400 5"
	kubeA      = "kubernetes.default.svc.cluster.local. 5 IN A 10.96.0.1"
	headlessSv = "headless.default.svc.cluster.local."
)

type want struct {
	rcode                int
	flags                string
	answer, ns, extra    []string
	orderedAnswer        bool
	skipFlags, skipExtra bool
}

type testCase struct {
	name  string
	q     string
	qtype uint16
	opts  func(*Options)
	req   func(*dns.Msg)
	rot   uint32
	want
}

func TestAnswer(t *testing.T) {
	s := build(t, fixture(t))
	pos := "qr aa rd"
	cases := []testCase{
		// Spec 000 section 2.2: schema version.
		{name: "dns-version TXT", q: "dns-version.cluster.local.", qtype: dns.TypeTXT,
			want: want{flags: pos, answer: []string{`dns-version.cluster.local. 5 IN TXT "1.0.1"`}}},
		// 2.3.1 ClusterIP A; two clusters publish it, one record answers.
		{name: "ClusterIP A", q: "kubernetes.default.svc.cluster.local.", qtype: dns.TypeA,
			want: want{flags: pos, answer: []string{kubeA}}},
		{name: "ClusterIP dual-stack A", q: "dual.default.svc.cluster.local.", qtype: dns.TypeA,
			want: want{flags: pos, answer: []string{"dual.default.svc.cluster.local. 5 IN A 10.96.0.10"}}},
		{name: "ClusterIP dual-stack AAAA", q: "dual.default.svc.cluster.local.", qtype: dns.TypeAAAA,
			want: want{flags: pos, answer: []string{"dual.default.svc.cluster.local. 5 IN AAAA fd00::10"}}},
		// 2.3.2 SRV with the service's A in Additional.
		{name: "ClusterIP SRV", q: "_https._tcp.kubernetes.default.svc.cluster.local.", qtype: dns.TypeSRV,
			want: want{flags: pos,
				answer: []string{"_https._tcp.kubernetes.default.svc.cluster.local. 5 IN SRV 10 100 443 kubernetes.default.svc.cluster.local."},
				extra:  []string{kubeA}}},
		{name: "unnamed port has no SRV", q: "_8080._tcp.kubernetes.default.svc.cluster.local.", qtype: dns.TypeSRV,
			want: want{rcode: dns.RcodeNameError, flags: pos, ns: []string{soaNeg}}},
		// 2.3.3 PTR.
		{name: "ClusterIP PTR", q: "1.0.96.10.in-addr.arpa.", qtype: dns.TypePTR,
			want: want{flags: pos, answer: []string{"1.0.96.10.in-addr.arpa. 5 IN PTR kubernetes.default.svc.cluster.local."}}},
		{name: "ClusterIP PTR IPv6", q: "0.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa.", qtype: dns.TypePTR,
			want: want{flags: pos, answer: []string{"0.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa. 5 IN PTR dual.default.svc.cluster.local."}}},
		// 2.4.1 headless: one A per ready endpoint, and per hostname.
		{name: "headless A", q: headlessSv, qtype: dns.TypeA,
			want: want{flags: pos, answer: []string{
				headlessSv + " 5 IN A 10.3.0.100", headlessSv + " 5 IN A 10.3.0.101", headlessSv + " 5 IN A 10.3.0.102"}}},
		{name: "headless hostname A", q: "my-pet.headless.default.svc.cluster.local.", qtype: dns.TypeA,
			want: want{flags: pos, answer: []string{"my-pet.headless.default.svc.cluster.local. 5 IN A 10.3.0.100"}}},
		{name: "headless endpoint without hostname", q: "10-3-0-102.headless.default.svc.cluster.local.", qtype: dns.TypeA,
			want: want{flags: pos, answer: []string{"10-3-0-102.headless.default.svc.cluster.local. 5 IN A 10.3.0.102"}}},
		{name: "headless not-ready endpoint", q: "sick.headless.default.svc.cluster.local.", qtype: dns.TypeA,
			want: want{rcode: dns.RcodeNameError, flags: pos, ns: []string{soaNeg}}},
		{name: "headless without ready endpoints is NXDOMAIN", q: "empty.default.svc.cluster.local.", qtype: dns.TypeA,
			want: want{rcode: dns.RcodeNameError, flags: pos, ns: []string{soaNeg}}},
		// 2.4.2 headless SRV: one per endpoint, weights spread as CoreDNS.
		{name: "headless SRV", q: "_https._tcp.headless.default.svc.cluster.local.", qtype: dns.TypeSRV,
			want: want{flags: pos, answer: []string{
				"_https._tcp.headless.default.svc.cluster.local. 5 IN SRV 10 33 443 my-pet.headless.default.svc.cluster.local.",
				"_https._tcp.headless.default.svc.cluster.local. 5 IN SRV 10 33 443 my-pet-2.headless.default.svc.cluster.local.",
				"_https._tcp.headless.default.svc.cluster.local. 5 IN SRV 10 33 443 10-3-0-102.headless.default.svc.cluster.local.",
			}, extra: []string{
				"my-pet.headless.default.svc.cluster.local. 5 IN A 10.3.0.100",
				"my-pet-2.headless.default.svc.cluster.local. 5 IN A 10.3.0.101",
				"10-3-0-102.headless.default.svc.cluster.local. 5 IN A 10.3.0.102",
			}}},
		// 2.4.3 headless PTR.
		{name: "headless PTR", q: "100.0.3.10.in-addr.arpa.", qtype: dns.TypePTR,
			want: want{flags: pos, answer: []string{"100.0.3.10.in-addr.arpa. 5 IN PTR my-pet.headless.default.svc.cluster.local."}}},
		{name: "headless PTR without hostname", q: "102.0.3.10.in-addr.arpa.", qtype: dns.TypePTR,
			want: want{flags: pos, answer: []string{"102.0.3.10.in-addr.arpa. 5 IN PTR 10-3-0-102.headless.default.svc.cluster.local."}}},
		// 2.5 ExternalName: CNAME for CNAME, A and AAAA; out of every zone the
		// target comes from Client.Outside, which these have none of
		// (server/chase_test.go: TestExternalNameIsFollowed).
		{name: "ExternalName A", q: "foo.default.svc.cluster.local.", qtype: dns.TypeA,
			want: want{flags: pos, answer: []string{"foo.default.svc.cluster.local. 5 IN CNAME www.example.com."}}},
		{name: "ExternalName AAAA", q: "foo.default.svc.cluster.local.", qtype: dns.TypeAAAA,
			want: want{flags: pos, answer: []string{"foo.default.svc.cluster.local. 5 IN CNAME www.example.com."}}},
		{name: "ExternalName CNAME", q: "foo.default.svc.cluster.local.", qtype: dns.TypeCNAME,
			want: want{flags: pos, answer: []string{"foo.default.svc.cluster.local. 5 IN CNAME www.example.com."}}},
		{name: "ExternalName in zone is chased", q: "inzone.default.svc.cluster.local.", qtype: dns.TypeA,
			want: want{flags: pos, answer: []string{"inzone.default.svc.cluster.local. 5 IN CNAME kubernetes.default.svc.cluster.local.", kubeA}, orderedAnswer: true}},
		{name: "ExternalName in zone, type missing at target", q: "inzone.default.svc.cluster.local.", qtype: dns.TypeAAAA,
			want: want{flags: pos, answer: []string{"inzone.default.svc.cluster.local. 5 IN CNAME kubernetes.default.svc.cluster.local."}, ns: []string{soaNeg}}},
		{name: "ExternalName to a missing name in zone", q: "dangling.default.svc.cluster.local.", qtype: dns.TypeA,
			want: want{rcode: dns.RcodeNameError, flags: pos, answer: []string{"dangling.default.svc.cluster.local. 5 IN CNAME nothing.default.svc.cluster.local."}, ns: []string{soaNeg}}},
		{name: "CNAME loop stops", q: "loop-a.default.svc.cluster.local.", qtype: dns.TypeA,
			want: want{flags: pos, orderedAnswer: true, answer: []string{
				"loop-a.default.svc.cluster.local. 5 IN CNAME loop-b.default.svc.cluster.local.",
				"loop-b.default.svc.cluster.local. 5 IN CNAME loop-a.default.svc.cluster.local."}}},
		// 2.6 pods, per mode.
		{name: "pod insecure A", q: "1-2-3-4.anyns.pod.cluster.local.", qtype: dns.TypeA,
			want: want{flags: pos, answer: []string{"1-2-3-4.anyns.pod.cluster.local. 5 IN A 1.2.3.4"}}},
		{name: "pod insecure AAAA", q: "fd00--1.anyns.pod.cluster.local.", qtype: dns.TypeAAAA,
			want: want{flags: pos, answer: []string{"fd00--1.anyns.pod.cluster.local. 5 IN AAAA fd00::1"}}},
		{name: "pod insecure AAAA of an IPv4 name", q: "1-2-3-4.anyns.pod.cluster.local.", qtype: dns.TypeAAAA,
			want: want{flags: pos, ns: []string{soaNeg}}},
		{name: "pod insecure bad address", q: "1-2-3-400.anyns.pod.cluster.local.", qtype: dns.TypeA,
			want: want{rcode: dns.RcodeNameError, flags: pos, ns: []string{soaNeg}}},
		{name: "pod insecure namespace is a non-terminal", q: "anyns.pod.cluster.local.", qtype: dns.TypeA,
			want: want{flags: pos, ns: []string{soaNeg}}},
		{name: "pod insecure pod. is a non-terminal", q: "pod.cluster.local.", qtype: dns.TypeA,
			want: want{flags: pos, ns: []string{soaNeg}}},
		{name: "pod insecure too deep", q: "x.1-2-3-4.anyns.pod.cluster.local.", qtype: dns.TypeA,
			want: want{rcode: dns.RcodeNameError, flags: pos, ns: []string{soaNeg}}},
		{name: "pod verified held", q: "10-244-0-5.default.pod.cluster.local.", qtype: dns.TypeA,
			opts: func(o *Options) { o.Pods = PodsVerified },
			want: want{flags: pos, answer: []string{"10-244-0-5.default.pod.cluster.local. 5 IN A 10.244.0.5"}}},
		{name: "pod verified held AAAA", q: "fd00--5.default.pod.cluster.local.", qtype: dns.TypeAAAA,
			opts: func(o *Options) { o.Pods = PodsVerified },
			want: want{flags: pos, answer: []string{"fd00--5.default.pod.cluster.local. 5 IN AAAA fd00::5"}}},
		{name: "pod verified not held", q: "1-2-3-4.default.pod.cluster.local.", qtype: dns.TypeA,
			opts: func(o *Options) { o.Pods = PodsVerified },
			want: want{rcode: dns.RcodeNameError, flags: pos, ns: []string{soaNeg}}},
		{name: "pod disabled", q: "10-244-0-5.default.pod.cluster.local.", qtype: dns.TypeA,
			opts: func(o *Options) { o.Pods = PodsDisabled },
			want: want{rcode: dns.RcodeNameError, flags: pos, ns: []string{soaNeg}}},
		// TTL: the value's own, else the default.
		{name: "value TTL", q: "ttl.default.svc.cluster.local.", qtype: dns.TypeA,
			want: want{flags: pos, answer: []string{"ttl.default.svc.cluster.local. 30 IN A 10.96.9.9"}}},
		// Zone apex: synthesized SOA and NS, glue only because we hold it.
		{name: "apex SOA", q: "cluster.local.", qtype: dns.TypeSOA,
			want: want{flags: pos, answer: []string{"cluster.local. 30 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 42 7200 1800 86400 5"}}},
		{name: "apex NS", q: "cluster.local.", qtype: dns.TypeNS,
			want: want{flags: pos, answer: []string{"cluster.local. 30 IN NS ns.dns.cluster.local."}, extra: []string{"ns.dns.cluster.local. 5 IN A 10.96.0.10"}}},
		{name: "reverse apex NS without glue", q: "in-addr.arpa.", qtype: dns.TypeNS,
			want: want{flags: pos, answer: []string{"in-addr.arpa. 30 IN NS ns.dns.in-addr.arpa."}}},
		{name: "apex A is NODATA", q: "cluster.local.", qtype: dns.TypeA,
			want: want{flags: pos, ns: []string{soaNeg}}},
		{name: "SOA below apex is NODATA", q: "kubernetes.default.svc.cluster.local.", qtype: dns.TypeSOA,
			want: want{flags: pos, ns: []string{soaNeg}}},
		// NXDOMAIN vs NODATA.
		{name: "svc. is an empty non-terminal", q: "svc.cluster.local.", qtype: dns.TypeA,
			want: want{flags: pos, ns: []string{soaNeg}}},
		{name: "namespace is an empty non-terminal", q: "default.svc.cluster.local.", qtype: dns.TypeA,
			want: want{flags: pos, ns: []string{soaNeg}}},
		{name: "SRV parent is an empty non-terminal", q: "_tcp.kubernetes.default.svc.cluster.local.", qtype: dns.TypeSRV,
			want: want{flags: pos, ns: []string{soaNeg}}},
		{name: "existing name, missing type", q: "kubernetes.default.svc.cluster.local.", qtype: dns.TypeAAAA,
			want: want{flags: pos, ns: []string{soaNeg}}},
		{name: "existing name, TXT", q: "kubernetes.default.svc.cluster.local.", qtype: dns.TypeTXT,
			want: want{flags: pos, ns: []string{soaNeg}}},
		{name: "missing service", q: "nope.default.svc.cluster.local.", qtype: dns.TypeA,
			want: want{rcode: dns.RcodeNameError, flags: pos, ns: []string{soaNeg}}},
		{name: "missing namespace", q: "nope.svc.cluster.local.", qtype: dns.TypeA,
			want: want{rcode: dns.RcodeNameError, flags: pos, ns: []string{soaNeg}}},
		{name: "reverse non-terminal", q: "0.96.10.in-addr.arpa.", qtype: dns.TypePTR,
			want: want{flags: pos, ns: []string{soaNegRev}}},
		{name: "reverse missing", q: "9.9.9.9.in-addr.arpa.", qtype: dns.TypePTR,
			want: want{rcode: dns.RcodeNameError, flags: pos, ns: []string{soaNegRev}}},
		// Outside every zone, other classes, transfers: REFUSED, not authoritative.
		{name: "outside the zones", q: "example.com.", qtype: dns.TypeA,
			want: want{rcode: dns.RcodeRefused, flags: "qr rd"}},
		{name: "root", q: ".", qtype: dns.TypeNS,
			want: want{rcode: dns.RcodeRefused, flags: "qr rd"}},
		{name: "suffix that is not a zone", q: "notcluster.local.", qtype: dns.TypeA,
			want: want{rcode: dns.RcodeRefused, flags: "qr rd"}},
		{name: "class CH", q: "kubernetes.default.svc.cluster.local.", qtype: dns.TypeA,
			req:  func(m *dns.Msg) { m.Question[0].Qclass = dns.ClassCHAOS },
			want: want{rcode: dns.RcodeRefused, flags: "qr rd"}},
		{name: "AXFR", q: "cluster.local.", qtype: dns.TypeAXFR,
			want: want{rcode: dns.RcodeRefused, flags: "qr rd"}},
		// Case-insensitive, echoed as asked (0x20).
		{name: "0x20", q: "KuBeRnEtEs.DeFaUlT.sVc.ClUsTeR.LoCaL.", qtype: dns.TypeA,
			want: want{flags: pos, answer: []string{"KuBeRnEtEs.DeFaUlT.sVc.ClUsTeR.LoCaL. 5 IN A 10.96.0.1"}}},
		{name: "0x20 negative", q: "NoPe.cluster.LOCAL.", qtype: dns.TypeA,
			want: want{rcode: dns.RcodeNameError, flags: pos, ns: []string{soaNeg}}},
		// ANY: one RRset (RFC 8482).
		{name: "ANY", q: "kubernetes.default.svc.cluster.local.", qtype: dns.TypeANY,
			want: want{flags: pos, answer: []string{kubeA}}},
		{name: "ANY at a CNAME", q: "inzone.default.svc.cluster.local.", qtype: dns.TypeANY,
			want: want{flags: pos, answer: []string{"inzone.default.svc.cluster.local. 5 IN CNAME kubernetes.default.svc.cluster.local."}}},
		{name: "ANY at the apex", q: "cluster.local.", qtype: dns.TypeANY,
			want: want{flags: pos, answer: []string{"cluster.local. 30 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 42 7200 1800 86400 5"}}},
		{name: "ANY at a non-terminal", q: "svc.cluster.local.", qtype: dns.TypeANY,
			want: want{flags: pos, ns: []string{soaNeg}}},
		// Header and protocol errors.
		{name: "NOTIFY is not implemented", q: "cluster.local.", qtype: dns.TypeSOA,
			req:  func(m *dns.Msg) { m.Opcode = dns.OpcodeNotify },
			want: want{rcode: dns.RcodeNotImplemented, flags: "qr rd"}},
		{name: "UPDATE is not implemented", q: "cluster.local.", qtype: dns.TypeSOA,
			req:  func(m *dns.Msg) { m.Opcode = dns.OpcodeUpdate },
			want: want{rcode: dns.RcodeNotImplemented, flags: "qr rd"}},
		{name: "no question", q: "cluster.local.", qtype: dns.TypeSOA,
			req:  func(m *dns.Msg) { m.Question = nil },
			want: want{rcode: dns.RcodeFormatError, flags: "qr rd"}},
		{name: "two questions", q: "cluster.local.", qtype: dns.TypeSOA,
			req:  func(m *dns.Msg) { m.Question = append(m.Question, m.Question[0]) },
			want: want{rcode: dns.RcodeFormatError, flags: "qr rd"}},
		{name: "two OPT records", q: "cluster.local.", qtype: dns.TypeSOA,
			req:  func(m *dns.Msg) { m.SetEdns0(1232, false); m.Extra = append(m.Extra, m.Extra[0]) },
			want: want{rcode: dns.RcodeFormatError, flags: "qr rd", skipExtra: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions
			if tc.opts != nil {
				tc.opts(&o)
			}
			req := new(dns.Msg).SetQuestion(tc.q, tc.qtype)
			if tc.req != nil {
				tc.req(req)
			}
			m := Answer(s, req, &o, tc.rot)
			check(t, req, m, tc.want)
		})
	}
}

// Rotation shifts the RRset by the counter; without it the order is fixed.
func TestRotation(t *testing.T) {
	s := build(t, fixture(t))
	ask := func(rotate bool, rot uint32) []string {
		o := testOptions
		o.Rotate = rotate
		m := Answer(s, new(dns.Msg).SetQuestion(headlessSv, dns.TypeA), &o, rot)
		var out []string
		for _, r := range m.Answer {
			out = append(out, rr(r))
		}
		return out
	}
	base := ask(false, 0)
	if len(base) != 3 || !slices.Equal(ask(false, 1), base) {
		t.Fatalf("without rotation the order must not change: %q", base)
	}
	for rot := range uint32(4) {
		got := ask(true, rot)
		k := int(rot % 3)
		if want := append(slices.Clone(base[k:]), base[:k]...); !slices.Equal(got, want) {
			t.Errorf("rot %d: got %q, want %q", rot, got, want)
		}
	}
}

func TestNothingLoadedIsServfail(t *testing.T) {
	m := Answer(nil, new(dns.Msg).SetQuestion("kubernetes.default.svc.cluster.local.", dns.TypeA), &testOptions, 0)
	check(t, nil, m, want{rcode: dns.RcodeServerFailure, flags: "qr rd"})
}

func TestResponseIsNotAnswered(t *testing.T) {
	req := new(dns.Msg).SetQuestion("cluster.local.", dns.TypeSOA)
	req.Response = true
	if m := Answer(build(t, fixture(t)), req, &testOptions, 0); m != nil {
		t.Fatalf("answered a response: %v", m)
	}
}

func TestEDNS(t *testing.T) {
	s := build(t, fixture(t))
	req := new(dns.Msg).SetQuestion("kubernetes.default.svc.cluster.local.", dns.TypeA)
	req.SetEdns0(4096, true)
	opt := req.IsEdns0()
	opt.Option = append(opt.Option, &dns.EDNS0_LOCAL{Code: 65001, Data: []byte("x")}) // unknown: ignored
	m := Answer(s, req, &testOptions, 0)
	if m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
		t.Fatalf("answer with EDNS: %v", m)
	}
	ro := m.IsEdns0()
	if ro == nil || ro.Version() != 0 || ro.UDPSize() != EDNSSize || !ro.Do() || len(ro.Option) != 0 {
		t.Fatalf("OPT not echoed as expected: %v", m)
	}
	if got := Size(req, true); got != EDNSSize {
		t.Fatalf("Size over UDP for a 4096-octet buffer = %d, want it capped at %d", got, EDNSSize)
	}
	opt.SetUDPSize(800)
	if got := Size(req, true); got != 800 {
		t.Fatalf("Size over UDP = %d, want the client's 800", got)
	}
	opt.SetUDPSize(100)
	if got := Size(req, true); got != dns.MinMsgSize {
		t.Fatalf("Size over UDP for a 100-octet buffer = %d, want %d", got, dns.MinMsgSize)
	}
	opt.SetUDPSize(4096)

	opt.SetVersion(1)
	m = Answer(s, req, &testOptions, 0)
	if m.Rcode != dns.RcodeBadVers || len(m.Answer) != 0 || m.IsEdns0() == nil {
		t.Fatalf("version 1: want BADVERS with OPT, got %v", m)
	}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	var back dns.Msg
	if err := back.Unpack(b); err != nil || back.Rcode != dns.RcodeBadVers {
		t.Fatalf("BADVERS does not survive the wire: %v %v", err, back.Rcode)
	}
}

func TestSize(t *testing.T) {
	plain := new(dns.Msg).SetQuestion("a.cluster.local.", dns.TypeA)
	small := new(dns.Msg).SetQuestion("a.cluster.local.", dns.TypeA).SetEdns0(100, false)
	for _, c := range []struct {
		req  *dns.Msg
		udp  bool
		want int
	}{{plain, true, 512}, {plain, false, 65535}, {small, true, 512}} {
		if got := Size(c.req, c.udp); got != c.want {
			t.Errorf("Size(%v, udp %v) = %d, want %d", c.req.Question, c.udp, got, c.want)
		}
	}
}

func TestFit(t *testing.T) {
	b := builder(t, "c1")
	svc := service("default", "big")
	svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "None", []string{"None"}
	var eps []ep
	for i := range 300 {
		eps = append(eps, ep{"", "10.4." + itoa(i/250) + "." + itoa(i%250+1), true})
	}
	recs, errs := b.Service(svc, []*discoveryv1EndpointSlice{slice("default", "big", eps...)})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	s := build(t, recs)

	// Too big for 512 octets: as many of its records as fit, the first
	// ones, and TC, as CoreDNS answers.
	req := new(dns.Msg).SetQuestion("big.default.svc.cluster.local.", dns.TypeA)
	m := Answer(s, req, &testOptions, 0)
	if len(m.Answer) != 300 {
		t.Fatalf("got %d records, want 300", len(m.Answer))
	}
	first := slices.Clone(m.Answer)
	Fit(m, Size(req, true))
	// 12 octets of header, 34 of question, 16 an A record pointing at it.
	if !m.Truncated || len(m.Answer) != (512-12-34)/16 || len(m.Ns) != 0 || m.Len() > 512 {
		t.Fatalf("want the 29 records that fit in 512 octets and TC, got TC=%v answer=%d len=%d", m.Truncated, len(m.Answer), m.Len())
	}
	for i, rr := range m.Answer {
		if rr != first[i] {
			t.Fatalf("record %d is %v, want %v: the records kept are the first", i, rr, first[i])
		}
	}
	if b, err := m.Pack(); err != nil || len(b) > 512 {
		t.Fatalf("packed: %d octets, %v", len(b), err)
	}
	// TCP takes it whole.
	m = Answer(s, req, &testOptions, 0)
	Fit(m, Size(req, false))
	if m.Truncated || len(m.Answer) != 300 {
		t.Fatalf("over TCP: TC=%v answer=%d", m.Truncated, len(m.Answer))
	}

	// Additional records go first, without TC (RFC 2181 section 9).
	req = new(dns.Msg).SetQuestion("_https._tcp.big.default.svc.cluster.local.", dns.TypeSRV).SetEdns0(1232, false)
	m = Answer(s, req, &testOptions, 0)
	Fit(m, 1_000_000)
	if len(m.Extra) != 301 {
		t.Fatalf("want 300 glue records and OPT, got %d", len(m.Extra))
	}
	m.Answer = m.Answer[:10] // SRV targets are never compressed: 10 fit, with no glue
	Fit(m, Size(req, true))
	if m.Truncated || len(m.Answer) != 10 || len(m.Extra) != 1 || m.IsEdns0() == nil {
		t.Fatalf("want 10 SRV, no glue, OPT kept, no TC; got TC=%v answer=%d extra=%d", m.Truncated, len(m.Answer), len(m.Extra))
	}
}

func TestSRVWeights(t *testing.T) {
	b := builder(t, "c1")
	var recs []keys_Record
	for i, v := range []keys_Value{
		{Host: "a.x.cluster.local", Port: 80, Priority: 0, Weight: 0},
		{Host: "b.x.cluster.local", Port: 80, Priority: 0, Weight: 300},
		{Host: "c.x.cluster.local", Port: 80, Priority: 20, Weight: 1},
		{Host: "d.x.cluster.local", Port: 80, Priority: 20, Weight: 1000},
	} {
		r, err := b.Forward("_http._tcp.x.cluster.local", "test"+itoa(i), v)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	m := Answer(build(t, recs), new(dns.Msg).SetQuestion("_http._tcp.x.cluster.local.", dns.TypeSRV), &testOptions, 0)
	// Priority 0 is 10; per priority, weight 0 counts as 100 and each is
	// floor(100/sum*weight), at least 1: CoreDNS's plugin.SRV.
	check(t, nil, m, want{flags: "qr aa rd", answer: []string{
		"_http._tcp.x.cluster.local. 5 IN SRV 10 25 80 a.x.cluster.local.",
		"_http._tcp.x.cluster.local. 5 IN SRV 10 75 80 b.x.cluster.local.",
		"_http._tcp.x.cluster.local. 5 IN SRV 20 1 80 c.x.cluster.local.",
		"_http._tcp.x.cluster.local. 5 IN SRV 20 99 80 d.x.cluster.local.",
	}})
}

func check(t *testing.T, req, m *dns.Msg, w want) {
	t.Helper()
	if m == nil {
		t.Fatal("no response")
	}
	if m.Rcode != w.rcode {
		t.Errorf("rcode %s, want %s\n%v", dns.RcodeToString[m.Rcode], dns.RcodeToString[w.rcode], m)
	}
	if got := flags(m); !w.skipFlags && got != w.flags {
		t.Errorf("flags %q, want %q", got, w.flags)
	}
	if req != nil && len(req.Question) == 1 && (len(m.Question) != 1 || m.Question[0] != req.Question[0]) {
		t.Errorf("question %v, want it echoed as %v", m.Question, req.Question)
	}
	if req != nil && m.Id != req.Id {
		t.Errorf("id %d, want %d", m.Id, req.Id)
	}
	section(t, "answer", m.Answer, w.answer, w.orderedAnswer)
	section(t, "authority", m.Ns, w.ns, false)
	if !w.skipExtra {
		var extra []dns.RR
		for _, r := range m.Extra {
			if r.Header().Rrtype != dns.TypeOPT {
				extra = append(extra, r)
			}
		}
		section(t, "additional", extra, w.extra, false)
	}
}

func section(t *testing.T, name string, got []dns.RR, want []string, ordered bool) {
	t.Helper()
	g := make([]string, len(got))
	for i, r := range got {
		g[i] = rr(r)
	}
	w := slices.Clone(want)
	if !ordered {
		slices.Sort(g)
		slices.Sort(w)
	}
	if !slices.Equal(g, w) {
		t.Errorf("%s section:\n got  %q\n want %q", name, g, w)
	}
}

func rr(r dns.RR) string { return strings.Join(strings.Fields(r.String()), " ") }

func flags(m *dns.Msg) string {
	var f []string
	for _, x := range []struct {
		on   bool
		name string
	}{{m.Response, "qr"}, {m.Authoritative, "aa"}, {m.Truncated, "tc"}, {m.RecursionDesired, "rd"}, {m.RecursionAvailable, "ra"}} {
		if x.on {
			f = append(f, x.name)
		}
	}
	return strings.Join(f, " ")
}

// TestNotImpCarriesOPT: the engine's NOTIMP to a query with one OPT has
// one (RFC 6891 section 7), with the DO bit as asked; without, none.
func TestNotImpCarriesOPT(t *testing.T) {
	for _, edns := range []bool{false, true} {
		m := new(dns.Msg).SetQuestion("kubernetes.default.svc.cluster.local.", dns.TypeA)
		m.Opcode = dns.OpcodeNotify
		if edns {
			m.SetEdns0(4096, true)
		}
		r := Answer(nil, m, &testOptions, 0)
		opt := r.IsEdns0()
		if r.Rcode != dns.RcodeNotImplemented || (opt != nil) != edns || opt != nil && (opt.UDPSize() != EDNSSize || !opt.Do()) {
			t.Errorf("EDNS %v: %s, OPT %v", edns, dns.RcodeToString[r.Rcode], opt)
		}
	}
}

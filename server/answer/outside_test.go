package answer

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/etcdns/etcdns/server/snap"
)

// outsideSnap serves two SkyDNS zones and an etcdns zone, with names
// pointing at each other and at names no zone holds.
func outsideSnap(t *testing.T) *snap.Snapshot {
	t.Helper()
	kvs := []snap.KV{
		{Key: "/skydns/test/skydns/ext/x", Value: []byte(`{"host":"WWW.Example.NET"}`)},
		{Key: "/skydns/test/skydns/two/x", Value: []byte(`{"host":"www.example.net"}`)},
		{Key: "/skydns/test/skydns/two/y", Value: []byte(`{"host":"mail.example.net"}`)},
		{Key: "/skydns/test/skydns/hop/x", Value: []byte(`{"host":"away.other.test"}`)},
		{Key: "/skydns/test/other/away/x", Value: []byte(`{"host":"far.example.org"}`)},
		{Key: "/skydns/test/skydns/kube/x", Value: []byte(`{"host":"kubernetes.default.svc.cluster.local"}`)},
		{Key: "/skydns/local/cluster/svc/default/kubernetes/x", Value: []byte(`{"host":"10.96.0.1"}`)},
		{Key: "/skydns/test/skydns/srv/a", Value: []byte(`{"host":"sip.example.net","port":5060}`)},
		{Key: "/skydns/test/skydns/srv/b", Value: []byte(`{"host":"sip.example.net","port":5061}`)},
		{Key: "/skydns/test/skydns/mx/a", Value: []byte(`{"host":"mx.example.net","mail":true,"priority":5}`)},
		{Key: "/skydns/test/skydns/fed/a", Value: []byte(`{"host":"web.ns.myfed.svc.federation"}`)},
		{Key: "/skydns/local/cluster/dns/stub/federation/svc/myfed/ns1", Value: []byte(`{"host":"10.0.0.53","port":53}`)},
	}
	for i := range 2 * maxOutside {
		kvs = append(kvs, snap.KV{Key: fmt.Sprintf("/skydns/test/skydns/many/%d", i), Value: []byte(fmt.Sprintf(`{"host":"h%d.example.net","port":80}`, i))})
	}
	sn, errs := snap.Build([]snap.Config{
		{Name: "skydns.test", Prefix: "/skydns", TTL: 300, SkyDNS: true},
		{Name: "other.test", Prefix: "/skydns", TTL: 300, SkyDNS: true},
		{Name: "cluster.local", Prefix: "/skydns", TTL: 5},
	}, 1, kvs)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return sn
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

func questions(qs []dns.Question) []string {
	var out []string
	for _, q := range qs {
		out = append(out, q.Name+" "+dns.TypeToString[q.Qtype])
	}
	return out
}

func outsideA(name, addr string) dns.RR {
	return &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: netip.MustParseAddr(addr).AsSlice()}
}

// A SkyDNS answer leaving every zone notes what it needs from outside and
// answers it from what the server found there; without an Outside it
// keeps the CNAME alone, as before.
func TestSkyDNSOutside(t *testing.T) {
	sn := outsideSnap(t)
	o := &Options{SOA: SOA{Mname: "ns.dns", Rname: "hostmaster"}}
	ask := func(name string, qtype uint16, out *Outside) (*dns.Msg, bool) {
		t.Helper()
		m, personal := AnswerFrom(sn, new(dns.Msg).SetQuestion(name, qtype), o, 0, Client{Outside: out})
		return m, personal
	}

	// No Outside (no forwarding): the CNAME alone, cacheable.
	m, personal := ask("ext.skydns.test.", dns.TypeA, nil)
	if got := rrStrings(m.Answer); !slices.Equal(got, []string{"ext.skydns.test. 300 IN CNAME WWW.Example.NET."}) || personal || m.Rcode != dns.RcodeSuccess {
		t.Errorf("without Outside: %v personal %v %s", got, personal, dns.RcodeToString[m.Rcode])
	}

	// First pass: the same answer, the question noted, personal.
	out := &Outside{Upstreams: true}
	m, personal = ask("ext.skydns.test.", dns.TypeA, out)
	if got := rrStrings(m.Answer); len(got) != 1 || !personal {
		t.Errorf("first pass: %v personal %v", got, personal)
	}
	if got := questions(out.Asked); !slices.Equal(got, []string{"WWW.Example.NET. A"}) {
		t.Errorf("asked %v", got)
	}

	// Second pass: the CNAME and what outside answered, in that order,
	// under the name outside answered with; nothing new asked.
	found := &Outside{Upstreams: true, Answers: map[dns.Question][]dns.RR{
		OutsideKey(out.Asked[0]): {outsideA("www.example.net.", "192.0.2.7"), outsideA("www.example.net.", "192.0.2.8")},
	}}
	m, personal = ask("ext.skydns.test.", dns.TypeA, found)
	want := []string{"ext.skydns.test. 300 IN CNAME WWW.Example.NET.", "www.example.net. 60 IN A 192.0.2.7", "www.example.net. 60 IN A 192.0.2.8"}
	if got := rrStrings(m.Answer); !slices.Equal(got, want) || !personal || m.Rcode != dns.RcodeSuccess || !m.Authoritative {
		t.Errorf("second pass: %v personal %v %s", got, personal, dns.RcodeToString[m.Rcode])
	}
	if len(found.Asked) != 0 {
		t.Errorf("second pass asked %v", questions(found.Asked))
	}

	// A question outside answered with nothing (NXDOMAIN, a failure):
	// the CNAME stays and the rcode is NOERROR, as in CoreDNS.
	m, _ = ask("ext.skydns.test.", dns.TypeA, &Outside{Upstreams: true, Answers: map[dns.Question][]dns.RR{OutsideKey(out.Asked[0]): nil}})
	if got := rrStrings(m.Answer); len(got) != 1 || m.Rcode != dns.RcodeSuccess {
		t.Errorf("nothing outside: %v %s", got, dns.RcodeToString[m.Rcode])
	}

	// Each question once, in the order the answer needs them; a TXT
	// question asks TXT.
	out = &Outside{Upstreams: true}
	ask("two.skydns.test.", dns.TypeTXT, out)
	if got := questions(out.Asked); !slices.Equal(got, []string{"www.example.net. TXT", "mail.example.net. TXT"}) {
		t.Errorf("TXT asked %v", got)
	}

	// Through another SkyDNS zone, which points outside: noted too. A
	// name in an etcdns zone is answered from memory, never asked.
	out = &Outside{Upstreams: true}
	m, _ = ask("hop.skydns.test.", dns.TypeAAAA, out)
	if got := questions(out.Asked); !slices.Equal(got, []string{"far.example.org. AAAA"}) {
		t.Errorf("through other.test asked %v (%v)", got, rrStrings(m.Answer))
	}
	out = &Outside{Upstreams: true}
	m, personal = ask("kube.skydns.test.", dns.TypeA, out)
	if got := rrStrings(m.Answer); len(out.Asked) != 0 || personal || len(got) != 2 || got[1] != "kubernetes.default.svc.cluster.local. 5 IN A 10.96.0.1" {
		t.Errorf("into cluster.local: %v, asked %v, personal %v", got, questions(out.Asked), personal)
	}

	// SRV and MX glue: A and AAAA of a target outside, once per target;
	// AAAA's CNAMEs are left out, A's kept, as CoreDNS does.
	out = &Outside{Upstreams: true}
	ask("srv.skydns.test.", dns.TypeSRV, out)
	if got := questions(out.Asked); !slices.Equal(got, []string{"sip.example.net. A", "sip.example.net. AAAA"}) {
		t.Fatalf("SRV asked %v", got)
	}
	cname := &dns.CNAME{Hdr: dns.RR_Header{Name: "sip.example.net.", Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: 60}, Target: "edge.example.net."}
	aaaa := &dns.AAAA{Hdr: dns.RR_Header{Name: "edge.example.net.", Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: 60}, AAAA: netip.MustParseAddr("2001:db8::7").AsSlice()}
	m, _ = ask("srv.skydns.test.", dns.TypeSRV, &Outside{Upstreams: true, Answers: map[dns.Question][]dns.RR{
		OutsideKey(out.Asked[0]): {cname, outsideA("edge.example.net.", "192.0.2.9")},
		OutsideKey(out.Asked[1]): {cname, aaaa},
	}})
	wantExtra := []string{"sip.example.net. 60 IN CNAME edge.example.net.", "edge.example.net. 60 IN A 192.0.2.9", "edge.example.net. 60 IN AAAA 2001:db8::7"}
	if got := rrStrings(m.Extra); !slices.Equal(got, wantExtra) || len(m.Answer) != 2 {
		t.Errorf("SRV: answer %v extra %v", rrStrings(m.Answer), got)
	}
	out = &Outside{Upstreams: true}
	m, _ = ask("mx.skydns.test.", dns.TypeMX, out)
	if got := questions(out.Asked); !slices.Equal(got, []string{"mx.example.net. A", "mx.example.net. AAAA"}) || len(m.Answer) != 1 {
		t.Errorf("MX asked %v, answer %v", got, rrStrings(m.Answer))
	}

	// Without upstreams only a name in a stub domain is asked; the
	// answers of the others stay cacheable.
	out = &Outside{}
	m, personal = ask("ext.skydns.test.", dns.TypeA, out)
	if len(out.Asked) != 0 || personal || len(m.Answer) != 1 {
		t.Errorf("no upstreams: asked %v, personal %v, answer %v", questions(out.Asked), personal, rrStrings(m.Answer))
	}
	m, personal = ask("fed.skydns.test.", dns.TypeA, out)
	if got := questions(out.Asked); !slices.Equal(got, []string{"web.ns.myfed.svc.federation. A"}) || !personal || len(m.Answer) != 1 {
		t.Errorf("into a stub domain: asked %v, personal %v, answer %v", got, personal, rrStrings(m.Answer))
	}

	// At most maxOutside questions an answer; the rest get no glue.
	out = &Outside{Upstreams: true}
	m, _ = ask("many.skydns.test.", dns.TypeSRV, out)
	if len(out.Asked) != maxOutside || len(m.Answer) != 2*maxOutside {
		t.Errorf("many targets: %d asked, %d answers", len(out.Asked), len(m.Answer))
	}
}

package skydns

import (
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// tree builds a tree from name -> JSON value, keys under /skydns.
func tree(t *testing.T, vals map[string]string) *Tree {
	t.Helper()
	b := (*Tree)(nil).Edit()
	for name, v := range vals {
		l := dns.SplitDomainName(name)
		slices.Reverse(l)
		if err := b.Put("/skydns/"+strings.Join(l, "/"), []byte(v)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	return b.Done()
}

var testZone = &Zone{Name: "example.org.", Prefix: "/skydns", TTL: 300, Serial: 7, Mname: "ns.dns", Rname: "hostmaster"}

func answer(tr *Tree, name string, qtype uint16) Result {
	return Answer(tr, testZone, dns.Question{Name: name, Qtype: qtype, Qclass: dns.ClassINET}, nil)
}

func strs(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		out = append(out, rr.String())
	}
	return out
}

func expect(t *testing.T, what string, got []dns.RR, want ...string) {
	t.Helper()
	g := strs(got)
	var w []string
	for _, s := range want {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		w = append(w, rr.String())
	}
	if !slices.Equal(g, w) {
		t.Errorf("%s:\n got %q\nwant %q", what, g, w)
	}
}

// What external-dns's coredns provider writes with its TXT registry up to
// v0.17: one key per target under a random leaf, targetstrip 1, and the
// owner text merged into the same value.
func TestExternalDNSValues(t *testing.T) {
	tr := tree(t, map[string]string{
		"1a2b3c4d.web.example.org.":   `{"host":"10.0.0.1","text":"\"heritage=external-dns,external-dns/owner=default\"","targetstrip":1,"ttl":60}`,
		"5e6f7a8b.web.example.org.":   `{"host":"10.0.0.2","text":"\"heritage=external-dns,external-dns/owner=default\"","targetstrip":1,"ttl":60}`,
		"0badc0de.alias.example.org.": `{"host":"web.example.net","text":"\"heritage=external-dns\"","targetstrip":1}`,
	})
	r := answer(tr, "web.example.org.", dns.TypeA)
	expect(t, "A", r.Answer, "web.example.org. 60 IN A 10.0.0.1", "web.example.org. 60 IN A 10.0.0.2")
	// An address host makes the value an A record, text or not: the
	// merged owner text is never served as TXT (CoreDNS's HostType).
	if r = answer(tr, "web.example.org.", dns.TypeTXT); len(r.Answer) != 0 || r.Rcode != dns.RcodeSuccess {
		t.Errorf("TXT of address values with text: %+v", r)
	}
	// A name host with text is a TXT value, never a CNAME: CoreDNS
	// answers the A question with NODATA, and the CNAME question (exact
	// key) with NXDOMAIN, since the value sits under a leaf.
	r = answer(tr, "alias.example.org.", dns.TypeA)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 || len(r.Ns) != 1 {
		t.Errorf("A of a name host with text: %+v", r)
	}
	if r = answer(tr, "alias.example.org.", dns.TypeCNAME); r.Rcode != dns.RcodeNameError {
		t.Errorf("CNAME under a leaf: rcode %d, want NXDOMAIN", r.Rcode)
	}
	// SRV from an address: the target is the key's name less one label.
	r = answer(tr, "web.example.org.", dns.TypeSRV)
	expect(t, "SRV", r.Answer, "web.example.org. 60 IN SRV 10 50 0 web.example.org.")
	expect(t, "SRV glue", r.Extra, "web.example.org. 60 IN A 10.0.0.1", "web.example.org. 60 IN A 10.0.0.2")
}

func TestOwnKeyAndChildren(t *testing.T) {
	tr := tree(t, map[string]string{
		"www.example.org.":      `{"host":"10.0.0.9"}`,
		"api.example.org.":      `{"host":"10.0.0.1"}`,
		"x1.api.example.org.":   `{"host":"10.0.0.2"}`,
		"x2.api.example.org.":   `{"host":"10.0.0.3"}`,
		"_tcp.web.example.org.": `{"host":"web.example.org","port":80}`,
		"web.example.org.":      `{"host":"10.0.0.4"}`,
	})
	// A value at the name's own key answers when nothing is below it.
	expect(t, "own key", answer(tr, "www.example.org.", dns.TypeA).Answer, "www.example.org. 300 IN A 10.0.0.9")
	// With children, only the children answer: the own key is not read.
	expect(t, "children", answer(tr, "api.example.org.", dns.TypeA).Answer,
		"api.example.org. 300 IN A 10.0.0.2", "api.example.org. 300 IN A 10.0.0.3")
	// A child whose host is the name itself would loop: left out, so the
	// name has no A records of its own beneath it: NODATA.
	if r := answer(tr, "web.example.org.", dns.TypeA); len(r.Answer) != 0 || r.Rcode != dns.RcodeSuccess {
		t.Errorf("looping child: %+v", r)
	}
}

func TestSRVWeights(t *testing.T) {
	tr := tree(t, map[string]string{
		"a.svc.example.org.": `{"host":"a.example.net","port":80,"weight":10}`,
		"b.svc.example.org.": `{"host":"b.example.net","port":80,"weight":30}`,
		"c.svc.example.org.": `{"host":"c.example.net","port":80,"priority":20}`,
		"d.svc.example.org.": `{"host":"d.example.net","port":-1}`,
	})
	// Priority 0 is read as 10; weights become percentages within a
	// priority; d counts in its priority's total but, with port -1, is
	// not served.
	expect(t, "SRV", answer(tr, "svc.example.org.", dns.TypeSRV).Answer,
		"svc.example.org. 300 IN SRV 10 7 80 a.example.net.",
		"svc.example.org. 300 IN SRV 10 21 80 b.example.net.",
		"svc.example.org. 300 IN SRV 20 100 80 c.example.net.")
}

// CoreDNS follows at most 8 CNAMEs in a zone; a longer chain answers
// nothing at all.
func TestCNAMEChainLimit(t *testing.T) {
	for _, n := range []int{8, 9} {
		vals := map[string]string{}
		for i := range n {
			vals["c"+itoa(i)+".example.org."] = `{"host":"c` + itoa(i+1) + `.example.org"}`
		}
		vals["c"+itoa(n)+".example.org."] = `{"host":"10.0.0.1"}`
		r := answer(tree(t, vals), "c0.example.org.", dns.TypeA)
		if n == 8 && len(r.Answer) != 9 || n == 9 && len(r.Answer) != 0 {
			t.Errorf("chain of %d: %d records", n, len(r.Answer))
		}
	}
}

func itoa(i int) string { return string(rune('0' + i)) }

func TestSOAAndTTL(t *testing.T) {
	tr := tree(t, map[string]string{"a.example.org.": `{"host":"10.0.0.1","ttl":5}`})
	expect(t, "ttl", answer(tr, "a.example.org.", dns.TypeA).Answer, "a.example.org. 5 IN A 10.0.0.1")
	r := answer(tr, "nope.example.org.", dns.TypeA)
	expect(t, "NXDOMAIN SOA", r.Ns, "example.org. 30 IN SOA ns.dns.example.org. hostmaster.example.org. 7 7200 1800 86400 30")
	// The SOA question of any name is the zone's SOA, as in CoreDNS.
	expect(t, "SOA", answer(tr, "a.example.org.", dns.TypeSOA).Answer,
		"example.org. 30 IN SOA ns.dns.example.org. hostmaster.example.org. 7 7200 1800 86400 30")
}

// A name value under ns.dns is an error in CoreDNS: SERVFAIL.
func TestNSNameIsServfail(t *testing.T) {
	tr := tree(t, map[string]string{"a.ns.dns.example.org.": `{"host":"ns1.example.net"}`})
	if r := answer(tr, "example.org.", dns.TypeNS); r.Rcode != dns.RcodeServerFailure {
		t.Errorf("rcode %d, want SERVFAIL", r.Rcode)
	}
}

// From msg/service_test.go: TestSplit255, made exact.
func TestSplit255(t *testing.T) {
	for _, c := range []struct {
		n    int
		want []int
	}{{3, []int{3}}, {254, []int{254}}, {255, []int{255, 0}}, {256, []int{255, 1}}, {511, []int{255, 255, 1}}} {
		var got []int
		for _, s := range split255(strings.Repeat("a", c.n)) {
			got = append(got, len(s))
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%d: %v, want %v", c.n, got, c.want)
		}
	}
}

// From msg/service_test.go: TestGroup, every set with its expected count
// (and the first set's kept key).
func TestGroup(t *testing.T) {
	s := func(host, group, key string) svc {
		return svc{Item: Item{Key: key, Service: Service{Host: host, Group: group}}}
	}
	for i, c := range []struct {
		in   []svc
		want int
	}{
		{[]svc{s("127.0.0.1", "g1", "b/sub/dom1/skydns/test"), s("127.0.0.2", "g2", "a/dom1/skydns/test")}, 1},
		{[]svc{s("server1", "g1", "region1/skydns/test"), s("server2", "g2", "region1/skydns/test")}, 2},
		{[]svc{s("server1", "g1", "a/dom/region1/skydns/test"), s("server2", "g2", "a/subdom/dom/region1/skydns/test")}, 1},
		{[]svc{s("server1", "g1", "a/dom/region1/skydns/test"), s("server2", "g2", "a/subdom/dom/region1/skydns/test"), s("server2", "", "b/subdom/dom/region1/skydns/test")}, 2},
		{[]svc{s("server1", "g1", "a/dom/region1/skydns/test"), s("server1", "", "b/dom/region1/skydns/test"), s("server2", "g2", "a/subdom/dom/region1/skydns/test")}, 2},
		{[]svc{s("server1", "g5", "a/dom/region1/skydns/test"), s("server1", "", "b/dom/region1/skydns/test"), s("server2", "g5", "a/subdom/dom/region1/skydns/test")}, 3},
		{[]svc{s("server1", "g6", "a/dom/region1/skydns/test")}, 1},
		{[]svc{s("server1", "", "a/dom/region1/skydns/test")}, 1},
	} {
		got := group(c.in)
		if len(got) != c.want {
			t.Errorf("set %d: %d kept, want %d: %v", i, len(got), c.want, got)
		}
		if i == 0 && len(got) == 1 && got[0].Key != "a/dom1/skydns/test" {
			t.Errorf("set 0 kept %s", got[0].Key)
		}
	}
}

func TestDecode(t *testing.T) {
	for _, bad := range []string{``, `[]`, `"x"`, `{"host":1}`, `{"port":"80"}`, `{"ttl":-1}`, `{`, `nul`} {
		if _, err := Decode([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	// encoding/json takes null into a struct as nothing, and so does
	// CoreDNS: a key whose name exists with no records.
	if s, err := Decode([]byte(` null `)); err != nil || s != (Service{}) {
		t.Errorf("null: %+v, %v; want an empty value", s, err)
	}
	s, err := Decode([]byte(` {"Host":"10.0.0.1","owner":"x","unknown":[1]} `))
	if err != nil || s.Host != "10.0.0.1" {
		t.Errorf("field names match as encoding/json does, unknown ones are ignored: %+v, %v", s, err)
	}
}

// A batch never changes the tree it started from: queries may be reading it.
func TestTreeCopyOnWrite(t *testing.T) {
	old := tree(t, map[string]string{"a.example.org.": `{"host":"10.0.0.1"}`, "b.example.org.": `{"host":"10.0.0.2"}`})
	b := old.Edit()
	b.Delete("/skydns/org/example/a")
	if err := b.Put("/skydns/org/example/b", []byte(`{"host":"10.0.0.3"}`)); err != nil {
		t.Fatal(err)
	}
	if err := b.Put("/skydns/org/example/c", []byte(`not json`)); err == nil {
		t.Fatal("malformed value accepted")
	}
	next := b.Done()
	expect(t, "old", answer(old, "example.org.", dns.TypeA).Answer, "example.org. 300 IN A 10.0.0.1", "example.org. 300 IN A 10.0.0.2")
	expect(t, "new", answer(next, "example.org.", dns.TypeA).Answer, "example.org. 300 IN A 10.0.0.3")
	if next.Len() != 1 {
		t.Errorf("new tree holds %d values, want 1", next.Len())
	}
}

// A batch that puts values as the tree holds them, deletes keys it does
// not hold and writes malformed values over nothing changes nothing (a
// writer's resync); one change among them is a change, and the rest of
// the batch still applies over it.
func TestTreeBatchOfHeldValuesChangesNothing(t *testing.T) {
	old := tree(t, map[string]string{"a.example.org.": `{"host":"10.0.0.1"}`, "b.example.org.": `{"host":"b.example.net","port":80}`})
	b := old.Edit()
	for _, kv := range [][2]string{{"/skydns/org/example/a", `{"host":"10.0.0.1"}`}, {"/skydns/org/example/b", `{"host":"b.example.net","port":80}`}, {"/skydns/org/example/c", `not json`}} {
		_ = b.Put(kv[0], []byte(kv[1]))
	}
	b.Delete("/skydns/org/example/d")
	if b.Changed() || b.Done() != old {
		t.Fatal("a batch of held values changed the tree")
	}
	b = old.Edit()
	b.Delete("/skydns/org/example/a")
	if err := b.Put("/skydns/org/example/a", []byte(`{"host":"10.0.0.1"}`)); err != nil {
		t.Fatal(err)
	}
	if err := b.Put("/skydns/org/example/b", []byte(`{"host":"b.example.net","port":81}`)); err != nil {
		t.Fatal(err)
	}
	if !b.Changed() {
		t.Fatal("a new port is no change")
	}
	next := b.Done()
	expect(t, "new", answer(next, "a.example.org.", dns.TypeA).Answer, "a.example.org. 300 IN A 10.0.0.1")
	if it, _ := next.Get("/skydns/org/example/b"); it.Port != 81 {
		t.Errorf("b's port %d, want 81", it.Port)
	}
}

// FuzzDecodeAnswer: whatever a value and its key hold, decoding and
// answering from them never panics, and the answer always packs (one
// that did not went out as a bare SERVFAIL, and CoreDNS sends nothing).
func FuzzDecodeAnswer(f *testing.F) {
	for _, s := range []string{`{"host":"10.0.0.1"}`, `{"host":"a.example.org","port":-1,"targetstrip":9}`,
		`{"text":"` + strings.Repeat("x", 300) + `"}`, `{"host":"::1","mail":true,"weight":-100}`, `{"host":"*.example.org","group":"g"}`,
		`{"host":".x.example.org","port":80}`, `null`} {
		f.Add([]byte(s), "b", "a.example.org.", uint16(dns.TypeSRV))
	}
	f.Add([]byte(`{"host":"10.0.0.5","port":80}`), "/y", "a.example.org.", uint16(dns.TypeSRV))
	f.Fuzz(func(t *testing.T, value []byte, segment, qname string, qtype uint16) {
		// A question off the wire: a name that packs.
		qname = dns.Fqdn(qname)
		if _, ok := dns.IsDomainName(qname); !ok || !dns.IsFqdn(qname) || len(value) > 4096 {
			return
		}
		b := (*Tree)(nil).Edit()
		_ = b.Put("/skydns/org/example/a", value)
		_ = b.Put("/skydns/org/example/a/"+segment, value)
		tr := b.Done()
		q := dns.Question{Name: qname, Qtype: qtype, Qclass: dns.ClassINET}
		r := Answer(tr, testZone, q, nil)
		m := &dns.Msg{Question: []dns.Question{q}, Answer: r.Answer, Ns: r.Ns, Extra: r.Extra}
		m.Compress = true
		if _, err := m.Pack(); err != nil {
			t.Fatalf("%s %s from %q at segment %q: %v\n%v", qname, dns.TypeToString[qtype], value, segment, err, m)
		}
	})
}

// Found by running dnsd and CoreDNS 1.11.4 side by side on random trees:
// where CoreDNS sends no reply at all (its answer does not pack) or
// answers otherwise than its own data says, dnsd answers as the data says.
func TestAnswersCoreDNSLeavesUnsent(t *testing.T) {
	tr := tree(t, map[string]string{
		"x.a.example.org.": `{"host":"10.0.0.1"}`,
		"x.b.example.org.": `null`,
	})
	// The apex NS with nothing under dns/ns: NODATA, for the zone exists.
	r := answer(tr, "example.org.", dns.TypeNS)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 || len(r.Ns) != 1 {
		t.Errorf("apex NS without dns/ns: %+v, want NODATA with the SOA", r)
	}
	// A null value: its name exists and holds nothing, as in CoreDNS.
	for _, qtype := range []uint16{dns.TypeA, dns.TypeTXT} {
		if r := answer(tr, "b.example.org.", qtype); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
			t.Errorf("%s under a null value: %+v, want NODATA", dns.TypeToString[qtype], r)
		}
	}

	// A record whose key or host names no DNS name is left out, alone:
	// the name's other records still answer, and the value still answers
	// where its own name is not needed.
	b := tr.Edit()
	for key, value := range map[string]string{
		"/skydns/org/example/d//y":                         `{"host":"10.0.0.5","port":80}`,
		"/skydns/org/example/d/ok":                         `{"host":"10.0.0.7","port":80}`,
		"/skydns/org/example/s/y":                          `{"host":".x.example.org","port":80}`,
		"/skydns/org/example/s/" + strings.Repeat("z", 64): `{"host":"10.0.0.6","port":80}`,
		"/skydns/org/example/s/ok":                         `{"host":"10.0.0.7","port":80}`,
		"/skydns/org/example/c/x":                          `{"host":"a..example.org"}`,
	} {
		if err := b.Put(key, []byte(value)); err != nil {
			t.Fatal(err)
		}
	}
	tr = b.Done()
	for _, c := range []struct {
		name  string
		qtype uint16
		want  []string
	}{
		{"s.example.org.", dns.TypeSRV, []string{"s.example.org. 300 IN SRV 10 33 80 ok.s.example.org."}},
		{"d.example.org.", dns.TypeSRV, []string{"d.example.org. 300 IN SRV 10 50 80 ok.d.example.org."}},
		{"d.example.org.", dns.TypeA, []string{"d.example.org. 300 IN A 10.0.0.5", "d.example.org. 300 IN A 10.0.0.7"}},
		{"c.example.org.", dns.TypeA, nil},
	} {
		r := answer(tr, c.name, c.qtype)
		what := c.name + " " + dns.TypeToString[c.qtype]
		expect(t, what, r.Answer, c.want...)
		if r.Rcode != dns.RcodeSuccess {
			t.Errorf("%s: %s", what, dns.RcodeToString[r.Rcode])
		}
		m := new(dns.Msg)
		m.Answer, m.Extra = r.Answer, r.Extra
		if _, err := m.Pack(); err != nil {
			t.Errorf("%s: the answer does not pack: %v", what, err)
		}
	}
}

// A value without a TTL at a key with an etcd lease gets LeaseTTL, not the
// zone's; one with a TTL keeps it, leased or not.
func TestPutLeased(t *testing.T) {
	b := (*Tree)(nil).Edit()
	for _, kv := range []struct {
		key, value string
		leased     bool
	}{
		{"/skydns/org/example/a", `{"host":"10.0.0.1"}`, true},
		{"/skydns/org/example/b", `{"host":"10.0.0.2","ttl":10}`, true},
		{"/skydns/org/example/c", `{"host":"10.0.0.3"}`, false},
	} {
		put := b.Put
		if kv.leased {
			put = b.PutLeased
		}
		if err := put(kv.key, []byte(kv.value)); err != nil {
			t.Fatal(err)
		}
	}
	tr := b.Done()
	for key, want := range map[string]uint32{"/skydns/org/example/a": LeaseTTL, "/skydns/org/example/b": 10, "/skydns/org/example/c": 0} {
		if it, ok := tr.Get(key); !ok || it.TTL != want {
			t.Errorf("%s: TTL %d (held %v), want %d", key, it.TTL, ok, want)
		}
	}
}

// TestOtherTypesAtACNAMEAskNoUpstream: a question of a type the zone has
// no records of (HTTPS, CAA) is NODATA or NXDOMAIN by the name alone:
// the target of a CNAME out of the zone is not asked about.
func TestOtherTypesAtACNAMEAskNoUpstream(t *testing.T) {
	tr := tree(t, map[string]string{"app.example.org.": `{"host":"lb-123.elb.example.com"}`})
	var asked []string
	up := func(name string, qtype uint16) ([]dns.RR, bool) {
		asked = append(asked, name+" "+dns.TypeToString[qtype])
		return nil, true
	}
	for _, c := range []struct {
		name  string
		qtype uint16
		rcode int
	}{
		{"app.example.org.", dns.TypeHTTPS, dns.RcodeSuccess},
		{"app.example.org.", dns.TypeCAA, dns.RcodeSuccess},
		{"nope.example.org.", dns.TypeHTTPS, dns.RcodeNameError},
	} {
		r := Answer(tr, testZone, dns.Question{Name: c.name, Qtype: c.qtype, Qclass: dns.ClassINET}, up)
		if r.Rcode != c.rcode || len(r.Answer) != 0 {
			t.Errorf("%s %s: %s %v, want %s and no answer", c.name, dns.TypeToString[c.qtype], dns.RcodeToString[r.Rcode], r.Answer, dns.RcodeToString[c.rcode])
		}
	}
	if len(asked) > 0 {
		t.Errorf("asked upstream %v", asked)
	}
	// The types that chase still do.
	if r := Answer(tr, testZone, dns.Question{Name: "app.example.org.", Qtype: dns.TypeA, Qclass: dns.ClassINET}, up); len(asked) != 1 || len(r.Answer) != 1 {
		t.Errorf("A: asked %v, answer %v; want the target asked once and the CNAME", asked, r.Answer)
	}
}

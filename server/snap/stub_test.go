package snap

import (
	"fmt"
	"strings"
	"testing"
)

func servers(st *Stub) string {
	if st == nil {
		return "<none>"
	}
	var out []string
	for _, s := range st.Servers {
		out = append(out, s.Addr.String())
	}
	return st.Domain + " " + strings.Join(out, ",")
}

// Stub keys build a table of stub domains and never records: nothing
// answers at stub.dns.<zone> or below it.
func TestStubKeysAreNoRecords(t *testing.T) {
	s, errs := Build([]Config{cfg, {Name: "in-addr.arpa", Prefix: "/skydns", TTL: 5}}, 3, []KV{
		{"/skydns/local/cluster/dns/stub/federation/svc/myfed/ns1", []byte(`{"host":"10.0.0.1","port":53}`)},
		{"/skydns/local/cluster/dns/stub/federation/svc/myfed/ns2", []byte(`{"host":"10.0.0.2"}`)},
		{"/skydns/local/cluster/dns/stub/com/miek/ns1", []byte(`{"host":"fd00::1","port":5353}`)},
		{"/skydns/local/cluster/svc/ns/a/x", []byte(`{"host":"10.1.0.1"}`)},
		// Malformed: a name host, no domain, text.
		{"/skydns/local/cluster/dns/stub/org/bad/ns1", []byte(`{"host":"ns.example.org"}`)},
		{"/skydns/local/cluster/dns/stub/ns1", []byte(`{"host":"10.0.0.3"}`)},
		{"/skydns/local/cluster/dns/stub/org/text/ns1", []byte(`{"text":"x"}`)},
	})
	if len(errs) != 3 {
		t.Errorf("skipped %d values, want 3: %v", len(errs), errs)
	}
	z := s.Zone("cluster.local")
	if z.Records != 1 {
		t.Errorf("%d records, want only the service's", z.Records)
	}
	for _, n := range []string{"dns.cluster.local", "stub.dns.cluster.local", "myfed.svc.federation.stub.dns.cluster.local"} {
		if z.Node(n) != nil {
			t.Errorf("a node at %s", n)
		}
	}
	for name, want := range map[string]string{
		"myfed.svc.federation":                        "myfed.svc.federation 10.0.0.1:53,10.0.0.2:53",
		"web.ns.myfed.svc.federation":                 "myfed.svc.federation 10.0.0.1:53,10.0.0.2:53",
		"www.miek.com":                                "miek.com [fd00::1]:5353",
		"svc.federation":                              "<none>",
		"xmyfed.svc.federation":                       "<none>",
		"bad.org":                                     "<none>",
		"a.ns.svc.cluster.local":                      "<none>",
		"myfed.svc.federation.stub.dns.cluster.local": "<none>",
	} {
		if got := servers(s.Stub(name)); got != want {
			t.Errorf("Stub(%s) = %s, want %s", name, got, want)
		}
	}
	if got := len(z.Stubs()); got != 2 {
		t.Errorf("%d stub domains, want 2", got)
	}
}

// The longest stub domain wins, and a served zone at least as close to
// the name keeps it.
func TestStubLongestMatch(t *testing.T) {
	kv := func(domain, ns string) KV {
		var k string
		labels := strings.Split(domain, ".")
		for i := len(labels) - 1; i >= 0; i-- {
			k += "/" + labels[i]
		}
		return KV{Key: "/skydns/local/cluster/dns/stub" + k + "/ns1", Value: []byte(fmt.Sprintf(`{"host":%q}`, ns))}
	}
	s, errs := Build([]Config{cfg, {Name: "corp.example", Prefix: "/skydns", TTL: 5}}, 1, []KV{
		kv("example", "10.0.0.1"),
		kv("sub.example", "10.0.0.2"),
		kv("in.corp.example", "10.0.0.3"),
		kv("local", "10.0.0.4"),
		kv("cluster.local", "10.0.0.5"),
	})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for name, want := range map[string]string{
		"a.example":         "example 10.0.0.1:53",
		"a.sub.example":     "sub.example 10.0.0.2:53",
		"sub.example":       "sub.example 10.0.0.2:53",
		"a.corp.example":    "<none>", // the zone corp.example is closer than example
		"corp.example":      "<none>",
		"x.in.corp.example": "in.corp.example 10.0.0.3:53", // a stub below a zone takes its names
		"a.cluster.local":   "<none>",                      // a stub at a zone's own apex takes nothing
		"other.local":       "local 10.0.0.4:53",
	} {
		if got := servers(s.Stub(name)); got != want {
			t.Errorf("Stub(%s) = %s, want %s", name, got, want)
		}
	}
}

// Batches edit the stub table copy-on-write: the zone a batch started from
// keeps its stubs.
func TestBatchEditsStubs(t *testing.T) {
	const k1, k2 = "/skydns/local/cluster/dns/stub/federation/svc/f/ns1", "/skydns/local/cluster/dns/stub/federation/svc/f/ns2"
	z0 := NewZone(cfg)
	b := z0.Edit()
	if _, err := b.PutStub(k1, []byte(`{"host":"10.0.0.1"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PutStub(k2, []byte(`{"host":"10.0.0.2"}`)); err != nil {
		t.Fatal(err)
	}
	z1 := b.Done(1)
	sn1 := NewSnapshot(1, []*Zone{z1})

	b = z1.Edit()
	b.PutStub(k1, []byte(`{"host":"10.0.0.9","port":5353}`))
	b.DeleteStub(k2)
	z2 := b.Done(2)
	sn2 := NewSnapshot(2, []*Zone{z2})
	if got := servers(sn2.Stub("a.f.svc.federation")); got != "f.svc.federation 10.0.0.9:5353" {
		t.Errorf("after the edit: %s", got)
	}
	if got := servers(sn1.Stub("a.f.svc.federation")); got != "f.svc.federation 10.0.0.1:53,10.0.0.2:53" {
		t.Errorf("the edit changed the snapshot before it: %s", got)
	}

	// A broken write removes what the key held; deleting the last
	// nameserver removes the domain.
	b = z2.Edit()
	if _, err := b.PutStub(k1, []byte(`{"host":"ns.example.com"}`)); err == nil {
		t.Error("a name host accepted")
	}
	z3 := b.Done(3)
	if st := NewSnapshot(3, []*Zone{z3}).Stub("f.svc.federation"); st != nil || len(z3.Stubs()) != 0 {
		t.Errorf("left behind: %s", servers(st))
	}
	if got := servers(sn2.Stub("f.svc.federation")); got != "f.svc.federation 10.0.0.9:5353" {
		t.Errorf("z2 changed: %s", got)
	}
}

// A nameserver written again as held is no change (a writer's resync): the
// zone is kept, its SOA serial and the answer cache with it. Another
// address is one.
func TestPutStubOfAHeldServerChangesNothing(t *testing.T) {
	const key = "/skydns/local/cluster/dns/stub/com/miek/ns1"
	z0 := NewZone(cfg)
	b := z0.Edit()
	if _, err := b.PutStub(key, []byte(`{"host":"10.0.0.1","port":53}`)); err != nil {
		t.Fatal(err)
	}
	z1 := b.Done(7)
	b = z1.Edit()
	if _, err := b.PutStub(key, []byte(`{"host":"10.0.0.1","port":53}`)); err != nil {
		t.Fatal(err)
	}
	if b.Changed() {
		t.Error("the held nameserver written again changed the zone")
	}
	b = z1.Edit()
	if _, err := b.PutStub(key, []byte(`{"host":"10.0.0.1","port":54}`)); err != nil {
		t.Fatal(err)
	}
	if !b.Changed() {
		t.Error("another port is no change")
	}
	if got := servers(b.Done(8).stubs["miek.com"]); got != "miek.com 10.0.0.1:54" {
		t.Errorf("after the change: %s", got)
	}
}

// TestSharedZoneHoldsNoStubs: a tree every cluster writes (the clusterset
// zone, the federation zone) holds no stub domains, which would send
// every cluster's questions for any name where one cluster wrote.
func TestSharedZoneHoldsNoStubs(t *testing.T) {
	kvs := []KV{{"/skydns/local/clusterset/dns/stub/com/example/ns1", []byte(`{"host":"10.0.0.1"}`)}}
	for _, shared := range []bool{false, true} {
		s, errs := Build([]Config{{Name: "clusterset.local", Prefix: "/skydns", TTL: 5, Shared: shared}}, 3, kvs)
		want := "example.com 10.0.0.1:53"
		if shared {
			want = "<none>"
		}
		if got := servers(s.Stub("www.example.com")); got != want || len(errs) != map[bool]int{false: 0, true: 1}[shared] {
			t.Errorf("shared %v: Stub(www.example.com) = %s, skipped %v; want %s", shared, got, errs, want)
		}
		if z := s.Zone("clusterset.local"); z.Records != 0 || z.Node("stub.dns.clusterset.local") != nil {
			t.Errorf("shared %v: the stub key made a record", shared)
		}
	}
}

package keys

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

func TestStubKey(t *testing.T) {
	k, err := StubKey("/skydns", "cluster.local", "MyFederation.svc.federation.", "ns1")
	if want := "/skydns/local/cluster/dns/stub/federation/svc/myfederation/ns1"; err != nil || k != want {
		t.Fatalf("StubKey = %q, %v; want %q", k, err, want)
	}
	d, id, err := SplitStubKey("/skydns", "cluster.local", k)
	if err != nil || d != "myfederation.svc.federation" || id != "ns1" {
		t.Fatalf("SplitStubKey(%q) = %q %q %v", k, d, id, err)
	}
	// SkyDNS's own example: miek.com under skydns.local.
	k, _ = StubKey("/skydns", "skydns.local", "miek.com", "ns1")
	if k != "/skydns/local/skydns/dns/stub/com/miek/ns1" {
		t.Errorf("SkyDNS layout: %q", k)
	}
	if r, err := StubDomainRange("/skydns", "cluster.local", "myfederation.svc.federation"); err != nil || r != "/skydns/local/cluster/dns/stub/federation/svc/myfederation/" {
		t.Errorf("StubDomainRange = %q, %v", r, err)
	}
	r, err := StubRange("/skydns-c1", "cluster.local")
	if err != nil || r != "/skydns-c1/local/cluster/dns/stub/" {
		t.Errorf("StubRange = %q, %v", r, err)
	}

	for _, bad := range []string{
		"/skydns/local/cluster/dns/stub/ns1",              // no domain, only an id
		"/skydns/local/cluster/dns/stub/",                 // nothing
		"/skydns/local/cluster/svc/default/kubernetes/x",  // not a stub key
		"/skydns/local/cluster/dns/stub/com/Miek/ns1",     // not lowercase
		"/skydns/local/cluster/dns/stub/com//ns1",         // empty label
		"/skydns/local/cluster/dns/stub/com/miek/n.s",     // the id is no label
		"/skydns/local/clusterx/dns/stub/com/miek/ns1",    // another zone
		"/skydns/local/cluster/dns/stub/com/mi.ek/ns1",    // a segment with a dot
		"/skydns/local/cluster/dns/stubx/com/miek/ns1",    // not the stub directory
		"/skydns-c1/local/cluster/dns/stub/com/miek/ns1x", // another prefix
	} {
		if d, id, err := SplitStubKey("/skydns", "cluster.local", bad); err == nil {
			t.Errorf("SplitStubKey(%q) = %q %q, want an error", bad, d, id)
		}
	}
	for _, c := range []struct{ prefix, zone, domain, id string }{
		{"/a/b", "cluster.local", "miek.com", "ns1"},
		{"/skydns", "cluster..local", "miek.com", "ns1"},
		{"/skydns", "cluster.local", "", "ns1"},
		{"/skydns", "cluster.local", "miek.com", "NS1"},
		{"/skydns", "cluster.local", "miek.com", ""},
	} {
		if k, err := StubKey(c.prefix, c.zone, c.domain, c.id); err == nil {
			t.Errorf("StubKey(%+v) = %q, want an error", c, k)
		}
	}
}

func TestNameserver(t *testing.T) {
	for _, c := range []struct {
		v    Value
		want string
	}{
		{Value{Host: "10.0.0.1", Port: 53}, "10.0.0.1:53"},
		{Value{Host: "10.0.0.1"}, "10.0.0.1:53"}, // SkyDNS: no port is 53
		{Value{Host: "10.0.0.1", Port: -1}, "10.0.0.1:53"},
		{Value{Host: "fd00::1", Port: 5353}, "[fd00::1]:5353"},
		{Value{Host: "::ffff:10.0.0.1", Port: 53}, "10.0.0.1:53"},
	} {
		got, err := c.v.Nameserver()
		if err != nil || got.String() != c.want {
			t.Errorf("%+v: %v %v, want %s", c.v, got, err, c.want)
		}
	}
	for _, bad := range []Value{
		{Host: "ns1.example.com", Port: 53}, // names would need a resolver
		{},
		{Host: "0.0.0.0"},
		{Host: "ff02::1"},
		{Host: "fe80::1%eth0"},
		{Host: "10.0.0.1", Text: "x"},
	} {
		if got, err := bad.Nameserver(); err == nil {
			t.Errorf("%+v: %v, want an error", bad, got)
		}
	}
}

// TestStubRecords is the stub layout keys/README.md shows: the
// nameservers of the seed's POST /federations/myfederation.
func TestStubRecords(t *testing.T) {
	l := Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: "c1", TTL: 5}
	var recs []Record
	for _, ns := range []string{"108.45.90.180:53", "108.180.64.128:53"} {
		r, err := l.Stub("cluster.local", "myfederation.svc.federation", "federation/myfederation", netip.MustParseAddrPort(ns))
		if err != nil {
			t.Fatal(err)
		}
		if r.Type != dns.TypeNS || r.Name != "myfederation.svc.federation" {
			t.Errorf("%s: type %d name %s", ns, r.Type, r.Name)
		}
		again, _ := l.Stub("cluster.local", "myfederation.svc.federation.", "federation/myfederation", netip.MustParseAddrPort(ns))
		if again.Key != r.Key {
			t.Errorf("%s: the same nameserver got two keys: %s %s", ns, r.Key, again.Key)
		}
		v, err := Decode(r.Value.Encode())
		if got, _ := v.Nameserver(); err != nil || got.String() != ns {
			t.Errorf("%s: reads back as %v %v", ns, got, err)
		}
		recs = append(recs, r)
	}
	// In key order, as etcdctl prints them.
	slices.SortFunc(recs, func(a, b Record) int { return strings.Compare(a.Key, b.Key) })
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "%s\n%s\n", r.Key, r.Value.Encode())
	}
	other, _ := l.Stub("cluster.local", "myfederation.svc.federation", "federation/myfederation", netip.MustParseAddrPort("108.45.90.180:5353"))
	if strings.Contains(b.String(), other.Key) {
		t.Error("two ports of one address share a key")
	}
	for _, bad := range []string{"0.0.0.0:53", "10.0.0.1:0"} {
		if _, err := l.Stub("cluster.local", "x.svc.federation", "federation/x", netip.MustParseAddrPort(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}

	path := filepath.Join("testdata", "stub.golden")
	if *update {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./keys -update to create it)", err)
	}
	if b.String() != string(want) {
		t.Errorf("stub records differ from %s:\n--- got\n%s--- want\n%s", path, b.String(), want)
	}
}

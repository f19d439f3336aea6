package keys

import (
	"net/netip"
	"testing"

	"github.com/miekg/dns"
)

// TestForwardKey: a record lives where RecordKey puts its owner and id,
// however the owner is spelled, and a layout with a bad prefix builds
// nothing.
func TestForwardKey(t *testing.T) {
	l := Layout{Prefix: "/skydns", Cluster: "c1", TTL: 30}
	for _, owner := range []string{"web.default.svc.cluster.local", "Web.Default.SVC.cluster.local."} {
		r, err := l.Forward(owner, "service/default/web", Value{Host: "10.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		id := ID(dns.TypeA, r.Value)
		want := "/skydns/local/cluster/svc/default/web/" + id
		if r.Key != want || r.Name != "web.default.svc.cluster.local" || r.Type != dns.TypeA {
			t.Errorf("%s: %s %s %s; want %s web.default.svc.cluster.local A", owner, r.Key, r.Name, dns.TypeToString[r.Type], want)
		}
		if k, err := RecordKey(l.Prefix, owner, id); err != nil || k != r.Key {
			t.Errorf("%s: RecordKey = %s, %v; Forward's key %s", owner, k, err, r.Key)
		}
	}
	if _, err := (Layout{Prefix: "skydns", Cluster: "c1"}).Forward("a.local", "s", Value{Host: "10.0.0.1"}); err == nil {
		t.Error("a prefix without its leading slash built a record")
	}
}

// Address builds what Forward builds of the address's text, whatever the
// address: it only skips reading the type back from that text.
func TestAddressIsForward(t *testing.T) {
	l := Layout{Prefix: "/skydns", Cluster: "c1", TTL: 30}
	for _, s := range []string{"10.0.0.1", "::ffff:10.0.0.2", "2001:db8::1", "fe80::1%eth0", "::", "0.0.0.0"} {
		ip := netip.MustParseAddr(s)
		got, err := l.Address("Web.default.svc.cluster.local.", "service/default/web", ip)
		want, werr := l.Forward("Web.default.svc.cluster.local.", "service/default/web", Value{Host: ip.Unmap().String()})
		if err != nil || werr != nil || got != want {
			t.Errorf("%s: Address = %+v, %v; Forward = %+v, %v", s, got, err, want, werr)
		}
	}
	for _, owner := range []string{"", "a..b", "bad_name!.local"} {
		_, err := l.Address(owner, "s", netip.MustParseAddr("10.0.0.1"))
		_, werr := l.Forward(owner, "s", Value{Host: "10.0.0.1"})
		if err == nil || werr == nil || err.Error() != werr.Error() {
			t.Errorf("owner %q: Address error %v, Forward error %v", owner, err, werr)
		}
	}
	if _, err := l.Address("a.local", "s", netip.Addr{}); err == nil {
		t.Error("the zero address built a record")
	}
	if _, err := (Layout{Prefix: "skydns"}).Address("a.local", "s", netip.MustParseAddr("10.0.0.1")); err == nil {
		t.Error("a prefix without its leading slash built a record")
	}
}

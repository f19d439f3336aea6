package keys

import (
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

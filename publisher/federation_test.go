package publisher

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/keys/kube"
	"github.com/etcdns/etcdns/publisher/source"
)

// TestDesiredFederation: a service unit wants its shard records only when
// federation is on and the service is marked, and the filter applies to
// them as to the rest of the service.
func TestDesiredFederation(t *testing.T) {
	marked := clusterIP("shop", "web", "10.96.0.30")
	marked.Annotations = map[string]string{kube.FederatedAnnotation: "true"}
	marked.Spec.Type = corev1.ServiceTypeLoadBalancer
	marked.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.10"}}
	plain := clusterIP("shop", "plain", "10.96.0.31")
	src := source.NewKube(fake.NewClientset(marked, plain), nil, "", false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := src.Start(ctx, func(string, time.Time) {}); err != nil {
		t.Fatal(err)
	}
	b := builder(t, "c1")
	f, err := kube.NewFederation(keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: "c1", TTL: 5}, "federation", "fed")
	if err != nil {
		t.Fatal(err)
	}
	fed := func(z Zones, filter Filter, unit string) []string {
		recs, problems := Desired(z, src, filter, unit)
		if len(problems) > 0 {
			t.Fatalf("%s: %v", unit, problems)
		}
		var out []string
		for _, r := range recs {
			if strings.HasSuffix(r.Name, ".svc.federation") {
				out = append(out, r.Name+" "+r.Value.Host)
			}
		}
		slices.Sort(out)
		return out
	}
	all, _ := NewFilter(nil, "", false)
	on := Zones{Cluster: b, Federation: &f}
	want := []string{"c1.web.shop.fed.svc.federation 10.96.0.30", "web.shop.fed.svc.federation 203.0.113.10"}
	if got := fed(on, all, "service/shop/web"); !slices.Equal(got, want) {
		t.Errorf("marked service: %v, want %v", got, want)
	}
	if got := fed(on, all, "service/shop/plain"); len(got) != 0 {
		t.Errorf("unmarked service federated: %v", got)
	}
	if got := fed(Zones{Cluster: b}, all, "service/shop/web"); len(got) != 0 {
		t.Errorf("federation off, yet: %v", got)
	}
	other, _ := NewFilter([]string{"default"}, "", false)
	if got := fed(on, other, "service/shop/web"); len(got) != 0 {
		t.Errorf("namespace filtered out, yet: %v", got)
	}
	if n := len(Units(on, src)); n != 3 { // two services, one zone: a federation adds no unit
		t.Errorf("units %v", Units(on, src))
	}
}

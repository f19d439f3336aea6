package kube

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/etcdns/etcdns/keys"
)

func federation(t *testing.T, cluster string) Federation {
	t.Helper()
	f, err := NewFederation(keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: cluster, TTL: 5}, "federation", "myfederation")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func federated(svc *corev1.Service, lb ...corev1.LoadBalancerIngress) *corev1.Service {
	svc.Annotations = map[string]string{FederatedAnnotation: "true"}
	if lb != nil {
		svc.Spec.Type = corev1.ServiceTypeLoadBalancer
		svc.Status.LoadBalancer.Ingress = lb
	}
	return svc
}

// TestFederated: spec 003's example (service myservice in namespace myns,
// federation myfederation, clusters foo and bar) as each cluster's shard.
func TestFederated(t *testing.T) {
	const name = "myservice.myns.myfederation.svc.federation"
	for _, tc := range []struct {
		name    string
		cluster string
		svc     *corev1.Service
		want    []string
	}{{
		name:    "foo", // the seed's cluster foo: externalIP 104.32.64.128, clusterIP 10.0.3.64
		cluster: "foo",
		svc:     federated(service("myns", "myservice", []string{"10.0.3.64"}, httpsPort), corev1.LoadBalancerIngress{IP: "104.32.64.128"}),
		want:    []string{name + " A 104.32.64.128", "foo." + name + " A 10.0.3.64"},
	}, {
		name:    "bar",
		cluster: "bar",
		svc:     federated(service("myns", "myservice", []string{"10.0.4.20"}, httpsPort), corev1.LoadBalancerIngress{IP: "104.32.64.130"}),
		want:    []string{name + " A 104.32.64.130", "bar." + name + " A 10.0.4.20"},
	}, {
		name:    "dualstack", // a hostname-only ingress is left out: CNAMEs cannot be shared
		cluster: "foo",
		svc: federated(service("myns", "myservice", []string{"10.0.3.64", "fd00:10:96::40"}),
			corev1.LoadBalancerIngress{IP: "104.32.64.128"}, corev1.LoadBalancerIngress{IP: "2001:db8::80"},
			corev1.LoadBalancerIngress{Hostname: "lb.example.com"}),
		want: []string{name + " A 104.32.64.128", name + " AAAA 2001:db8::80",
			"foo." + name + " A 10.0.3.64", "foo." + name + " AAAA fd00:10:96::40"},
	}, {
		name:    "clusterip", // no load balancer: only the shard's cluster IP, for this cluster's clients
		cluster: "foo",
		svc:     federated(service("myns", "myservice", []string{"10.0.3.64"})),
		want:    []string{"foo." + name + " A 10.0.3.64"},
	}, {
		name:    "lb-pending", // a LoadBalancer without an address yet
		cluster: "foo",
		svc:     federated(service("myns", "myservice", []string{"10.0.3.64"}), []corev1.LoadBalancerIngress{}...),
		want:    []string{"foo." + name + " A 10.0.3.64"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			recs, problems := federation(t, tc.cluster).Federated(tc.svc)
			if len(problems) > 0 {
				t.Errorf("problems: %v", problems)
			}
			if got, want := rrs(recs), sorted(tc.want); !slices.Equal(got, want) {
				t.Errorf("records:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			for _, r := range recs {
				if r.Value.Cluster != tc.cluster || r.Value.Source != "service/myns/myservice" || r.Value.TTL != 5 || r.Value.Group != r.Name {
					t.Errorf("%s: value %s does not carry cluster, source, ttl and group", r.Key, r.Value.Encode())
				}
			}
			golden(t, "federation-"+tc.name, etcdctl(recs))
		})
	}
}

func TestFederatedSkips(t *testing.T) {
	f := federation(t, "foo")
	lb := corev1.LoadBalancerIngress{IP: "104.32.64.128"}

	unmarked := federated(service("myns", "web", []string{"10.0.3.64"}), lb)
	unmarked.Annotations[FederatedAnnotation] = "false"
	if recs, problems := f.Federated(unmarked); len(recs)+len(problems) != 0 {
		t.Errorf("a service not marked federated: %v, %v", rrs(recs), problems)
	}

	// Type changed from LoadBalancer, status not yet cleared.
	stale := federated(service("myns", "web", []string{"10.0.3.64"}), lb)
	stale.Spec.Type = corev1.ServiceTypeClusterIP
	if recs, _ := f.Federated(stale); !slices.Equal(rrs(recs), []string{"foo.web.myns.myfederation.svc.federation A 10.0.3.64"}) {
		t.Errorf("stale load balancer status published: %v", rrs(recs))
	}

	bad := federated(service("myns", "web", []string{"10.0.3.64"}), corev1.LoadBalancerIngress{IP: "104.32.64.300"}, lb)
	recs, problems := f.Federated(bad)
	if len(problems) != 1 || !strings.Contains(problems[0].Error(), "104.32.64.300") || len(recs) != 2 {
		t.Errorf("bad ingress IP: records %v, problems %v; want the other 2 records and 1 problem", rrs(recs), problems)
	}

	en := federated(service("myns", "web", nil))
	en.Spec.Type, en.Spec.ExternalName = corev1.ServiceTypeExternalName, "www.example.com"
	if recs, problems := f.Federated(en); len(recs) != 0 || len(problems) != 1 {
		t.Errorf("ExternalName: %v, %v; want one problem", rrs(recs), problems)
	}

	if _, err := NewFederation(keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: "foo"}, "federation", "My.Fed"); err == nil {
		t.Error("a federation name that is no label was accepted")
	}
}

// Two clusters' shards never share a key, so neither publisher touches the
// other's records in the shared tree.
func TestFederatedClustersNeverShareAKey(t *testing.T) {
	svc := federated(service("myns", "myservice", []string{"10.0.3.64"}), corev1.LoadBalancerIngress{IP: "104.32.64.128"})
	foo, _ := federation(t, "foo").Federated(svc)
	bar, _ := federation(t, "bar").Federated(svc)
	for _, a := range foo {
		for _, b := range bar {
			if a.Key == b.Key {
				t.Errorf("clusters foo and bar both write %s", a.Key)
			}
		}
	}
}

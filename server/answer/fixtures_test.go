package answer

import (
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/keys/kube"
	"github.com/etcdns/etcdns/server/snap"
)

// Fixtures are built by keys/kube from real API objects, so the engine is
// tested on exactly what the publisher writes.

var zones = []snap.Config{
	{Name: "cluster.local", Prefix: "/skydns", TTL: 5},
	{Name: "in-addr.arpa", Prefix: "/skydns", TTL: 5},
	{Name: "ip6.arpa", Prefix: "/skydns", TTL: 5},
}

func builder(t testing.TB, cluster string) kube.Builder {
	b, err := kube.NewBuilder(keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: cluster}, "cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func service(ns, name string, clusterIPs ...string) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeClusterIP,
			ClusterIPs: clusterIPs,
			Ports:      []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}, {Port: 8080}},
		},
	}
	if len(clusterIPs) > 0 {
		s.Spec.ClusterIP = clusterIPs[0]
	}
	return s
}

func externalName(ns, name, target string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: target},
	}
}

type ep struct {
	host  string
	ip    string
	ready bool
}

func slice(ns, svc string, eps ...ep) *discoveryv1.EndpointSlice {
	port, name, proto := int32(443), "https", corev1.ProtocolTCP
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: svc + "-x", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}
	for _, e := range eps {
		ready := e.ready
		x := discoveryv1.Endpoint{Addresses: []string{e.ip}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}
		if e.host != "" {
			h := e.host
			x.Hostname = &h
		}
		s.Endpoints = append(s.Endpoints, x)
	}
	return s
}

func pod(ns, name string, ips ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	return p
}

// fixture is a small cluster covering every record of spec 000 section 2.
func fixture(t testing.TB) []keys.Record {
	b, b2 := builder(t, "c1"), builder(t, "c2")
	var recs []keys.Record
	add := func(r []keys.Record, errs []error) {
		t.Helper()
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		recs = append(recs, r...)
	}
	headless := service("default", "headless")
	headless.Spec.ClusterIP, headless.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
	emptyHeadless := service("default", "empty")
	emptyHeadless.Spec.ClusterIP, emptyHeadless.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}

	recs = append(recs, b.Version())
	add(b.Service(service("default", "kubernetes", "10.96.0.1"), nil))
	// A second cluster publishing the same service: identical records,
	// other keys. Clients must see each record once.
	add(b2.Service(service("default", "kubernetes", "10.96.0.1"), nil))
	add(b.Service(service("default", "dual", "10.96.0.10", "fd00::10"), nil))
	add(b.Service(headless, []*discoveryv1.EndpointSlice{slice("default", "headless",
		ep{"my-pet", "10.3.0.100", true},
		ep{"my-pet-2", "10.3.0.101", true},
		ep{"", "10.3.0.102", true},
		ep{"sick", "10.3.0.103", false},
	)}))
	add(b.Service(emptyHeadless, []*discoveryv1.EndpointSlice{slice("default", "empty", ep{"x", "10.3.1.1", false})}))
	add(b.Service(externalName("default", "foo", "www.example.com"), nil))
	add(b.Service(externalName("default", "inzone", "kubernetes.default.svc.cluster.local"), nil))
	add(b.Service(externalName("default", "loop-a", "loop-b.default.svc.cluster.local"), nil))
	add(b.Service(externalName("default", "loop-b", "loop-a.default.svc.cluster.local"), nil))
	add(b.Service(externalName("default", "dangling", "nothing.default.svc.cluster.local"), nil))
	add(b.Pod(pod("default", "web", "10.244.0.5", "fd00::5")))

	// A value with its own TTL, and the apex name server's address.
	r, err := b.Forward("ttl.default.svc.cluster.local", "test", keys.Value{Host: "10.96.9.9"})
	if err != nil {
		t.Fatal(err)
	}
	r.Value.TTL = 30
	recs = append(recs, r)
	ns, err := b.Address("ns.dns.cluster.local", "test", netip.MustParseAddr("10.96.0.10"))
	if err != nil {
		t.Fatal(err)
	}
	return append(recs, ns)
}

func build(t testing.TB, recs []keys.Record) *snap.Snapshot {
	t.Helper()
	kvs := make([]snap.KV, len(recs))
	for i, r := range recs {
		kvs[i] = snap.KV{Key: r.Key, Value: r.Value.Encode()}
	}
	s, errs := snap.Build(zones, 42, kvs)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return s
}

// bigFixture is n ClusterIP services, for benchmarks.
func bigFixture(t testing.TB, n int) []keys.Record {
	b := builder(t, "c1")
	recs := []keys.Record{b.Version()}
	for i := range n {
		r, errs := b.Service(service(fmt.Sprintf("ns%d", i%10), fmt.Sprintf("svc%d", i), fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)), nil)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		recs = append(recs, r...)
	}
	return recs
}

type (
	keys_Record              = keys.Record
	keys_Value               = keys.Value
	discoveryv1EndpointSlice = discoveryv1.EndpointSlice
)

func itoa(i int) string { return fmt.Sprint(i) }

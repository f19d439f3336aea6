package publisher

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/keys/kube"
	"github.com/etcdns/etcdns/publisher/plan"
	"github.com/etcdns/etcdns/publisher/source"
)

// oneService is a source of one ClusterIP service with n endpoints, the
// unit of bench/publisher's million-record world.
type oneService struct {
	svc *corev1.Service
	sl  *discoveryv1.EndpointSlice
}

func newOneService(n int) *oneService {
	pname, port, proto := "http", int32(8080), corev1.ProtocolTCP
	s := &oneService{
		svc: &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "svc1"},
			Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.1", ClusterIPs: []string{"10.96.0.1"},
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: proto}}},
		},
		sl: &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "ns1", Name: "svc1-1", Labels: map[string]string{discoveryv1.LabelServiceName: "svc1"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &pname, Port: &port, Protocol: &proto}},
		},
	}
	for i := range n {
		s.sl.Endpoints = append(s.sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("100.64.%d.%d", i/256, i%256)}})
	}
	return s
}

func (s *oneService) Start(context.Context, source.Notify) error { return nil }
func (s *oneService) Service(ns, name string) (*corev1.Service, bool) {
	return s.svc, ns == "ns1" && name == "svc1"
}
func (s *oneService) Slices(string, string) []*discoveryv1.EndpointSlice {
	return []*discoveryv1.EndpointSlice{s.sl}
}
func (s *oneService) Pod(string, string) (*corev1.Pod, bool) { return nil, false }
func (s *oneService) Exported(string, string) bool           { return false }
func (s *oneService) Import(string, string) (*mcsv1alpha1.ServiceImport, bool) {
	return nil, false
}
func (s *oneService) ServicesAt(netip.Addr) []*corev1.Service { return nil }
func (s *oneService) Units() []string                         { return []string{source.ServiceUnit("ns1", "svc1")} }

// BenchmarkChangePlan is the publisher's own work per endpoint change of a
// 100-endpoint service, before the transaction: the unit's records, its
// owned entries and the diff (bench/publisher/README.md).
func BenchmarkChangePlan(b *testing.B) {
	bld, err := kube.NewBuilder(keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: "bench", TTL: 5}, "cluster.local")
	if err != nil {
		b.Fatal(err)
	}
	z := Zones{Cluster: bld}
	src := newOneService(100)
	unit := source.ServiceUnit("ns1", "svc1")
	recs, _ := Desired(z, src, Filter{}, unit)
	var kvs []plan.KV
	for i, r := range recs {
		kvs = append(kvs, plan.KV{Key: r.Key, Value: r.Value.Encode(), ModRev: int64(i + 1)})
	}
	idx, _ := plan.Load("bench", kvs)
	src.sl.Endpoints[50].Addresses = []string{"100.65.0.1"}
	b.ReportAllocs()
	for b.Loop() {
		d, _ := Desired(z, src, Filter{}, unit)
		res := idx.Diff(unit, plan.Encode(d))
		if len(res.Ops) != 2 {
			b.Fatalf("%d ops, want 2", len(res.Ops))
		}
	}
}

//go:build bench

package dnsdbench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/etcdns/etcdns/integration/harness"
	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/keys/kube"
)

const (
	namespaces   = 20
	bigEndpoints = 250
	zone         = "cluster.local"
)

// world is what every server serves: the same Kubernetes objects, created
// in the kube-apiserver for CoreDNS's kubernetes plugin and turned into
// etcd records by kube.Builder for dnsd and CoreDNS's etcd plugin (Knot's
// zone file is then read back from dnsd, see knotZone).
type world struct {
	services []*corev1.Service // svc<i> in ns<i%20>, ClusterIP
	big      *corev1.Service   // headless "big" in ns0
	bigSlice *discoveryv1.EndpointSlice
}

// v4only services have no IPv6 address, so their AAAA question is NODATA,
// as it is for single-stack services in a dual-stack cluster.
func v4only(i int) bool { return i%3 == 2 }

func fqdn(svc *corev1.Service) string {
	return svc.Name + "." + svc.Namespace + ".svc." + zone + "."
}

func newWorld(t *testing.T, n int) world {
	// The harness kube-apiserver's ranges are 10.96.0.0/16 and
	// fd00:10:96::/112; 10.96.0.0/24 is left to the "kubernetes" service.
	if n < 2*namespaces || n > 60000 {
		t.Fatalf("SERVICES=%d: want 40 to 60000", n)
	}
	var w world
	for i := range n {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns%d", i%namespaces), Name: fmt.Sprintf("svc%d", i)},
			Spec: corev1.ServiceSpec{
				Ports:          []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}},
				ClusterIPs:     []string{fmt.Sprintf("10.96.%d.%d", 10+i/250, i%250+1), fmt.Sprintf("fd00:10:96::%x", 0x1000+i)},
				IPFamilies:     []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
				IPFamilyPolicy: ptr(corev1.IPFamilyPolicyRequireDualStack),
			},
		}
		if v4only(i) {
			svc.Spec.ClusterIPs, svc.Spec.IPFamilies = svc.Spec.ClusterIPs[:1], svc.Spec.IPFamilies[:1]
			svc.Spec.IPFamilyPolicy = ptr(corev1.IPFamilyPolicySingleStack)
		}
		svc.Spec.ClusterIP = svc.Spec.ClusterIPs[0]
		w.services = append(w.services, svc)
	}
	w.big = &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns0", Name: "big"},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone, ClusterIPs: []string{corev1.ClusterIPNone},
			Ports: []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}},
		},
	}
	// No controller-manager runs, so the slice is written as the
	// EndpointSlice controller would write it.
	w.bigSlice = &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns0", Name: "big-1",
			Labels: map[string]string{discoveryv1.LabelServiceName: "big"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("https"), Port: ptr[int32](443), Protocol: ptr(corev1.ProtocolTCP)}},
	}
	for i := range bigEndpoints {
		w.bigSlice.Endpoints = append(w.bigSlice.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.244.%d.%d", i/250, i%250+1)},
			Hostname:   ptr(fmt.Sprintf("big-%d", i)),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)},
		})
	}
	return w
}

func ptr[T any](v T) *T { return &v }

// records are the world's etcd records, as the publisher would write them.
func (w world) records(t *testing.T, b kube.Builder) []keys.Record {
	recs := []keys.Record{b.Version()}
	add := func(r []keys.Record, errs []error) {
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		recs = append(recs, r...)
	}
	for _, svc := range w.services {
		add(b.Service(svc, nil))
	}
	add(b.Service(w.big, []*discoveryv1.EndpointSlice{w.bigSlice}))
	return recs
}

// createInKube creates the world's namespaces, services and the big
// service's EndpointSlice in the kube-apiserver.
func (w world) createInKube(t *testing.T, k *harness.KubeAPIServer) {
	cfg := k.RESTConfig()
	cfg.QPS, cfg.Burst = 1000, 1000 // client-go's default 5/s would take minutes
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range namespaces {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ns%d", i)}}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(w.services)+1)
	work := make(chan *corev1.Service)
	for range 8 {
		wg.Go(func() {
			for svc := range work {
				if _, err := cs.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
					errs <- fmt.Errorf("service %s/%s: %w", svc.Namespace, svc.Name, err)
				}
			}
		})
	}
	for _, svc := range append(w.services, w.big) {
		work <- svc
	}
	close(work)
	wg.Wait()
	if _, err := cs.DiscoveryV1().EndpointSlices("ns0").Create(ctx, w.bigSlice, metav1.CreateOptions{}); err != nil {
		errs <- err
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// put writes records in transactions of at most etcd's default 128
// operations, as the publisher does, deleting the keys in del first.
func put(t *testing.T, cli *clientv3.Client, recs []keys.Record, del []string) {
	ops := changeOps(recs, del)
	for len(ops) > 0 {
		k := min(len(ops), 128)
		if _, err := cli.Txn(context.Background()).Then(ops[:k]...).Commit(); err != nil {
			t.Fatal(err)
		}
		ops = ops[k:]
	}
}

// changeOps deletes the keys in del and puts recs.
func changeOps(recs []keys.Record, del []string) []clientv3.Op {
	var ops []clientv3.Op
	for _, k := range del {
		ops = append(ops, clientv3.OpDelete(k))
	}
	for _, r := range recs {
		ops = append(ops, clientv3.OpPut(r.Key, string(r.Value.Encode())))
	}
	return ops
}

// readdress gives the ClusterIP service ns/name the address ip: its
// records, and the keys of prev, its records until now, that they no
// longer hold.
func readdress(b kube.Builder, ns, name, ip string, prev []keys.Record) (recs []keys.Record, del []string, err error) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{ClusterIP: ip, ClusterIPs: []string{ip}}}
	recs, errs := b.Service(svc, nil)
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	for _, r := range prev {
		if !slices.ContainsFunc(recs, func(n keys.Record) bool { return n.Key == r.Key }) {
			del = append(del, r.Key)
		}
	}
	return recs, del, nil
}

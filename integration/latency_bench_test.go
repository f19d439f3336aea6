//go:build integration

package integration

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/etcdns/etcdns/integration/harness"
)

// BenchmarkProgrammingLatency measures the DNS programming latency a user
// sees: from an EndpointSlice write acknowledged by the kube-apiserver to the
// first dnsd answer that carries the new address, over the whole chain of
// real processes. It reports p50 and p99; bench/e2e/run.sh prints them.
func BenchmarkProgrammingLatency(b *testing.B) {
	etcd := harness.StartEtcd(b)
	api := harness.StartKubeAPIServer(b, etcd)
	cs := kubernetes.NewForConfigOrDie(api.RESTConfig())
	ctx := context.Background()

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "moving"},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}}
	if _, err := cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "moving", Labels: map[string]string{discoveryv1.LabelServiceName: "moving"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.5.0.0"}}},
	}
	slice, err := cs.DiscoveryV1().EndpointSlices("default").Create(ctx, slice, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}

	dnsAddr := startChain(b, etcd, api, "bench")

	client := &dns.Client{Net: "udp", Timeout: time.Second}
	answers := func(ip netip.Addr) bool {
		m := new(dns.Msg)
		m.SetQuestion("moving.default.svc.cluster.local.", dns.TypeA)
		r, _, err := client.Exchange(m, dnsAddr)
		if err != nil || len(r.Answer) != 1 {
			return false
		}
		a, ok := r.Answer[0].(*dns.A)
		return ok && a.A.String() == ip.String()
	}
	wait := func(ip netip.Addr, limit time.Duration) bool {
		for deadline := time.Now().Add(limit); time.Now().Before(deadline); {
			if answers(ip) {
				return true
			}
			time.Sleep(200 * time.Microsecond)
		}
		return false
	}
	if !wait(netip.MustParseAddr("10.5.0.0"), 30*time.Second) {
		b.Fatal("the first address never appeared in dnsd")
	}

	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ip := netip.AddrFrom4([4]byte{10, 5, byte((i + 1) >> 8), byte(i + 1)})
		slice.Endpoints[0].Addresses = []string{ip.String()}
		var err error
		if slice, err = cs.DiscoveryV1().EndpointSlices("default").Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if !wait(ip, 10*time.Second) {
			b.Fatalf("change %d (%s) not answered within 10s", i, ip)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
}

package store

import (
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/keys/kube"
	"github.com/etcdns/etcdns/server/snap"
)

// dnsdZones are dnsd's default zones (config.yaml's dnsd.zones).
var dnsdZones = []snap.Config{
	{Name: "cluster.local", Prefix: "/skydns", TTL: 5},
	{Name: "clusterset.local", Prefix: "/skydns", TTL: 5},
	{Name: "in-addr.arpa", Prefix: "/skydns", TTL: 5},
	{Name: "ip6.arpa", Prefix: "/skydns", TTL: 5},
}

// worldKVs is what the publisher writes for n ClusterIP services of m
// ready endpoints each, as bench/scale's world: a service's A, PTR and SRV
// and one A record per endpoint.
func worldKVs(tb testing.TB, n, m int) []snap.KV {
	b, err := kube.NewBuilder(keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: "bench"}, "cluster.local")
	if err != nil {
		tb.Fatal(err)
	}
	var kvs []snap.KV
	port := int32(8080)
	for i := range n {
		ns, name := fmt.Sprintf("ns%d", i%100), fmt.Sprintf("svc%d", i)
		ip := netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}).String()
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.ServiceSpec{ClusterIP: ip, ClusterIPs: []string{ip},
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
		}
		sl := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-0",
				Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Port: &port}},
		}
		for j := range m {
			a := netip.AddrFrom4([4]byte{10, byte(128 + i>>16), byte(i >> 8), byte(i)}).As4()
			a[3] = byte(j) // m <= 256
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{netip.AddrFrom4(a).String()}})
		}
		recs, errs := b.Service(svc, []*discoveryv1.EndpointSlice{sl})
		if len(errs) > 0 {
			tb.Fatal(errs)
		}
		for _, r := range recs {
			kvs = append(kvs, snap.KV{Key: r.Key, Value: r.Value.Encode()})
		}
	}
	return kvs
}

// benchStore is a store with no etcd that serves kvs, as its first load
// would have left it.
func benchStore(b *testing.B, kvs []snap.KV) (*Store, *snap.Snapshot) {
	s := New(nil, dnsdZones, time.Second, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	cur, errs := snap.Build(dnsdZones, 1, kvs)
	if len(errs) > 0 {
		b.Fatal(errs)
	}
	s.publish(cur)
	return s, cur
}

// BenchmarkApply is what one changed record costs dnsd's store once the
// watch has delivered it: decoding the value, deriving the next snapshot
// and publishing it (snapshot pointer and metrics), one event per
// snapshot as a trickle of changes arrives, in a world of 100 services x
// 100 endpoints (10,301 records). ns/op is per applied change; the gRPC
// receive in front of it is not included (bench/scale measures the
// process's CPU per change). cpu-ns/change is the process's CPU time per
// change, the garbage collection it causes included, which ns/op leaves
// out when the collector runs on another core; the target is 20 us.
func BenchmarkApply(b *testing.B) {
	defer debug.SetGCPercent(debug.SetGCPercent(50)) // dnsd's (cmd/dnsd gcPercent)
	for _, n := range []int{100, 1000} {
		kvs := worldKVs(b, n, 100)
		b.Run(fmt.Sprintf("records=%d", len(kvs)), func(b *testing.B) {
			s, cur := benchStore(b, kvs)
			// Change the endpoints of one service in turn, each value
			// flipping its TTL, as a publisher's updates do.
			var changes []snap.KV
			for _, kv := range kvs {
				if strings.Contains(kv.Key, "/svc0/") && !strings.HasSuffix(kv.Key, "/svc0") {
					changes = append(changes, kv)
				}
			}
			vals := make([][2][]byte, len(changes))
			for i, kv := range changes {
				v, err := keys.Decode(kv.Value)
				if err != nil {
					b.Fatal(err)
				}
				v.TTL = 10
				vals[i][0] = v.Encode()
				v.TTL = 11
				vals[i][1] = v.Encode()
			}
			ev := &mvccpb.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{}}
			events := []*mvccpb.Event{ev}
			rev := cur.Rev
			i := 0
			cpu0 := cpuTime()
			for b.Loop() {
				rev++
				c := i % len(changes)
				ev.Kv.Key, ev.Kv.Value, ev.Kv.ModRevision = []byte(changes[c].Key), vals[c][i/len(changes)%2], rev
				next, changed := s.apply(cur, events)
				if !changed {
					b.Fatal("no zone changed")
				}
				cur = next
				s.publish(cur)
				i++
			}
			if cpu := cpuTime() - cpu0; cpu > 0 {
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/change")
			}
		})
	}
}

// BenchmarkApplyService is a readdressed service as bench/fleet's writers
// make them, in its world of ClusterIP services of one port (an A, a PTR
// and an SRV each): the A and the SRV put (the SRV as it was), the old PTR
// deleted and the new one put, one transaction in two zones, then packed
// and published as the watch does. B/op is the garbage a frontend's
// collector pays for with each change.
func BenchmarkApplyService(b *testing.B) {
	defer debug.SetGCPercent(debug.SetGCPercent(50)) // dnsd's (cmd/dnsd gcPercent)
	kb, err := kube.NewBuilder(keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: "bench"}, "cluster.local")
	if err != nil {
		b.Fatal(err)
	}
	ip := func(i int) string { return fmt.Sprintf("10.%d.%d.%d", 100+i/62500%100, i/250%250, i%250+1) }
	records := func(name string, i int) []keys.Record {
		addr := ip(i)
		recs, errs := kb.Service(&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: name},
			Spec: corev1.ServiceSpec{ClusterIP: addr, ClusterIPs: []string{addr},
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
		}, nil)
		if len(errs) > 0 {
			b.Fatal(errs)
		}
		return recs
	}
	const changes = 10_000 // made at a time, off the clock
	for _, n := range []int{3334, 33334} {
		var kvs []snap.KV
		for i := range n {
			for _, r := range records(fmt.Sprintf("svc-%05d", i), i) {
				kvs = append(kvs, snap.KV{Key: r.Key, Value: r.Value.Encode()})
			}
		}
		b.Run(fmt.Sprintf("records=%d", len(kvs)), func(b *testing.B) {
			s, cur := benchStore(b, kvs)
			all := make([][]*mvccpb.Event, changes)
			prepare := func(from int) {
				for c := range all {
					c += from
					name, rev := fmt.Sprintf("svc-%05d", c%n), int64(c)+2
					old, next := records(name, c), records(name, c+n)
					evs := all[c-from][:0]
					for _, r := range next {
						evs = append(evs, &mvccpb.Event{Type: mvccpb.PUT, Kv: &mvccpb.KeyValue{Key: []byte(r.Key), Value: r.Value.Encode(), ModRevision: rev}})
					}
					for _, r := range old {
						if !slices.ContainsFunc(next, func(x keys.Record) bool { return x.Key == r.Key }) {
							evs = append(evs, &mvccpb.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: []byte(r.Key), ModRevision: rev}})
						}
					}
					all[c-from] = evs
				}
			}
			c := 0
			b.ReportAllocs()
			for b.Loop() {
				if c%changes == 0 {
					b.StopTimer()
					prepare(c)
					b.StartTimer()
				}
				next, changed := s.apply(cur, all[c%changes])
				if !changed {
					b.Fatal("no zone changed")
				}
				cur, _ = next.Pack(packBusy)
				s.publish(cur)
				c++
			}
		})
	}
}

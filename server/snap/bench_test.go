package snap

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// BenchmarkBatch is the cost of one watch event on a large zone: the copy
// of what changes, not of the zone.
func BenchmarkBatch(b *testing.B) {
	for _, n := range []int{10_000, 200_000} {
		z := NewZone(cfg)
		bt := z.Edit()
		for i := range n {
			key := fmt.Sprintf("/skydns/local/cluster/svc/ns%d/s%d/x", i%50, i)
			owner, e, err := z.Parse(key, []byte(fmt.Sprintf(`{"host":"10.%d.%d.%d"}`, i>>16&255, i>>8&255, i&255)))
			if err != nil {
				b.Fatal(err)
			}
			bt.Put(owner, e)
		}
		z = bt.Done(1)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			i := 0
			for b.Loop() {
				key := fmt.Sprintf("/skydns/local/cluster/svc/ns%d/s%d/x", i%50, i%n)
				// Each round over the names writes another address: a
				// value written again as held is no change (Put).
				owner, e, _ := z.Parse(key, fmt.Appendf(nil, `{"host":"10.99.0.%d"}`, i/n%250+1))
				bt := z.Edit()
				bt.Put(owner, e)
				z = bt.Done(uint32(i))
				i++
			}
		})
	}
}

// endpointKVs is n endpoint records shaped as the publisher writes them
// (bench/scale's world): 100 per service, generation gen's addresses.
func endpointKVs(n, gen int) []KV {
	kvs := make([]KV, n)
	for i := range kvs {
		svc, ns := i/100, i/100%100
		ip := fmt.Sprintf("10-%d-%d-%d", 64+gen*8+i>>16&7, i>>8&255, i&255)
		owner := fmt.Sprintf("%s.svc%d.ns%d.svc.cluster.local", ip, svc, ns)
		kvs[i] = KV{
			Key: fmt.Sprintf("/skydns/local/cluster/svc/ns%d/svc%d/%s/%016x", ns, svc, ip, (i+gen<<24)*2654435761),
			Value: fmt.Appendf(nil, `{"host":"%s","ttl":5,"group":%q,"cluster":"bench","source":"service/ns%d/svc%d"}`,
				strings.ReplaceAll(ip, "-", "."), owner, ns, svc),
		}
	}
	return kvs
}

func load(tb testing.TB, kvs []KV) *Zone { return loadZone(tb, cfg, kvs) }

// loadZone loads the pairs of kvs in c's range into a new zone, as the
// store's load does: sized first, then one batch, a target keeping the
// string of a name held in it or in one of the zones loaded before.
func loadZone(tb testing.TB, c Config, kvs []KV, before ...*Zone) *Zone {
	z := NewZone(c)
	n := 0
	for _, kv := range kvs {
		if strings.HasPrefix(kv.Key, z.Range) {
			n++
		}
	}
	bt := z.Edit()
	bt.Reserve(n)
	held := func(name string) string {
		for _, o := range before {
			if s := o.NameHeld(name); s != "" {
				return s
			}
		}
		return bt.NameHeld(name)
	}
	for _, kv := range kvs {
		if !strings.HasPrefix(kv.Key, z.Range) {
			continue
		}
		owner, e, err := z.ParseHeld(kv.Key, kv.Value, held)
		if err != nil {
			tb.Fatal(err)
		}
		bt.Put(owner, e)
	}
	return bt.Done(1)
}

// BenchmarkLoad is a cold start without etcd: a zone of n endpoint records
// built from scratch. It reports the live heap the zone keeps per record,
// which is most of dnsd's RSS at scale.
//
//	go test -run '^$' -bench 'Load/1000000' -benchtime 1x ./server/snap/
func BenchmarkLoad(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) { measureLoad(b, []Config{cfg}, endpointKVs(n, 0), true) })
	}
}

// measureLoad loads kvs into a new zone of each of zones each round and
// reports the time a record, the live heap the zones keep a record, and,
// if allocated, what the load allocated a record.
func measureLoad(b *testing.B, zones []Config, kvs []KV, allocated bool) {
	n := len(kvs)
	var loaded []*Zone
	var before, after runtime.MemStats
	for b.Loop() {
		loaded = nil
		runtime.GC()
		runtime.ReadMemStats(&before)
		for _, c := range zones {
			loaded = append(loaded, loadZone(b, c, kvs, loaded...))
		}
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	records := 0
	for _, z := range loaded {
		records += z.Records
	}
	if records != n {
		b.Fatalf("%d records, want %d", records, n)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "B/record")
	if allocated {
		// Garbage too is a cold start's time, and its peak memory.
		b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(n), "allocated-B/record")
	}
	runtime.KeepAlive(loaded)
	runtime.KeepAlive(kvs)
}

// BenchmarkLoadServices is BenchmarkLoad's measure for a zone of one
// record an object: n ClusterIP services. Each name is a record's own,
// where BenchmarkLoad's hundred endpoints of a service share theirs.
//
//	go test -run '^$' -bench 'LoadServices' -benchtime 1x ./server/snap/
func BenchmarkLoadServices(b *testing.B) {
	const n = 100_000
	kvs := make([]KV, n)
	for i := range kvs {
		kvs[i] = KV{
			Key:   fmt.Sprintf("/skydns/local/cluster/svc/ns%d/svc%d/%08x", i%100, i, i*2654435761),
			Value: fmt.Appendf(nil, `{"host":"10.%d.%d.%d","ttl":5,"cluster":"bench","source":"service/ns%d/svc%d"}`, 96+i>>16&7, i>>8&255, i&255, i%100, i),
		}
	}
	measureLoad(b, []Config{cfg}, kvs, false)
}

// BenchmarkBurst is one watch response of a rolling update at scale: 100
// endpoints of one service replaced (100 puts, 100 deletes) in a zone of a
// million, as bench/scale's bursts deliver them.
func BenchmarkBurst(b *testing.B) {
	const n = 1_000_000
	old, next := endpointKVs(n, 0), endpointKVs(n, 1)
	z := load(b, old)
	i := 0
	for b.Loop() {
		svc := i % (n / 100)
		bt := z.Edit()
		for j := svc * 100; j < svc*100+100; j++ {
			add, del := next[j], old[j]
			if i/(n/100)%2 == 1 {
				add, del = del, add
			}
			owner, e, err := z.Parse(add.Key, add.Value)
			if err != nil {
				b.Fatal(err)
			}
			bt.Put(owner, e)
			owner, id, _ := z.Owner(del.Key)
			bt.Delete(owner, id)
		}
		z = bt.Done(uint32(i))
		i++
	}
	if z.Records != n {
		b.Fatalf("%d records, want %d", z.Records, n)
	}
}

// serviceKVs is n ClusterIP services as the publisher writes them, and as
// bench/fleet's world has them: an A and an SRV in cluster.local, a PTR in
// in-addr.arpa, all of one cluster.
func serviceKVs(n int) []KV {
	kvs := make([]KV, 0, 3*n)
	for i := range n {
		name := fmt.Sprintf("svc-%d.fleet.svc.cluster.local", i)
		a, b, c := 96+i>>16&7, i>>8&255, i&255
		src := fmt.Sprintf(`"cluster":"fleet","source":"service/fleet/svc-%d"}`, i)
		kvs = append(kvs,
			KV{Key: fmt.Sprintf("/skydns/arpa/in-addr/10/%d/%d/%d", a, b, c),
				Value: fmt.Appendf(nil, `{"host":%q,"ttl":5,"group":"%d.%d.%d.10.in-addr.arpa",%s`, name, c, b, a, src)},
			KV{Key: fmt.Sprintf("/skydns/local/cluster/svc/fleet/svc-%d/_tcp/_http/%016x", i, uint64(i)*2654435761),
				Value: fmt.Appendf(nil, `{"host":%q,"port":80,"ttl":5,"group":"_http._tcp.%s",%s`, name, name, src)},
			KV{Key: fmt.Sprintf("/skydns/local/cluster/svc/fleet/svc-%d/%016x", i, uint64(i)*40503),
				Value: fmt.Appendf(nil, `{"host":"10.%d.%d.%d","ttl":5,"group":%q,%s`, a, b, c, name, src)},
		)
	}
	// In etcd's order, as a load reads them: a service's A (its id is
	// hexadecimal) before its _tcp subtree.
	slices.SortFunc(kvs, func(a, b KV) int { return strings.Compare(a.Key, b.Key) })
	return kvs
}

// BenchmarkLoadFleet is the live heap a record of a world of services
// keeps (three records a service, in two zones, each loaded as the store
// loads it): the shape of a node-local frontend's memory in bench/fleet.
//
//	go test -run '^$' -bench 'LoadFleet' -benchtime 1x ./server/snap/
func BenchmarkLoadFleet(b *testing.B) {
	measureLoad(b, []Config{cfg, {Name: "in-addr.arpa", Prefix: "/skydns", TTL: 5}}, serviceKVs(33_334), false)
}

// BenchmarkLoadClustersetImports is a shared clusterset.local tree of 10
// clusters that each import the same 10,000 services, each with its own
// clusterset IP (an A and an SRV a cluster's import): 200,000 values, as
// loaded by a frontend that knows its cluster (it holds its own 20,000)
// and by one that does not (it holds them all).
//
//	go test -run '^$' -bench 'LoadClustersetImports' -benchtime 1x ./server/snap/
func BenchmarkLoadClustersetImports(b *testing.B) {
	const clusters, services = 10, 10_000
	kvs := make([]KV, 0, 2*clusters*services)
	for c := range clusters {
		for i := range services {
			name := fmt.Sprintf("svc-%d.ns%d.svc.clusterset.local", i, i%20)
			src := fmt.Sprintf(`"cluster":"c%d","source":"serviceimport/ns%d/svc-%d"}`, c, i%20, i)
			kvs = append(kvs,
				KV{Key: fmt.Sprintf("/skydns/local/clusterset/svc/ns%d/svc-%d/%016x", i%20, i, uint64(c*services+i)*2654435761),
					Value: fmt.Appendf(nil, `{"host":"10.%d.%d.%d","ttl":5,"group":%q,%s`, 100+c, i>>8&255, i&255, name, src)},
				KV{Key: fmt.Sprintf("/skydns/local/clusterset/svc/ns%d/svc-%d/_tcp/_http/%016x", i%20, i, uint64(c*services+i)*40503),
					Value: fmt.Appendf(nil, `{"host":%q,"port":80,"ttl":5,"group":"_http._tcp.%s",%s`, name, name, src)})
		}
	}
	for _, cluster := range []string{"c3", ""} {
		b.Run("cluster="+cluster, func(b *testing.B) {
			var z *Zone
			var before, after runtime.MemStats
			for b.Loop() {
				z = nil
				runtime.GC()
				runtime.ReadMemStats(&before)
				z = loadZone(b, Config{Name: "clusterset.local", Prefix: "/skydns", TTL: 5, Cluster: cluster}, kvs)
			}
			b.StopTimer()
			runtime.GC()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(z.Records), "records")
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(len(kvs)), "B/value")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(kvs)), "ns/value")
			runtime.KeepAlive(z)
		})
	}
}

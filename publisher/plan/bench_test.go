package plan

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/etcdns/etcdns/keys"
)

// BenchmarkDiff is one unit's diff in an index of a million keys, as the
// publisher makes it for each change of bench/publisher's world: 10,000
// services of 100 endpoints, each an A record under the service's name and
// a PTR, one endpoint readdressed. At that size each lookup of a key in the
// index's table is a cache miss; a unit's own keys lie together.
//
//	go test -run '^$' -bench Diff ./publisher/plan/
func BenchmarkDiff(b *testing.B) {
	const services, endpoints = 10_000, 100
	unitKVs := func(i int, moved int) []KV {
		source := fmt.Sprintf("service/ns%d/svc%d", i%100, i)
		var kvs []KV
		for j := range endpoints {
			host := fmt.Sprintf("10.%d.%d.%d", 64+i/250%64, i%250, j+1)
			if j == moved {
				host = fmt.Sprintf("10.%d.%d.%d", 128+i/250%64, i%250, j+1)
			}
			v := keys.Value{Host: host, TTL: 5, Cluster: "bench", Source: source}
			id := keys.ID(1, v) // dns.TypeA
			kvs = append(kvs,
				KV{Key: fmt.Sprintf("/skydns/local/cluster/svc/ns%d/svc%d/%s", i%100, i, id), Value: v.Encode()},
				KV{Key: "/skydns/arpa/in-addr/" + strings.ReplaceAll(host, ".", "/"), Value: keys.Value{Host: fmt.Sprintf("svc%d.ns%d.svc.cluster.local", i, i%100), TTL: 5, Cluster: "bench", Source: source}.Encode()},
			)
		}
		slices.SortFunc(kvs, func(a, b KV) int { return strings.Compare(a.Key, b.Key) })
		return kvs
	}
	var all []KV
	for i := range services {
		all = append(all, unitKVs(i, -1)...)
	}
	for i := range all {
		all[i].ModRev = int64(i + 1)
	}
	idx, _ := Load("bench", all)
	all = nil
	const units = 1000 // diffed in turn, each with one endpoint moved
	wants, sources := make([][]Want, units), make([]string, units)
	for u := range units {
		i := u * (services / units)
		var recs []keys.Record
		for _, kv := range unitKVs(i, 50) {
			v, err := keys.Decode(kv.Value)
			if err != nil {
				b.Fatal(err)
			}
			recs = append(recs, keys.Record{Key: kv.Key, Value: v})
		}
		wants[u], sources[u] = Encode(recs), fmt.Sprintf("service/ns%d/svc%d", i%100, i)
	}
	b.ReportAllocs()
	u := 0
	for b.Loop() {
		r := idx.Diff(sources[u%units], wants[u%units])
		if len(r.Ops) != 4 || r.Unchanged != 2*endpoints-2 {
			b.Fatalf("%d ops, %d unchanged; want 4 and %d", len(r.Ops), r.Unchanged, 2*endpoints-2)
		}
		u++
	}
}

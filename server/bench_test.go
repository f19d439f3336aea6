package server

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/etcdns/etcdns/server/snap"
)

// BenchmarkHandle measures one query through the UDP worker, from the
// datagram in to the response out, on the warm cache where one applies:
// the per-query cost dnsperf sees, without the sockets.
func BenchmarkHandle(b *testing.B) {
	kvs := serviceKVs()
	for i := range 250 {
		kvs = append(kvs, snap.KV{
			Key:   fmt.Sprintf("/skydns/local/cluster/svc/ns0/big/e%d", i),
			Value: []byte(fmt.Sprintf(`{"host":"10.4.%d.%d","port":443}`, i/250, i%250+1)),
		})
	}
	sn, errs := snap.Build(zones, 9, kvs)
	if len(errs) > 0 {
		b.Fatal(errs)
	}
	for _, c := range []struct {
		name  string
		qname string
		qtype uint16
	}{
		{"A", "svc7.ns7.svc.cluster.local.", dns.TypeA},
		{"AAAA-NODATA", "svc7.ns7.svc.cluster.local.", dns.TypeAAAA},
		{"NXDOMAIN", "svc7.ns7.ns0.svc.cluster.local.", dns.TypeA},
		{"0x20", "SvC7.nS7.svc.cluster.local.", dns.TypeA},
		{"headless-A", "big.ns0.svc.cluster.local.", dns.TypeA},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := newServer(b, sn)
			w := &worker{s: s, out: make([]byte, 0, 4096)}
			q := new(dns.Msg).SetQuestion(c.qname, c.qtype)
			q.SetEdns0(1232, false)
			wire, err := q.Pack()
			if err != nil {
				b.Fatal(err)
			}
			if w.handle(wire) == nil {
				b.Fatal("no response")
			}
			b.ReportAllocs()
			for b.Loop() {
				w.handle(wire)
			}
		})
	}
}

// BenchmarkHandleMiss is BenchmarkHandle's A query on the path every
// query takes once: the cache holds one entry a shard, and the questions
// cycle through 1,000 names, so each is answered from the snapshot and
// stored, evicting another.
func BenchmarkHandleMiss(b *testing.B) {
	sn, errs := snap.Build(zones, 9, serviceKVs())
	if len(errs) > 0 {
		b.Fatal(errs)
	}
	s := newServer(b, sn)
	s.cacheLimits = [2]int64{cacheShards, 1 << 20}
	w := &worker{s: s, out: make([]byte, 0, 4096)}
	wires := serviceQueries(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if w.handle(wires[i%len(wires)]) == nil {
			b.Fatal("no response")
		}
		i++
	}
}

// benchBatch is how many queries one batch of the benchmark's workers
// holds: a Linux reader's recvmmsg batch (udp_linux.go), off Linux too.
const benchBatch = 32

// BenchmarkHandleParallel is the cached path on every core at once: each
// goroutine a UDP worker answering batches of 32 questions, over 1,000
// cached names. Run it with -cpu 1,2,4,...: the time a query should fall
// in step with the cores, and where it does not, the cores share a cache
// line the path writes (a lock's count, a counter).
func BenchmarkHandleParallel(b *testing.B) {
	sn, errs := snap.Build(zones, 9, serviceKVs())
	if len(errs) > 0 {
		b.Fatal(errs)
	}
	s := newServer(b, sn)
	wires := serviceQueries(b)
	warm := &worker{s: s, out: make([]byte, 0, 4096)}
	for _, q := range wires {
		if warm.handle(q) == nil {
			b.Fatal("no response")
		}
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		w := &worker{s: s, out: make([]byte, 0, 4096)}
		w.startBatch()
		for i := 0; pb.Next(); i++ {
			w.handle(wires[i%len(wires)])
			if i%benchBatch == benchBatch-1 {
				w.addBatch()
				w.endBatch()
				w.startBatch()
			}
		}
		w.addBatch()
		w.endBatch()
	})
}

// serviceQueries is an A query, with EDNS(0), for each of serviceKVs'
// services.
func serviceQueries(b *testing.B) [][]byte {
	wires := make([][]byte, 1000)
	for i := range wires {
		q := new(dns.Msg).SetQuestion(fmt.Sprintf("svc%d.ns%d.svc.cluster.local.", i, i%20), dns.TypeA)
		q.SetEdns0(1232, false)
		var err error
		if wires[i], err = q.Pack(); err != nil {
			b.Fatal(err)
		}
	}
	return wires
}

// serviceKVs is 1,000 ClusterIP services in 20 namespaces, svc<i>.ns<i%20>.
func serviceKVs() []snap.KV {
	kvs := make([]snap.KV, 0, 1000)
	for i := range 1000 {
		kvs = append(kvs, snap.KV{
			Key:   fmt.Sprintf("/skydns/local/cluster/svc/ns%d/svc%d/x", i%20, i),
			Value: []byte(fmt.Sprintf(`{"host":"10.96.%d.%d"}`, i/250, i%250+1)),
		})
	}
	return kvs
}

// BenchmarkMalformed measures what junk costs dnsd: each message of
// malformed() that screen turns down, through the UDP worker, and a
// 65535-octet TCP message, skipped unread by the connection loop. Each
// must make no allocation.
func BenchmarkMalformed(b *testing.B) {
	srv := newServer(b, testSnapshot(b, 0))
	for _, c := range malformed() {
		if !c.free {
			continue
		}
		b.Run(strings.ReplaceAll(c.name, " ", "_"), func(b *testing.B) {
			w := &worker{s: srv, out: make([]byte, 0, 512)}
			b.ReportAllocs()
			for b.Loop() {
				w.handle(c.b)
			}
		})
	}
	b.Run("TCP_message_of_65535_octets", func(b *testing.B) {
		huge := cat(hdr(0xbeef, flagRD, 1, 0, 0, 0), kubernetesA)
		huge = append(huge, make([]byte, 65535-len(huge))...)
		b.ReportAllocs()
		b.SetBytes(65537)
		// One connection sends every message: the loop's own set-up is
		// spread over b.N of them.
		b.ResetTimer()
		serveConn(srv, &streamConn{r: &repeatReader{msg: frame(huge), left: b.N}, w: io.Discard})
	})
}

// endpointNames is n names of one A record each, as a million-record
// world's endpoints are, and an A query for each.
func endpointNames(tb testing.TB, n int) ([]snap.KV, [][]byte) {
	kvs := make([]snap.KV, n)
	wires := make([][]byte, n)
	for i := range n {
		kvs[i] = snap.KV{
			Key:   fmt.Sprintf("/skydns/local/cluster/svc/ns%d/svc%d/ep%d/x", i%20, i%1000, i),
			Value: []byte(fmt.Sprintf(`{"host":"10.%d.%d.%d"}`, i>>16, i>>8&255, i&255)),
		}
		q := new(dns.Msg).SetQuestion(fmt.Sprintf("ep%d.svc%d.ns%d.svc.cluster.local.", i, i%1000, i%20), dns.TypeA)
		q.SetEdns0(1232, false)
		var err error
		if wires[i], err = q.Pack(); err != nil {
			tb.Fatal(err)
		}
	}
	return kvs, wires
}

// BenchmarkCacheFill is the heap a name costs once asked: n names of one
// A record each, each asked once, as bench/scale's verification asks its
// burst's names. What stays is the cache's entry: its key, response,
// index and what the answer read.
//
//	go test -run '^$' -bench 'CacheFill' -benchtime 1x ./server/
func BenchmarkCacheFill(b *testing.B) {
	const n = 50_000
	kvs, wires := endpointNames(b, n)
	var per float64
	for b.Loop() {
		// A snapshot of its own, so no name was asked for before.
		sn, errs := snap.Build(zones, 9, kvs)
		if len(errs) > 0 {
			b.Fatal(errs)
		}
		s := newServer(b, sn)
		w := &worker{s: s, out: make([]byte, 0, 4096)}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for _, q := range wires {
			if w.handle(q) == nil {
				b.Fatal("no response")
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		per = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(s)
		runtime.KeepAlive(sn)
	}
	b.ReportMetric(per, "B/name")
}

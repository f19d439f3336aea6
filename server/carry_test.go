package server

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/server/answer"
	"github.com/etcdns/etcdns/server/snap"
)

// change derives the snapshot at rev from sn as the store does: one batch
// for each zone the keys fall in, the others shared.
func change(t testing.TB, sn *snap.Snapshot, rev int64, puts []snap.KV, dels []string) *snap.Snapshot {
	t.Helper()
	next := &snap.Snapshot{Rev: rev, Zones: slices.Clone(sn.Zones)}
	for i, z := range sn.Zones {
		var b *snap.Batch
		edit := func() *snap.Batch {
			if b == nil {
				b = z.Edit()
			}
			return b
		}
		for _, k := range dels {
			if strings.HasPrefix(k, z.Range) {
				owner, id, err := z.Owner(k)
				if err != nil {
					t.Fatal(err)
				}
				edit().Delete(owner, id)
			}
		}
		for _, kv := range puts {
			if strings.HasPrefix(kv.Key, z.Range) {
				owner, e, err := z.Parse(kv.Key, kv.Value)
				if err != nil {
					t.Fatal(err)
				}
				edit().Put(owner, e)
			}
		}
		if b != nil {
			next.Zones[i] = b.Done(uint32(rev))
		}
	}
	return next
}

func key(t testing.TB, name, id string) string {
	t.Helper()
	k, err := keys.Key("/skydns", name)
	if err != nil {
		t.Fatal(err)
	}
	if id != "" {
		k += "/" + id
	}
	return k
}

// movingServer serves whatever snapshot cur holds, sn at first, without
// rotation, so that two servers give the same bytes for the same
// question, and with autopath's suffix form, whose answers read several
// names.
func movingServer(sn *snap.Snapshot) (srv *Server, reg *prometheus.Registry, cur *atomic.Pointer[snap.Snapshot]) {
	o := opts
	o.Rotate = false
	o.Autopath.Suffix = true
	reg = prometheus.NewRegistry()
	cur = new(atomic.Pointer[snap.Snapshot])
	cur.Store(sn)
	return New(cur.Load, o, reg, slog.New(slog.NewTextHandler(io.Discard, nil))), reg, cur
}

// addresses is the snapshot at revision 1 where each of names has the
// address 10.96.0.<its place from 1>.
func addresses(t testing.TB, names ...string) *snap.Snapshot {
	t.Helper()
	var kvs []snap.KV
	for i, n := range names {
		kvs = append(kvs, snap.KV{Key: key(t, n, "x"), Value: []byte(fmt.Sprintf(`{"host":"10.96.0.%d"}`, i+1))})
	}
	sn, errs := snap.Build(zones, 1, kvs)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return sn
}

// An answer a change does not touch is kept across it, with the new serial
// in the SOA of a negative answer; one it touches is built again.
func TestCacheKeepsWhatAChangeLeaves(t *testing.T) {
	a, b := "a.default.svc.cluster.local", "b.default.svc.cluster.local"
	srv, reg, cur := movingServer(addresses(t, a, b))
	w := &worker{s: srv, out: make([]byte, 0, 512)}
	rechecks := func(result string) float64 { return counter(t, reg, "etcdns_dnsd_cache_rechecks_total", result) }
	ask := func(name string, qtype uint16) *dns.Msg {
		t.Helper()
		var m dns.Msg
		if err := m.Unpack(w.handle(pack(t, 7, name+".", qtype))); err != nil {
			t.Fatal(err)
		}
		return &m
	}
	ask(a, dns.TypeA)
	ask("gone.default.svc.cluster.local", dns.TypeA)

	cur.Store(change(t, cur.Load(), 2, []snap.KV{{Key: key(t, b, "x"), Value: []byte(`{"host":"10.96.0.3"}`)}}, nil))
	if m := ask(a, dns.TypeA); len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "10.96.0.1" {
		t.Fatalf("a after b changed: %v", m.Answer)
	}
	if m := ask("gone.default.svc.cluster.local", dns.TypeA); m.Rcode != dns.RcodeNameError || m.Ns[0].(*dns.SOA).Serial != 2 {
		t.Fatalf("NXDOMAIN after b changed: %v", m)
	}
	if kept, dropped := rechecks("kept"), rechecks("dropped"); kept != 2 || dropped != 0 {
		t.Fatalf("after a change elsewhere: %v kept, %v dropped; want 2, 0", kept, dropped)
	}

	cur.Store(change(t, cur.Load(), 3, []snap.KV{{Key: key(t, a, "x"), Value: []byte(`{"host":"10.96.0.4"}`)}}, nil))
	if m := ask(a, dns.TypeA); len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "10.96.0.4" {
		t.Fatalf("a after a changed: %v", m.Answer)
	}
	if dropped := rechecks("dropped"); dropped != 1 {
		t.Fatalf("after a changed: %v dropped, want 1", dropped)
	}
}

// Through a long run of random changes, every answer the cache gives is
// byte for byte the one a server with an empty cache builds from the same
// snapshot: names that come and go, addresses that change, CNAMEs chased
// in the zone, SRV glue from other names, empty non-terminals, reverse
// records, the apex and its NS glue, autopath searches.
func TestCacheMatchesFreshAnswers(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 9))
	const ns = "ns0.svc.cluster.local"
	var names []string
	for i := range 6 {
		names = append(names, fmt.Sprintf("svc%d.%s", i, ns))
	}
	var endpoints []string
	for i := range 4 {
		endpoints = append(endpoints, fmt.Sprintf("e%d.hl.%s", i, ns))
	}
	srvOwner := "_https._tcp.hl." + ns
	aliases := []string{"alias0." + ns, "alias1." + ns}
	ptrs := []string{"1.0.96.10.in-addr.arpa", "2.0.96.10.in-addr.arpa"}
	ip := func() string { return fmt.Sprintf(`{"host":"10.96.%d.%d"}`, r.IntN(3), 1+r.IntN(250)) }

	type q struct {
		name  string
		qtype uint16
	}
	var questions []q
	for _, n := range slices.Concat(names, endpoints, aliases, []string{"hl." + ns, "nope." + ns, ns, "svc.cluster.local"}) {
		for _, t := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeCNAME, dns.TypeTXT} {
			questions = append(questions, q{n, t})
		}
	}
	questions = append(questions, q{srvOwner, dns.TypeSRV}, q{"cluster.local", dns.TypeSOA}, q{"cluster.local", dns.TypeNS},
		q{"cluster.local", dns.TypeANY}, q{"SvC1." + ns, dns.TypeA},
		q{"svc1.search.ns0.cluster.local." + answer.ApZone, dns.TypeA}, q{"alias0.search.ns0.cluster.local." + answer.ApZone, dns.TypeA},
		q{"nope.search.ns0.cluster.local." + answer.ApZone, dns.TypeA})
	for _, p := range ptrs {
		questions = append(questions, q{p, dns.TypePTR})
	}

	srv, reg, cur := movingServer(addresses(t))
	w := &worker{s: srv, out: make([]byte, 0, 4096)}
	for step := range 400 {
		var puts []snap.KV
		var dels []string
		for range 1 + r.IntN(3) {
			switch r.IntN(8) {
			case 0:
				puts = append(puts, snap.KV{Key: key(t, names[r.IntN(len(names))], "x"), Value: []byte(ip())})
			case 1:
				dels = append(dels, key(t, names[r.IntN(len(names))], "x"))
			case 2:
				e := endpoints[r.IntN(len(endpoints))]
				if r.IntN(2) == 0 {
					puts = append(puts, snap.KV{Key: key(t, e, "x"), Value: []byte(ip())})
				} else {
					dels = append(dels, key(t, e, "x"))
				}
			case 3:
				id := fmt.Sprint(r.IntN(len(endpoints)))
				if r.IntN(2) == 0 {
					puts = append(puts, snap.KV{Key: key(t, srvOwner, id),
						Value: []byte(fmt.Sprintf(`{"host":%q,"port":443}`, endpoints[r.IntN(len(endpoints))]))})
				} else {
					dels = append(dels, key(t, srvOwner, id))
				}
			case 4:
				a := aliases[r.IntN(len(aliases))]
				if r.IntN(3) > 0 {
					target := slices.Concat(names, aliases)[r.IntN(len(names)+len(aliases))]
					puts = append(puts, snap.KV{Key: key(t, a, "x"), Value: []byte(fmt.Sprintf(`{"host":%q}`, target))})
				} else {
					dels = append(dels, key(t, a, "x"))
				}
			case 6: // records at the apex answer ANY there
				if r.IntN(2) == 0 {
					puts = append(puts, snap.KV{Key: key(t, "cluster.local", "x"), Value: []byte(fmt.Sprintf(`{"text":"v%d"}`, r.IntN(3)))})
				} else {
					dels = append(dels, key(t, "cluster.local", "x"))
				}
			case 7: // the NS record's glue
				if r.IntN(2) == 0 {
					puts = append(puts, snap.KV{Key: key(t, "ns.dns.cluster.local", "x"), Value: []byte(ip())})
				} else {
					dels = append(dels, key(t, "ns.dns.cluster.local", "x"))
				}
			case 5:
				p := ptrs[r.IntN(len(ptrs))]
				if r.IntN(2) == 0 {
					puts = append(puts, snap.KV{Key: key(t, p, ""), Value: []byte(fmt.Sprintf(`{"host":%q}`, names[r.IntN(len(names))]))})
				} else {
					dels = append(dels, key(t, p, ""))
				}
			}
		}
		cur.Store(change(t, cur.Load(), int64(step+2), puts, dels))

		fresh, _, _ := movingServer(cur.Load())
		for _, i := range r.Perm(len(questions)) {
			qu := questions[i]
			b := pack(t, uint16(i), qu.name+".", qu.qtype)
			want := slices.Clone((&worker{s: fresh, out: make([]byte, 0, 4096)}).handle(b))
			for range 2 { // the first may carry the entry, the second hits it
				if got := w.handle(b); !bytes.Equal(got, want) {
					var g, f dns.Msg
					_ = g.Unpack(got)
					_ = f.Unpack(want)
					t.Fatalf("step %d, %s %s: the cache says\n%v\nan empty cache says\n%v", step, qu.name, dns.TypeToString[qu.qtype], &g, &f)
				}
			}
		}
	}
	kept, dropped := counter(t, reg, "etcdns_dnsd_cache_rechecks_total", "kept"), counter(t, reg, "etcdns_dnsd_cache_rechecks_total", "dropped")
	t.Logf("%.0f entries kept across a change, %.0f dropped", kept, dropped)
	if kept == 0 || dropped == 0 {
		t.Fatalf("the run kept %v and dropped %v entries: it must do both to test anything", kept, dropped)
	}
}

// Readers carry and drop entries while a writer derives snapshot after
// snapshot under them; run with -race. An answer no change touches never
// wavers, and a negative answer never shows a serial the writer has not
// published.
func TestCacheCarriesConcurrently(t *testing.T) {
	srv, _, cur := movingServer(addresses(t, "kubernetes.default.svc.cluster.local"))
	stable := pack(t, 1, "kubernetes.default.svc.cluster.local.", dns.TypeA)
	moving := pack(t, 2, "moving.default.svc.cluster.local.", dns.TypeA)
	gone := pack(t, 3, "gone.default.svc.cluster.local.", dns.TypeA)
	const changes = 300
	var wg sync.WaitGroup
	var done atomic.Bool
	for range 4 {
		wg.Go(func() {
			w := &worker{s: srv, out: make([]byte, 0, 512)}
			for !done.Load() {
				var m dns.Msg
				if err := m.Unpack(w.handle(stable)); err != nil || len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "10.96.0.1" {
					t.Errorf("kubernetes: %v, %v", &m, err)
					return
				}
				if err := m.Unpack(w.handle(moving)); err != nil {
					t.Error(err)
					return
				}
				if err := m.Unpack(w.handle(gone)); err != nil || m.Rcode != dns.RcodeNameError || m.Ns[0].(*dns.SOA).Serial > uint32(cur.Load().Rev) {
					t.Errorf("gone: %v, %v", &m, err)
					return
				}
			}
		})
	}
	for i := range changes {
		k := key(t, "moving.default.svc.cluster.local", "x")
		if i%3 == 0 {
			cur.Store(change(t, cur.Load(), int64(i+2), nil, []string{k}))
		} else {
			cur.Store(change(t, cur.Load(), int64(i+2), []snap.KV{{Key: k, Value: []byte(fmt.Sprintf(`{"host":"10.96.1.%d"}`, i%250+1))}}, nil))
		}
	}
	done.Store(true)
	wg.Wait()
}

// A cached entry keeps no snapshot alive: at a million records each one
// holds tens of MiB that the next does not share (the scale benchmark's
// RSS after three bursts grew by 135 MiB when entries held theirs).
func TestCacheKeepsNoSnapshot(t *testing.T) {
	old := addresses(t, "a.default.svc.cluster.local")
	srv, _, cur := movingServer(old)
	w := &worker{s: srv, out: make([]byte, 0, 512)}
	defer runtime.KeepAlive(w) // and with it the server and its cache
	w.handle(pack(t, 1, "a.default.svc.cluster.local.", dns.TypeA))
	collected := make(chan struct{})
	runtime.AddCleanup(old, func(ch chan struct{}) { close(ch) }, collected)
	cur.Store(change(t, old, 2, []snap.KV{{Key: key(t, "b.default.svc.cluster.local", "x"), Value: []byte(`{"host":"10.96.0.2"}`)}}, nil))
	old = nil
	w.handle(pack(t, 2, "b.default.svc.cluster.local.", dns.TypeA)) // the view moves on; a's entry is not asked
	for range 20 {
		runtime.GC()
		select {
		case <-collected:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatal("the first snapshot is still reachable once the cache has moved on")
}

// Nor does the view keep the snapshot the store has replaced while no
// query came to move it on: an idle frontend would hold two snapshots'
// worth of tables after a burst, the packed ones and the scattered ones
// packing was to free (at a million records, 29 MB of live heap in the
// scale bench).
func TestCacheViewKeepsNoReplacedSnapshot(t *testing.T) {
	old := addresses(t, "a.default.svc.cluster.local")
	srv, _, cur := movingServer(old)
	w := &worker{s: srv, out: make([]byte, 0, 512)}
	defer runtime.KeepAlive(w)
	w.handle(pack(t, 1, "a.default.svc.cluster.local.", dns.TypeA)) // the view is old's
	packed := &snap.Snapshot{Rev: old.Rev}
	for _, z := range old.Zones {
		packed.Zones = append(packed.Zones, z.Pack())
	}
	collected := make(chan struct{})
	runtime.AddCleanup(old.Zones[0], func(ch chan struct{}) { close(ch) }, collected)
	cur.Store(packed)
	old = nil
	for range 20 {
		runtime.GC()
		select {
		case <-collected:
			if v := srv.cache.Load(); v == nil || v.cache == nil {
				t.Fatal("the cache went with the snapshot")
			}
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatal("the replaced snapshot's zone is still reachable while no query has come since")
}

// A snapshot the store replaces with one of the same revision (its tables
// packed once changes pause) keeps the view on the new one: a query still
// on the old one uses the view as it is, so the view neither churns nor
// holds the old snapshot's memory.
func TestCacheStaysOnTheSnapshotThatReplacedOne(t *testing.T) {
	old := addresses(t, "a.default.svc.cluster.local")
	srv, _, cur := movingServer(old)
	_, g0 := srv.cacheFor(old)
	packed := &snap.Snapshot{Rev: old.Rev, Zones: old.Zones}
	cur.Store(packed)
	_, g1 := srv.cacheFor(packed)
	_, g2 := srv.cacheFor(old) // a query that read the snapshot before the swap
	_, g3 := srv.cacheFor(packed)
	if g1 != g0+1 || g2 != g1 || g3 != g1 {
		t.Fatalf("views %d, %d, %d, %d; want the replacement's view kept for both: %d, %d, %d, %d", g0, g1, g2, g3, g0, g0+1, g0+1, g0+1)
	}
	if v := srv.cache.Load(); !v.snap.Of(packed) {
		t.Fatal("the view holds the replaced snapshot")
	}
}

package snap

import (
	"runtime"
	"testing"
	"unsafe"
)

// scatter loads n endpoint records and applies bursts rolls of the last
// services, each as batches of per events, as a watch delivers a rollout.
func scatter(tb testing.TB, n, bursts, per int) *Zone {
	tb.Helper()
	old, next := endpointKVs(n, 0), endpointKVs(n, 1)
	z := load(tb, old)
	serial := uint32(1)
	for burst := range bursts {
		if burst%2 == 1 {
			old, next = next, old
		}
		var bt *Batch
		events := 0
		for j := max(0, n-10_000); j < n; j++ {
			if bt == nil {
				bt = z.Edit()
			}
			owner, e, err := z.Parse(next[j].Key, next[j].Value)
			if err != nil {
				tb.Fatal(err)
			}
			bt.Put(owner, e)
			owner, id, _ := z.Owner(old[j].Key)
			bt.Delete(owner, id)
			if events += 2; events >= per || j == n-1 {
				serial++
				z, bt, events = bt.Done(serial), nil, 0
			}
		}
	}
	return z
}

func TestPackKeepsEveryNode(t *testing.T) {
	z := scatter(t, 20_000, 1, 128)
	if z.Scattered() < 1 {
		t.Fatalf("the bursts copied %.2f times the tables; the test needs them scattered", z.Scattered())
	}
	nodes := map[string]*Node{}
	z.Names(func(n *Node) { nodes[n.Name] = n })

	p := z.Pack()
	if p.Scattered() != 0 || z.Scattered() < 1 {
		t.Fatalf("scattered %.2f after packing, %.2f before", p.Scattered(), z.Scattered())
	}
	if p.Records != z.Records || p.Serial != z.Serial {
		t.Fatalf("packed: %d records at %d, want %d at %d", p.Records, p.Serial, z.Records, z.Serial)
	}
	count := 0
	p.Names(func(n *Node) {
		count++
		if nodes[n.Name] != n || p.Node(n.Name) != n {
			t.Fatalf("%s: not the same node after packing", n.Name)
		}
	})
	if count != len(nodes) {
		t.Fatalf("%d names after packing, want %d", count, len(nodes))
	}
	// One leaf's tables are one array: each starts where the one before
	// it ends.
	l := p.names[0]
	for j := 1; j < leafSize; j++ {
		prev := l[j-1]
		if end := unsafe.Add(unsafe.Pointer(unsafe.SliceData(prev.slots)), len(prev.slots)*8); end != unsafe.Pointer(unsafe.SliceData(l[j].slots)) {
			t.Fatalf("table %d of a packed leaf is not beside table %d", j, j-1)
		}
	}

	// The packed zone is a snapshot like any other: a batch on it copies
	// what it changes and leaves it as it was.
	name := "10-64-0-1.svc0.ns0.svc.cluster.local"
	before := p.Node(name)
	b := p.Edit()
	owner, id, _ := p.Owner(endpointKVs(2, 0)[1].Key)
	b.Delete(owner, id)
	after := b.Done(p.Serial + 1)
	if before == nil || p.Node(name) != before || after.Node(name) != nil {
		t.Fatalf("%s: %v in the packed zone after the batch (was %v), %v in the batch's", name, p.Node(name), before, after.Node(name))
	}
}

func TestSnapshotPacksScatteredZonesOnly(t *testing.T) {
	quiet := load(t, endpointKVs(1000, 0))
	busy := scatter(t, 1000, 1, 16)
	s := &Snapshot{Rev: 7, Zones: []*Zone{quiet, busy}}
	p, freed := s.Pack(0.25)
	if freed == 0 || p == s || p.Rev != 7 || p.Zones[0] != quiet || p.Zones[1] == busy || p.Zones[1].Scattered() != 0 {
		t.Fatalf("Pack(0.25) freed %d; zones %p %p of %p %p", freed, p.Zones[0], p.Zones[1], quiet, busy)
	}
	// At least busy's tables as they were, at most twice that: the blocks
	// of the packing before, which copies superseded, go too.
	tables := 0
	for _, l := range busy.names {
		for _, t := range l {
			if t != nil {
				tables += len(t.slots) * 9
			}
		}
	}
	if freed < tables || freed > 3*tables {
		t.Errorf("Pack(0.25) reports %d bytes freed; busy's tables hold %d in their slots", freed, tables)
	}
	if s.Zones[1] != busy {
		t.Fatal("Pack changed the snapshot it was given")
	}
	if p2, freed := p.Pack(0.25); freed != 0 || p2 != p {
		t.Fatal("a packed snapshot was packed again")
	}
	if _, freed := s.Pack(busy.Scattered() + 1); freed != 0 {
		t.Fatal("a zone below the share asked for was packed")
	}
}

// BenchmarkPack is the packing of a million-record zone after three
// bursts of 10,000 changed records (bench/scale's), and what it gives
// back: the heap in use that held no object once the bursts' garbage was
// collected, before and after.
//
//	go test -run '^$' -bench Pack -benchtime 10x ./server/snap/
func BenchmarkPack(b *testing.B) {
	z := scatter(b, 1_000_000, 3, 128)
	wasted := func() float64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return float64(m.HeapInuse-m.HeapAlloc) / (1 << 20)
	}
	before := wasted()
	var p *Zone
	for b.Loop() {
		p = z.Pack()
	}
	z = p
	b.ReportMetric(before, "unused-MiB-scattered")
	b.ReportMetric(wasted(), "unused-MiB-packed")
	runtime.KeepAlive(z)
}

package main

import (
	"context"
	"io"
	"log/slog"
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A burst's garbage is collected and given back once allocation has gone
// quiet, and only once: with the slack gone there is nothing to release.
func TestReleaseIdleHeap(t *testing.T) {
	// The GC is held off so that the burst stays in the heap as garbage
	// until dnsd collects it; the runtime's own collector or scavenger
	// would otherwise race the check.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	var burst [][]byte
	for range 4 * releaseMinSlack >> 20 {
		burst = append(burst, make([]byte, 1<<20))
	}
	runtime.KeepAlive(burst)
	burst = nil
	held := func() uint64 {
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/free:bytes"}}
		metrics.Read(s)
		return s[0].Value.Uint64() + s[1].Value.Uint64()
	}
	before := held()
	if before < 4*releaseMinSlack {
		t.Fatalf("the burst left %d MiB in the heap, want at least %d", before>>20, 4*releaseMinSlack>>20)
	}

	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go newHeapReleaser(reg, slog.New(slog.NewTextHandler(io.Discard, nil)), func() uint64 { return 0 }).run(ctx)
	released := func() float64 {
		mfs, err := reg.Gather()
		if err != nil || len(mfs) != 1 || mfs[0].GetName() != "etcdns_dnsd_heap_releases_total" {
			t.Fatalf("gathered %v, %v; want etcdns_dnsd_heap_releases_total alone", mfs, err)
		}
		return mfs[0].Metric[0].Counter.GetValue()
	}
	deadline := time.Now().Add(10 * releaseEvery)
	for released() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no release within %v of a %d MiB burst", 10*releaseEvery, before>>20)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if after := held(); after >= releaseMinSlack {
		t.Errorf("the heap still holds %d MiB after the release (%d before)", after>>20, before>>20)
	}
	time.Sleep(3 * releaseEvery)
	if n := released(); n != 1 {
		t.Errorf("%v releases, want 1: nothing was left to release after the first", n)
	}
}

// Packing leaves garbage the collector's last count holds live, so what
// the store says its packings freed counts as slack: enough of it releases
// once allocation is quiet, once; a small zone's packing does not.
func TestReleaseAfterPacking(t *testing.T) {
	var packed atomic.Uint64
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runtime.GC()
	go newHeapReleaser(reg, slog.New(slog.NewTextHandler(io.Discard, nil)), packed.Load).run(ctx)
	released := func() float64 {
		mfs, err := reg.Gather()
		if err != nil || len(mfs) != 1 {
			t.Fatalf("gathered %v, %v; want etcdns_dnsd_heap_releases_total alone", mfs, err)
		}
		return mfs[0].Metric[0].Counter.GetValue()
	}
	packed.Add(64 << 10) // a small zone's tables
	time.Sleep(5 * releaseEvery / 2)
	if n := released(); n != 0 {
		t.Fatalf("%v releases of a heap with no slack after a small packing, want none", n)
	}
	packed.Add(2 * releaseMinSlack)
	deadline := time.Now().Add(10 * releaseEvery)
	for released() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no release within %v of a packing that freed %d MiB", 10*releaseEvery, 2*releaseMinSlack>>20)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(3 * releaseEvery)
	if n := released(); n != 1 {
		t.Errorf("%v releases after one packing, want 1", n)
	}
}

// A live heap past 70% of the memory limit for a while is logged, once in
// a while: the GC is about to run all the time. One that has just got
// there, as a load's does, is not.
func TestWarnNearTheMemoryLimit(t *testing.T) {
	var logged strings.Builder
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	live := int64(s[0].Value.Uint64())
	for _, c := range []struct {
		limit   int64
		nearFor time.Duration
		warns   bool
	}{
		{math.MaxInt64, 0, false}, // no GOMEMLIMIT
		{live * 2, 0, false},
		{live * 12 / 10, releaseEvery / 2, true},
		{live * 12 / 10, 10 * releaseEvery, false},
	} {
		logged.Reset()
		h := newHeapReleaser(prometheus.NewRegistry(), slog.New(slog.NewTextHandler(&logged, nil)), func() uint64 { return 0 })
		h.limit, h.nearFor = c.limit, c.nearFor
		ctx, cancel := context.WithTimeout(context.Background(), 7*releaseEvery/2)
		h.run(ctx)
		cancel()
		if n := strings.Count(logged.String(), "near the memory limit"); n != map[bool]int{false: 0, true: 1}[c.warns] {
			t.Errorf("live heap %d MiB, limit %d MiB, for %v: %d warnings in three checks, want %v:\n%s", live>>20, c.limit>>20, c.nearFor, n, c.warns, logged.String())
		}
	}
}

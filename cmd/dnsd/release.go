package main

import (
	"context"
	"log/slog"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The heap's slack (garbage not yet collected, and free spans not yet
// given back) is returned to the operating system once allocation has gone
// quiet, when it is at least releaseMinSlack and an eighth of the live
// heap. A load, a relist or a burst of changes leaves up to GOGC's headroom
// behind (half the live heap at dnsd's GOGC): at a million records that is
// more than 100 MiB a node-local frontend would keep for nothing until the
// next change. Queries allocate nothing, so a frontend that is only
// answering counts as quiet; a steady stream of changes never is, and is
// left to the GC. A small zone never has that much slack, so it never pays
// for the forced collection.
//
// The slack is counted against the live heap of the collector's last
// cycle, which is stale once the store has packed its tables (changes
// paused after a burst): the tables packing replaced are garbage that the
// count still holds live. So what the store reports packing freed since
// the last release (store.PackedBytes) counts as slack too. Without it,
// at a million records, the 29 MB a pack after the load frees stayed
// resident: a later cycle (the runtime forces one every two minutes)
// collects it, but leaves the spans to a scavenger that keeps what lies
// under the heap goal.
const (
	releaseEvery    = time.Second
	releaseQuiet    = 1 << 20 // bytes allocated in releaseEvery, at most
	releaseMinSlack = 32 << 20
)

// A memory limit (nine tenths of the container's, or GOMEMLIMIT: see
// internal/heaplimit) too close to the live heap leaves the GC no room: it runs
// all the time. bench/fleet measured a frontend at 100k records, a live
// heap of about 25 MiB, at 22 ms of CPU a second with no limit, 31-38 at
// GOMEMLIMIT=38MiB, and 735-777 at 34MiB, three quarters of its core.
// So dnsd warns, at most every nearLimitEvery, when the live heap has
// stayed past nearLimit of the limit for nearLimitFor: a load or a relist
// holds two snapshots for a few seconds, which the limit is sized for.
const (
	nearLimit      = 0.7
	nearLimitFor   = 30 * time.Second
	nearLimitEvery = 10 * time.Minute
)

// heapReleaser runs debug.FreeOSMemory when the heap's slack is worth it
// (see releaseMinSlack); packed counts the bytes the store's packings have
// freed, in all. It also warns when the live heap nears the memory limit.
type heapReleaser struct {
	released prometheus.Counter
	log      *slog.Logger
	packed   func() uint64
	limit    int64 // the runtime's memory limit; math.MaxInt64: none
	nearFor  time.Duration
	near     time.Time // since when the live heap has been near the limit; zero: it is not
	warned   time.Time
}

func newHeapReleaser(reg prometheus.Registerer, log *slog.Logger, packed func() uint64) *heapReleaser {
	h := &heapReleaser{log: log, packed: packed, limit: debug.SetMemoryLimit(-1), nearFor: nearLimitFor, released: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "etcdns_dnsd_heap_releases_total",
		Help: "Times dnsd collected and returned its heap's slack to the operating system once allocation went quiet (after a load, a relist or a burst of changes).",
	})}
	reg.MustRegister(h.released)
	return h
}

// run checks the heap every releaseEvery until ctx ends.
func (h *heapReleaser) run(ctx context.Context) {
	samples := []metrics.Sample{
		{Name: "/gc/heap/allocs:bytes"},
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
	}
	t := time.NewTicker(releaseEvery)
	defer t.Stop()
	var lastAllocs uint64
	lastPacked := h.packed()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		metrics.Read(samples)
		allocs, live := samples[0].Value.Uint64(), samples[1].Value.Uint64()
		held := samples[2].Value.Uint64() + samples[3].Value.Uint64()
		quiet := allocs-lastAllocs <= releaseQuiet
		lastAllocs = allocs
		h.nearLimit(live)
		if !quiet {
			continue
		}
		packed := h.packed()
		fromPacking := packed - lastPacked
		slack := held - min(held, live) + fromPacking
		if slack < max(releaseMinSlack, live/8) {
			continue
		}
		lastPacked = packed
		began := time.Now()
		debug.FreeOSMemory()
		h.released.Inc()
		h.log.Info("returned the heap's slack to the operating system", "slack_mib", slack>>20, "live_mib", live>>20,
			"of_it_packed_tables_mib", fromPacking>>20, "took", time.Since(began).Round(time.Millisecond))
		metrics.Read(samples[:1])
		lastAllocs = samples[0].Value.Uint64()
	}
}

// nearLimit warns when live, the live heap, has been past nearLimit of
// the memory limit for h.nearFor, unless it did within nearLimitEvery.
func (h *heapReleaser) nearLimit(live uint64) {
	if h.limit == math.MaxInt64 || float64(live) < nearLimit*float64(h.limit) {
		h.near = time.Time{}
		return
	}
	if h.near.IsZero() {
		h.near = time.Now()
	}
	if time.Since(h.near) < h.nearFor || time.Since(h.warned) < nearLimitEvery {
		return
	}
	h.warned = time.Now()
	h.log.Warn("the live heap is near the memory limit, so the GC runs often and costs CPU; raise the limit (GOMEMLIMIT, or the container's memory limit it is set from) to about 1.5 times the live heap",
		"live_mib", live>>20, "limit_mib", h.limit>>20)
}

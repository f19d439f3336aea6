package server

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

// Lookups take no lock while a writer adds and drops entries and the
// table is rebuilt under them: an entry in the index the whole time is
// always found, and a lookup never returns another key's entry. Half the
// keys share five hashes, so probes run through long chains and
// tombstones.
func TestIndexLookupsDuringChurn(t *testing.T) {
	const limit = 64
	entry := func(i int) *cached {
		h := uint64(i) * 0x9e3779b97f4a7c15
		if i%2 == 0 {
			h = uint64(i%5) << 6
		}
		return &cached{key: fmt.Sprintf("k%d", i), hash: h}
	}
	var x index
	var mu sync.Mutex
	pinned := make([]*cached, 16)
	for i := range pinned {
		pinned[i] = entry(i)
		x.put(pinned[i], limit)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	rebuilds := 0
	wg.Go(func() {
		defer stop.Store(true)
		var churn []*cached
		for i := len(pinned); i < 50_000; i++ {
			mu.Lock()
			if len(churn) == limit-len(pinned) {
				j := rand.IntN(len(churn))
				x.drop(churn[j])
				churn[j] = churn[len(churn)-1]
				churn = churn[:len(churn)-1]
			}
			before := x.t.Load()
			e := entry(i)
			x.put(e, limit)
			if x.t.Load() != before {
				rebuilds++
			}
			churn = append(churn, e)
			mu.Unlock()
		}
	})
	for range 2 {
		wg.Go(func() {
			for n := 0; !stop.Load(); n++ {
				p := pinned[n%len(pinned)]
				if got := x.get(p.hash, []byte(p.key)); got != p {
					t.Errorf("%s: got %v", p.key, got)
					return
				}
				c := entry(len(pinned) + rand.IntN(50_000))
				if got := x.get(c.hash, []byte(c.key)); got != nil && got.key != c.key {
					t.Errorf("%s: got %s's entry", c.key, got.key)
					return
				}
			}
		})
	}
	wg.Wait()
	if rebuilds < 10 {
		t.Errorf("%d rebuilds; the test means to run lookups through many", rebuilds)
	}
	n := 0
	x.each(func(e *cached) {
		n++
		if x.get(e.hash, []byte(e.key)) != e {
			t.Errorf("%s is in the table and not found", e.key)
		}
	})
	if n != x.live || n != limit {
		t.Errorf("%d entries in the table, %d counted, want %d", n, x.live, limit)
	}
}

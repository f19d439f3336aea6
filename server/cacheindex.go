package server

import (
	"math/bits"
	"sync/atomic"
)

// index finds a cache shard's entries by key. A lookup takes no lock and
// writes nothing: a hot answer is asked for on every core at once, and a
// read lock's reader count is a write each core makes to one shared cache
// line, which then bounces between them (sync.RWMutex does not scale with
// cores for that reason, golang/go#17973). Only the shard's writers, who
// hold its lock, change the index.
//
// It is open addressing with linear probing over atomic pointers. A slot
// goes from empty to an entry; a removed entry leaves a tombstone, which a
// later entry may take; no slot of a table ever becomes empty again. So a
// probe never stops short of an entry that is in the table for the whole
// lookup. When tombstones and entries fill three quarters of the table,
// the writer builds a new one and publishes it whole, and the old one
// never changes again: a lookup still on it finishes on a frozen copy.
type index struct {
	t          atomic.Pointer[slotTable]
	_          [56]byte // t alone on its cache line: every lookup reads it, and every miss writes what follows
	live, dead int      // entries and tombstones in t; written under the shard's lock
}

type slotTable struct {
	slots []atomic.Pointer[cached]
	mask  uint64
}

// tombstone fills the slot of a removed entry: a probe goes on past it.
var tombstone = new(cached)

// slotOf is where a key's probe starts: the bits of its hash above those
// that chose the shard.
func slotOf(h uint64) uint64 { return h >> bits.Len(cacheShards-1) }

// get returns the entry for key, whose hash is h, or nil.
func (x *index) get(h uint64, key []byte) *cached {
	t := x.t.Load()
	if t == nil {
		return nil
	}
	i := slotOf(h)
	for range len(t.slots) {
		i &= t.mask
		e := t.slots[i].Load()
		if e == nil {
			return nil
		}
		if e.hash == h && e != tombstone && e.key == string(key) {
			return e
		}
		i++
	}
	return nil
}

// put adds e, whose key is not in x, to a table of room for at least
// limit entries at half load. The caller holds the shard's lock.
func (x *index) put(e *cached, limit int) {
	t := x.t.Load()
	if t == nil || 4*(x.live+x.dead+1) > 3*len(t.slots) {
		t = x.rebuild(limit)
	}
	i := slotOf(e.hash)
	for {
		i &= t.mask
		switch t.slots[i].Load() {
		case nil:
			t.slots[i].Store(e)
			x.live++
			return
		case tombstone:
			// Safe to reuse: the key is in no later slot either.
			t.slots[i].Store(e)
			x.live++
			x.dead--
			return
		}
		i++
	}
}

// drop replaces e by a tombstone. The caller holds the shard's lock.
func (x *index) drop(e *cached) {
	t := x.t.Load()
	i := slotOf(e.hash)
	for range len(t.slots) {
		i &= t.mask
		if t.slots[i].Load() == e {
			t.slots[i].Store(tombstone)
			x.live--
			x.dead++
			return
		}
		i++
	}
}

// rebuild publishes a table holding x's entries and no tombstones, with
// twice the slots of the larger of limit and the entries, so that it is
// at most half full; readers of the old table finish on it.
func (x *index) rebuild(limit int) *slotTable {
	n := 8
	for n < 2*max(limit, x.live+1) {
		n *= 2
	}
	nt := &slotTable{slots: make([]atomic.Pointer[cached], n), mask: uint64(n - 1)}
	if old := x.t.Load(); old != nil {
		for i := range old.slots {
			if e := old.slots[i].Load(); e != nil && e != tombstone {
				j := slotOf(e.hash)
				for ; nt.slots[j&nt.mask].Load() != nil; j++ {
				}
				nt.slots[j&nt.mask].Store(e)
			}
		}
	}
	x.dead = 0
	x.t.Store(nt)
	return nt
}

// each calls f with every entry. The caller holds the shard's lock.
func (x *index) each(f func(*cached)) {
	if t := x.t.Load(); t != nil {
		for i := range t.slots {
			if e := t.slots[i].Load(); e != nil && e != tombstone {
				f(e)
			}
		}
	}
}

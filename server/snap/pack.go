package snap

import "slices"

// Packing undoes what copy-on-write does to the heap. A batch copies each
// shard table it writes to, so a burst of changes leaves the live tables
// scattered over spans that mostly hold copies already thrown away; the Go
// heap does not move objects, so those spans stay in use. Packing copies
// every table of a zone into a few large allocations and lets all the
// scattered ones go. It is O(tables), a few milliseconds at a million
// names, so it is worth it only once batches have copied a good share of
// them.

// Scattered is how many times over batches have copied the zone's shard
// tables since they were last packed: 0 right after a load, 1 when there
// were as many copies as tables.
func (z *Zone) Scattered() float64 {
	return float64(z.copies) / float64(len(z.names)*leafSize)
}

// Pack returns a zone that holds the same nodes as z, its tables packed.
// z is not touched: a query may be reading it.
func (z *Zone) Pack() *Zone {
	p := *z
	p.names = make([]*leaf, len(z.names))
	for i, l := range z.names {
		p.names[i] = packLeaf(l)
	}
	p.copies = 0
	return &p
}

// packLeaf returns a leaf of copies of l's tables, packed.
func packLeaf(l *leaf) *leaf {
	p := packedLeaf(func(j int) int {
		if l[j] == nil {
			return 0
		}
		return len(l[j].slots)
	})
	for j, t := range l {
		if t != nil {
			copy(p[j].slots, t.slots)
			copy(p[j].tags, t.tags)
			p[j].used = t.used
		}
	}
	return p
}

// packedLeaf returns a leaf of empty tables of size(j) slots, whose slots,
// tags and headers sit in one allocation each; a size of 0 leaves that
// shard without a table.
func packedLeaf(size func(j int) int) *leaf {
	total := 0
	for j := range leafSize {
		total += size(j)
	}
	slots, tags := make([]*Node, total), make([]uint8, total)
	headers := make([]table, leafSize)
	var l leaf
	for j := range l {
		k := size(j)
		if k == 0 {
			continue
		}
		l[j] = &headers[j]
		l[j].slots, l[j].tags = slots[:k:k], tags[:k:k]
		slots, tags = slots[k:], tags[k:]
	}
	return &l
}

// Pack returns s with every zone that is at least min Scattered packed,
// and about how many bytes of s's tables that leaves to the collector once
// s is gone; 0 and s itself when no zone was packed. The zones, their
// nodes and s's revision stay the same, so an answer built from s stands
// in the result.
func (s *Snapshot) Pack(min float64) (*Snapshot, int) {
	var p *Snapshot
	freed := 0
	for i, z := range s.Zones {
		if z.copies == 0 || z.Scattered() < min {
			continue
		}
		if p == nil {
			p = &Snapshot{Rev: s.Rev, Zones: slices.Clone(s.Zones)}
		}
		p.Zones[i] = z.Pack()
		freed += z.packedGarbage()
	}
	if p == nil {
		return s, 0
	}
	return p, freed
}

// packedGarbage estimates what packing z frees: its tables, and the
// blocks of the packing before, which each table's copy left in place
// while the leaf's other tables kept them.
func (z *Zone) packedGarbage() int {
	bytes := 0
	for _, l := range z.names {
		for _, t := range l {
			if t != nil {
				bytes += len(t.slots)*(8+1) + 56 // a slot: a pointer and a tag; the header
			}
		}
	}
	return int(float64(bytes) * (1 + min(z.Scattered(), 1)))
}

package snap

import (
	"hash/maphash"
	"slices"
)

// table is one shard of a zone's names: an open-addressing hash table of
// nodes, probed linearly from the slot the name's hash picks. A Go map of
// name to node took 58 bytes a name at a million names; this takes 9 a
// slot at most three quarters full, and a batch copies it as one slice.
// The hash is the one that picked the shard (Zone.shardOf), so a lookup
// hashes the name once; the shard takes its low bits, the slot its high
// ones. Each slot also has a tag, a few more bits of the hash, so a probe
// reads a node only when its tag matches: at a million names a node is a
// cache miss, and a load probes a slot per name for nothing.
type table struct {
	slots []*Node // a power of two long, never full
	tags  []uint8 // tagOf of the node in the same slot; 0: empty
	used  int
}

func hashOf(name string) uint64 { return maphash.String(seed, name) }

func (t *table) start(h uint64) int { return int(h>>32) & (len(t.slots) - 1) }

// tagOf is never 0 and uses bits that neither the shard (at most 16) nor
// the slot (from 32 up) uses.
func tagOf(h uint64) uint8 { return uint8(h>>16) | 0x80 }

// get returns the node of name, whose hash is h, or nil.
func (t *table) get(name string, h uint64) *Node {
	if t == nil {
		return nil
	}
	tag := tagOf(h)
	for i := t.start(h); ; i = (i + 1) & (len(t.slots) - 1) {
		switch t.tags[i] {
		case 0:
			return nil
		case tag:
			if n := t.slots[i]; n.Name == name {
				return n
			}
		}
	}
}

// newTable returns an empty table for about n names.
func newTable(n int) *table {
	size := tableSize(n)
	return &table{slots: make([]*Node, size), tags: make([]uint8, size)}
}

// tableSize is the slots of a table for about n names.
func tableSize(n int) int {
	size := 8
	for size*3 < n*4 {
		size *= 2
	}
	return size
}

func (t *table) clone() *table {
	if t == nil {
		return newTable(0)
	}
	return &table{slots: slices.Clone(t.slots), tags: slices.Clone(t.tags), used: t.used}
}

// set puts n in the slot of its name, replacing the node there.
func (t *table) set(n *Node, h uint64) {
	if (t.used+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	tag := tagOf(h)
	i := t.start(h)
	for ; t.tags[i] != 0; i = (i + 1) & (len(t.slots) - 1) {
		if t.tags[i] == tag && t.slots[i].Name == n.Name {
			t.slots[i] = n
			return
		}
	}
	t.slots[i], t.tags[i] = n, tag
	t.used++
}

func (t *table) grow() {
	old, oldTags := t.slots, t.tags
	t.slots, t.tags = make([]*Node, 2*len(old)), make([]uint8, 2*len(old))
	for j, n := range old {
		if oldTags[j] != 0 {
			i := t.start(hashOf(n.Name))
			for ; t.tags[i] != 0; i = (i + 1) & (len(t.slots) - 1) {
			}
			t.slots[i], t.tags[i] = n, oldTags[j]
		}
	}
}

// delete removes the node of name, shifting back the nodes after it that
// would no longer be found past the emptied slot.
func (t *table) delete(name string, h uint64) {
	mask := len(t.slots) - 1
	tag := tagOf(h)
	i := t.start(h)
	for ; t.tags[i] != 0 && (t.tags[i] != tag || t.slots[i].Name != name); i = (i + 1) & mask {
	}
	if t.tags[i] == 0 {
		return
	}
	t.used--
	for j := (i + 1) & mask; t.tags[j] != 0; j = (j + 1) & mask {
		// The node at j may move to the hole at i when its home slot is
		// not in (i, j], cyclically.
		if home := t.start(hashOf(t.slots[j].Name)); (j-home)&mask >= (j-i)&mask {
			t.slots[i], t.tags[i] = t.slots[j], t.tags[j]
			i = j
		}
	}
	t.slots[i], t.tags[i] = nil, 0
}

// each calls f for every node.
func (t *table) each(f func(*Node)) {
	if t == nil {
		return
	}
	for _, n := range t.slots {
		if n != nil {
			f(n)
		}
	}
}

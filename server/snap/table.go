package snap

import (
	"hash/maphash"
	"slices"
)

// table is one shard of a zone's names: an open-addressing hash table of
// nodes, probed linearly from the slot the name's hash picks. A Go map of
// name to node took 58 bytes a name at a million names; this takes 8 a
// slot at most three quarters full, and a batch copies it as one slice.
// The hash is the one that picked the shard (Zone.shardOf), so a lookup
// hashes the name once; the shard takes its low bits, the slot its high
// ones.
type table struct {
	slots []*Node // a power of two long, never full
	used  int
}

func hashOf(name string) uint64 { return maphash.String(seed, name) }

func (t *table) start(h uint64) int { return int(h>>32) & (len(t.slots) - 1) }

// get returns the node of name, whose hash is h, or nil.
func (t *table) get(name string, h uint64) *Node {
	if t == nil {
		return nil
	}
	for i := t.start(h); ; i = (i + 1) & (len(t.slots) - 1) {
		n := t.slots[i]
		if n == nil || n.Name == name {
			return n
		}
	}
}

// newTable returns an empty table for about n names.
func newTable(n int) *table {
	size := 8
	for size*3 < n*4 {
		size *= 2
	}
	return &table{slots: make([]*Node, size)}
}

func (t *table) clone() *table {
	if t == nil {
		return newTable(0)
	}
	return &table{slots: slices.Clone(t.slots), used: t.used}
}

// set puts n in the slot of its name, replacing the node there.
func (t *table) set(n *Node, h uint64) {
	if (t.used+1)*4 > len(t.slots)*3 {
		t.grow()
	}
	i := t.start(h)
	for ; t.slots[i] != nil; i = (i + 1) & (len(t.slots) - 1) {
		if t.slots[i].Name == n.Name {
			t.slots[i] = n
			return
		}
	}
	t.slots[i] = n
	t.used++
}

func (t *table) grow() {
	old := t.slots
	t.slots = make([]*Node, 2*len(old))
	for _, n := range old {
		if n != nil {
			i := t.start(hashOf(n.Name))
			for ; t.slots[i] != nil; i = (i + 1) & (len(t.slots) - 1) {
			}
			t.slots[i] = n
		}
	}
}

// delete removes the node of name, shifting back the nodes after it that
// would no longer be found past the emptied slot.
func (t *table) delete(name string, h uint64) {
	mask := len(t.slots) - 1
	i := t.start(h)
	for ; t.slots[i] != nil && t.slots[i].Name != name; i = (i + 1) & mask {
	}
	if t.slots[i] == nil {
		return
	}
	t.used--
	for j := (i + 1) & mask; t.slots[j] != nil; j = (j + 1) & mask {
		// The node at j may move to the hole at i when its home slot is
		// not in (i, j], cyclically.
		if home := t.start(hashOf(t.slots[j].Name)); (j-home)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = nil
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

package snap

import (
	"math"
	"slices"

	"github.com/etcdns/etcdns/server/skydns"
)

// Batch derives a new zone from an old one. The old zone is never touched:
// the first write to a shard copies that shard's table (about shardSize
// names), and the first write to a node copies the node, so a batch costs
// O(changed names), not O(zone).
type Batch struct {
	z  *Zone
	id uint32 // stamped on the nodes this batch made, which it may change in place
	// copied holds a word per leaf of z.names, a bit per shard that is
	// this batch's own; leaves, a bit per leaf that is. Nil: not even the
	// directory is.
	copied, leaves []uint64
	touched        []*Node // nodes made in this batch, to finish in Done

	podsCopied [podShards / 64]uint64 // bit per pod index shard this batch owns; none: not even the array

	stubsCopied bool            // the stub table is this batch's own
	stubCopied  map[string]bool // so are these domains' entries

	skyBatch *skydns.Batch // a SkyDNS zone's changes (skydns.go)
}

// Edit starts a batch on z.
func (z *Zone) Edit() *Batch {
	nz := *z
	z.line.batches++
	return &Batch{z: &nz, id: z.line.batches}
}

// Reserve sizes an empty zone for about n names, so a load does not grow
// its maps, or split its shards, step by step. It does nothing once the
// zone holds names.
func (b *Batch) Reserve(n int) {
	if b.z.Records > 0 || len(b.touched) > 0 || n <= 0 {
		return
	}
	shards := shardsFor(n)
	b.z.names = newLeaves(shards, n/shards+n/shards/8+1)
	b.z.copies = 0
	b.own()
	// Grown by append, the list of a million new nodes was 40 MiB of
	// garbage: each large growth copies it and adds only a quarter. The
	// names above the records' owners are a few more.
	b.touched = make([]*Node, 0, n+n/16)
}

// own marks every leaf and shard of z.names as the batch's own.
func (b *Batch) own() {
	b.copied = make([]uint64, len(b.z.names))
	b.leaves = make([]uint64, (len(b.z.names)+63)/64)
	for i := range b.copied {
		b.copied[i] = ^uint64(0)
		b.leaves[i/64] |= 1 << (i % 64)
	}
}

// shard returns the batch's own table of the shard of a name whose hash is
// h.
func (b *Batch) shard(h uint64) *table {
	if b.copied == nil {
		b.z.names = slices.Clone(b.z.names)
		b.copied = make([]uint64, len(b.z.names))
		b.leaves = make([]uint64, (len(b.z.names)+63)/64)
	}
	i := b.z.shardOf(h)
	l, j := i/leafSize, i%leafSize
	if b.leaves[l/64]&(1<<(l%64)) == 0 {
		c := *b.z.names[l]
		b.z.names[l] = &c
		b.leaves[l/64] |= 1 << (l % 64)
	}
	t := &b.z.names[l][j]
	if b.copied[l]&(1<<j) == 0 {
		*t = (*t).clone()
		b.copied[l] |= 1 << j
		b.z.copies++
	}
	return *t
}

// mutable returns the batch's own copy of name's node, making the node
// (and, through link, its parents) if it does not exist.
func (b *Batch) mutable(name string) *Node {
	h := hashOf(name)
	return b.mutableAt(name, h, b.z.nodeAt(name, h))
}

// mutableAt is mutable of a name whose hash is h and whose node is n (nil:
// none), as found before the shard was copied: a copy holds the same nodes.
func (b *Batch) mutableAt(name string, h uint64, n *Node) *Node {
	if n != nil && n.batch == b.id {
		return n
	}
	t := b.shard(h)
	if n != nil {
		// The name it has may be a suffix of a longer name's string (a
		// parent made by link), which this one would hold twice.
		name = n.Name
	}
	c := &Node{Name: name, batch: b.id}
	if n != nil {
		c.kids = n.kids
		if sd := n.side(); sd != nil && sd.more != nil {
			c.one[0].under = n.one[0].under
			c.setEntries(slices.Clone(sd.more)) // a side of its own: n's is a published node's
		} else {
			c.one = n.one
		}
	}
	t.set(c, h)
	b.touched = append(b.touched, c)
	if n == nil {
		b.link(name, 1)
		if parent, ok := b.z.tcpParent(name); ok {
			// The names below it that its parent counted are its own now.
			p := b.mutable(parent)
			c.kids, p.one[0].under = int32(p.one[0].under), 0
		}
	}
	return c
}

// countedLabel is the label whose empty non-terminals have no node while
// their parent can count the names below them: a service's _tcp, above
// its SRV records (_http._tcp.NAME), was a quarter of the nodes of a
// frontend of services and a seventh of its live heap
// (BenchmarkLoadFleet). Its parent counts them in its one entry's under;
// the _tcp name gets a node, which takes the count over, when it holds a
// record itself or when the count would pass what under holds.
const countedLabel = "_tcp"

// link counts a name that comes or goes in its parent, which exists
// exactly while it has entries or children: so every empty non-terminal
// is kept (as a node, or in its parent's count) and none outlives the
// last name below it. Most changes stop at the parent; only the first or
// last name of a subtree walks further.
func (b *Batch) link(name string, delta int32) {
	p, ok := b.z.parent(name)
	if !ok {
		return
	}
	if gp, ok := b.counts(p); ok {
		n := b.mutable(gp)
		if delta > 0 {
			n.Name = gp // as below
		}
		if u := int32(n.one[0].under) + delta; u <= math.MaxUint8 {
			n.one[0].under = uint8(u)
			if n.empty() {
				b.drop(n)
			}
			return
		}
		// Full: p gets a node (mutableAt), which counts from here on.
	}
	n := b.mutable(p)
	if delta > 0 {
		// p is a part of the child's string, which the child keeps alive.
		// A parent loaded before it (a service's A, before its
		// _http._tcp SRV) has a copy of its own: the copy is garbage now
		// unless a target holds it too. A child that goes before its
		// parent leaves it its string, a few labels longer than a copy.
		n.Name = p
	}
	n.kids += delta
	if n.empty() {
		b.drop(n)
	}
}

// counts returns the parent of p when that parent counts the names below
// p: p is a _tcp name, not the apex, with no node.
func (b *Batch) counts(p string) (string, bool) {
	gp, ok := b.z.tcpParent(p)
	if !ok || b.z.nodeAt(p, hashOf(p)) != nil {
		return "", false
	}
	return gp, true
}

func (b *Batch) drop(n *Node) {
	h := hashOf(n.Name)
	b.shard(h).delete(n.Name, h)
	b.link(n.Name, -1)
}

// Node returns the node of a canonical name as the batch has it so far;
// nil if none.
func (b *Batch) Node(name string) *Node { return b.z.Node(name) }

// NameHeld is Zone.NameHeld of the zone as the batch has it so far.
func (b *Batch) NameHeld(name string) string { return b.z.NameHeld(name) }

// Put stores an entry of owner, as Parse made it, replacing the one with
// the same ID. An entry the name already holds as it is changes nothing:
// no node or shard is copied for it, and a batch of nothing else leaves
// its zone as it was (Changed). Writers that put every record again (a
// kube2sky resync, a full reconcile) then cost a frontend a lookup a key.
func (b *Batch) Put(owner string, e Entry) {
	if e.typ == 0 {
		// No value (one dnsd does not hold): whatever the key held goes,
		// as a load of the key now would not find it.
		b.Delete(owner, e.ID())
		return
	}
	h := hashOf(owner)
	n := b.z.nodeAt(owner, h)
	if n != nil && n.batch != b.id && n.holds(&e) {
		return
	}
	n = b.mutableAt(owner, h, n)
	es := n.Entries()
	if len(es) == 0 {
		n.setOne(e)
		b.z.Records++
		return
	}
	i, found := slices.BinarySearchFunc(es, e.ID(), byID)
	if found {
		e.under = es[i].under // es may be n.one[:]
		es[i] = e
		return
	}
	n.setEntries(slices.Insert(es, i, e))
	b.z.Records++
}

// Delete removes the entry with id of owner, if held.
func (b *Batch) Delete(owner, id string) {
	h := hashOf(owner)
	n := b.z.nodeAt(owner, h)
	if _, found := slices.BinarySearchFunc(n.Entries(), id, byID); !found {
		return
	}
	n = b.mutableAt(owner, h, n)
	es := n.Entries()
	if len(es) == 1 {
		n.setOne(Entry{}) // not slices.Delete, which clears the count in one
	} else {
		i, _ := slices.BinarySearchFunc(es, id, byID)
		n.setEntries(slices.Delete(es, i, i+1))
	}
	b.z.Records--
	if n.empty() {
		b.drop(n)
	}
}

func byID(e Entry, id string) int { return e.compareID(id) }

// Done finishes the batch and returns the new zone. A caller applying
// changes keeps the zone it began with instead when the batch changed
// nothing (Changed): a load's serial is its revision even if it is empty.
func (b *Batch) Done(serial uint32) *Zone {
	suffix := ".pod." + b.z.Name
	for _, n := range b.touched {
		if sd := n.side(); sd != nil && cap(sd.more) > len(sd.more)+len(sd.more)/4 {
			sd.more = slices.Clip(slices.Clone(sd.more)) // what appends left spare stays with the snapshot
		}
		if !b.z.Reverse {
			b.indexPod(n.Name, suffix)
		}
	}
	if b.copied != nil {
		// Grown with the zone; and shrunk where a load reserved for more
		// than it held (values this dnsd does not hold: other clusters'
		// own, at a frontend that knows its cluster), or a zone lost most
		// of its names. The factor keeps a zone near a boundary from
		// regrouping back and forth.
		want := shardsFor(b.z.Records)
		if have := len(b.z.names) * leafSize; have < want || have >= 4*want {
			b.split()
		}
	}
	b.doneSkyDNS()
	b.z.Serial = serial
	z := b.z
	b.z, b.touched = nil, nil // a batch is used once
	return z
}

// Changed reports whether the batch has changed anything in its zone so
// far: its names (a shard of them copied), its stubs, or its SkyDNS tree.
func (b *Batch) Changed() bool {
	return b.copied != nil || b.stubsCopied || b.skyBatch != nil && b.skyBatch.Changed()
}

// split regroups a zone that has outgrown its shards, or shrunk far
// inside them, into as many as its size asks for. The maps are new, so
// no older snapshot shares them; it costs O(zone), once each time the
// zone doubles (or quarters).
func (b *Batch) split() {
	old := b.z.names
	shards := shardsFor(b.z.Records)
	b.z.names = newLeaves(shards, b.z.Records/shards+1)
	b.z.copies = 0
	for _, l := range old {
		for _, t := range l {
			t.each(func(n *Node) {
				h := hashOf(n.Name)
				i := b.z.shardOf(h)
				b.z.names[i/leafSize][i%leafSize].set(n, h)
			})
		}
	}
	b.own()
}

package plan

import (
	"hash/maphash"
	"slices"
	"sort"
	"strings"
	"unsafe"

	"github.com/etcdns/etcdns/keys"
)

// Index is what this cluster owns in etcd, by source (the unit), plus who
// holds every other key seen in the same ranges, so that Diff does not try
// to create a key someone else already holds. It is not safe for concurrent
// use; the publisher guards it.
//
// A large cluster owns a million keys, and the index lives as long as the
// publisher, so it is laid out for the heap and the GC rather than for the
// simplest code: a unit's keys (less the prefix they share with its first
// key) lie back to back in one byte slice with its entries beside them in
// another, and the key -> unit lookup is an open-addressing table of
// positions (table). None of these holds a pointer, so
// a GC cycle does not trace a million strings and map entries (it did, and
// that tracing was most of the change-to-commit tail at a million records),
// and a key costs about 70 bytes instead of its own bytes plus about 220
// (bench/publisher/README.md). A position is trusted only after the key
// bytes it points at are compared with the key, so two keys with one hash
// cost a longer probe, never a wrong answer.
type Index struct {
	cluster string
	units   []unit            // by unit id
	ids     map[string]int32  // source -> unit id
	free    []int32           // ids of emptied units, for reuse
	table   table             // an owned key's hash -> where it is
	spill   map[string]loc    // owned keys whose position does not fit a table entry
	buf     []byte            // for hashAt
	n       int               // keys owned
	foreign map[string]string // key -> "cluster source", for keys we do not own
	// reads counts the re-reads in flight (BeginRead); while there are
	// any, gone holds when each key was last found deleted, since a
	// deleted key has no entry to say so (Refresh). Nil otherwise.
	reads int
	gone  map[string]int64
}

// unit is the keys one source owns. A removed key leaves a hole (n 0: no
// key is empty) until the unit is compacted.
//
// A unit's keys mostly share a long prefix (a service's records all lie
// under /skydns/local/cluster/svc/<ns>/<name>/), so a key is stored as the
// bytes that follow its common prefix with the unit's first key, base: at
// a million keys that prefix was half of the index's key bytes.
type unit struct {
	source string
	base   []byte
	keys   []byte
	slots  []slot
	live   int
}

// slot is one key: its suffix at keys[off:], and in n the suffix's length
// (low 24 bits: etcd refuses requests long before 16 MiB) and the length
// of the prefix it shares with base (high 8 bits, at most 255), so that a
// slot stays 32 bytes.
type slot struct {
	off, n uint32
	e      Entry
}

const suffixBits = 24

func (s slot) lens() (cp, n uint32) { return s.n >> suffixBits, s.n & (1<<suffixBits - 1) }

// keyIs reports whether s holds key, without making a string of it.
func (u *unit) keyIs(s slot, key string) bool {
	cp, n := s.lens()
	return uint32(len(key)) == cp+n && string(u.base[:cp]) == key[:cp] && string(u.keys[s.off:s.off+n]) == key[cp:]
}

// held is the first slot from i on that holds a key; len(u.slots): none.
func (u *unit) held(i int) int {
	for i < len(u.slots) && u.slots[i].n == 0 {
		i++
	}
	return i
}

// key is the key s holds.
func (u *unit) key(s slot) string {
	cp, n := s.lens()
	var b strings.Builder
	b.Grow(int(cp + n))
	b.Write(u.base[:cp])
	b.Write(u.keys[s.off : s.off+n])
	return b.String()
}

// add stores key and returns its slot, not yet in u.slots.
func (u *unit) add(key string, e Entry) slot {
	if u.base == nil {
		u.base = []byte(key)
	}
	cp := 0
	for cp < len(key) && cp < len(u.base) && cp < 255 && key[cp] == u.base[cp] {
		cp++
	}
	s := slot{off: uint32(len(u.keys)), n: uint32(cp)<<suffixBits | uint32(len(key)-cp), e: e}
	u.keys = append(u.keys, key[cp:]...)
	return s
}

// loc is a key's position: unit id and slot.
type loc struct{ unit, slot uint32 }

var keySeed = maphash.MakeSeed()

// keyHash is a variable so that a test can make every key collide.
var keyHash = func(k string) uint64 { return maphash.String(keySeed, k) }

// LoadStats counts what Load met besides our own records.
type LoadStats struct {
	Owned     int
	Foreign   int // valid values of another cluster, or with no cluster
	Malformed int // values that are not records; never touched
}

// KV is one key and value as read from etcd.
type KV struct {
	Key    string
	Value  []byte
	ModRev int64
}

// NewIndex returns an empty index for cluster.
func NewIndex(cluster string) *Index {
	return &Index{
		cluster: cluster,
		ids:     map[string]int32{},
		spill:   map[string]loc{},
		foreign: map[string]string{},
	}
}

// Load builds the index from one consistent read of the ranges this cluster
// writes. A record is ours iff its value names our cluster and a source;
// everything else is remembered only as held by someone else.
func Load(cluster string, kvs []KV) (*Index, LoadStats) {
	l := NewLoader(cluster)
	l.Add(kvs)
	return l.Done()
}

// Loader builds an index a page of a read at a time (Load in pieces), so
// that a million values need not be held at once.
type Loader struct {
	x  *Index
	st LoadStats
}

// NewLoader starts an index for cluster.
func NewLoader(cluster string) *Loader { return &Loader{x: NewIndex(cluster)} }

// Add indexes kvs; it keeps no reference to their values.
func (l *Loader) Add(kvs []KV) {
	x := l.x
	for _, kv := range kvs {
		// A view: the index keeps only the source, once per unit (set
		// clones it), not a copy of it per record.
		v, err := keys.DecodeView(kv.Value)
		switch {
		case err != nil:
			l.st.Malformed++
			x.foreign[kv.Key] = "malformed"
		case v.Cluster != x.cluster || v.Source == "":
			l.st.Foreign++
			x.foreign[kv.Key] = v.Cluster + " " + v.Source // a new string, not a view
		default:
			l.st.Owned++
			// Not looked up: one read has each key once, and Done
			// places all of them in a table of the right size at
			// once, where placing them one by one was a third of a
			// restart's index building, in cache misses and regrowth.
			id := x.unitID(v.Source)
			u := &x.units[id]
			u.slots = append(u.slots, u.add(kv.Key, Entry{Sum: SumOf(kv.Value), ModRev: kv.ModRev}))
			u.live++
			x.n++
		}
	}
}

// Done returns the index and what was met besides our own records.
func (l *Loader) Done() (*Index, LoadStats) {
	x := l.x
	// The slices grew by appending; trim their spare capacity, which is a
	// third of them on average and stays for the index's life.
	for i := range x.units {
		u := &x.units[i]
		u.keys, u.slots = slices.Clip(slices.Clone(u.keys)), slices.Clip(slices.Clone(u.slots))
	}
	x.table.reserve(x.n)
	for id := range x.units {
		u := &x.units[id]
		for i, s := range u.slots {
			if s.n == 0 {
				continue
			}
			at := loc{uint32(id), uint32(i)}
			h := x.hashAt(at)
			key := unsafe.String(unsafe.SliceData(x.buf), len(x.buf))
			if _, dup := x.findHashed(key, h); dup {
				// Read twice, by ranges that overlap: the same record.
				u.slots[i].n = 0
				u.live--
				x.n--
				l.st.Owned--
				continue
			}
			if at.unit > posMask || at.slot > posMask {
				x.spill[strings.Clone(key)] = at
				continue
			}
			x.table.insert(h, entry(h, at))
		}
	}
	return x, l.st
}

// find returns where key is, if we own it.
func (x *Index) find(key string) (loc, bool) { return x.findHashed(key, keyHash(key)) }

// findHashed is find of a key whose hash h the caller has.
func (x *Index) findHashed(key string, h uint64) (loc, bool) {
	if i, ok := x.lookup(key, h); ok {
		return x.table.at(i), true
	}
	if len(x.spill) > 0 {
		l, ok := x.spill[key]
		return l, ok
	}
	return loc{}, false
}

// lookup returns the table position of key, if it is there.
func (x *Index) lookup(key string, h uint64) (int, bool) {
	t := &x.table
	if len(t.e) == 0 {
		return 0, false
	}
	mask := len(t.e) - 1
	tag := tagOf(h)
	for i := int(h) & mask; ; i = (i + 1) & mask {
		switch e := t.e[i]; {
		case e == 0:
			return 0, false
		case e>>56 == tag && x.keyIs(locOf(e), key):
			return i, true
		}
	}
}

// keyIs reports whether the key at l is key, without making a string of
// it (a function returning the key as a string allocated it, once per
// lookup).
func (x *Index) keyIs(l loc, key string) bool {
	u := &x.units[l.unit]
	return u.keyIs(u.slots[l.slot], key)
}

func (x *Index) unitID(source string) int32 {
	if id, ok := x.ids[source]; ok {
		return id
	}
	source = strings.Clone(source) // may be a view of an etcd response
	var id int32
	if n := len(x.free); n > 0 {
		id, x.free = x.free[n-1], x.free[:n-1]
		x.units[id] = unit{source: source}
	} else {
		id = int32(len(x.units))
		x.units = append(x.units, unit{source: source})
	}
	x.ids[source] = id
	return id
}

func (x *Index) set(source, key string, e Entry) {
	delete(x.foreign, key)
	h := keyHash(key)
	if l, ok := x.findHashed(key, h); ok {
		if x.units[l.unit].source == source {
			x.units[l.unit].slots[l.slot].e = e
			return
		}
		x.remove(key) // another source's key changes hands
	}
	// Before the key is in a unit: rehash indexes the units' keys.
	if x.table.full() {
		x.rehash()
	}
	id := x.unitID(source)
	u := &x.units[id]
	l := loc{uint32(id), uint32(len(u.slots))}
	u.slots = append(u.slots, u.add(key, e))
	u.live++
	x.n++
	if l.unit > posMask || l.slot > posMask {
		x.spill[key] = l
		return
	}
	x.table.insert(h, entry(h, l))
}

// rehash rebuilds the table, sized for twice the keys it holds, from the
// units' keys: the table keeps no hashes.
func (x *Index) rehash() {
	var t table
	t.reserve(x.table.live + 1)
	for id := range x.units {
		u := &x.units[id]
		for i, s := range u.slots {
			l := loc{uint32(id), uint32(i)}
			if s.n == 0 || l.unit > posMask || l.slot > posMask {
				continue // a hole, or in spill
			}
			h := x.hashAt(l)
			t.insert(h, entry(h, l))
		}
	}
	x.table = t
}

// hashAt is the hash of the key at l, put together in a buffer the index
// reuses.
func (x *Index) hashAt(l loc) uint64 {
	u := &x.units[l.unit]
	s := u.slots[l.slot]
	cp, n := s.lens()
	x.buf = append(append(x.buf[:0], u.base[:cp]...), u.keys[s.off:s.off+n]...)
	// The key is hashed, not kept: no copy of buf's bytes needed.
	return keyHash(unsafe.String(unsafe.SliceData(x.buf), len(x.buf)))
}

// table is an open-addressing (linear probing) hash table of owned keys'
// positions: 8 bytes an entry and no pointer, where a Go map[uint64]loc
// took 34 MB for a million keys (bench/publisher/README.md). An entry
// holds the unit id and slot (28 bits each) and 8 bits of the key's hash,
// so that a probe compares the key's bytes only when the tag matches; 0 is
// an empty entry. Positions past 28 bits go to Index.spill. A removal
// shifts the entries after it back instead of leaving a tombstone, so
// that a publisher changing records for months never has to rebuild the
// table, which stops every worker for the time it takes.
type table struct {
	e    []uint64
	live int
}

const posMask = 1<<28 - 1

// tagOf is 8 bits of h other than those that pick the first probe, with
// the top bit set so that no entry is 0.
func tagOf(h uint64) uint64 { return h>>57 | 0x80 }

func entry(h uint64, l loc) uint64 {
	return tagOf(h)<<56 | uint64(l.unit)<<28 | uint64(l.slot)
}

func (t *table) at(i int) loc { return locOf(t.e[i]) }

func locOf(e uint64) loc { return loc{uint32(e >> 28 & posMask), uint32(e & posMask)} }

// reserve sizes an empty table for n keys at most half full.
func (t *table) reserve(n int) {
	size := 8
	for size < 2*n {
		size *= 2
	}
	t.e, t.live = make([]uint64, size), 0
}

// full reports whether one more entry would fill the table past three
// quarters: probes would grow long.
func (t *table) full() bool { return 4*(t.live+1) > 3*len(t.e) }

// insert adds e, known not to be in t, at its first free position.
func (t *table) insert(h uint64, e uint64) {
	mask := len(t.e) - 1
	i := int(h) & mask
	for t.e[i] != 0 {
		i = (i + 1) & mask
	}
	t.e[i] = e
	t.live++
}

// drop removes the entry at i, moving each entry after it that could not
// be reached past an empty one back into the gap; home is an entry's first
// probe.
func (t *table) drop(i int, home func(e uint64) int) {
	mask := len(t.e) - 1
	for j := (i + 1) & mask; t.e[j] != 0; j = (j + 1) & mask {
		// The entry at j stays if its home lies cyclically in (i, j].
		k := home(t.e[j])
		if i <= j && i < k && k <= j || j < i && (i < k || k <= j) {
			continue
		}
		t.e[i], i = t.e[j], j
	}
	t.e[i] = 0
	t.live--
}

// Owned returns a copy of the entries of one source.
func (x *Index) Owned(source string) map[string]Entry {
	id, ok := x.ids[source]
	if !ok {
		return map[string]Entry{}
	}
	u := &x.units[id]
	out := make(map[string]Entry, u.live)
	for _, s := range u.slots {
		if s.n > 0 {
			out[u.key(s)] = s.e
		}
	}
	return out
}

// Sources lists every source that owns at least one key, sorted.
func (x *Index) Sources() []string {
	out := make([]string, 0, len(x.ids))
	for s := range x.ids {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Len is the number of keys this cluster owns.
func (x *Index) Len() int { return x.n }

// HeldBy reports who other than source holds key. It is Diff's Holder.
func (x *Index) HeldBy(source string) Holder {
	return func(key string) (string, bool) {
		if l, ok := x.find(key); ok {
			if s := x.units[l.unit].source; s != source {
				return x.cluster + " " + s, true
			}
		}
		if o, ok := x.foreign[key]; ok {
			return o, true
		}
		return "", false
	}
}

// Applied records a committed transaction: puts now hold their value at rev,
// deletes are gone. It returns the keys that were freed, so that units
// waiting for them can be retried.
func (x *Index) Applied(source string, ops []Op, rev int64) (freed []string) {
	for _, o := range ops {
		if o.Kind == Put {
			x.set(source, o.Key, Entry{Sum: SumOf(o.Value), ModRev: rev})
			continue
		}
		x.remove(o.Key)
		x.bury(o.Key, rev)
		freed = append(freed, o.Key)
	}
	return freed
}

// BeginRead tells the index that a re-read for Refresh is about to start,
// so that until EndRead it remembers the deletes it learns of: the read
// may be answered at a revision before one of them, and then still show
// the key.
func (x *Index) BeginRead() { x.reads++ }

// EndRead ends what BeginRead began. With no re-read in flight no read can
// be older than a delete the index knows of, and the deletes are forgotten.
func (x *Index) EndRead() {
	if x.reads--; x.reads == 0 {
		x.gone = nil
	}
}

// bury remembers that key was gone at rev, while a re-read is in flight.
func (x *Index) bury(key string, rev int64) {
	if x.reads == 0 {
		return
	}
	if x.gone == nil {
		x.gone = map[string]int64{}
	}
	x.gone[key] = max(x.gone[key], rev)
}

// newer reports whether the index learned of key from a commit after rev.
func (x *Index) newer(key string, rev int64) bool {
	if l, ok := x.find(key); ok {
		return x.units[l.unit].slots[l.slot].e.ModRev > rev
	}
	return x.gone[key] > rev
}

func (x *Index) remove(key string) {
	delete(x.foreign, key)
	var l loc
	if i, ok := x.lookup(key, keyHash(key)); ok {
		l = x.table.at(i)
		mask := len(x.table.e) - 1
		x.table.drop(i, func(e uint64) int { return int(x.hashAt(locOf(e))) & mask })
	} else if sl, spilled := x.spill[key]; spilled {
		l = sl
		delete(x.spill, key)
	} else {
		return
	}
	id := int32(l.unit)
	u := &x.units[id]
	u.slots[l.slot].n = 0
	u.live--
	x.n--
	switch {
	case u.live == 0:
		delete(x.ids, u.source)
		x.units[id] = unit{}
		x.free = append(x.free, id)
	case len(u.slots) > 2*u.live+8:
		x.compact(id)
	}
}

// compact drops a unit's holes once they outnumber its keys, so that a
// unit whose records keep changing does not grow without bound.
func (x *Index) compact(id int32) {
	u := &x.units[id]
	kb := make([]byte, 0, len(u.keys))
	slots := make([]slot, 0, u.live)
	at := make([]int, 0, u.live) // table position of each kept key, -1 in spill
	for _, s := range u.slots {
		if s.n == 0 {
			continue
		}
		// Found by the old layout, before it is replaced.
		pos := -1
		k := u.key(s)
		if j, ok := x.lookup(k, keyHash(k)); ok {
			pos = j
		}
		at = append(at, pos)
		_, n := s.lens()
		slots = append(slots, slot{off: uint32(len(kb)), n: s.n, e: s.e})
		kb = append(kb, u.keys[s.off:s.off+n]...)
	}
	u.keys, u.slots = kb, slots
	for i, s := range slots {
		l := loc{uint32(id), uint32(i)}
		if at[i] < 0 {
			x.spill[u.key(s)] = l
			continue
		}
		// The tag is the key's, unchanged; only the position moves.
		x.table.e[at[i]] = x.table.e[at[i]]&(0xff<<56) | uint64(l.unit)<<28 | uint64(l.slot)
	}
}

// Refresh replaces what the index knows about keys with a re-read at
// revision rev (see BeginRead): present holds the keys that existed then,
// absent those that did not. A key the index learned of from a commit
// after rev keeps what the index has: another unit's transaction committed
// while the read was on its way, and the read would bring back a key it
// deleted, which a unit waiting for the key then waits for forever, or
// forget one it wrote, which is then never deleted.
func (x *Index) Refresh(present []KV, absent []string, rev int64) {
	for _, k := range absent {
		if !x.newer(k, rev) {
			x.remove(k)
			x.bury(k, rev)
		}
	}
	for _, kv := range present {
		if x.newer(kv.Key, rev) {
			continue
		}
		x.remove(kv.Key)
		v, err := keys.Decode(kv.Value)
		switch {
		case err != nil:
			x.foreign[kv.Key] = "malformed"
		case v.Cluster != x.cluster || v.Source == "":
			x.foreign[kv.Key] = v.Cluster + " " + v.Source
		default:
			x.set(v.Source, kv.Key, Entry{Sum: SumOf(kv.Value), ModRev: kv.ModRev})
		}
	}
}

// Want is one desired record, encoded: what Index.Diff compares.
type Want struct {
	Key   string
	Value []byte
	Sum   Sum
}

// Encode encodes a unit's desired records for Index.Diff, keeping the first
// of any two at one key as Diff does. It needs no index, so the publisher
// runs it before taking the lock the index is under.
func Encode(desired []keys.Record) []Want {
	sorted := slices.IsSortedFunc(desired, func(a, b keys.Record) int { return strings.Compare(a.Key, b.Key) })
	if !sorted {
		desired = slices.Clone(desired)
		slices.SortStableFunc(desired, func(a, b keys.Record) int { return strings.Compare(a.Key, b.Key) })
	}
	out := make([]Want, 0, len(desired))
	for i, r := range desired {
		if i > 0 && desired[i-1].Key == r.Key {
			continue
		}
		v := r.Value.Encode()
		out = append(out, Want{Key: r.Key, Value: v, Sum: SumOf(v)})
	}
	return out
}

// Diff is plan.Diff of want (from Encode) against what source owns and who
// holds the other keys, read in place: copying a unit's entries into a map
// first cost a map and a string per record on every change of a service
// (bench/publisher/README.md).
func (x *Index) Diff(source string, want []Want) Result {
	var r Result
	id, ok := x.ids[source]
	var u *unit
	var wanted []bool // by slot of source's unit
	if ok {
		u = &x.units[id]
		wanted = make([]bool, len(u.slots))
	}
	// A unit's keys are mostly in their slots in key order, as want is
	// (a transaction's puts are, and a load's pages), so the slot after
	// the last one matched is tried before the table: at a million keys a
	// lookup in the table is a cache miss or two, and the unit's slots and
	// bytes lie together.
	next := 0
	for _, w := range want {
		l, found := loc{}, false
		if ok {
			// Holes are skipped once, not again for each key that misses.
			if next = u.held(next); next < len(u.slots) && u.keyIs(u.slots[next], w.Key) {
				l, found = loc{unit: uint32(id), slot: uint32(next)}, true
			}
		}
		if !found {
			l, found = x.find(w.Key)
		}
		if found {
			if ok && l.unit == uint32(id) {
				next = int(l.slot) + 1
				wanted[l.slot] = true
				e := u.slots[l.slot].e
				if e.Sum == w.Sum {
					r.Unchanged++
					continue
				}
				r.Ops = append(r.Ops, Op{Kind: Put, Key: w.Key, Value: w.Value, ModRev: e.ModRev})
				continue
			}
			r.Conflicts = append(r.Conflicts, Conflict{Key: w.Key, Owner: x.cluster + " " + x.units[l.unit].source})
			continue
		}
		if o, held := x.foreign[w.Key]; held {
			r.Conflicts = append(r.Conflicts, Conflict{Key: w.Key, Owner: o})
			continue
		}
		r.Ops = append(r.Ops, Op{Kind: Put, Key: w.Key, Value: w.Value})
	}
	// want is in key order, so the puts are too.
	if ok {
		var dels []Op
		for i, s := range u.slots {
			if s.n > 0 && !wanted[i] {
				dels = append(dels, Op{Kind: Delete, Key: u.key(s), ModRev: s.e.ModRev})
			}
		}
		slices.SortFunc(dels, func(a, b Op) int { return strings.Compare(a.Key, b.Key) })
		r.Ops = append(r.Ops, dels...)
	}
	return r
}

// Keys lists the keys source owns.
func (x *Index) Keys(source string) []string {
	id, ok := x.ids[source]
	if !ok {
		return nil
	}
	u := &x.units[id]
	out := make([]string, 0, u.live)
	for _, s := range u.slots {
		if s.n > 0 {
			out = append(out, u.key(s))
		}
	}
	return out
}

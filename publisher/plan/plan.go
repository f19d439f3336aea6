package plan

import (
	"cmp"
	"encoding/binary"
	"hash/maphash"
	"slices"

	"github.com/etcdns/etcdns/keys"
)

// Entry is one stored key as this publisher last saw it. ModRev is the
// revision the guards compare against, so a key changed behind our back
// makes the transaction fail instead of being overwritten blindly.
type Entry struct {
	Sum    Sum // of the stored value's bytes
	ModRev int64
}

// Sum stands for a value's bytes in the index: a large cluster owns
// hundreds of thousands of records, and 16 bytes instead of a ~150-byte
// JSON value each keeps the publisher's heap (and its GC pauses) small.
// Sums live only in this process's memory, so they need not be stable
// across processes: two 64-bit maphashes under seeds drawn at start make a
// false "unchanged" practically impossible, and nobody outside can aim
// for one, at a tenth of SHA-256's cost on the sustained-change path.
type Sum [16]byte

var sumSeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

// SumOf is the Sum of an encoded value.
func SumOf(b []byte) Sum {
	var s Sum
	binary.LittleEndian.PutUint64(s[:8], maphash.Bytes(sumSeeds[0], b))
	binary.LittleEndian.PutUint64(s[8:], maphash.Bytes(sumSeeds[1], b))
	return s
}

// OpKind says whether an Op writes or removes its key.
type OpKind int

const (
	Put OpKind = iota
	Delete
)

func (k OpKind) String() string {
	if k == Delete {
		return "delete"
	}
	return "put"
}

// Op is one guarded change. ModRev 0 on a Put means the key must not exist
// (create); otherwise the key must still be at ModRev.
type Op struct {
	Kind   OpKind
	Key    string
	Value  []byte // Put only
	ModRev int64
}

// Size approximates the bytes an op costs in an etcd request: its key twice
// (compare and operation), its value, and some framing.
func (o Op) Size() int { return 2*len(o.Key) + len(o.Value) + 32 }

// Conflict is a desired record whose key is held by another owner (another
// object's PTR for the same address, or another cluster). It is not written:
// ownership means never overwriting what someone else wrote.
type Conflict struct {
	Key   string
	Owner string // the holder's cluster and source, "" when unknown
}

// Result is the plan for one unit.
type Result struct {
	Ops       []Op
	Conflicts []Conflict
	Unchanged int
}

// Holder tells Diff who holds a key that this unit does not own, if anyone.
type Holder func(key string) (owner string, held bool)

// Diff compares what a unit wants with what it owns. Values are compared as
// encoded bytes, so an unchanged record is never rewritten; owned keys no
// longer wanted are deleted. Puts come before deletes, in key order, so that
// when a unit must be split a name is never left without records between
// two transactions.
func Diff(desired []keys.Record, owned map[string]Entry, held Holder) Result {
	var r Result
	want := make(map[string]bool, len(desired))
	for _, rec := range desired {
		if want[rec.Key] {
			continue
		}
		want[rec.Key] = true
		v := rec.Value.Encode()
		if e, ok := owned[rec.Key]; ok {
			if e.Sum == SumOf(v) {
				r.Unchanged++
				continue
			}
			r.Ops = append(r.Ops, Op{Kind: Put, Key: rec.Key, Value: v, ModRev: e.ModRev})
			continue
		}
		if held != nil {
			if owner, ok := held(rec.Key); ok {
				r.Conflicts = append(r.Conflicts, Conflict{Key: rec.Key, Owner: owner})
				continue
			}
		}
		r.Ops = append(r.Ops, Op{Kind: Put, Key: rec.Key, Value: v})
	}
	var dels []Op
	for k, e := range owned {
		if !want[k] {
			dels = append(dels, Op{Kind: Delete, Key: k, ModRev: e.ModRev})
		}
	}
	slices.SortFunc(r.Ops, func(a, b Op) int { return cmp.Compare(a.Key, b.Key) })
	slices.SortFunc(dels, func(a, b Op) int { return cmp.Compare(a.Key, b.Key) })
	r.Ops = append(r.Ops, dels...)
	return r
}

// Split cuts ops into transactions of at most maxOps operations and about
// maxBytes bytes, keeping their order. One slot and some bytes are left for
// the leader fence every transaction carries. Almost every unit fits in one.
func Split(ops []Op, maxOps, maxBytes int) [][]Op {
	if len(ops) == 0 {
		return nil
	}
	maxOps-- // the fence compare
	if maxOps < 1 {
		maxOps = 1
	}
	budget := maxBytes - 1024 // fence, headers
	var out [][]Op
	var cur []Op
	size := 0
	for _, o := range ops {
		s := o.Size()
		if len(cur) > 0 && (len(cur) >= maxOps || size+s > budget) {
			out = append(out, cur)
			cur, size = nil, 0
		}
		cur = append(cur, o)
		size += s
	}
	return append(out, cur)
}

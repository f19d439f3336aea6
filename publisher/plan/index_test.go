package plan

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/etcdns/etcdns/keys"
)

// TestIndexModel runs random puts, deletes and refreshes against the index
// and against plain maps, and compares every answer, with the real key hash,
// with one under which every key collides, and with one that sends every
// key to the table's last eight entries, so that probes and the shifts of
// removals wrap around its end.
func TestIndexModel(t *testing.T) {
	real := keyHash
	for _, hash := range []struct {
		name string
		fn   func(string) uint64
	}{
		{"real", real},
		{"collide", func(string) uint64 { return 7 }},
		{"wrap", func(k string) uint64 { return real(k) | ^uint64(7) }},
	} {
		t.Run(hash.name, func(t *testing.T) {
			keyHash = hash.fn
			defer func() { keyHash = real }()
			rng := rand.New(rand.NewPCG(1, 2))
			x := NewIndex("c1")
			owner := map[string]string{}             // key -> source
			entries := map[string]map[string]Entry{} // source -> key -> entry
			sources := []string{"service/a/s1", "service/a/s2", "service/b/s3", "pod/a/p"}
			key := func() string { return fmt.Sprintf("/skydns/local/cluster/k%d", rng.IntN(60)) }
			drop := func(k string) {
				if s, ok := owner[k]; ok {
					delete(entries[s], k)
					if len(entries[s]) == 0 {
						delete(entries, s)
					}
					delete(owner, k)
				}
			}
			for i := range 5000 {
				src := sources[rng.IntN(len(sources))]
				var ops []Op
				for range 1 + rng.IntN(8) {
					k := key()
					if o, ok := owner[k]; ok && o != src {
						continue // Diff never plans another owner's key
					}
					if rng.IntN(3) == 0 {
						ops = append(ops, Op{Kind: Delete, Key: k})
					} else {
						ops = append(ops, Op{Kind: Put, Key: k, Value: fmt.Appendf(nil, `{"host":"10.0.0.%d"}`, i%250)})
					}
				}
				rev := int64(i + 1)
				x.Applied(src, ops, rev)
				for _, o := range ops {
					drop(o.Key)
					if o.Kind == Put {
						owner[o.Key] = src
						if entries[src] == nil {
							entries[src] = map[string]Entry{}
						}
						entries[src][o.Key] = Entry{Sum: SumOf(o.Value), ModRev: rev}
					}
				}
				if rng.IntN(50) == 0 { // another cluster takes a key
					k := key()
					x.Refresh([]KV{{Key: k, Value: []byte(`{"host":"10.9.9.9","cluster":"c2","source":"service/z/z"}`), ModRev: rev}}, nil, rev)
					drop(k)
				}
				if x.Len() != len(owner) {
					t.Fatalf("step %d: len %d, want %d", i, x.Len(), len(owner))
				}
				want := slices.Sorted(maps.Keys(entries))
				if got := x.Sources(); !slices.Equal(got, want) {
					t.Fatalf("step %d: sources %v, want %v", i, got, want)
				}
				for _, s := range sources {
					if got := x.Owned(s); !reflect.DeepEqual(got, entries[s]) && (len(got) != 0 || len(entries[s]) != 0) {
						t.Fatalf("step %d: owned(%s) %v, want %v", i, s, got, entries[s])
					}
				}
				for n := range 60 {
					k := fmt.Sprintf("/skydns/local/cluster/k%d", n)
					o, held := x.HeldBy(src)(k)
					s, ours := owner[k]
					if ours && s != src && (!held || o != "c1 "+s) || ours && s == src && held {
						t.Fatalf("step %d: %s held by %q %v for %s, owner %q", i, k, o, held, src, s)
					}
				}
				// Index.Diff plans what Diff over a copy plans, from
				// records in any order, with repeated keys.
				var desired []keys.Record
				for range rng.IntN(12) {
					desired = append(desired, keys.Record{Key: key(), Value: keys.Value{Host: fmt.Sprintf("10.0.0.%d", rng.IntN(250))}})
				}
				plan := Diff(desired, x.Owned(src), x.HeldBy(src))
				got := x.Diff(src, Encode(desired))
				byKey := func(a, b Conflict) int { return strings.Compare(a.Key, b.Key) }
				slices.SortFunc(plan.Conflicts, byKey)
				slices.SortFunc(got.Conflicts, byKey)
				if !reflect.DeepEqual(got, plan) {
					t.Fatalf("step %d: Index.Diff %+v, want %+v", i, got, plan)
				}
			}
		})
	}
}

// TestLoadKeyReadTwice: ranges that overlap (a cluster domain of "arpa" with
// one prefix for both trees) deliver a key twice; it is one record.
func TestLoadKeyReadTwice(t *testing.T) {
	v := keys.Value{Host: "10.0.0.1", Cluster: "c1", Source: "service/a/s"}.Encode()
	kvs := []KV{
		{Key: "/skydns/arpa/x/k1", Value: v, ModRev: 3},
		{Key: "/skydns/arpa/x/k2", Value: v, ModRev: 4},
		{Key: "/skydns/arpa/x/k1", Value: v, ModRev: 3},
	}
	x, st := Load("c1", kvs)
	if x.Len() != 2 || st.Owned != 2 {
		t.Fatalf("Len %d, owned %d, want 2 and 2", x.Len(), st.Owned)
	}
	if got := x.Keys("service/a/s"); !slices.Equal(got, []string{"/skydns/arpa/x/k1", "/skydns/arpa/x/k2"}) {
		t.Fatalf("keys %q", got)
	}
	x.Applied("service/a/s", []Op{{Kind: Delete, Key: "/skydns/arpa/x/k1"}}, 5)
	if _, held := x.HeldBy("service/b/t")("/skydns/arpa/x/k1"); held || x.Len() != 1 {
		t.Fatalf("k1 still held after its delete, or Len %d != 1", x.Len())
	}
}

// TestRefreshOlderThanACommit: a re-read answered before another unit's
// transaction committed must not undo what the index learned from that
// commit, in either direction; a read newer than what the index knows
// replaces it as before.
func TestRefreshOlderThanACommit(t *testing.T) {
	const k = "/skydns/arpa/in-addr/10/244/1/10"
	b := keys.Value{Host: "b.apps.svc.cluster.local", Cluster: "c1", Source: "service/apps/b"}.Encode()
	a := keys.Value{Host: "a.apps.svc.cluster.local", Cluster: "c1", Source: "service/apps/a"}.Encode()
	held := func(x *Index) (string, bool) { return x.HeldBy("service/apps/a")(k) }

	t.Run("present before a delete", func(t *testing.T) {
		x, _ := Load("c1", []KV{{Key: k, Value: b, ModRev: 5}})
		x.BeginRead()
		// The read sees b's key at 6; b deletes it at 7, applied first.
		x.Applied("service/apps/b", []Op{{Kind: Delete, Key: k, ModRev: 5}}, 7)
		x.Refresh([]KV{{Key: k, Value: b, ModRev: 5}}, nil, 6)
		x.EndRead()
		if o, ok := held(x); ok {
			t.Fatalf("a read older than the delete brought the key back, held by %q", o)
		}
	})
	t.Run("absent before a put", func(t *testing.T) {
		x := NewIndex("c1")
		x.BeginRead()
		x.Applied("service/apps/a", []Op{{Kind: Put, Key: k, Value: a}}, 7)
		x.Refresh(nil, []string{k}, 6)
		x.EndRead()
		if e, ok := x.Owned("service/apps/a")[k]; !ok || e.ModRev != 7 {
			t.Fatalf("a read older than the put forgot the key: %v %v", e, ok)
		}
	})
	t.Run("present before another read's absence", func(t *testing.T) {
		x, _ := Load("c1", []KV{{Key: k, Value: b, ModRev: 5}})
		x.BeginRead()
		x.BeginRead()
		x.Refresh(nil, []string{k}, 8)
		x.EndRead()
		x.Refresh([]KV{{Key: k, Value: b, ModRev: 5}}, nil, 6)
		x.EndRead()
		if o, ok := held(x); ok {
			t.Fatalf("the older of two reads won, held by %q", o)
		}
	})
	t.Run("tombstones only while reading", func(t *testing.T) {
		x, _ := Load("c1", []KV{{Key: k, Value: b, ModRev: 5}, {Key: k + "/x", Value: b, ModRev: 5}})
		x.Applied("service/apps/b", []Op{{Kind: Delete, Key: k + "/x"}}, 6)
		if len(x.gone) != 0 {
			t.Fatalf("a delete with no read in flight kept %v", x.gone)
		}
		x.BeginRead()
		x.BeginRead()
		x.Applied("service/apps/b", []Op{{Kind: Delete, Key: k}}, 7)
		x.EndRead()
		if x.gone[k] != 7 {
			t.Fatalf("the delete was forgotten with a read still in flight: %v", x.gone)
		}
		x.EndRead()
		if x.gone != nil {
			t.Fatalf("no read in flight, and the index still keeps %v", x.gone)
		}
	})
	t.Run("newer read", func(t *testing.T) {
		other := keys.Value{Host: "10.9.9.9", Cluster: "c2", Source: "service/z/z"}.Encode()
		x, _ := Load("c1", []KV{{Key: k, Value: b, ModRev: 5}, {Key: k + "/1", Value: a, ModRev: 5}, {Key: k + "/2", Value: a, ModRev: 5}})
		x.BeginRead()
		x.Applied("service/apps/b", []Op{{Kind: Delete, Key: k}}, 7)
		// Made again at 9 by another cluster, read at 10: the read wins,
		// as over keys it changed (/1) or found gone (/2).
		x.Refresh([]KV{{Key: k, Value: other, ModRev: 9}, {Key: k + "/1", Value: b, ModRev: 8}}, []string{k + "/2"}, 10)
		x.EndRead()
		if o, ok := held(x); !ok || o != "c2 service/z/z" {
			t.Fatalf("the newer read's key is held by %q %v", o, ok)
		}
		if got := x.Owned("service/apps/b"); len(got) != 1 || got[k+"/1"].ModRev != 8 {
			t.Fatalf("b owns %v", got)
		}
		if got := x.Owned("service/apps/a"); len(got) != 0 {
			t.Fatalf("a owns %v", got)
		}
	})
}

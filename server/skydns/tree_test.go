package skydns

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// Random batches against a map: after each, every key, every prefix read
// and the count agree with the map, chunks stay sorted and bounded, and
// the tree before the batch still holds what it held.
func TestTreeAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	model := map[string]string{}
	var tr *Tree
	key := func() string {
		return fmt.Sprintf("/skydns/org/example/%c/%03d", 'a'+rng.IntN(4), rng.IntN(400))
	}
	for round := range 60 {
		before, beforeModel := tr, maps(model)
		b := tr.Edit()
		for range 1 + rng.IntN(1+round*10) {
			k := key()
			if rng.IntN(3) == 0 {
				b.Delete(k)
				delete(model, k)
				continue
			}
			h := fmt.Sprintf("10.0.%d.%d", rng.IntN(256), rng.IntN(256))
			if err := b.Put(k, []byte(`{"host":"`+h+`"}`)); err != nil {
				t.Fatal(err)
			}
			model[k] = h
		}
		tr = b.Done()
		check(t, tr, model)
		check(t, before, beforeModel)
	}
}

func maps(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func check(t *testing.T, tr *Tree, model map[string]string) {
	t.Helper()
	if tr.Len() != len(model) {
		t.Fatalf("Len %d, want %d", tr.Len(), len(model))
	}
	var all []string
	for k := range model {
		all = append(all, k)
	}
	slices.Sort(all)
	var prev string
	if tr != nil {
		for _, c := range tr.chunks {
			if len(c) == 0 || len(c) > 2*chunkSize {
				t.Fatalf("chunk of %d", len(c))
			}
			for _, it := range c {
				if it.Key <= prev {
					t.Fatalf("%s after %s", it.Key, prev)
				}
				prev = it.Key
			}
		}
	}
	for k, h := range model {
		if it, ok := tr.Get(k); !ok || it.Host != h {
			t.Fatalf("Get(%s) = %v %v, want %s", k, it, ok, h)
		}
	}
	for _, p := range []string{"/skydns/", "/skydns/org/example/a/", "/skydns/org/example/c/", "/skydns/org/example/d/1", "/skydns/org/example/e/"} {
		var got, want []string
		for _, it := range tr.Prefix(p) {
			got = append(got, it.Key)
		}
		for _, k := range all {
			if strings.HasPrefix(k, p) {
				want = append(want, k)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("Prefix(%s): %d keys, want %d", p, len(got), len(want))
		}
	}
}

// BenchmarkChange is one watch event applied to a large zone: it copies
// the chunk it touches and the chunk list, not the zone.
func BenchmarkChange(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			e := (*Tree)(nil).Edit()
			for i := range n {
				e.Put(fmt.Sprintf("/skydns/org/example/h%07d/x", i), []byte(`{"host":"10.0.0.1"}`))
			}
			tr := e.Done()
			b.ResetTimer()
			for i := range b.N {
				e := tr.Edit()
				e.Put(fmt.Sprintf("/skydns/org/example/h%07d/y", i%n), []byte(`{"host":"10.0.0.2"}`))
				tr = e.Done()
			}
		})
	}
}

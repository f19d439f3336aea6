package snap

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestTableAgainstMap puts and deletes random names in a table, growing it
// and shifting nodes back over deleted slots, and checks every name
// against a map after each step.
func TestTableAgainstMap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	tb := newTable(0)
	want := map[string]*Node{}
	for step := range 20_000 {
		name := fmt.Sprintf("n%d.example", r.IntN(300))
		if r.IntN(3) == 0 {
			tb.delete(name, hashOf(name))
			delete(want, name)
		} else {
			n := &Node{Name: name}
			tb.set(n, hashOf(name))
			want[name] = n
		}
		if tb.used != len(want) {
			t.Fatalf("step %d: %d used, want %d", step, tb.used, len(want))
		}
		if step%97 != 0 {
			continue
		}
		for i := range 300 {
			name := fmt.Sprintf("n%d.example", i)
			if got := tb.get(name, hashOf(name)); got != want[name] {
				t.Fatalf("step %d: %s is %p, want %p", step, name, got, want[name])
			}
		}
		seen := 0
		tb.each(func(*Node) { seen++ })
		if seen != len(want) {
			t.Fatalf("step %d: each saw %d, want %d", step, seen, len(want))
		}
	}
}

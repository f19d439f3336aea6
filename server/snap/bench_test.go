package snap

import (
	"fmt"
	"testing"
)

// BenchmarkBatch is the cost of one watch event on a large zone: the copy
// of what changes, not of the zone.
func BenchmarkBatch(b *testing.B) {
	for _, n := range []int{10_000, 200_000} {
		z := NewZone(cfg)
		bt := z.Edit()
		for i := range n {
			key := fmt.Sprintf("/skydns/local/cluster/svc/ns%d/s%d/x", i%50, i)
			owner, e, err := z.Parse(key, []byte(fmt.Sprintf(`{"host":"10.%d.%d.%d"}`, i>>16&255, i>>8&255, i&255)))
			if err != nil {
				b.Fatal(err)
			}
			bt.Put(owner, e)
		}
		z = bt.Done(1)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			i := 0
			for b.Loop() {
				key := fmt.Sprintf("/skydns/local/cluster/svc/ns%d/s%d/x", i%50, i%n)
				owner, e, _ := z.Parse(key, []byte(`{"host":"10.99.0.1"}`))
				bt := z.Edit()
				bt.Put(owner, e)
				z = bt.Done(uint32(i))
				i++
			}
		})
	}
}

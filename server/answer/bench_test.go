package answer

import (
	"fmt"
	"testing"

	"github.com/miekg/dns"
)

// BenchmarkAnswer measures the engine alone on 1,000 services, the bench
// script's data set: a query in, a packed response out.
func BenchmarkAnswer(b *testing.B) {
	s := build(b, bigFixture(b, 1000))
	o := testOptions
	o.Rotate = true
	for _, c := range []struct {
		name  string
		q     string
		qtype uint16
	}{
		{"A", "svc7.ns7.svc.cluster.local.", dns.TypeA},
		{"SRV", "_https._tcp.svc7.ns7.svc.cluster.local.", dns.TypeSRV},
		{"NXDOMAIN", "nope.ns7.svc.cluster.local.", dns.TypeA},
		{"0x20", "SvC7.nS7.svc.cluster.local.", dns.TypeA},
	} {
		reqs := make([]*dns.Msg, 1000)
		for i := range reqs {
			name := c.q
			if c.name == "A" {
				name = fmt.Sprintf("svc%d.ns%d.svc.cluster.local.", i, i%10)
			}
			reqs[i] = new(dns.Msg).SetQuestion(name, c.qtype)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 512)
			i := 0
			for b.Loop() {
				m := Answer(s, reqs[i%len(reqs)], &o, uint32(i))
				if _, err := m.PackBuffer(buf); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

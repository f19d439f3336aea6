package server

import (
	"bytes"
	"testing"

	"github.com/miekg/dns"

	"github.com/etcdns/etcdns/server/answer"
)

// FuzzServeDNS feeds raw packets to what the listeners run: the UDP
// worker (fast path, cache, full path) and the TCP handler. It must never
// panic; every response must unpack and fit the client's limit; and a
// cached answer must be byte for byte the one computed without the cache.
func FuzzServeDNS(f *testing.F) {
	seed := func(m *dns.Msg) {
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	seed(new(dns.Msg).SetQuestion("kubernetes.default.svc.cluster.local.", dns.TypeA))
	seed(new(dns.Msg).SetQuestion("kubernetes.default.svc.cluster.local.", dns.TypeA).SetEdns0(1232, true))
	seed(new(dns.Msg).SetQuestion("big.default.svc.cluster.local.", dns.TypeA))
	seed(new(dns.Msg).SetQuestion("big.default.svc.cluster.local.", dns.TypeANY).SetEdns0(4096, true))
	seed(new(dns.Msg).SetQuestion("1.0.96.10.in-addr.arpa.", dns.TypePTR))
	seed(new(dns.Msg).SetQuestion("1-2-3-4.ns.pod.cluster.local.", dns.TypeA))
	seed(new(dns.Msg).SetQuestion("Cluster.Local.", dns.TypeNS))
	seed(new(dns.Msg).SetQuestion("nope.cluster.local.", dns.TypeA).SetEdns0(512, false))
	bad := new(dns.Msg).SetQuestion("example.com.", dns.TypeA)
	bad.Opcode = dns.OpcodeUpdate
	seed(bad)
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0})

	srv := newServer(f, testSnapshot(f, 60))
	srv.opts.Rotate = false // so repeated answers are comparable
	f.Fuzz(func(t *testing.T, data []byte) {
		w := &worker{s: srv}
		first := bytes.Clone(w.handle(data))
		again := w.handle(data) // from the cache when cacheable
		if !bytes.Equal(first, again) {
			t.Fatalf("cached response differs:\n%x\n%x", first, again)
		}
		req := new(dns.Msg)
		if first == nil || req.Unpack(data) != nil {
			return
		}
		var m dns.Msg
		if err := m.Unpack(first); err != nil {
			t.Fatalf("response does not unpack: %v", err)
		}
		if len(first) > answer.Size(req, true) {
			t.Fatalf("UDP response of %d octets, limit %d", len(first), answer.Size(req, true))
		}
		tw := &worker{s: srv, tcp: true}
		if out := tw.handle(data); out != nil && m.Unpack(out) != nil {
			t.Fatal("TCP response does not unpack")
		}
	})
}

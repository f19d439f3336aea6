package server

import (
	"io"
	"log/slog"
	"net/netip"
	"testing"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/etcdns/etcdns/server/answer"
	"github.com/etcdns/etcdns/server/snap"
)

// Every search answered is counted once, whether the engine made the
// answer or the UDP cache replayed it, over UDP and TCP alike.
func TestAutopathMetrics(t *testing.T) {
	s := testSnapshot(t, 0)
	o := opts
	o.Autopath = answer.Autopath{Suffix: true, Option: 65001, Client: true}
	reg := prometheus.NewRegistry()
	srv := New(func() *snap.Snapshot { return s }, o, reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	w := &worker{s: srv, from: netip.MustParseAddrPort("10.9.9.9:5353")}
	ask := func(name string, edit func(*dns.Msg)) *dns.Msg {
		t.Helper()
		q := new(dns.Msg).SetQuestion(name, dns.TypeA)
		if edit != nil {
			edit(q)
		}
		b, _ := q.Pack()
		var m dns.Msg
		if err := m.Unpack(w.handle(b)); err != nil {
			t.Fatal(err)
		}
		return &m
	}
	hit := "kubernetes.search.default.cluster.local.ap.k8s.io."
	w.startBatch() // as a UDP worker: the replays are added at the batch's end
	for range 3 {  // the second and third from the cache
		if m := ask(hit, nil); len(m.Answer) != 2 {
			t.Fatalf("%s: %v", hit, m)
		}
	}
	w.addBatch()
	w.endBatch()
	if m := ask("nope.search.default.cluster.local.ap.k8s.io.", nil); m.Rcode != dns.RcodeNameError {
		t.Fatalf("nope: %v", m)
	}
	withList := func(m *dns.Msg) {
		m.SetEdns0(1232, false).IsEdns0().Option = []dns.EDNS0{&dns.EDNS0_LOCAL{Code: 65001, Data: []byte("default.svc.cluster.local")}}
	}
	for range 2 {
		if m := ask("kubernetes.", withList); len(m.Answer) != 2 {
			t.Fatalf("option: %v", m)
		}
	}
	hitq, _ := new(dns.Msg).SetQuestion(hit, dns.TypeA).Pack()
	(&worker{s: srv, tcp: true}).handle(hitq)

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if l := m.GetLabel(); len(l) == 1 && l[0].GetName() == "form" {
				got[mf.GetName()+" "+l[0].GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	for series, want := range map[string]float64{
		"etcdns_dnsd_autopath_searches_total suffix": 5, "etcdns_dnsd_autopath_hits_total suffix": 4,
		"etcdns_dnsd_autopath_searches_total option": 2, "etcdns_dnsd_autopath_hits_total option": 2,
		"etcdns_dnsd_autopath_searches_total client": 0, "etcdns_dnsd_autopath_hits_total client": 0,
	} {
		if v, ok := got[series]; !ok || v != want {
			t.Errorf("%s = %v (exported %v), want %v", series, v, ok, want)
		}
	}
}

package skydns_test

import (
	"context"
	"testing"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/etcdns/etcdns/internal/testetcd"
)

// In a SkyDNS zone a malformed value is skipped and counted, and the
// other values of its name still answer; a change in etcd reaches the
// answers through the watch, and a value broken by a later write stops
// answering instead of serving its old content.
func TestSkyDNSMalformedAndWatch(t *testing.T) {
	cli := testetcd.Start(t, nil)
	ctx := context.Background()
	mustPut := func(k, v string) int64 {
		t.Helper()
		r, err := cli.Put(ctx, k, v)
		if err != nil {
			t.Fatal(err)
		}
		return r.Header.Revision
	}
	mustPut("/skydns/test/skydns/web/x1", `{"host":"10.0.0.1"}`)
	mustPut("/skydns/test/skydns/web/x2", `{"host":"10.0.0.2"`) // cut short
	mustPut("/skydns/test/skydns/web/x3", `{"host":"10.0.0.3","port":"80"}`)
	reg := prometheus.NewRegistry()
	st := startStoreReg(t, cli, []string{"skydns.test"}, reg)

	a := func(want ...string) {
		t.Helper()
		m := ask(st.Snapshot(), "web.skydns.test.", dns.TypeA)
		var got []string
		for _, rr := range m.Answer {
			got = append(got, rr.(*dns.A).A.String())
		}
		if len(got) != len(want) || len(got) > 0 && got[0] != want[0] || len(got) > 1 && got[1] != want[1] {
			t.Errorf("A web.skydns.test. = %v, want %v", got, want)
		}
	}
	a("10.0.0.1")
	if n := malformed(t, reg); n != 2 {
		t.Errorf("malformed values counted: %v, want 2", n)
	}

	waitRev(t, st, mustPut("/skydns/test/skydns/web/x2", `{"host":"10.0.0.2"}`))
	a("10.0.0.1", "10.0.0.2")
	waitRev(t, st, mustPut("/skydns/test/skydns/web/x1", `{"host":`))
	a("10.0.0.2")
	if n := malformed(t, reg); n != 3 {
		t.Errorf("malformed values counted: %v, want 3", n)
	}
	r, err := cli.Delete(ctx, "/skydns/test/skydns/web/x2")
	if err != nil {
		t.Fatal(err)
	}
	waitRev(t, st, r.Header.Revision)
	if m := ask(st.Snapshot(), "web.skydns.test.", dns.TypeA); m.Rcode != dns.RcodeNameError {
		t.Errorf("after the last valid value is deleted: rcode %s, want NXDOMAIN", dns.RcodeToString[m.Rcode])
	}
}

func malformed(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "etcdns_dnsd_malformed_values_total" {
			return sum(mf.GetMetric())
		}
	}
	return 0
}

func sum(ms []*dto.Metric) float64 {
	var n float64
	for _, m := range ms {
		n += m.GetCounter().GetValue()
	}
	return n
}

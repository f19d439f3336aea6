package shadow

import (
	"strings"
	"testing"

	"github.com/miekg/dns"
)

func msg(t *testing.T, rcode int, rrs ...string) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.Rcode = rcode
	for _, s := range rrs {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatal(err)
		}
		m.Answer = append(m.Answer, rr)
	}
	return m
}

func TestCompare(t *testing.T) {
	q := Question{"web.default.svc.cluster.local.", dns.TypeA}
	a1 := "web.default.svc.cluster.local. 5 IN A 10.0.0.1"
	a2 := "web.default.svc.cluster.local. 5 IN A 10.0.0.2"
	for _, tc := range []struct {
		name string
		a, b *dns.Msg
		want []string // class: detail
	}{
		{"same", msg(t, 0, a1, a2), msg(t, 0, a1, a2), nil},
		{"same, name in other case", msg(t, 0, a1), msg(t, 0, "WEB.default.svc.cluster.local. 5 IN A 10.0.0.1"), nil},
		{"order only", msg(t, 0, a1, a2), msg(t, 0, a2, a1),
			[]string{"order: web.default.svc.cluster.local. 0 IN A 10.0.0.1; web.default.svc.cluster.local. 0 IN A 10.0.0.2, then web.default.svc.cluster.local. 0 IN A 10.0.0.2; web.default.svc.cluster.local. 0 IN A 10.0.0.1"}},
		{"ttl only", msg(t, 0, a1), msg(t, 0, "web.default.svc.cluster.local. 30 IN A 10.0.0.1"),
			[]string{"ttl: web.default.svc.cluster.local. 0 IN A 10.0.0.1: TTL [5], then [30]"}},
		{"missing", msg(t, 0, a1, a2), msg(t, 0, a1),
			[]string{"missing: web.default.svc.cluster.local. 0 IN A 10.0.0.2"}},
		{"extra", msg(t, 0, a1), msg(t, 0, a2, a1),
			[]string{"extra: web.default.svc.cluster.local. 0 IN A 10.0.0.2"}},
		{"missing and extra", msg(t, 0, a1), msg(t, 0, a2),
			[]string{"missing: web.default.svc.cluster.local. 0 IN A 10.0.0.1", "extra: web.default.svc.cluster.local. 0 IN A 10.0.0.2"}},
		{"duplicate counts", msg(t, 0, a1, a1), msg(t, 0, a1),
			[]string{"missing: web.default.svc.cluster.local. 0 IN A 10.0.0.1"}},
		{"rcode, reported alone", msg(t, dns.RcodeServerFailure), msg(t, dns.RcodeNameError),
			[]string{"rcode: SERVFAIL, then NXDOMAIN"}},
	} {
		var got []string
		for _, d := range Compare(q, tc.a, tc.b) {
			if d.Question != q {
				t.Errorf("%s: question %v", tc.name, d.Question)
			}
			got = append(got, string(d.Class)+": "+d.Detail)
		}
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%s:\ngot  %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

func TestMatters(t *testing.T) {
	for c, want := range map[Class]bool{Rcode: true, Missing: true, Extra: true, Failed: true, TTL: false, Order: false} {
		if c.Matters() != want {
			t.Errorf("%s matters: %v", c, c.Matters())
		}
	}
}

func TestParseQuestions(t *testing.T) {
	qs, err := ParseQuestions(strings.NewReader("# services\nkubernetes.default.svc.cluster.local\n\n_https._tcp.kubernetes.default.svc.cluster.local. srv\nKube-DNS.kube-system.svc.cluster.local AAAA\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Question{
		{"kubernetes.default.svc.cluster.local.", dns.TypeA},
		{"_https._tcp.kubernetes.default.svc.cluster.local.", dns.TypeSRV},
		{"kube-dns.kube-system.svc.cluster.local.", dns.TypeAAAA},
	}
	if len(qs) != len(want) {
		t.Fatalf("%v", qs)
	}
	for i := range want {
		if qs[i] != want[i] {
			t.Errorf("question %d: %v; want %v", i, qs[i], want[i])
		}
	}
	for _, bad := range []string{"a.example A extra\n", "a.example NOPE\n", "a..example\n"} {
		if _, err := ParseQuestions(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%q: error %v; want one naming line 1", bad, err)
		}
	}
}

func TestFromKeys(t *testing.T) {
	qs := FromKeys("/skydns", []string{
		"/skydns/local/cluster/svc/default/kubernetes/6c1c9bd3",
		"/skydns/local/cluster/svc/default/kubernetes/7d2f0a11", // the same owner
		"/skydns/local/cluster/svc/default/kubernetes/_tcp/_https/1a2b3c4d",
		"/skydns/arpa/in-addr/10/96/0/1",
		"/skydns", // no record key
	})
	var got []string
	for _, q := range qs {
		got = append(got, q.String())
	}
	want := []string{
		"kubernetes.default.svc.cluster.local. A",
		"kubernetes.default.svc.cluster.local. AAAA",
		"_https._tcp.kubernetes.default.svc.cluster.local. SRV",
		"1.0.96.10.in-addr.arpa. PTR",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/etcdns/etcdns/integration/harness"
)

// chaseValues point out of the SkyDNS zones chase.test and other.test:
// at names a real Knot serves (example.net), one it holds as a CNAME,
// one it does not hold, one in a zone it does not serve, and through
// other.test back out.
var chaseValues = [][2]string{
	{"/skydns/test/chase/ext/x", `{"host":"www.example.net"}`},
	{"/skydns/test/chase/alias/x", `{"host":"alias.example.net"}`},
	{"/skydns/test/chase/gone/x", `{"host":"gone.example.net"}`},
	{"/skydns/test/chase/elsewhere/x", `{"host":"www.example.com"}`},
	{"/skydns/test/chase/hop/x", `{"host":"away.other.test"}`},
	{"/skydns/test/other/away/x", `{"host":"www.example.net"}`},
	{"/skydns/test/chase/inzone/x", `{"host":"ext.chase.test"}`},
	{"/skydns/test/chase/sip/_udp/_sip/x", `{"host":"sip.example.net","port":5060}`},
	{"/skydns/test/chase/mail/x", `{"host":"mx.example.net","mail":true,"priority":10}`},
}

var chaseQuestions = []struct {
	name  string
	qtype uint16
}{
	{"ext.chase.test.", dns.TypeA},
	{"ext.chase.test.", dns.TypeAAAA},
	{"ext.chase.test.", dns.TypeTXT},
	{"ext.chase.test.", dns.TypeCNAME},
	{"alias.chase.test.", dns.TypeA},
	{"gone.chase.test.", dns.TypeA},
	{"elsewhere.chase.test.", dns.TypeA},
	{"hop.chase.test.", dns.TypeA},
	{"inzone.chase.test.", dns.TypeA},
	{"_sip._udp.sip.chase.test.", dns.TypeSRV},
	{"mail.chase.test.", dns.TypeMX},
}

// TestSkyDNSChaseMatchesCoreDNS serves SkyDNS zones whose CNAME, SRV and
// MX targets lie outside every zone, from a real etcd, with a real Knot
// as the upstream: dnsd (forwarding to Knot) and CoreDNS 1.11.4 (etcd
// plugin, forward to Knot in the same server block, so the plugin's
// upstream lookups reach Knot) must give the same answers, the
// upstream's records after the CNAME and as glue. With Knot gone both
// keep the CNAME alone.
func TestSkyDNSChaseMatchesCoreDNS(t *testing.T) {
	knot := harness.StartKnot(t, "example.net", "$TTL 30\n"+
		"@ SOA ns hostmaster 1 3600 900 604800 20\n@ NS ns\nns A 127.0.0.1\n"+
		"www A 192.0.2.7\nwww AAAA 2001:db8::7\nwww TXT \"hello from knot\"\n"+
		"alias CNAME www\nsip A 192.0.2.9\nsip AAAA 2001:db8::9\nmx A 192.0.2.10\n")
	etcd := harness.StartEtcd(t)
	cli := etcd.Client(t)
	for _, kv := range chaseValues {
		if _, err := cli.Put(context.Background(), kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	d := startDnsd(t, etcd, "--dnsd.zones=chase.test=/skydns:skydns,other.test=/skydns:skydns",
		"--dnsd.forward", "--dnsd.upstreams="+knot.Addr, "--dnsd.forward-cache=0", "--dnsd.forward-allow=127.0.0.0/8")
	c := harness.StartCoreDNS(t, fmt.Sprintf(`.:{{.Port}} {
	bind 127.0.0.1
	etcd chase.test other.test {
		path /skydns
		endpoint %s
	}
	forward . %s
}
`, etcd.Endpoint, knot.Addr))

	compare := func(what string) {
		t.Helper()
		for _, q := range chaseQuestions {
			want := skydnsView(chaseAsk(t, c.Addr, q.name, q.qtype))
			got := skydnsView(chaseAsk(t, d.Addr, q.name, q.qtype))
			if got != want {
				t.Errorf("%s: %s %s:\ndnsd:    %s\ncoredns: %s", what, q.name, dns.TypeToString[q.qtype], got, want)
			}
		}
	}
	compare("Knot up")
	// Spelled out, so two answers that both lack the upstream's records
	// cannot pass unnoticed.
	for q, want := range map[string]string{
		"ext.chase.test. A":             "NOERROR aa=true\nanswer:\n  ext.chase.test. 300 IN CNAME www.example.net.\n  www.example.net. 30 IN A 192.0.2.7\n",
		"hop.chase.test. A":             "hop.chase.test. 300 IN CNAME away.other.test.\n  www.example.net. 30 IN A 192.0.2.7\n",
		"_sip._udp.sip.chase.test. SRV": "additional:\n  sip.example.net. 30 IN A 192.0.2.9\n  sip.example.net. 30 IN AAAA 2001:db8::9",
		"gone.chase.test. A":            "NOERROR aa=true\nanswer:\n  gone.chase.test. 300 IN CNAME gone.example.net.\nauthority:",
	} {
		name, qt, _ := strings.Cut(q, " ")
		if v := skydnsView(chaseAsk(t, d.Addr, name, dns.StringToType[qt])); !strings.Contains(v, want) {
			t.Errorf("%s: %s\nwant it to hold %s", q, v, want)
		}
	}

	knot.Stop()
	compare("Knot gone")
	if v := skydnsView(chaseAsk(t, d.Addr, "ext.chase.test.", dns.TypeA)); !strings.HasPrefix(v, "NOERROR aa=true\nanswer:\n  ext.chase.test. 300 IN CNAME www.example.net.\nauthority:") {
		t.Errorf("Knot gone: %s\nwant the CNAME alone", v)
	}
}

// chaseAsk asks with RD and EDNS(0), and waits long enough for a dead
// upstream to be given up on.
func chaseAsk(t *testing.T, addr, name string, qtype uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg).SetQuestion(name, qtype)
	m.SetEdns0(1232, false)
	r, _, err := (&dns.Client{Net: "udp", Timeout: 10 * time.Second}).Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s %s at %s: %v", name, dns.TypeToString[qtype], addr, err)
	}
	return r
}

//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdns/etcdns/integration/harness"
)

// externalDNS runs one reconcile of external-dns's coredns provider, a
// pinned release built by hack/tools.sh (hack/externaldns) as the binary
// tool, against etcd: desired is its endpoints file, "name type
// target[,target...]" a line.
func externalDNS(t *testing.T, tool string, etcd *harness.Etcd, zone, desired string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "endpoints.txt")
	if err := os.WriteFile(f, []byte(desired), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(harness.Tool(t, tool), "-zone", zone, "-endpoints", f)
	cmd.Env = append(os.Environ(), "ETCD_URLS="+etcd.Endpoint)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("externaldns: %v\n%s", err, out)
	}
	t.Logf("externaldns: %s", strings.TrimSpace(string(out)))
}

// hostsUnder is the host of every value under prefix in etcd, sorted, and
// whether any of them has text.
func hostsUnder(t *testing.T, cli *clientv3.Client, prefix string) (hosts []string, text bool) {
	t.Helper()
	r, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range r.Kvs {
		var v struct {
			Host string `json:"host"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(kv.Value, &v); err != nil {
			t.Fatalf("%s: %v", kv.Key, err)
		}
		hosts = append(hosts, v.Host)
		text = text || v.Text != ""
	}
	slices.Sort(hosts)
	return hosts, text
}

// TestExternalDNSWriter has external-dns's own coredns provider (with its
// TXT registry and planner, as its controller runs them) write records
// into etcd; dnsd, serving the zone as SkyDNS, and CoreDNS's etcd plugin
// must then answer the same questions the same way. A second reconcile
// changes a name's targets, deletes a name and adds one: dnsd must show
// all three. Both pinned releases: v0.22, which keeps the registry's owner
// text in names of its own, and v0.17, which also merges it into the
// first value of each name (so that CoreDNS, and dnsd with it, reads its
// CNAME value as TXT: see docs/skydns.md).
func TestExternalDNSWriter(t *testing.T) {
	t.Run("v0.22", func(t *testing.T) { testExternalDNSWriter(t, "externaldns", false) })
	t.Run("v0.17", func(t *testing.T) { testExternalDNSWriter(t, "externaldns-old", true) })
}

func testExternalDNSWriter(t *testing.T, tool string, merged bool) {
	etcd := harness.StartEtcd(t)
	cli := etcd.Client(t)
	const zone = "xdns.test"
	externalDNS(t, tool, etcd, zone, `# first reconcile
web.xdns.test A 10.3.0.1,10.3.0.2
api.xdns.test A 10.3.0.10
v6.xdns.test AAAA fd00:3::1,fd00:3::2
alias.xdns.test CNAME web.xdns.test
old.xdns.test A 10.3.0.20
`)
	if r, err := cli.Get(context.Background(), "/skydns/", clientv3.WithPrefix()); err == nil {
		for _, kv := range r.Kvs {
			t.Logf("%s %s", kv.Key, kv.Value)
		}
	}
	// What external-dns left in etcd: a random leaf per target.
	if got, text := hostsUnder(t, cli, "/skydns/test/xdns/web/"); !slices.Equal(got, []string{"10.3.0.1", "10.3.0.2"}) || text != merged {
		t.Fatalf("under /skydns/test/xdns/web/: hosts %v, text %t; want 10.3.0.1 and 10.3.0.2, text %t", got, text, merged)
	}
	d := startDnsd(t, etcd, "--dnsd.zones="+zone+"=/skydns:skydns")
	c := harness.StartCoreDNS(t, fmt.Sprintf(`.:{{.Port}} {
	bind 127.0.0.1
	etcd %s {
		path /skydns
		endpoint %s
	}
}
`, zone, etcd.Endpoint))

	questions := []struct {
		name  string
		qtype uint16
	}{
		{"web.xdns.test.", dns.TypeA},
		{"web.xdns.test.", dns.TypeAAAA},
		{"web.xdns.test.", dns.TypeTXT},
		{"api.xdns.test.", dns.TypeA},
		{"v6.xdns.test.", dns.TypeAAAA},
		{"alias.xdns.test.", dns.TypeA},
		{"alias.xdns.test.", dns.TypeCNAME},
		{"a-web.xdns.test.", dns.TypeTXT},
		{"old.xdns.test.", dns.TypeA},
		{"new.xdns.test.", dns.TypeA},
		{"nothere.xdns.test.", dns.TypeA},
	}
	compare := func() {
		t.Helper()
		for _, q := range questions {
			want := skydnsView(dnsdAsk(t, "udp", c.Addr, q.name, q.qtype, 1232))
			got := skydnsView(dnsdAsk(t, "udp", d.Addr, q.name, q.qtype, 1232))
			if got != want {
				t.Errorf("%s %s:\ndnsd:    %s\ncoredns: %s", q.name, dns.TypeToString[q.qtype], got, want)
			}
		}
	}
	// The answers spelled out, so that two servers answering nothing alike
	// cannot pass.
	answer := func(name string, qtype uint16) string {
		v := skydnsView(dnsdAsk(t, "udp", d.Addr, name, qtype, 0))
		head, _, _ := strings.Cut(v, "\nauthority:")
		return head
	}
	spelled := map[string]string{
		"web.xdns.test. A":     "NOERROR aa=true\nanswer:\n  web.xdns.test. 300 IN A 10.3.0.1\n  web.xdns.test. 300 IN A 10.3.0.2",
		"v6.xdns.test. AAAA":   "NOERROR aa=true\nanswer:\n  v6.xdns.test. 300 IN AAAA fd00:3::1\n  v6.xdns.test. 300 IN AAAA fd00:3::2",
		"alias.xdns.test. A":   "NOERROR aa=true\nanswer:\n  alias.xdns.test. 300 IN CNAME web.xdns.test.\n  web.xdns.test. 300 IN A 10.3.0.1\n  web.xdns.test. 300 IN A 10.3.0.2",
		"old.xdns.test. A":     "NOERROR aa=true\nanswer:\n  old.xdns.test. 300 IN A 10.3.0.20",
		"nothere.xdns.test. A": "NXDOMAIN aa=true\nanswer:\n  ",
	}
	if merged {
		// A name host with text is TXT to CoreDNS: the alias has no A.
		spelled["alias.xdns.test. A"] = "NOERROR aa=true\nanswer:\n  "
	}
	for q, want := range spelled {
		name, qt, _ := strings.Cut(q, " ")
		if got := answer(name, dns.StringToType[qt]); got != want {
			t.Errorf("%s: dnsd answers\n%s\nwant\n%s", q, got, want)
		}
	}
	compare()

	// Second reconcile: web's second target replaced, old deleted, new added.
	externalDNS(t, tool, etcd, zone, `# second reconcile
web.xdns.test A 10.3.0.1,10.3.0.3
api.xdns.test A 10.3.0.10
v6.xdns.test AAAA fd00:3::1,fd00:3::2
alias.xdns.test CNAME web.xdns.test
new.xdns.test A 10.3.0.30
`)
	if got, _ := hostsUnder(t, cli, "/skydns/test/xdns/web/"); !slices.Equal(got, []string{"10.3.0.1", "10.3.0.3"}) {
		t.Fatalf("hosts under /skydns/test/xdns/web/ after the second reconcile: %v, want 10.3.0.1 and 10.3.0.3", got)
	}
	for q, want := range map[string]string{
		"web.xdns.test. A": "NOERROR aa=true\nanswer:\n  web.xdns.test. 300 IN A 10.3.0.1\n  web.xdns.test. 300 IN A 10.3.0.3",
		"old.xdns.test. A": "NXDOMAIN aa=true\nanswer:\n  ",
		"new.xdns.test. A": "NOERROR aa=true\nanswer:\n  new.xdns.test. 300 IN A 10.3.0.30",
	} {
		name, qt, _ := strings.Cut(q, " ")
		start := time.Now()
		for got := answer(name, dns.StringToType[qt]); got != want; got = answer(name, dns.StringToType[qt]) {
			if time.Since(start) > 5*time.Second {
				t.Fatalf("%s after the second reconcile: dnsd answers\n%s\nwant\n%s", q, got, want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// Every name, not only the three above, as of external-dns's exit.
	dnsdCaughtUp(t, cli, d.Metrics)
	compare()
}

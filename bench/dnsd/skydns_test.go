//go:build bench

package dnsdbench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdns/etcdns/integration/harness"
)

// skydnsZone is the zone external-dns publishes into in TestSkyDNS.
const skydnsZone = "example.org"

// An xdnsName is one name external-dns manages: its record type and
// targets.
type xdnsName struct {
	name    string // absolute
	rtype   uint16
	targets []string
}

// skydnsWorld is what external-dns's coredns provider writes for n names
// (bench/skydns/run.sh): 80% with two IPv4 targets, 10% with two IPv6
// ones, 10% a CNAME to an A name of the zone. Each target is a key of
// its own under the name, its leaf 8 random hex digits, with targetstrip
// 1. The TXT registry's owner text is a name of its own ("a-<name>", one
// value, text only); even names are as releases up to v0.17 write them,
// the owner text also merged into the first target's value. The values
// are the provider's JSON, fields in its order (integration/
// externaldns_test.go logs what v0.17 and v0.22 really write).
func skydnsWorld(n int) (names []xdnsName, kvs [][2]string) {
	r := rand.New(rand.NewPCG(3, 4))
	leaf := func() string { return fmt.Sprintf("%08x", r.Int32()) }
	key := func(name, leaf string) string {
		labels := strings.Split(strings.TrimSuffix(name, "."), ".")
		slices.Reverse(labels)
		return "/skydns/" + strings.Join(labels, "/") + "/" + leaf
	}
	for i := range n {
		x := xdnsName{name: fmt.Sprintf("app%d.%s.", i, skydnsZone), rtype: dns.TypeA,
			targets: []string{fmt.Sprintf("10.%d.%d.1", 100+i/250, i%250), fmt.Sprintf("10.%d.%d.2", 100+i/250, i%250)}}
		switch i % 10 {
		case 8:
			x.rtype, x.targets = dns.TypeAAAA, []string{fmt.Sprintf("fd00:e::%x:1", i), fmt.Sprintf("fd00:e::%x:2", i)}
		case 9:
			x.rtype, x.targets = dns.TypeCNAME, []string{fmt.Sprintf("app%d.%s", i-2, skydnsZone)} // an A name
		}
		owner := fmt.Sprintf(`"heritage=external-dns,external-dns/owner=default,external-dns/resource=service/default/app%d"`, i)
		prefix := map[uint16]string{dns.TypeA: "a", dns.TypeAAAA: "aaaa", dns.TypeCNAME: "cname"}[x.rtype]
		kvs = append(kvs, [2]string{key(prefix+"-"+x.name, leaf()), fmt.Sprintf(`{"text":%q,"targetstrip":1}`, owner)})
		for j, t := range x.targets {
			text := ""
			if i%2 == 0 && j == 0 {
				text = fmt.Sprintf(`,"text":%q`, owner)
			}
			kvs = append(kvs, [2]string{key(x.name, leaf()), fmt.Sprintf(`{"host":%q%s,"targetstrip":1}`, t, text)})
		}
		names = append(names, x)
	}
	return names, kvs
}

// skydnsMix asks what clients of external-dns's names ask: the record
// type of each name (A for a CNAME name, which the servers chase inside
// the zone), a tenth of them also their other address type (NODATA), and
// one question in ten for a name that does not exist (NXDOMAIN).
func skydnsMix(t *testing.T, names []xdnsName, rate int) *mix {
	r := rand.New(rand.NewPCG(5, 6))
	m := &mix{name: "external-dns", rate: rate}
	for i, x := range names {
		qt := x.rtype
		if qt == dns.TypeCNAME {
			qt = dns.TypeA
		}
		if i%9 == 0 {
			m.queries = append(m.queries, query{fmt.Sprintf("gone%d.%s.", r.IntN(len(names)), skydnsZone), dns.TypeA})
		}
		if i%10 == 0 {
			m.queries = append(m.queries, query{x.name, dns.TypeAAAA})
		}
		// Last, so that the mix ends with a question that has an answer
		// (waitSame waits for one).
		m.queries = append(m.queries, query{x.name, qt})
	}
	var b strings.Builder
	for _, q := range m.queries {
		fmt.Fprintln(&b, q)
	}
	m.file = filepath.Join(t.TempDir(), "external-dns.txt")
	if err := os.WriteFile(m.file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return m
}

func startCoreDNSSkyDNS(t *testing.T, etcd *harness.Etcd, cache bool) *server {
	name, plugin := "coredns etcd", ""
	if cache {
		name, plugin = "coredns etcd+cache", "cache 30"
	}
	c := harness.StartCoreDNS(t, fmt.Sprintf(`.:{{.Port}} {
	bind 127.0.0.1
	%s
	etcd %s {
		path /skydns
		endpoint %s
	}
}
`, plugin, skydnsZone, etcd.Endpoint))
	return &server{name: name, addr: c.Addr, proc: c.Process, stores: []*harness.Process{etcd.Process}}
}

// TestSkyDNS compares dnsd, serving example.org as a SkyDNS zone, with
// CoreDNS's etcd plugin, with and without cache 30, on the same etcd
// holding what external-dns's coredns provider writes (skydnsWorld), in
// alternating rounds as TestPeers does; then dnsd's put-to-answer latency
// for a target external-dns changes. bench/skydns/run.sh runs it.
func TestSkyDNS(t *testing.T) {
	n, rounds, duration, clients := env("NAMES", 1000), env("ROUNDS", 5), env("DURATION", 3), env("CLIENTS", 4)
	dnsperf := harness.SystemTool(t, "dnsperf")
	names, kvs := skydnsWorld(n)
	etcd := harness.StartEtcd(t)
	cli := etcd.Client(t)
	ctx := context.Background()
	for len(kvs) > 0 {
		var ops []clientv3.Op
		for _, kv := range kvs[:min(len(kvs), 128)] {
			ops = append(ops, clientv3.OpPut(kv[0], kv[1]))
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
		kvs = kvs[len(ops):]
	}
	m := skydnsMix(t, names, env("RATE", 2000))
	ms := []*mix{m}

	addr := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	metrics := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	p := harness.StartProcess(t, harness.BuildBinary(t, "./cmd/dnsd"), []string{
		"--etcd.endpoints=" + etcd.Endpoint, "--dnsd.listen=" + addr, "--dnsd.metrics-listen=" + metrics,
		"--dnsd.zones=" + skydnsZone + "=/skydns:skydns",
	}, nil, func() error { return harness.HTTPOK("http://" + metrics + "/readyz") })
	dnsd := &server{name: "dnsd", addr: addr, proc: p, stores: []*harness.Process{etcd.Process}}
	waitSame(t, dnsd, nil, ms)
	servers := []*server{dnsd, startCoreDNSSkyDNS(t, etcd, false), startCoreDNSSkyDNS(t, etcd, true)}
	for _, s := range servers[1:] {
		waitSame(t, s, dnsd, ms)
	}

	var md strings.Builder
	say := func(text, mdText string) { fmt.Print(text); md.WriteString(mdText) }
	world := fmt.Sprintf("%d names in %s as external-dns's coredns provider writes them (2 A or 2 AAAA targets, or a CNAME; "+
		"a TXT registry name of its own, the owner text also merged into a value for half), %d keys; %s.",
		n, skydnsZone, etcdCount(t, cli), cpus())
	say(world+"\n", world+" Every server answers each query before it is measured:\n\n")
	saySanity(t, servers, ms, say)
	fmt.Printf("\n%d s runs with %d clients against each server alone, %d rounds alternating\n", duration, clients, rounds)
	for _, s := range servers {
		s.res = map[string]*result{}
	}
	st := &stage{servers: servers, paused: map[*harness.Process]bool{}}
	for round := range rounds {
		for _, s := range servers {
			st.alone(t, s)
			r, lost := s.measure(t, dnsperf, m, clients, duration)
			fmt.Printf("  round %d  %-20s %9.0f qps  p99 %6.3f ms  %6d lost\n",
				round+1, s.name, r.qps[len(r.qps)-1], r.p99s[len(r.p99s)-1], lost)
		}
	}
	st.all()
	title := fmt.Sprintf("external-dns mix: %d questions, UDP, dnsperf, %d rounds of %d s with %d clients, "+
		"dnsd/peer: the median of the rounds' paired ratios; p50/p99 at %d qps", len(m.queries), rounds, duration, clients, m.rate)
	header, rows, notes := table(t, servers, m)
	say("\n"+title+"\n"+plain(header, rows), "\n### "+title+"\n\n"+markdown(header, rows))
	for _, n := range notes {
		say("note: "+n+"\n", "\nNote: "+n+"\n")
	}
	p2a := skydnsPutToAnswer(t, cli, addr, env("CHANGES", 200))
	say("\n"+p2a+"\n", "\n"+p2a+"\n")
	if out := os.Getenv("OUT"); out != "" {
		if err := os.WriteFile(out, []byte(md.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func etcdCount(t *testing.T, cli *clientv3.Client) int64 {
	r, err := cli.Get(context.Background(), "/skydns/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return r.Count
}

// skydnsPutToAnswer changes a target of latency.example.org as
// external-dns does: the new target is put at a new random leaf, then the
// old leaf is deleted. It times from the put's return to dnsd's first
// answer holding the new target, and waits for the delete to show before
// the next change.
func skydnsPutToAnswer(t *testing.T, cli *clientv3.Client, addr string, changes int) string {
	ctx := context.Background()
	c := &dns.Client{Timeout: time.Second}
	q := new(dns.Msg).SetQuestion("latency."+skydnsZone+".", dns.TypeA)
	// answers is dnsd's A answer, sorted.
	answers := func() []string {
		r, _, err := c.Exchange(q, addr)
		if err != nil {
			return nil
		}
		var out []string
		for _, rr := range r.Answer {
			if a, ok := rr.(*dns.A); ok {
				out = append(out, a.A.String())
			}
		}
		slices.Sort(out)
		return out
	}
	wait := func(what string, ok func([]string) bool) time.Duration {
		start := time.Now()
		for !ok(answers()) {
			if time.Since(start) > 5*time.Second {
				t.Fatalf("%s not answered after 5s", what)
			}
			time.Sleep(100 * time.Microsecond)
		}
		return time.Since(start)
	}
	const stay = "10.99.0.1" // the name's other target, never changed
	if _, err := cli.Put(ctx, "/skydns/org/example/latency/0000beef", `{"host":"`+stay+`","targetstrip":1}`); err != nil {
		t.Fatal(err)
	}
	prev := ""
	var took []time.Duration
	for i := range changes {
		ip := fmt.Sprintf("10.99.%d.%d", 1+i/250, i%250+1)
		k := fmt.Sprintf("/skydns/org/example/latency/%08x", i+1)
		if _, err := cli.Put(ctx, k, `{"host":"`+ip+`","targetstrip":1}`); err != nil {
			t.Fatal(err)
		}
		took = append(took, wait("change "+ip, func(a []string) bool { return slices.Contains(a, ip) }))
		if prev != "" {
			if _, err := cli.Delete(ctx, prev); err != nil {
				t.Fatal(err)
			}
		}
		wait("delete of "+prev, func(a []string) bool { return len(a) == 2 })
		prev = k
	}
	slices.Sort(took)
	at := func(p float64) float64 {
		return float64(took[min(len(took)-1, int(p*float64(len(took))))].Microseconds()) / 1000
	}
	return fmt.Sprintf("dnsd put-to-answer in the SkyDNS zone over %d target changes: p50 %.2f ms, p99 %.2f ms, max %.2f ms "+
		"(CoreDNS etcd reads etcd per query; with cache 30 it answers the old target for up to 30 s)", changes, at(0.5), at(1-0.01), at(1))
}

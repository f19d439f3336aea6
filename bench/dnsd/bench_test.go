//go:build bench

// Package dnsdbench compares dnsd with its peers on this machine, in one
// run, on the same world (world_test.go): SERVICES ClusterIP services over
// 20 namespaces, dual-stack but a third IPv4-only, and a headless service
// with 250 endpoints. The servers, each reading that world its own way:
//
//   - dnsd, on the kube.Builder records in a real etcd;
//   - Knot DNS, on a zone file holding what dnsd answers (servers_test.go);
//   - CoreDNS's kubernetes plugin, with cache 30 (as kube deploys it) and
//     without, on the same objects in a real kube-apiserver;
//   - CoreDNS's etcd plugin with cache 30, on the same keys as dnsd.
//
// Three query mixes (mixes_test.go): positive A/AAAA hits; what glibc sends
// with ndots:5 from a pod, about 80% NXDOMAIN/NODATA; SRV of the headless
// service over TCP. Every server must first answer every mix as dnsd does.
// Then, ROUNDS times, for each mix, for each server in turn with the other
// DNS servers stopped (SIGSTOP), and the stores only they read (stage),
// dnsperf (for SRV over TCP a small client of our own, tcpperf_test.go)
// measures max throughput and, separately, latency at a fixed rate
// (measure_test.go). It prints a table per mix with dnsd's ratio to each
// peer, then dnsd's etcd put-to-answer latency, then the search mix's QPS
// of the servers reading etcd while it changes (churn_test.go).
// bench/dnsd/run.sh runs it; it is a test only so that it can use
// integration/harness.
package dnsdbench

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdns/etcdns/integration/harness"
	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/keys/kube"
)

func env(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// pick reads a comma-separated subset of all from the environment
// variable name, all of it when unset.
func pick(t *testing.T, name string, all []string) map[string]bool {
	set := map[string]bool{}
	v := os.Getenv(name)
	if v == "" {
		v = strings.Join(all, ",")
	}
	for _, x := range strings.Split(v, ",") {
		if !slices.Contains(all, x) {
			t.Fatalf("%s: %q is not one of %s", name, x, strings.Join(all, ", "))
		}
		set[x] = true
	}
	return set
}

func TestPeers(t *testing.T) {
	n, rounds, duration, clients := env("SERVICES", 1000), env("ROUNDS", 10), env("DURATION", 3), env("CLIENTS", 4)
	dnsperf := harness.SystemTool(t, "dnsperf")
	w := newWorld(t, n)
	peers := pick(t, "PEERS", []string{"knot", "coredns-kube-cache", "coredns-kube", "coredns-etcd"})

	var k *harness.KubeAPIServer
	var kubeEtcd *harness.Etcd
	if peers["coredns-kube-cache"] || peers["coredns-kube"] {
		kubeEtcd = harness.StartEtcd(t)
		k = harness.StartKubeAPIServer(t, kubeEtcd)
		w.createInKube(t, k)
	}
	etcd := harness.StartEtcd(t)
	cli := etcd.Client(t)
	b, err := kube.NewBuilder(keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: "bench"}, zone)
	if err != nil {
		t.Fatal(err)
	}
	put(t, cli, w.records(t, b), nil)
	ms := mixes(t, w, env("RATE", 5000), env("SRV_RATE", 200))
	ms = slices.DeleteFunc(ms, func(m *mix) bool { return !pick(t, "MIXES", []string{"positive", "search", "srv"})[m.name] })

	dnsd := startDnsd(t, "dnsd", harness.BuildBinary(t, "./cmd/dnsd"), etcd)
	waitSame(t, dnsd, nil, ms) // loaded
	servers := []*server{dnsd}
	if alt := os.Getenv("DNSD_ALT"); alt != "" {
		servers = append(servers, startDnsd(t, "dnsd alt", alt, etcd))
	}
	if peers["knot"] {
		servers = append(servers, startKnot(t, knotZone(t, dnsd.addr, ms)))
	}
	if peers["coredns-kube-cache"] {
		servers = append(servers, startCoreDNSKube(t, k, kubeEtcd, true))
	}
	if peers["coredns-kube"] {
		servers = append(servers, startCoreDNSKube(t, k, kubeEtcd, false))
	}
	if peers["coredns-etcd"] {
		servers = append(servers, startCoreDNSEtcd(t, etcd))
	}
	for _, s := range servers[1:] {
		waitSame(t, s, dnsd, ms) // the kubernetes plugin has synced
	}
	// The same text goes to stdout and, as Markdown, to $OUT.
	var md strings.Builder
	say := func(text, mdText string) { fmt.Print(text); md.WriteString(mdText) }
	world := fmt.Sprintf("%d services in %d namespaces (every third IPv4-only), headless big.ns0 with %d endpoints; %s.",
		n, namespaces, bigEndpoints, cpus())
	say(world+"\n", world+" Every server answers each query of each mix before it is measured:\n\n")
	saySanity(t, servers, ms, say)

	fmt.Printf("\n%d s runs with %d clients against each server alone, %d rounds alternating A B A B\n", duration, clients, rounds)
	for _, s := range servers {
		s.res = map[string]*result{}
	}
	st := &stage{servers: servers, paused: map[*harness.Process]bool{}}
	for round := range rounds {
		for _, m := range ms {
			for _, s := range servers {
				st.alone(t, s)
				r, lost := s.measure(t, dnsperf, m, clients, duration)
				fmt.Printf("  round %d  %-8s  %-24s %9.0f qps  p99 %6.3f ms  %6d lost\n",
					round+1, m.name, s.name, r.qps[len(r.qps)-1], r.p99s[len(r.p99s)-1], lost)
			}
		}
	}
	st.all()

	legend := fmt.Sprintf("QPS: max throughput, median of %d runs of %d s with %d clients, and the lowest and highest run; "+
		"dnsd/peer QPS: the median of the rounds' ratios of dnsd's run to the peer's, back to back, so that the machine's drift over the whole run cancels "+
		"(the two QPS medians, taken apart, do not cancel it); above 1 means dnsd is faster; rounds dnsd faster: runs of dnsd above the peer's run of the same round. "+
		"p50: latency of every query in %d s runs at a fixed rate, given per mix, well below capacity; "+
		"p99: the median of those runs' own p99s, since a p99 pooled over all runs is set by whichever server ran in the machine's worst seconds; "+
		"dnsd/peer p99: the median of the rounds' ratios of dnsd's p99 to the peer's, paired as QPS is; at most 1 means dnsd's tail is no longer; rounds dnsd p99 lower: runs of dnsd below the peer's run of the same round. "+
		"CPU s/run: server process user+system seconds per throughput run, and per query answered; "+
		"store: its store's in the same windows, etcd for dnsd and coredns etcd, kube-apiserver and its etcd for coredns kubernetes. "+
		"Peak RSS: VmHWM of the server process at the end. Lost: queries unanswered in both runs.", rounds, duration, clients, duration)
	say("\n"+legend+"\n", "\n"+legend+"\n")
	for _, m := range ms {
		title := map[string]string{
			"positive": "positive mix: A/AAAA of service names, all hits, UDP, dnsperf",
			"search":   "search mix: ndots:5 search-path expansion from a pod in ns0, mostly NXDOMAIN/NODATA, UDP, dnsperf",
			"srv": fmt.Sprintf("srv mix: SRV of the %d-endpoint headless service, TCP, tcpperf (dnsperf 2.10 cannot read answers over 16 KiB)",
				bigEndpoints),
		}[m.name] + fmt.Sprintf("; p50/p99 at %d qps", m.rate)
		header, rows, notes := table(t, servers, m)
		say("\n"+title+"\n"+plain(header, rows), "\n### "+title+"\n\n"+markdown(header, rows))
		for _, n := range notes {
			say("note: "+n+"\n", "\nNote: "+n+"\n")
		}
	}
	p2a := putToAnswer(t, cli, b, dnsd.addr, env("CHANGES", 200))
	say("\n"+p2a+"\n", "\n"+p2a+"\n")
	if i := slices.IndexFunc(ms, func(m *mix) bool { return m.name == "search" }); i >= 0 {
		// Only the servers that read this etcd see its changes.
		readers := slices.DeleteFunc(slices.Clone(servers), func(s *server) bool {
			return !slices.Contains(s.stores, etcd.Process)
		})
		n := env("CHURN_ROUNDS", 5)
		title := fmt.Sprintf("search mix while etcd changes: max QPS, median of %d runs of %d s, while one service's address "+
			"changes so many times a second, each change a transaction of its own; vs no changes: the median of the rounds' ratios", n, duration)
		fmt.Printf("\n%s\n", title)
		header, rows := churn(t, cli, b, dnsperf, st, readers, ms[i], clients, duration, n)
		say(plain(header, rows), "\n### "+title+"\n\n"+markdown(header, rows))
	}
	if out := os.Getenv("OUT"); out != "" {
		if err := os.WriteFile(out, []byte(md.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// waitSame waits until s answers the last question of each mix as ref
// does or, with no ref, answers it (with records, but for the search mix).
func waitSame(t *testing.T, s, ref *server, ms []*mix) {
	deadline := time.Now().Add(time.Minute)
	for _, m := range ms {
		q := m.queries[len(m.queries)-1]
		for {
			got := askAll(t, s.addr, []query{q}, m.tcp)[0]
			if ref == nil && got.err == nil && (len(got.msg.Answer) > 0 || m.name == "search") ||
				ref != nil && outcome(got) == outcome(askAll(t, ref.addr, []query{q}, m.tcp)[0]) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s does not answer %s as expected: %s", s.name, q, outcome(got))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// A stage runs the servers one at a time.
type stage struct {
	servers []*server
	paused  map[*harness.Process]bool // stores
}

// settle is how long a store gets after SIGCONT before its server is
// measured: kube-apiserver catches up on its leases and watches then.
const settle = time.Second

// alone has s answer with every other DNS server stopped (SIGSTOP), and
// every store that only they read: kube-apiserver and its etcd take a few
// percent of a CPU, in bursts, which landed in the runs of servers that
// never ask them; and dnsd's etcd, idle, for Knot and the kubernetes
// plugin.
func (st *stage) alone(t *testing.T, s *server) {
	for _, o := range st.servers {
		if o == s {
			continue
		}
		o.proc.Pause()
		for _, p := range o.stores {
			if !slices.Contains(s.stores, p) && !st.paused[p] {
				p.Pause()
				st.paused[p] = true
			}
		}
	}
	resumed := false
	for _, p := range s.stores {
		if st.paused[p] {
			p.Resume()
			st.paused[p], resumed = false, true
		}
	}
	if resumed {
		time.Sleep(settle)
	}
	s.proc.Resume()
	if err := waitAlive(s.addr); err != nil {
		t.Fatalf("%s after SIGCONT: %v", s.name, err)
	}
}

// all continues every server and store.
func (st *stage) all() {
	for p, paused := range st.paused {
		if paused {
			p.Resume()
			st.paused[p] = false
		}
	}
	time.Sleep(settle)
	for _, s := range st.servers {
		s.proc.Resume()
	}
}

func waitAlive(addr string) error {
	var err error
	for range 50 {
		if err = harness.DNSAlive(addr); err == nil {
			return nil
		}
	}
	return err
}

// putToAnswer changes one service's address repeatedly and polls dnsd
// until it answers the new one: the time from the transaction's return to
// the first answer that shows it.
func putToAnswer(t *testing.T, cli *clientv3.Client, b kube.Builder, addr string, changes int) string {
	c := &dns.Client{Timeout: time.Second}
	q := new(dns.Msg).SetQuestion("latency.bench.svc.cluster.local.", dns.TypeA)
	var prev []keys.Record
	var took []time.Duration
	for i := range changes {
		ip := fmt.Sprintf("10.97.%d.%d", i/250, i%250+1)
		recs, del, err := readdress(b, "bench", "latency", ip, prev)
		if err != nil {
			t.Fatal(err)
		}
		put(t, cli, recs, del)
		start := time.Now()
		for {
			r, _, err := c.Exchange(q, addr)
			if err == nil && len(r.Answer) == 1 && r.Answer[0].(*dns.A).A.String() == ip {
				break
			}
			if time.Since(start) > 5*time.Second {
				t.Fatalf("change %d not answered after 5s", i)
			}
			time.Sleep(100 * time.Microsecond)
		}
		took = append(took, time.Since(start))
		prev = recs
	}
	slices.Sort(took)
	at := func(p float64) float64 {
		return float64(took[min(len(took)-1, int(p*float64(len(took))))].Microseconds()) / 1000
	}
	return fmt.Sprintf("dnsd etcd put-to-answer over %d changes: p50 %.2f ms, p99 %.2f ms, max %.2f ms", changes, at(0.5), at(0.99), at(1))
}

func cpus() string {
	out, err := exec.Command("nproc").Output()
	if err != nil {
		return "? CPUs"
	}
	return strings.TrimSpace(string(out)) + " CPUs"
}

// saySanity says sanity's lines, as a nested Markdown list for the report.
func saySanity(t *testing.T, servers []*server, ms []*mix, say func(text, mdText string)) {
	t.Helper()
	for _, l := range sanity(t, servers, ms) {
		item, nested := strings.CutPrefix(l, "  ")
		say(l+"\n", map[bool]string{false: "- ", true: "  - "}[nested]+item+"\n")
	}
}

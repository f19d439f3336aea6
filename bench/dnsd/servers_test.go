//go:build bench

package dnsdbench

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/etcdns/etcdns/integration/harness"
)

// A server is one DNS server under test. Its store is what it reads its
// data from while serving (etcd, or kube-apiserver and its etcd), whose CPU
// time is shown in a column of its own; Knot has none.
type server struct {
	name   string
	addr   string
	proc   *harness.Process
	stores []*harness.Process
	res    map[string]*result // by mix name
}

// startDnsd runs the dnsd binary at bin, named name in the tables.
func startDnsd(t *testing.T, name, bin string, etcd *harness.Etcd) *server {
	addr := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	metrics := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	p := harness.StartProcess(t, bin, []string{
		"--etcd.endpoints=" + etcd.Endpoint, "--dnsd.listen=" + addr, "--dnsd.metrics-listen=" + metrics,
	}, nil, func() error { return harness.HTTPOK("http://" + metrics + "/readyz") })
	return &server{name: name, addr: addr, proc: p, stores: []*harness.Process{etcd.Process}}
}

func startCoreDNSEtcd(t *testing.T, etcd *harness.Etcd) *server {
	c := harness.StartCoreDNS(t, fmt.Sprintf(`.:{{.Port}} {
	bind 127.0.0.1
	cache 30
	etcd cluster.local in-addr.arpa ip6.arpa {
		path /skydns
		endpoint %s
	}
}
`, etcd.Endpoint))
	return &server{name: "coredns etcd+cache", addr: c.Addr, proc: c.Process, stores: []*harness.Process{etcd.Process}}
}

// startCoreDNSKube runs the kubernetes plugin as kubeadm configures it
// (ttl 30, pods insecure), with or without "cache 30"; no forward, since
// nothing here has an upstream.
func startCoreDNSKube(t *testing.T, k *harness.KubeAPIServer, kubeEtcd *harness.Etcd, cache bool) *server {
	name, plugin := "coredns kubernetes", ""
	if cache {
		name, plugin = "coredns kubernetes+cache", "cache 30"
	}
	c := harness.StartCoreDNS(t, fmt.Sprintf(`.:{{.Port}} {
	bind 127.0.0.1
	%s
	kubernetes cluster.local in-addr.arpa ip6.arpa {
		kubeconfig %s harness
		pods insecure
		ttl 30
	}
}
`, plugin, k.Kubeconfig))
	return &server{name: name, addr: c.Addr, proc: c.Process, stores: []*harness.Process{k.Process, kubeEtcd.Process}}
}

func startKnot(t *testing.T, zoneFile string) *server {
	k := harness.StartKnot(t, zone, zoneFile)
	return &server{name: "knot", addr: k.Addr, proc: k.Process}
}

// knotZone is a zone file for cluster.local holding exactly what dnsd
// answers to every question of the mixes (answer and additional sections,
// so SRV targets have their addresses), plus dnsd's SOA and NS: Knot then
// serves the same data by construction.
func knotZone(t *testing.T, dnsdAddr string, ms []*mix) string {
	seen := map[string]bool{}
	var rrs []string
	add := func(rr dns.RR) {
		if rr.Header().Rrtype == dns.TypeOPT || seen[rr.String()] {
			return
		}
		seen[rr.String()] = true
		rrs = append(rrs, rr.String())
	}
	var qs []query
	for _, m := range ms {
		qs = append(qs, m.queries...)
	}
	slices.SortFunc(qs, func(a, b query) int { return strings.Compare(a.String(), b.String()) })
	qs = append([]query{{zone + ".", dns.TypeSOA}, {zone + ".", dns.TypeNS}}, slices.Compact(qs)...)
	for i, r := range askAll(t, dnsdAddr, qs, false) {
		if i == 0 && (r.err != nil || len(r.msg.Answer) != 1) {
			t.Fatalf("dnsd answers %s with %s", qs[0], outcome(r))
		}
		if r.err == nil && r.msg.Rcode == dns.RcodeSuccess {
			for _, rr := range append(r.msg.Answer, r.msg.Extra...) {
				add(rr)
			}
		}
	}
	return strings.Join(rrs, "\n") + "\n"
}

type reply struct {
	msg *dns.Msg
	err error
}

// askAll asks every question of qs, eight at a time, over UDP (TCP if tcp
// is set or the answer is truncated), without EDNS as dnsperf does.
func askAll(t *testing.T, addr string, qs []query, tcp bool) []reply {
	out := make([]reply, len(qs))
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			udp, tc := &dns.Client{Timeout: 2 * time.Second}, &dns.Client{Net: "tcp", Timeout: 2 * time.Second}
			for i := range work {
				m := new(dns.Msg).SetQuestion(qs[i].name, qs[i].qtype)
				var r *dns.Msg
				var err error
				if !tcp {
					r, _, err = udp.Exchange(m, addr)
				}
				if tcp || err != nil || r.Truncated {
					r, _, err = tc.Exchange(m, addr)
				}
				out[i] = reply{r, err}
			}
		})
	}
	for i := range qs {
		work <- i
	}
	close(work)
	wg.Wait()
	return out
}

// outcome is how the sanity check compares answers: the rcode, for NOERROR
// the number of answer records (0 is NODATA), and for a negative answer
// whether it carries the zone's SOA for negative caching.
func outcome(r reply) string {
	o := ""
	switch {
	case r.err != nil:
		return "no reply (" + r.err.Error() + ")"
	case r.msg.Rcode == dns.RcodeSuccess && len(r.msg.Answer) == 0:
		o = "NODATA"
	case r.msg.Rcode == dns.RcodeSuccess:
		return fmt.Sprintf("%d answers", len(r.msg.Answer))
	default:
		o = dns.RcodeToString[r.msg.Rcode]
	}
	if slices.ContainsFunc(r.msg.Ns, func(rr dns.RR) bool { return rr.Header().Rrtype == dns.TypeSOA }) {
		o += " with SOA"
	}
	return o
}

func negative(o string) bool {
	return strings.HasPrefix(o, "NXDOMAIN") || strings.HasPrefix(o, "NODATA")
}

// sanity asks dnsd and every peer each question of every mix before
// anything is measured. Where a peer answers NXDOMAIN and dnsd NODATA (or
// the reverse), with or without the SOA, or with another number of
// records, it says so once per kind of difference: peers may differ there
// by design. A peer that does not answer, fails, or answers where dnsd has
// nothing (or the reverse) fails the run, since the servers would not be
// doing the same work. It returns what it found, in lines, with the share
// of negative answers dnsd gives in each mix.
func sanity(t *testing.T, servers []*server, ms []*mix) (lines []string) {
	say := func(format string, a ...any) { lines = append(lines, fmt.Sprintf(format, a...)) }
	for _, m := range ms {
		qs := m.queries
		want := askAll(t, servers[0].addr, qs, m.tcp)
		counts := map[string]int{}
		for i, r := range want {
			o := outcome(r)
			if r.err != nil || !negative(o) && r.msg.Rcode != dns.RcodeSuccess {
				t.Fatalf("dnsd answers %s with %s", qs[i], o)
			}
			counts[o]++
		}
		if m.name == "search" {
			nx, nodata := 0, 0
			for o, n := range counts {
				if strings.HasPrefix(o, "NXDOMAIN") {
					nx += n
				} else if strings.HasPrefix(o, "NODATA") {
					nodata += n
				}
			}
			say("search mix: %d queries, dnsd answers %.1f%% NXDOMAIN + %.1f%% NODATA = %.1f%% negative (%s)",
				len(qs), pct(nx, len(qs)), pct(nodata, len(qs)), pct(nx+nodata, len(qs)), tally(counts))
		} else {
			say("%s mix: %d queries, dnsd answers %s", m.name, len(m.queries), tally(counts))
		}
		for _, s := range servers[1:] {
			type diff struct {
				n       int
				example query
			}
			diffs := map[string]*diff{}
			var kinds []string
			for i, r := range askAll(t, s.addr, qs, m.tcp) {
				o, w := outcome(r), outcome(want[i])
				if o == w {
					continue
				}
				k := fmt.Sprintf("differs: %s answers %s where dnsd says %s", s.name, o, w)
				if r.err != nil || !negative(o) && r.msg.Rcode != dns.RcodeSuccess || negative(o) != negative(w) {
					k = fmt.Sprintf("MISMATCH: %s answers %s where dnsd says %s", s.name, o, w)
					t.Fail()
				}
				if diffs[k] == nil {
					diffs[k] = &diff{example: qs[i]}
					kinds = append(kinds, k)
				}
				diffs[k].n++
			}
			for _, k := range kinds {
				say("  %s: %d of %d, e.g. %s", k, diffs[k].n, len(qs), diffs[k].example)
			}
			if len(kinds) == 0 {
				say("  %s: same rcode, SOA and answer count on all %d", s.name, len(qs))
			}
		}
	}
	if t.Failed() {
		t.Fatal(strings.Join(lines, "\n"))
	}
	return lines
}

// tally lists counts by outcome, largest first: "1000 x 1 answers, ...".
func tally(counts map[string]int) string {
	var outcomes, out []string
	for o := range counts {
		outcomes = append(outcomes, o)
	}
	slices.SortFunc(outcomes, func(a, b string) int { return counts[b] - counts[a] })
	for _, o := range outcomes {
		out = append(out, fmt.Sprintf("%d x %s", counts[o], o))
	}
	return strings.Join(out, ", ")
}

func pct(a, b int) float64 { return 100 * float64(a) / float64(b) }

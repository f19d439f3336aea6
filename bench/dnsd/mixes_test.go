//go:build bench

package dnsdbench

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// A mix is one dnsperf query file and how it is sent.
type mix struct {
	name    string
	tcp     bool
	rate    int // queries per second of the fixed-rate latency run
	queries []query
	file    string
}

type query struct {
	name  string // absolute
	qtype uint16
}

func (q query) String() string { return q.name + " " + dns.TypeToString[q.qtype] }

// A pod in ns0 with kubelet's resolv.conf: "search ns0.svc.cluster.local
// svc.cluster.local cluster.local" and "options ndots:5".
var searchList = []string{"ns0.svc." + zone, "svc." + zone, zone}

// Names pods look up outside the cluster. With ndots:5 every one is first
// tried under each search domain, and each of those is NXDOMAIN.
var external = []string{
	"api.github.com", "registry-1.docker.io", "auth.docker.io", "s3.amazonaws.com", "sts.amazonaws.com",
	"oauth2.googleapis.com", "storage.googleapis.com", "login.microsoftonline.com", "pypi.org", "proxy.golang.org",
}

func mixes(t *testing.T, w world, rate, srvRate int) []*mix {
	positive := &mix{name: "positive", rate: rate}
	for i, svc := range w.services {
		positive.queries = append(positive.queries, query{fqdn(svc), dns.TypeA})
		if !v4only(i) {
			positive.queries = append(positive.queries, query{fqdn(svc), dns.TypeAAAA})
		}
	}
	search := &mix{name: "search", rate: rate, queries: searchMix(w)}
	srv := &mix{name: "srv", tcp: true, rate: srvRate,
		queries: []query{{"_https._tcp." + fqdn(w.big), dns.TypeSRV}}}

	dir := t.TempDir()
	all := []*mix{positive, search, srv}
	for _, m := range all {
		var b strings.Builder
		for _, q := range m.queries {
			fmt.Fprintln(&b, q)
		}
		m.file = filepath.Join(dir, m.name+".txt")
		if err := os.WriteFile(m.file, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return all
}

// searchMix is what glibc sends for one lookup per service, of the forms
// pods use: "svc" in the pod's own namespace, "svc.ns", "svc.ns.svc",
// "svc.ns.svc.cluster.local" and, twice as often, external names. With
// ndots:5 all have too few dots, so the search list is tried first: A and
// AAAA (in parallel, as glibc does) for each candidate, until one has an
// answer. The final absolute query for an external name is left out, since
// no server here forwards. A third of the services are IPv4-only, so some
// AAAA questions are NODATA; in all about 80% of answers are negative.
func searchMix(w world) []query {
	r := rand.New(rand.NewPCG(1, 2)) // the same file every run
	var sameNS []int
	for i, svc := range w.services {
		if svc.Namespace == "ns0" {
			sameNS = append(sameNS, i)
		}
	}
	var out []query
	for l := range w.services {
		svc := w.services[r.IntN(len(w.services))]
		target := fqdn(svc)
		var name string
		switch l % 6 {
		case 0:
			svc = w.services[sameNS[r.IntN(len(sameNS))]]
			target, name = fqdn(svc), svc.Name
		case 1:
			name = svc.Name + "." + svc.Namespace
		case 2:
			name = svc.Name + "." + svc.Namespace + ".svc"
		case 3:
			name = strings.TrimSuffix(target, ".")
		default:
			name, target = external[r.IntN(len(external))], ""
		}
		var candidates []string
		for _, s := range searchList {
			candidates = append(candidates, name+"."+s+".")
		}
		if target != "" && strings.HasSuffix(name, "."+zone) {
			candidates = append(candidates, name+".")
		}
		for _, c := range candidates {
			out = append(out, query{c, dns.TypeA}, query{c, dns.TypeAAAA})
			if c == target {
				break
			}
		}
	}
	return out
}

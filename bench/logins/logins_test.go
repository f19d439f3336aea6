//go:build bench

// Package logins measures what frontends that log in to etcd with a
// password cost the members: FRONTENDS real dnsd processes, each given
// PROXIES etcd grpc-proxies as its endpoints (the node-local-proxied
// layout, whose dnsd logs in with the dnsd-etcd-auth Secret), start at
// once; then the proxy the most of them watch through is killed and they
// move. For each, the Authenticate calls etcd answered (each a bcrypt hash
// and a raft proposal), etcd's CPU, and the wall time. Each build
// (VARIANTS, as bench/changecpu's; run.sh builds them from git refs) gets
// an etcd and proxies of its own, in turn, ROUNDS times.
package logins

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/etcdns/etcdns/integration/harness"
	"github.com/etcdns/etcdns/keys"
)

func env(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

type variant struct{ name, bin string }

func variants(t *testing.T) []variant {
	spec := strings.Fields(os.Getenv("VARIANTS"))
	if len(spec) == 0 {
		return []variant{{"tree", harness.BuildBinary(t, "./cmd/dnsd")}}
	}
	var out []variant
	for _, s := range spec {
		name, bin, ok := strings.Cut(s, "=")
		if !ok {
			t.Fatalf("VARIANTS: %q: want name=path", s)
		}
		out = append(out, variant{name, bin})
	}
	return out
}

// logins is the Authenticate calls etcd has answered.
func logins(etcd *harness.Etcd) float64 {
	return harness.Metric(etcd.Endpoint, `grpc_server_handled_total{grpc_code="OK",grpc_method="Authenticate",grpc_service="etcdserverpb.Auth",grpc_type="unary"}`)
}

func TestLogins(t *testing.T) {
	n, proxies, rounds := env("FRONTENDS", 20), env("PROXIES", 2), env("ROUNDS", 1)
	vs := variants(t)
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("Machine: %d CPUs; load average at start: %s", runtime.NumCPU(), load)
	fmt.Printf("%d frontends (dnsd, default settings), each given %d grpc-proxies of one etcd member as its endpoints, logging in with a password; etcd's default --bcrypt-cost\n\n", n, proxies)
	fmt.Println("| build | round | cold start: all ready | logins | etcd CPU | a proxy killed: frontends moved | logins | etcd CPU | all answer a change after |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for round := 1; round <= rounds; round++ {
		for _, v := range vs {
			run(t, v, round, n, proxies)
		}
	}
}

func run(t *testing.T, v variant, round, n, proxies int) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	etcd := harness.StartEtcd(t)
	defer etcd.Kill()
	var ps []*harness.GRPCProxy
	var eps []string
	for range proxies { // before auth: a proxy's health check reads with no user
		p := harness.StartGRPCProxy(t, etcd.Endpoint)
		defer p.Kill()
		ps, eps = append(ps, p), append(eps, p.Endpoint)
	}
	root := etcd.EnableAuth(t, "rootpw", "dnsd", "dnsdpw", "/skydns/")
	layout := keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: "bench", TTL: 5}
	put := func(name string) float64 {
		r, err := layout.Address(name+".bench.svc.cluster.local", "bench", netip.AddrFrom4([4]byte{10, 0, 0, 1}))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := root.Put(ctx, r.Key, string(r.Value.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		return float64(resp.Header.Revision)
	}
	put("first")

	logins0, cpu0, began := logins(etcd), etcd.CPU(), time.Now()
	fes := make([]*harness.Process, n)
	metrics := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		metrics[i] = fmt.Sprintf("http://127.0.0.1:%d", harness.FreePort(t))
		wg.Add(1)
		go func() {
			defer wg.Done()
			fes[i] = harness.StartProcess(t, v.bin, []string{
				"--etcd.endpoints=" + strings.Join(eps, ","),
				fmt.Sprintf("--dnsd.listen=127.0.0.1:%d", harness.FreePort(t)),
				"--dnsd.metrics-listen=" + strings.TrimPrefix(metrics[i], "http://"),
			}, []string{"ETCDNS_ETCD_USERNAME=dnsd", "ETCDNS_ETCD_PASSWORD=dnsdpw", "GOMAXPROCS=1"}, func() error {
				return harness.HTTPOK(metrics[i] + "/readyz")
			})
		}()
	}
	wg.Wait()
	ready, startLogins, startCPU := time.Since(began), logins(etcd)-logins0, etcd.CPU()-cpu0
	defer func() {
		for _, fe := range fes {
			fe.Kill()
		}
	}()

	// Kill the proxy the most frontends watch through.
	on := make([]int, len(ps))
	for _, m := range metrics {
		for j, p := range ps {
			if harness.Metric(m, `etcdns_dnsd_watch_endpoint{endpoint="`+p.Endpoint+`"}`) == 1 {
				on[j]++
			}
		}
	}
	busiest := 0
	for j := range on {
		if on[j] > on[busiest] {
			busiest = j
		}
	}
	logins0, cpu0, began = logins(etcd), etcd.CPU(), time.Now()
	ps[busiest].Kill()
	rev := put("second")
	for _, m := range metrics {
		for harness.Metric(m, "etcdns_dnsd_etcd_revision") < rev {
			if time.Since(began) > time.Minute {
				t.Fatalf("a frontend did not show revision %v within a minute", rev)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	moved := time.Since(began)
	fmt.Printf("| %s | %d | %.2f s | %.0f | %.2f s | %d | %.0f | %.2f s | %.2f s |\n", v.name, round, ready.Seconds(), startLogins, startCPU.Seconds(),
		on[busiest], logins(etcd)-logins0, (etcd.CPU() - cpu0).Seconds(), moved.Seconds())
}

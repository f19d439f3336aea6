//go:build bench

// Package fleetbench measures a fleet of dnsd frontends on one etcd (issue
// 18 item 5): N real dnsd processes (GOMAXPROCS=1 each, as one node-local
// frontend would run), either straight on etcd or spread over K etcd
// grpc-proxies, while a writer changes CHANGES records a second and a
// probe service is readdressed once a second. Each probe change is timed
// from its put returning to the moment EVERY frontend answers the new
// address. It prints, per N and path: put-to-answer p50/p99/max over every
// (probe, frontend) pair, the slowest frontend, CPU seconds per second of
// etcd and of each proxy, and frontend RSS.
//
// The poller is one UDP socket: every 2 ms it sends one query to each
// frontend that has not yet answered the current probe, and a reader
// stamps the first right answer of each. Latencies are therefore good to
// about 2 ms, and the poller's cost falls as frontends catch up.
//
// bench/fleet/run.sh runs it; it is a test only so that it can use
// integration/harness.
package fleetbench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdns/etcdns/integration/harness"
	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/keys/kube"
)

func env(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

func envList(name, def string) []string {
	v := os.Getenv(name)
	if v == "" {
		v = def
	}
	return strings.Split(v, ",")
}

const probeName = "probe.fleet.svc.cluster.local."

func TestFleet(t *testing.T) {
	var ns []int
	for _, s := range envList("FRONTENDS", "5,10") {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("FRONTENDS: %v", err)
		}
		ns = append(ns, n)
	}
	paths := envList("PATHS", "direct,proxy")
	proxies := env(t, "PROXIES", 1)
	duration := time.Duration(env(t, "DURATION", 10)) * time.Second
	services := env(t, "SERVICES", 1000)
	changes := env(t, "CHANGES", 100)
	dnsd := harness.BuildBinary(t, "./cmd/dnsd")

	var rows []string
	for _, n := range ns {
		for _, path := range paths {
			k := 0
			if path == "proxy" {
				k = proxies
			} else if path != "direct" {
				t.Fatalf("PATHS: %q is neither direct nor proxy", path)
			}
			var row string
			t.Run(fmt.Sprintf("%d/%s", n, path), func(t *testing.T) {
				row = runFleet(t, dnsd, n, k, services, changes, duration)
			})
			rows = append(rows, row)
		}
	}
	nproc, _ := exec.Command("nproc").Output()
	model := "?"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	fmt.Printf("\nMachine: %s x %s. One etcd member; %d ClusterIP services in it (an A, a PTR and an SRV each); %d service changes/s, one probe change/s; %v of probing per row.\n\n",
		strings.TrimSpace(string(nproc)), model, services, changes, duration)
	fmt.Println("| frontends | path | probes | put to answer on every frontend p50 / p99 / max | unanswered after 1 s | slowest frontend (its p99) | etcd CPU s/s | proxy CPU s/s | frontend RSS p50 / max |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Println(r)
	}
}

// service is a ClusterIP service with one named port: an A record, a PTR
// and an SRV.
func service(name, ip string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: name},
		Spec: corev1.ServiceSpec{ClusterIP: ip, ClusterIPs: []string{ip},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
}

func records(t testing.TB, b kube.Builder, name, ip string) []keys.Record {
	recs, errs := b.Service(service(name, ip), nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return recs
}

// change replaces a service's records as the publisher does, in one
// transaction: new keys put, keys it no longer has deleted.
func change(ctx context.Context, cli *clientv3.Client, old, new []keys.Record) error {
	var ops []clientv3.Op
	keep := map[string]bool{}
	for _, r := range new {
		keep[r.Key] = true
		ops = append(ops, clientv3.OpPut(r.Key, string(r.Value.Encode())))
	}
	for _, r := range old {
		if !keep[r.Key] {
			ops = append(ops, clientv3.OpDelete(r.Key))
		}
	}
	_, err := cli.Txn(ctx).Then(ops...).Commit()
	return err
}

func ip(i int) string { return fmt.Sprintf("10.%d.%d.%d", 100+i/62500%100, i/250%250, i%250+1) }

type frontend struct {
	p    *harness.Process
	addr *net.UDPAddr
}

func runFleet(t *testing.T, dnsd string, n, k, services, changes int, duration time.Duration) string {
	etcd := harness.StartEtcd(t, harness.WithEtcdArgs("--quota-backend-bytes=8589934592"))
	cli := etcd.Client(t)
	b, err := kube.NewBuilder(keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: "fleet", TTL: 5}, "cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	all := []keys.Record{b.Version()}
	for i := range services {
		all = append(all, records(t, b, fmt.Sprintf("svc-%05d", i), ip(i))...)
	}
	probe := records(t, b, "probe", "10.99.0.1")
	all = append(all, probe...)
	for len(all) > 0 {
		m := min(len(all), 128)
		var ops []clientv3.Op
		for _, r := range all[:m] {
			ops = append(ops, clientv3.OpPut(r.Key, string(r.Value.Encode())))
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
		all = all[m:]
	}

	var pxs []*harness.GRPCProxy
	for range k {
		pxs = append(pxs, harness.StartGRPCProxy(t, etcd.Endpoint))
	}
	fes := make([]frontend, n)
	for i := range fes {
		endpoint := etcd.Endpoint
		if k > 0 {
			endpoint = pxs[i%k].Endpoint
		}
		port, metrics := harness.FreePort(t), harness.FreePort(t)
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		murl := fmt.Sprintf("http://127.0.0.1:%d", metrics)
		p := harness.StartProcess(t, dnsd, []string{
			"--etcd.endpoints=" + endpoint,
			"--dnsd.listen=" + addr,
			"--dnsd.metrics-listen=" + strings.TrimPrefix(murl, "http://"),
		}, []string{"GOMAXPROCS=1"}, func() error { return harness.HTTPOK(murl + "/readyz") })
		fes[i] = frontend{p: p, addr: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}}
	}

	// The writer: CHANGES readdresses a second, round robin over the
	// services, each one transaction.
	quit := make(chan struct{})
	var wg sync.WaitGroup
	writeErr := make(chan error, 1)
	if changes > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Second / time.Duration(changes))
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-quit:
					return
				case <-tick.C:
				}
				s := i % services
				name := fmt.Sprintf("svc-%05d", s)
				gen := i / services
				old := records(t, b, name, ip(s+gen*services))
				if err := change(ctx, cli, old, records(t, b, name, ip(s+(gen+1)*services))); err != nil {
					writeErr <- err
					return
				}
			}
		}()
	}

	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	byPort := map[int]int{}
	for i, f := range fes {
		byPort[f.addr.Port] = i
	}
	// The reader stamps, per frontend, the first answer carrying want.
	var mu sync.Mutex
	var want string
	answered := make([]time.Time, n)
	go func() {
		buf := make([]byte, 1500)
		m := new(dns.Msg)
		for {
			nb, from, err := conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			at := time.Now()
			if m.Unpack(buf[:nb]) != nil || len(m.Answer) != 1 {
				continue
			}
			a, ok := m.Answer[0].(*dns.A)
			if !ok {
				continue
			}
			i, ok := byPort[from.Port]
			mu.Lock()
			if ok && a.A.String() == want && answered[i].IsZero() {
				answered[i] = at
			}
			mu.Unlock()
		}
	}()
	q, err := new(dns.Msg).SetQuestion(probeName, dns.TypeA).Pack()
	if err != nil {
		t.Fatal(err)
	}

	cpu0 := etcd.CPU()
	pcpu0 := make([]time.Duration, k)
	for i, p := range pxs {
		pcpu0[i] = p.CPU()
	}
	start := time.Now()
	var lat []time.Duration
	perFE := make([][]time.Duration, n)
	unanswered := 0
	prev := probe
	probes := 0
	for gen := 1; time.Since(start) < duration; gen++ {
		next := records(t, b, "probe", fmt.Sprintf("10.99.%d.%d", gen/250%250, gen%250+1))
		round := time.Now()
		mu.Lock()
		want = fmt.Sprintf("10.99.%d.%d", gen/250%250, gen%250+1)
		clear(answered)
		mu.Unlock()
		if err := change(ctx, cli, prev, next); err != nil {
			t.Fatal(err)
		}
		put := time.Now()
		prev = next
		probes++
		for time.Since(put) < 900*time.Millisecond {
			mu.Lock()
			var pending []int
			for i := range fes {
				if answered[i].IsZero() {
					pending = append(pending, i)
				}
			}
			mu.Unlock()
			if len(pending) == 0 {
				break
			}
			for _, i := range pending {
				conn.WriteToUDP(q, fes[i].addr)
			}
			time.Sleep(2 * time.Millisecond)
		}
		mu.Lock()
		for i, at := range answered {
			if at.IsZero() {
				unanswered++
				continue
			}
			d := max(at.Sub(put), 0)
			lat = append(lat, d)
			perFE[i] = append(perFE[i], d)
		}
		mu.Unlock()
		time.Sleep(time.Until(round.Add(time.Second)))
	}
	elapsed := time.Since(start).Seconds()
	etcdCPU := (etcd.CPU() - cpu0).Seconds() / elapsed
	var pcpu []string
	for i, p := range pxs {
		pcpu = append(pcpu, fmt.Sprintf("%.2f", (p.CPU()-pcpu0[i]).Seconds()/elapsed))
	}
	close(quit)
	wg.Wait()
	select {
	case err := <-writeErr:
		t.Fatalf("writer: %v", err)
	default:
	}

	var rss []float64
	for _, f := range fes {
		rss = append(rss, float64(f.p.Memory()["VmRSS"])/(1<<20))
	}
	slices.Sort(rss)
	slowest, slowP99 := -1, time.Duration(-1)
	for i, l := range perFE {
		if p := pct(l, 99); p > slowP99 {
			slowest, slowP99 = i, p
		}
	}
	path := "direct"
	if k > 0 {
		path = fmt.Sprintf("%d grpc-proxy", k)
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/1e6) }
	proxyCol := strings.Join(pcpu, " + ")
	if proxyCol == "" {
		proxyCol = "-"
	}
	return fmt.Sprintf("| %d | %s | %d | %s / %s / %s ms | %d of %d | #%d (%s ms) | %.2f | %s | %.1f / %.1f MiB |",
		n, path, probes, ms(pct(lat, 50)), ms(pct(lat, 99)), ms(pct(lat, 100)), unanswered, probes*n,
		slowest, ms(slowP99), etcdCPU, proxyCol, rss[len(rss)/2], rss[len(rss)-1])
}

// pct is the p-th percentile (nearest rank) of ds; -1 if empty.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return -1
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s) + 99) / 100
	return s[max(min(i, len(s))-1, 0)]
}

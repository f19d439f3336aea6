//go:build bench

// Package dnsdbench compares dnsd with its peers on this machine, in one
// run: the same 1,000 services served by dnsd (keys in a real etcd),
// CoreDNS's etcd plugin with cache on the same keys, and CoreDNS's
// kubernetes plugin, with and without cache, on the same objects in a real
// kube-apiserver. dnsperf drives each in turn, ROUNDS times, alternating so
// that drift on a shared machine hits all alike. It prints a table of QPS
// and latency with dnsd's ratio to each peer, then dnsd's put-to-answer
// latency. bench/dnsd/run.sh runs it; it is a test only so that it can use
// integration/harness.
package dnsdbench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	"k8s.io/client-go/kubernetes"

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

type server struct {
	name string
	addr string
	qps  []float64
	avg  []float64 // ms
	lost int
}

func TestPeers(t *testing.T) {
	n, rounds, duration, clients := env("SERVICES", 1000), env("ROUNDS", 2), env("DURATION", 10), env("CLIENTS", 4)
	withKube := os.Getenv("KUBE") != "0"
	dnsperf := harness.SystemTool(t, "dnsperf")

	services := make([]*corev1.Service, n)
	for i := range services {
		services[i] = &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns%d", i%20), Name: fmt.Sprintf("svc%d", i)},
			Spec: corev1.ServiceSpec{
				Ports:      []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}},
				ClusterIP:  fmt.Sprintf("10.96.%d.%d", 10+i/250, i%250+1),
				ClusterIPs: []string{fmt.Sprintf("10.96.%d.%d", 10+i/250, i%250+1)},
			},
		}
	}
	var kubeconfig string
	if withKube {
		k := harness.StartKubeAPIServer(t, harness.StartEtcd(t))
		kubeconfig = k.Kubeconfig
		createInKube(t, k, services)
	}

	etcd := harness.StartEtcd(t)
	cli := etcd.Client(t)
	b, err := kube.NewBuilder(keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: "bench"}, "cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	recs := []keys.Record{b.Version()}
	var queries strings.Builder
	for _, svc := range services {
		r, errs := b.Service(svc, nil)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		recs = append(recs, r...)
		fmt.Fprintf(&queries, "%s.%s.svc.cluster.local A\n", svc.Name, svc.Namespace)
	}
	put(t, cli, recs, nil)
	queryFile := filepath.Join(t.TempDir(), "queries.txt")
	if err := os.WriteFile(queryFile, []byte(queries.String()), 0o644); err != nil {
		t.Fatal(err)
	}

	dnsdAddr := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	metrics := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	harness.StartProcess(t, harness.BuildBinary(t, "./cmd/dnsd"), []string{
		"--etcd.endpoints=" + etcd.Endpoint, "--dnsd.listen=" + dnsdAddr, "--dnsd.metrics-listen=" + metrics,
	}, nil, func() error { return harness.HTTPOK("http://" + metrics + "/readyz") })
	servers := []*server{{name: "dnsd", addr: dnsdAddr}}

	coreEtcd := harness.StartCoreDNS(t, fmt.Sprintf(`.:{{.Port}} {
	bind 127.0.0.1
	cache 30
	etcd cluster.local in-addr.arpa ip6.arpa {
		path /skydns
		endpoint %s
	}
}
`, etcd.Endpoint))
	servers = append(servers, &server{name: "coredns etcd+cache", addr: coreEtcd.Addr})
	if withKube {
		for _, c := range []struct{ name, cache string }{{"coredns kubernetes", ""}, {"coredns kubernetes+cache", "cache 30"}} {
			cd := harness.StartCoreDNS(t, fmt.Sprintf(`.:{{.Port}} {
	bind 127.0.0.1
	%s
	kubernetes cluster.local in-addr.arpa ip6.arpa {
		kubeconfig %s harness
		pods insecure
	}
}
`, c.cache, kubeconfig))
			servers = append(servers, &server{name: c.name, addr: cd.Addr})
		}
	}
	// Every server answers the last service before any is measured.
	last := fmt.Sprintf("%s.%s.svc.cluster.local.", services[n-1].Name, services[n-1].Namespace)
	for _, s := range servers {
		waitAnswer(t, s.addr, last, services[n-1].Spec.ClusterIP)
	}

	fmt.Printf("dnsperf -c %d -l %d, %d service names, %d rounds, %s\n", clients, duration, n, rounds, cpus())
	for round := range rounds {
		for _, s := range servers {
			qps, avg, lost := perf(t, dnsperf, s.addr, queryFile, clients, duration)
			s.qps, s.avg, s.lost = append(s.qps, qps), append(s.avg, avg), s.lost+lost
			fmt.Printf("  round %d  %-26s %10.0f qps %8.3f ms avg %6d lost\n", round+1, s.name, qps, avg, lost)
		}
	}
	fmt.Printf("\n%-26s %12s %16s %10s %16s\n", "server", "mean QPS", "avg latency ms", "lost", "dnsd QPS ratio")
	d := mean(servers[0].qps)
	for _, s := range servers {
		ratio := "-"
		if s != servers[0] {
			ratio = fmt.Sprintf("%.2fx", d/mean(s.qps))
		}
		fmt.Printf("%-26s %12.0f %16.3f %10d %16s\n", s.name, mean(s.qps), mean(s.avg), s.lost, ratio)
	}
	fmt.Println()
	putToAnswer(t, cli, b, dnsdAddr, env("CHANGES", 200))
}

func createInKube(t *testing.T, k *harness.KubeAPIServer, services []*corev1.Service) {
	cfg := k.RESTConfig()
	cfg.QPS, cfg.Burst = 1000, 1000 // client-go's default 5/s would take minutes
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 20 {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ns%d", i)}}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(services))
	work := make(chan *corev1.Service)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for svc := range work {
				if _, err := cs.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
					errs <- err
				}
			}
		}()
	}
	for _, svc := range services {
		work <- svc
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// put writes records and deletes keys in transactions of at most etcd's
// default 128 operations, as the publisher does.
func put(t *testing.T, cli *clientv3.Client, recs []keys.Record, del []string) {
	var ops []clientv3.Op
	for _, k := range del {
		ops = append(ops, clientv3.OpDelete(k))
	}
	for _, r := range recs {
		ops = append(ops, clientv3.OpPut(r.Key, string(r.Value.Encode())))
	}
	for len(ops) > 0 {
		k := min(len(ops), 128)
		if _, err := cli.Txn(context.Background()).Then(ops[:k]...).Commit(); err != nil {
			t.Fatal(err)
		}
		ops = ops[k:]
	}
}

func waitAnswer(t *testing.T, addr, name, ip string) {
	c := &dns.Client{Timeout: time.Second}
	q := new(dns.Msg).SetQuestion(name, dns.TypeA)
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if r, _, err := c.Exchange(q, addr); err == nil && len(r.Answer) == 1 {
			if a, ok := r.Answer[0].(*dns.A); ok && a.A.String() == ip {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s does not answer %s with %s", addr, name, ip)
}

var (
	reQPS  = regexp.MustCompile(`Queries per second:\s+([0-9.]+)`)
	reAvg  = regexp.MustCompile(`Average Latency \(s\):\s+([0-9.]+)`)
	reLost = regexp.MustCompile(`Queries lost:\s+([0-9]+)`)
)

func perf(t *testing.T, dnsperf, addr, queries string, clients, duration int) (qps, avgMs float64, lost int) {
	host, port, _ := strings.Cut(addr, ":")
	out, err := exec.Command(dnsperf, "-s", host, "-p", port, "-d", queries, "-c", strconv.Itoa(clients), "-l", strconv.Itoa(duration)).CombinedOutput()
	q, a, l := reQPS.FindSubmatch(out), reAvg.FindSubmatch(out), reLost.FindSubmatch(out)
	if err != nil || q == nil || a == nil || l == nil {
		t.Fatalf("dnsperf against %s: %v\n%s", addr, err, out)
	}
	qps, _ = strconv.ParseFloat(string(q[1]), 64)
	avg, _ := strconv.ParseFloat(string(a[1]), 64)
	lost, _ = strconv.Atoi(string(l[1]))
	return qps, avg * 1000, lost
}

// putToAnswer changes one service's address repeatedly and polls dnsd
// until it answers the new one: the time from the transaction's return to
// the first answer that shows it.
func putToAnswer(t *testing.T, cli *clientv3.Client, b kube.Builder, addr string, changes int) {
	c := &dns.Client{Timeout: time.Second}
	q := new(dns.Msg).SetQuestion("latency.bench.svc.cluster.local.", dns.TypeA)
	var prev []keys.Record
	var took []time.Duration
	for i := range changes {
		ip := fmt.Sprintf("10.97.%d.%d", i/250, i%250+1)
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: "latency"},
			Spec: corev1.ServiceSpec{ClusterIP: ip, ClusterIPs: []string{ip}}}
		recs, errs := b.Service(svc, nil)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		var del []string
		for _, r := range prev {
			if !slices.ContainsFunc(recs, func(n keys.Record) bool { return n.Key == r.Key }) {
				del = append(del, r.Key)
			}
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
	pct := func(p float64) float64 {
		return float64(took[min(len(took)-1, int(p*float64(len(took))))].Microseconds()) / 1000
	}
	fmt.Printf("dnsd etcd put-to-answer over %d changes: p50 %.2f ms, p99 %.2f ms, max %.2f ms\n", changes, pct(0.5), pct(0.99), pct(1))
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func cpus() string {
	out, err := exec.Command("nproc").Output()
	if err != nil {
		return "? CPUs"
	}
	return strings.TrimSpace(string(out)) + " CPUs"
}

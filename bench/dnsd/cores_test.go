//go:build bench

package dnsdbench

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/etcdns/etcdns/integration/harness"
	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/keys/kube"
)

// TestCores is the core-scaling bench (issue 20): dnsd and Knot on the
// same world, each pinned to the first C cores (dnsd with GOMAXPROCS=C,
// Knot with C UDP workers), dnsperf pinned to the cores after them, at
// every count of CORES that leaves the generator a core. Each round runs
// both servers back to back on each UDP mix; the table gives the median
// QPS, dnsd/Knot as the median of the rounds' ratios, and how busy the
// generator was: below its cores' worth of CPU, it was not the limit.
// DNSD_ALT names another dnsd binary (DNSD_ALT_ENV its extra environment,
// space-separated), measured in the same rounds beside the first: an A/B
// of two builds on the same machine, with Knot between them.
func TestCores(t *testing.T) {
	n, rounds, duration, clients := env("SERVICES", 1000), env("ROUNDS", 5), env("DURATION", 3), env("CLIENTS", 4)
	ncpu := runtime.NumCPU()
	var counts []int
	for _, s := range strings.Split(envOr("CORES", "1,2,4,8,16"), ",") {
		c, err := strconv.Atoi(s)
		if err != nil || c < 1 {
			t.Fatalf("CORES: %q", s)
		}
		if c < ncpu { // the generator needs a core of its own
			counts = append(counts, c)
		}
	}
	if len(counts) == 0 {
		t.Skipf("%d CPUs: no count of CORES leaves the load generator a core", ncpu)
	}
	dnsperf := harness.SystemTool(t, "dnsperf")
	taskset := harness.SystemTool(t, "taskset")
	w := newWorld(t, n)
	etcd := harness.StartEtcd(t)
	b, err := kube.NewBuilder(keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: "bench"}, zone)
	if err != nil {
		t.Fatal(err)
	}
	put(t, etcd.Client(t), w.records(t, b), nil)
	ms := mixes(t, w, env("RATE", 5000), env("SRV_RATE", 200))
	ms = slices.DeleteFunc(ms, func(m *mix) bool { return m.tcp })
	bin := harness.BuildBinary(t, "./cmd/dnsd")

	// The zone Knot serves is what an unpinned dnsd answers, as in TestPeers.
	ref := startDnsd(t, "dnsd", bin, etcd)
	waitSame(t, ref, nil, ms)
	zoneFile := knotZone(t, ref.addr, ms)
	ref.proc.Stop()

	alt := os.Getenv("DNSD_ALT")
	type cell struct {
		dnsd, knot, ratio        []float64
		alt, altRatio, acpu, asw []float64
		// CPU a query (us) and thread switches a 1,000 queries, each server
		dcpu, kcpu, dsw, ksw []float64
	}
	type gen struct{ dnsd, knot []float64 } // generator CPU / its cores' worth
	results := map[int]map[string]*cell{}
	gens := map[int]map[string]*gen{}
	spread := map[int]float64{} // dnsd's busiest socket's datagrams over the mean
	for _, c := range counts {
		serverCPUs := cpuList(0, c)
		loadCPUs := cpuList(c, ncpu-c)
		addr := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
		metrics := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
		d := harness.StartProcess(t, taskset, []string{"-c", serverCPUs, bin,
			"--etcd.endpoints=" + etcd.Endpoint, "--dnsd.listen=" + addr, "--dnsd.metrics-listen=" + metrics,
		}, []string{fmt.Sprintf("GOMAXPROCS=%d", c)}, func() error { return harness.HTTPOK("http://" + metrics + "/readyz") })
		k := harness.StartKnot(t, zone, zoneFile, harness.KnotWorkers(c), harness.KnotCPUs(serverCPUs))
		dn := &server{name: "dnsd", addr: addr, proc: d}
		kn := &server{name: "knot", addr: k.Addr, proc: k.Process}
		waitSame(t, dn, nil, ms)
		waitSame(t, kn, dn, ms)
		var a *harness.Process
		var altAddr string
		if alt != "" {
			altAddr = fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
			altMetrics := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
			a = harness.StartProcess(t, taskset, []string{"-c", serverCPUs, alt,
				"--etcd.endpoints=" + etcd.Endpoint, "--dnsd.listen=" + altAddr, "--dnsd.metrics-listen=" + altMetrics,
			}, append([]string{fmt.Sprintf("GOMAXPROCS=%d", c)}, strings.Fields(os.Getenv("DNSD_ALT_ENV"))...),
				func() error { return harness.HTTPOK("http://" + altMetrics + "/readyz") })
			waitSame(t, &server{name: "dnsd alt", addr: altAddr, proc: a}, dn, ms)
			a.Pause()
		}
		results[c], gens[c] = map[string]*cell{}, map[string]*gen{}
		for _, m := range ms {
			results[c][m.name], gens[c][m.name] = &cell{}, &gen{}
		}
		// Both stay up; the one not measured is paused so that it takes
		// nothing from the one that is.
		for round := range rounds {
			for _, m := range ms {
				k.Pause()
				d0 := spentBy(d.Pid())
				dq, dg := pinnedLoad(t, taskset, loadCPUs, dnsperf, addr, m, clients, duration, ncpu-c)
				d1 := spentBy(d.Pid())
				k.Resume()
				d.Pause()
				k0 := spentBy(k.Pid())
				kq, kg := pinnedLoad(t, taskset, loadCPUs, dnsperf, k.Addr, m, clients, duration, ncpu-c)
				k1 := spentBy(k.Pid())
				d.Resume()
				r, g := results[c][m.name], gens[c][m.name]
				r.dnsd, r.knot, r.ratio = append(r.dnsd, dq), append(r.knot, kq), append(r.ratio, dq/kq)
				dcpu, dsw := d1.less(d0).per(dq * float64(duration))
				kcpu, ksw := k1.less(k0).per(kq * float64(duration))
				r.dcpu, r.kcpu, r.dsw, r.ksw = append(r.dcpu, dcpu), append(r.kcpu, kcpu), append(r.dsw, dsw), append(r.ksw, ksw)
				g.dnsd, g.knot = append(g.dnsd, dg), append(g.knot, kg)
				if a != nil {
					d.Pause()
					k.Pause()
					a.Resume()
					a0 := spentBy(a.Pid())
					aq, _ := pinnedLoad(t, taskset, loadCPUs, dnsperf, altAddr, m, clients, duration, ncpu-c)
					acpu, asw := spentBy(a.Pid()).less(a0).per(aq * float64(duration))
					a.Pause()
					k.Resume()
					d.Resume()
					r.alt, r.altRatio, r.acpu, r.asw = append(r.alt, aq), append(r.altRatio, aq/kq), append(r.acpu, acpu), append(r.asw, asw)
					fmt.Printf("  %d core(s)  round %d  %-8s  dnsd alt %9.0f qps\n", c, round+1, m.name, aq)
				}
				fmt.Printf("  %d core(s)  round %d  %-8s  dnsd %9.0f qps (generator %3.0f%%)  knot %9.0f qps (generator %3.0f%%)\n",
					c, round+1, m.name, dq, 100*dg, kq, 100*kg)
			}
		}
		spread[c] = socketSpread("http://"+metrics, c)
		d.Stop()
		k.Stop()
		if a != nil {
			a.Stop() // continues it first
		}
	}

	var md strings.Builder
	fmt.Fprintf(&md, "Machine: %s, %s. %d services; dnsd (GOMAXPROCS=C) and Knot (C UDP workers) pinned to cores 0..C-1, dnsperf (-c %d, one thread per core) to the rest; %d rounds of %d s per server, mix and count, the idle server paused.\n\n",
		cpus(), cpuModel(), n, clients, rounds, duration)
	md.WriteString("| server cores | mix | dnsd QPS | Knot QPS | dnsd / Knot | generator busy (dnsd / Knot runs) | dnsd's busiest socket / mean | server CPU a query, dnsd / Knot | thread switches a 1,000 queries, dnsd / Knot |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range counts {
		for _, m := range ms {
			r, g := results[c][m.name], gens[c][m.name]
			fmt.Fprintf(&md, "| %d | %s | %.0f | %.0f | %.2fx | %.0f%% / %.0f%% of %d core(s) | %.2f | %.2f / %.2f us | %.0f / %.0f |\n",
				c, m.name, median(r.dnsd), median(r.knot), median(r.ratio), 100*median(g.dnsd), 100*median(g.knot), ncpu-c, spread[c],
				median(r.dcpu), median(r.kcpu), median(r.dsw), median(r.ksw))
		}
	}
	var skipped []string
	for _, s := range strings.Split(envOr("CORES", "1,2,4,8,16"), ",") {
		if c, _ := strconv.Atoi(s); c >= ncpu {
			skipped = append(skipped, s)
		}
	}
	if alt != "" {
		fmt.Fprintf(&md, "\ndnsd alt (%s, environment %q), measured after dnsd and Knot in each round:\n\n", alt, os.Getenv("DNSD_ALT_ENV"))
		md.WriteString("| server cores | mix | dnsd QPS | dnsd alt QPS | alt / Knot | server CPU a query, dnsd / alt | thread switches a 1,000 queries, dnsd / alt |\n|---|---|---|---|---|---|---|\n")
		for _, c := range counts {
			for _, m := range ms {
				r := results[c][m.name]
				fmt.Fprintf(&md, "| %d | %s | %.0f | %.0f | %.2fx | %.2f / %.2f us | %.0f / %.0f |\n",
					c, m.name, median(r.dnsd), median(r.alt), median(r.altRatio), median(r.dcpu), median(r.acpu), median(r.dsw), median(r.asw))
			}
		}
	}
	if len(skipped) > 0 {
		fmt.Fprintf(&md, "\nNot measured here (the load generator needs cores of its own): %s server cores.\n", strings.Join(skipped, ", "))
	}
	md.WriteString("\nA generator busy well below 100% of its cores was not the limit; near 100%, the figure is the generator's as much as the server's.\n")
	md.WriteString("Server CPU a query and thread switches a 1,000 queries: the server process's CPU and the context switches of all its threads over each run, over the queries answered; a cost a query that grows with the cores is the server's own scaling limit, and switches that grow with it say where.\n")
	md.WriteString("dnsd's busiest socket / mean: datagrams read by the busiest of dnsd's C sockets (SO_REUSEPORT, one reader each) over all the runs at that count, against the mean; the kernel spreads dnsperf's clients by address and port, and 1.00 is an even spread.\n")
	fmt.Print("\n" + md.String())
	if out := os.Getenv("OUT"); out != "" {
		if err := os.WriteFile(out, []byte(md.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// spent is what a process has spent so far: its CPU, and the context
// switches of all its threads (a server whose readers park and wake often
// pays for it in switches, which are dear on a virtual machine).
type spent struct {
	cpu      time.Duration
	switches float64
}

func spentBy(pid int) spent {
	return spent{harness.ProcCPU(pid), float64(harness.ProcSwitches(pid))}
}

func (s spent) less(o spent) spent { return spent{s.cpu - o.cpu, s.switches - o.switches} }

// per is the CPU in us a query and the switches a 1,000 queries.
func (s spent) per(queries float64) (us, switches float64) {
	if queries <= 0 {
		return 0, 0
	}
	return float64(s.cpu.Microseconds()) / queries, 1000 * s.switches / queries
}

// socketSpread is the datagrams read by the busiest of dnsd's n UDP
// sockets over the mean (etcdns_dnsd_udp_socket_queries_total), or 0 when
// the metrics do not say.
func socketSpread(metrics string, n int) float64 {
	var sum, most float64
	for i := range n {
		v := harness.Metric(metrics, fmt.Sprintf(`etcdns_dnsd_udp_socket_queries_total{socket="%d"}`, i))
		if v < 0 {
			return 0
		}
		sum, most = sum+v, max(most, v)
	}
	if sum == 0 {
		return 0
	}
	return most / (sum / float64(n))
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// cpuList is taskset's list of n CPUs from first.
func cpuList(first, n int) string {
	if n == 1 {
		return strconv.Itoa(first)
	}
	return fmt.Sprintf("%d-%d", first, first+n-1)
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "model name"); ok {
			return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
		}
	}
	return "?"
}

// pinnedLoad runs dnsperf at max throughput on cpus (one thread per core)
// and returns its QPS and how busy it was: its CPU time over its cores'
// worth of the run.
func pinnedLoad(t *testing.T, taskset, cpus, dnsperf, addr string, m *mix, clients, duration, cores int) (qps, busy float64) {
	host, port, _ := strings.Cut(addr, ":")
	args := []string{"-c", cpus, dnsperf, "-s", host, "-p", port, "-d", m.file,
		"-c", strconv.Itoa(max(clients, cores)), "-T", strconv.Itoa(cores), "-l", strconv.Itoa(duration)}
	f, err := os.CreateTemp("", "dnsperf-*.out")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	cmd := exec.Command(taskset, args...)
	cmd.Stdout, cmd.Stderr = f, f
	start := time.Now()
	err = cmd.Run()
	wall := time.Since(start)
	out, rerr := os.ReadFile(f.Name())
	if err != nil || rerr != nil {
		t.Fatalf("dnsperf %s: %v\n%s", strings.Join(args, " "), errors.Join(err, rerr), tail(out))
	}
	used := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return parseFloat(t, reQPS, out), used.Seconds() / (wall.Seconds() * float64(cores))
}

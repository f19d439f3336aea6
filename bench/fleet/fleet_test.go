//go:build bench

// Package fleetbench measures a fleet of dnsd frontends on etcd (issue 18
// item 5): N real dnsd processes (GOMAXPROCS=1 each, as one node-local
// frontend would run), on one etcd member or a cluster of three, either
// straight on etcd or spread over K etcd grpc-proxies, while P writers
// (the publishers of P clusters) change CHANGES records a second in all
// and a probe service is readdressed once a second. Each probe change is
// timed from its put returning to the moment EVERY frontend answers the
// new address. It prints, per configuration: put-to-answer p50/p99/max
// over every (probe, frontend) pair, the slowest frontend, CPU seconds per
// second of each etcd member and of each proxy, frontend RSS, and the cold
// start: the N frontends are started all at once, and the time until every
// one is ready is reported with the writers' put p99 during that storm
// and after it.
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
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdns/etcdns/integration/harness"
	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/keys/kube"
	"github.com/etcdns/etcdns/server/store"
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
	base := fleet{
		proxies:  env(t, "PROXIES", 1),
		members:  env(t, "MEMBERS", 1),
		writers:  max(env(t, "WRITERS", 1), 1),
		services: env(t, "SERVICES", 1000),
		changes:  env(t, "CHANGES", 100),
		duration: time.Duration(env(t, "DURATION", 10)) * time.Second,
		jitter:   env(t, "START_JITTER_MS", -1),
		// As overlays/node-local-proxied: the proxy keeps 2,048 pages
		// whatever their size.
		proxyPage: env(t, "PROXY_PAGE_SIZE", 1000),
		pin:       env(t, "PIN", 0) == 1,
		kill:      os.Getenv("KILL"),
	}
	switch {
	case base.kill == "" || base.kill == "proxy" && base.proxies >= 2 || base.kill == "member" && base.members == 3:
	default:
		t.Fatalf("KILL=%q: proxy (with PROXIES=2 or more) or member (with MEMBERS=3)", base.kill)
	}
	if base.proxyPage < 1 {
		t.Fatalf("PROXY_PAGE_SIZE=%d: dnsd.page-size must be at least 1", base.proxyPage)
	}
	if base.pin {
		// The CPUs this process may use, which in a container need not be
		// 0..N-1; read before a run pins it to one of them.
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &set); err != nil {
			t.Fatal(err)
		}
		for c := range 1024 {
			if set.IsSet(c) {
				base.cpus = append(base.cpus, strconv.Itoa(c))
			}
		}
	}
	if base.members != 1 && base.members != 3 {
		t.Fatalf("MEMBERS=%d: 1 or 3", base.members)
	}
	dnsd := harness.BuildBinary(t, "./cmd/dnsd")

	var rows []result
	for _, n := range ns {
		for _, path := range paths {
			f := base
			f.n = n
			if path == "direct" {
				f.proxies = 0
			} else if path != "proxy" {
				t.Fatalf("PATHS: %q is neither direct nor proxy", path)
			}
			var row result
			t.Run(fmt.Sprintf("%d/%s", n, path), func(t *testing.T) {
				row = f.run(t, dnsd)
			})
			// Each row as it is measured: a run cut short keeps the rows it has.
			fmt.Println("measured:", row.row)
			if row.killed != "" {
				fmt.Println("killed:", row.killed)
			}
			rows = append(rows, row)
		}
	}
	jitter := "dnsd's default (1 s)"
	if base.jitter >= 0 {
		jitter = (time.Duration(base.jitter) * time.Millisecond).String()
	}
	pinned := "Nothing pinned: the frontends, members, proxies and writers share every core."
	if base.pin {
		pinned = "Pinned: a core for each member, each proxy, and the writers and prober; the frontends share the rest."
	}
	model := "?"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	fmt.Printf("\nMachine: %d x %s. %d etcd member(s); %d ClusterIP services in it (an A, a PTR and an SRV each, %d records); %d writer(s) making %d service changes/s in all, one probe change/s; %v of probing per row. Frontends' start jitter: %s; through a proxy, pages of %d keys (dnsd.page-size, as overlays/node-local-proxied; a build from before the setting reads 50,000). %s\n\n",
		runtime.NumCPU(), model, base.members, base.services, 3*base.services, base.writers, base.changes, base.duration, jitter, base.proxyPage, pinned)
	fmt.Println("| frontends | path | cold start: all ready | frontend CPU by then p50 / max | proxy cache hits / misses by then | etcd's bytes by then a frontend | writer put p99 in the storm / after | probes | put to answer on every frontend p50 / p99 / max | unanswered after 1 s | slowest frontend (its p99) | frontend CPU p50 / max while probed | etcd CPU s/s per member | proxy CPU s/s | watches on etcd | bytes a change to each frontend p50 / max | etcd's bytes a change, all clients | frontends' watch restarts by reason | frontend RSS p50 / max (anonymous p50 / max) |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Println(r.row)
	}
	fitModel(rows, base.changes+1)
	if base.kill == "" {
		return
	}
	fmt.Printf("\nKILL=%s: after each row, %s was killed (SIGKILL) while the writers went on, and the fleet probed for %v more: the first change, written right after the kill, waited for up to %v; the later ones, as above, up to 900 ms.\n\n",
		base.kill, map[string]string{"proxy": "proxy 0 (the frontends were each given every proxy, in turn from their own)", "member": "the leader"}[base.kill], killFor, killFirst)
	fmt.Println("| frontends | path | killed | first change after it: committed after the kill | its put to answer: answered by / max | later changes p99 | unanswered in time | watch restarts before | watch restarts after | etcd CPU s/s per member | proxy CPU s/s |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		if r.killed != "" {
			fmt.Println(r.killed)
		}
	}
}

// result is one configuration's table row and the CPU figures the cost
// model is fitted to.
type result struct {
	row               string
	path              string
	n                 int
	etcdCPU, proxyCPU float64 // CPU s/s, all members and all proxies
	measured          bool
	killed            string // KILL's row: what the fleet did after it
}

// fitModel fits, per path, CPU = fixed + per-frontend x N to the rows by
// least squares, for etcd and for the proxies, and prints the slope per
// change per frontend: what docs/fleet.md's capacity plan extrapolates.
func fitModel(rows []result, changes int) {
	byPath := map[string][]result{}
	var paths []string
	for _, r := range rows {
		if !r.measured {
			continue
		}
		if byPath[r.path] == nil {
			paths = append(paths, r.path)
		}
		byPath[r.path] = append(byPath[r.path], r)
	}
	var lines []string
	for _, p := range paths {
		rs := byPath[p]
		if len(rs) < 2 {
			continue
		}
		fit := func(y func(result) float64) (a, b float64) {
			var sx, sy, sxx, sxy float64
			for _, r := range rs {
				x := float64(r.n)
				sx, sy, sxx, sxy = sx+x, sy+y(r), sxx+x*x, sxy+x*y(r)
			}
			k := float64(len(rs))
			b = (k*sxy - sx*sy) / (k*sxx - sx*sx)
			return (sy - b*sx) / k, b
		}
		ea, eb := fit(func(r result) float64 { return r.etcdCPU })
		line := fmt.Sprintf("| %s | %d | etcd %.2f core + %.1f µs per change per frontend", p, len(rs), ea, eb/float64(changes)*1e6)
		if p != "direct" {
			pa, pb := fit(func(r result) float64 { return r.proxyCPU })
			line += fmt.Sprintf("; proxies %.2f core + %.1f µs per change per frontend", pa, pb/float64(changes)*1e6)
		}
		lines = append(lines, line+" |")
	}
	if len(lines) == 0 {
		return
	}
	fmt.Printf("\nCost model fitted to the rows above (least squares over frontend counts; %d changes/s counting the probe):\n\n", changes)
	fmt.Println("| path | rows | CPU s/s = fixed + slope x changes/s x frontends |")
	fmt.Println("|---|---|---|")
	for _, l := range lines {
		fmt.Println(l)
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

// change replaces a service's records in one transaction: every record it
// has put, keys it no longer has deleted. The publisher would leave out
// the SRV, which a readdress does not change; it stays so that the rows
// compare with earlier ones. Since dnsd takes a value written again as it
// was for no change, it costs the frontends its event and a lookup.
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
	// Bounded: a put to a member KILL killed would wait for it forever.
	ctx, cancel := context.WithTimeout(ctx, putTimeout)
	defer cancel()
	_, err := cli.Txn(ctx).Then(ops...).Commit()
	return err
}

// putTimeout bounds a writer's or the prober's change; one that fails
// moves to the next member, as the publisher does. A change sent to a
// follower while no member leads is dropped, and etcd says so only after
// its request timeout (about 7 s), so the first after a leader is killed
// commits once a retry reaches the new leader.
const putTimeout = 2 * time.Second

func ip(i int) string { return fmt.Sprintf("10.%d.%d.%d", 100+i/62500%100, i/250%250, i%250+1) }

type frontend struct {
	p       *harness.Process
	addr    *net.UDPAddr
	metrics string
}

// fleet is one configuration of the bench.
type fleet struct {
	n, proxies, members, writers, services, changes int
	jitter                                          int // dnsd's start jitter in ms; < 0: its default
	proxyPage                                       int // dnsd.page-size of the frontends on a proxy
	pin                                             bool
	cpus                                            []string // PIN: the CPUs the bench may use
	duration                                        time.Duration
	kill                                            string // KILL: "proxy", "member" or ""
}

// writeLog records the writers' put latencies by when they were made.
type writeLog struct {
	mu   sync.Mutex
	puts []timedPut
}

type timedPut struct {
	at time.Time
	d  time.Duration
}

func (w *writeLog) add(at time.Time, d time.Duration) {
	w.mu.Lock()
	w.puts = append(w.puts, timedPut{at, d})
	w.mu.Unlock()
}

// between is the latencies of the puts started in [from, to).
func (w *writeLog) between(from, to time.Time) []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []time.Duration
	for _, p := range w.puts {
		if !p.at.Before(from) && p.at.Before(to) {
			out = append(out, p.d)
		}
	}
	return out
}

// stormLimit is how long the cold start may take (STORM_LIMIT seconds,
// default 300) before the row reports the frontends still not ready
// instead of their answers.
func stormLimit(t *testing.T) time.Duration {
	return time.Duration(env(t, "STORM_LIMIT", 300)) * time.Second
}

// stillStarting is the frontends of pending whose /readyz does not yet
// answer 200, asked many at a time and none past deadline, and how many
// of them gave no answer at all within the probe's 2 s (a frontend starved
// of CPU, against one that answers that it is not ready). Asked one after
// another, a thousand starved frontends took each up to that timeout: one
// round outlasted the storm limit, and the 16-core run of 1,000 frontends
// never reported (bench/README.md, stop 34).
func stillStarting(pending []frontend, deadline time.Time) (out []frontend, silent int) {
	ready := make([]bool, len(pending))
	quiet := make([]bool, len(pending))
	askMany(pending, 128, deadline, func(i int, fe frontend) {
		err := harness.HTTPOK(fe.metrics + "/readyz")
		ready[i] = err == nil
		// Out of time, not refused (not listening yet) nor answered 503.
		quiet[i] = errors.Is(err, context.DeadlineExceeded)
	})
	for i, fe := range pending {
		if !ready[i] {
			out = append(out, fe)
			if quiet[i] {
				silent++
			}
		}
	}
	return out, silent
}

// askMany calls ask for each frontend, at most n at a time, and starts
// none past deadline (zero: none). It returns when every call has.
func askMany(fes []frontend, n int, deadline time.Time, ask func(i int, fe frontend)) {
	var wg sync.WaitGroup
	slots := make(chan struct{}, n)
	for i, fe := range fes {
		if !deadline.IsZero() && time.Now().After(deadline) {
			break
		}
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			ask(i, fe)
		}()
	}
	wg.Wait()
}

func (f fleet) run(t *testing.T, dnsd string) result {
	n, k := f.n, f.proxies
	quota := harness.WithEtcdArgs("--quota-backend-bytes=8589934592")
	var endpoints []string
	var members []*harness.Process
	var clients []*clientv3.Client // one per member
	if f.members == 1 {
		etcd := harness.StartEtcd(t, quota)
		endpoints, members, clients = []string{etcd.Endpoint}, []*harness.Process{etcd.Process}, []*clientv3.Client{etcd.Client(t)}
	} else {
		c := harness.StartEtcdCluster(t, f.members, quota)
		endpoints = c.Endpoints()
		for _, m := range c.Members {
			members = append(members, m.Process)
			clients = append(clients, m.Client(t))
		}
	}
	cli := clients[0]
	b, err := kube.NewBuilder(keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: "fleet", TTL: 5}, "cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	all := []keys.Record{b.Version()}
	for i := range f.services {
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
	// dnsd shares load revisions only past the first store.RevisionStep
	// (the revision rounded down must be one), and a real cluster is far
	// past it, every change being a revision; the bulk load above leaves
	// this one short of it.
	for rev := int64(0); rev <= store.RevisionStep; {
		r, err := cli.Put(ctx, "/fleet-bench/tick", "")
		if err != nil {
			t.Fatal(err)
		}
		rev = r.Header.Revision
	}

	var pxs []*harness.GRPCProxy
	for range k {
		pxs = append(pxs, harness.StartGRPCProxy(t, endpoints...))
	}
	// Pinned, each member and each proxy has a core of its own, as on
	// machines of their own, and the frontends share what is left after
	// one core for this process (the writers and the prober): otherwise a
	// thousand loading frontends starve the members of the CPU they need
	// to keep their leader, and the bench measures the starving.
	var pin []string // taskset's arguments for a frontend
	if f.pin {
		taskset := harness.SystemTool(t, "taskset")
		next := 0
		own := func(pid int) {
			if next >= len(f.cpus)-1 {
				t.Fatalf("PIN: %d members, %d proxies and this process need %d CPUs of %d, and the frontends one more", len(members), k, len(members)+k+1, len(f.cpus))
			}
			if out, err := exec.Command(taskset, "-a", "-p", "-c", f.cpus[next], strconv.Itoa(pid)).CombinedOutput(); err != nil {
				t.Fatalf("taskset: %v: %s", err, out)
			}
			next++
		}
		for _, m := range members {
			own(m.Pid())
		}
		for _, p := range pxs {
			own(p.Pid())
		}
		own(os.Getpid())
		pin = []string{taskset, "-c", strings.Join(f.cpus[next:], ",")}
	}

	// The writers: CHANGES readdresses a second in all, each writer its
	// own share of the services (its own cluster's) through its own
	// member, each change one transaction, every put's latency logged.
	quit := make(chan struct{})
	var wg sync.WaitGroup
	// A put etcd fails (a storm that starves the members on a small
	// machine times them out) is counted and made again: the change is
	// idempotent, and a writer that stopped would leave the rest of the
	// row measuring a fleet with nothing changing.
	var failedPuts atomic.Int64
	var lastFail atomic.Value // string
	var writes writeLog
	for w := range f.writers {
		if f.changes == 0 {
			break
		}
		wcli, moves := clients[w%len(clients)], 0
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Second * time.Duration(f.writers) / time.Duration(f.changes))
			defer tick.Stop()
			mine := (f.services - w + f.writers - 1) / f.writers // services w, w+P, w+2P, ...
			for i := 0; ; i++ {
				select {
				case <-quit:
					return
				case <-tick.C:
				}
				s := w + (i%mine)*f.writers
				name := fmt.Sprintf("svc-%05d", s)
				gen := i / mine
				old := records(t, b, name, ip(s+gen*f.services))
				at := time.Now()
				err := change(ctx, wcli, old, records(t, b, name, ip(s+(gen+1)*f.services)))
				if ctx.Err() != nil {
					return
				}
				// A failed put's wait counts too: the writer felt it.
				writes.add(at, time.Since(at))
				if err != nil {
					failedPuts.Add(1)
					// A string: an atomic.Value takes one type, and
					// errors differ in theirs.
					lastFail.Store(err.Error())
					i-- // the same change again, through the next member
					moves++
					wcli = clients[(w+moves)%len(clients)]
				}
			}
		}()
	}
	time.Sleep(2 * time.Second) // the writers' latency before the storm

	// The storm: every frontend started at once, each given every
	// endpoint (dnsd picks one at random) or its proxy.
	fes := make([]frontend, n)
	sent0 := etcdSent(endpoints)
	storm := time.Now()
	for i := range fes {
		eps := strings.Join(endpoints, ",")
		if k > 0 {
			eps = pxs[i%k].Endpoint
		}
		if k > 0 && f.kill == "proxy" {
			// Every proxy, so that those of the one killed move on: dnsd
			// starts on one of them at random.
			var all []string
			for j := range k {
				all = append(all, pxs[(i+j)%k].Endpoint)
			}
			eps = strings.Join(all, ",")
		}
		port, metrics := harness.FreePort(t), harness.FreePort(t)
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		murl := fmt.Sprintf("http://127.0.0.1:%d", metrics)
		args := []string{
			"--etcd.endpoints=" + eps,
			"--dnsd.listen=" + addr,
			"--dnsd.metrics-listen=" + strings.TrimPrefix(murl, "http://"),
		}
		if f.jitter >= 0 {
			args = append(args, fmt.Sprintf("--dnsd.start-jitter=%dms", f.jitter))
		}
		bin := dnsd
		if pin != nil {
			bin, args = pin[0], append(append(pin[1:], dnsd), args...)
		}
		environ := []string{"GOMAXPROCS=1"}
		if k > 0 {
			// The environment, not a flag: a build from before the
			// setting (ETCDNS_BIN_DIR) ignores it.
			environ = append(environ, fmt.Sprintf("ETCDNS_DNSD_PAGE_SIZE=%d", f.proxyPage))
		}
		p := harness.StartProcess(t, bin, args, append(environ, strings.Fields(os.Getenv("DNSD_ENV"))...), nil)
		fes[i] = frontend{p: p, addr: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}, metrics: murl}
	}
	defer func() {
		procs := make([]*harness.Process, len(fes))
		for i, f := range fes {
			procs[i] = f.p
		}
		harness.KillAll(procs)
	}()
	pending := slices.Clone(fes)
	limit := stormLimit(t)
	for len(pending) > 0 {
		if time.Since(storm) > limit {
			// A last pass over every one still pending, given time of its
			// own: a round cut short by the limit leaves some unasked,
			// and starved frontends answer late. If that finds them all
			// ready, the row is measured as any other, its cold start
			// the longer for the pass.
			var silent int
			if pending, silent = stillStarting(pending, time.Now().Add(30*time.Second)); len(pending) == 0 {
				break
			}
			// A finding, not a failure of the bench: the row says so and
			// the other configurations still run.
			close(quit)
			wg.Wait()
			path := "direct"
			if k > 0 {
				path = fmt.Sprintf("%d grpc-proxy", k)
			}
			ws := writes.between(storm, time.Now())
			cpu := frontendCPU(fes)
			if tail, err := os.ReadFile(pending[0].p.LogPath); err == nil {
				lines := strings.Split(strings.TrimSpace(string(tail)), "\n")
				t.Logf("a frontend not ready, the end of its log:\n%s", strings.Join(lines[max(len(lines)-8, 0):], "\n"))
			}
			return result{row: fmt.Sprintf("| %d | %s | %d of %d not ready after %v (%d of them gave no answer within 2 s; %d page retries) | %.2f / %.2f s | %s | - | %.1f / - ms | - | - | - | - | - | - | - | - | - | - | %s | - |",
				n, path, len(pending), n, limit, silent, loadRetries(fes), cpu[len(cpu)/2], cpu[len(cpu)-1], proxyCache(pxs), float64(pct(ws, 99))/1e6, watchRestarts(fes))}
		}
		pending, _ = stillStarting(pending, storm.Add(limit))
		// Not more often: every frontend answers each round, on the
		// cores the cold start needs.
		time.Sleep(100 * time.Millisecond)
	}
	coldStart := time.Since(storm)
	// What a frontend's start cost it, the load above all: read as the
	// last one turns ready, so the first ones' watches add a little.
	startCPU := frontendCPU(fes)
	stormWrites := writes.between(storm, storm.Add(coldStart))
	retried := loadRetries(fes)
	cached := proxyCache(pxs)
	// What the members sent while the fleet started, a frontend's share:
	// straight, each one's load (etcd's gRPC payload, the writers' replies
	// beside it); through proxies, what the proxies asked for.
	stormSent := "-"
	if sent1 := etcdSent(endpoints); sent0 >= 0 && sent1 >= 0 {
		stormSent = fmt.Sprintf("%.2f MB", (sent1-sent0)/float64(n)/1e6)
	}
	after := time.Now()

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

	// Restarts by the storm's end, so that the row tells them from those
	// while probed, which delay answers.
	stormRestarts, stormRead := restartCounts(fes)
	etcdCPU, proxyCPU := cpuSince(members, nil), cpuSince(proxyProcs(pxs), nil)
	fcpu0 := make([]time.Duration, n)
	for i, f := range fes {
		fcpu0[i] = harness.ProcCPU(f.p.Pid())
	}
	wire := bandwidth(fes, endpoints, &writes)
	// probing changes the probe record once a second for d, each change
	// timed from its put to its answer on every frontend; one not
	// answered within wait (the first round's firstWait) is unanswered.
	prev := probe
	gen := 0
	pcli, pmoves := cli, 0
	probing := func(d, firstWait, wait time.Duration) (p probed) {
		p.perFE = make([][]time.Duration, n)
		for start := time.Now(); time.Since(start) < d; {
			gen++
			next := records(t, b, "probe", fmt.Sprintf("10.99.%d.%d", gen/250%250, gen%250+1))
			round := time.Now()
			mu.Lock()
			want = fmt.Sprintf("10.99.%d.%d", gen/250%250, gen%250+1)
			clear(answered)
			mu.Unlock()
			for err := change(ctx, pcli, prev, next); err != nil; err = change(ctx, pcli, prev, next) {
				if pmoves++; pmoves > 2*len(clients) {
					t.Fatal(err)
				}
				pcli = clients[pmoves%len(clients)] // the next member, as a writer moves
			}
			put := time.Now()
			prev = next
			p.probes++
			if p.probes == 1 {
				p.firstPut = put
			}
			limit := wait
			if p.probes == 1 {
				limit = firstWait
			}
			for time.Since(put) < limit {
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
					p.unanswered++
					continue
				}
				d := max(at.Sub(put), 0)
				p.lat = append(p.lat, d)
				p.perFE[i] = append(p.perFE[i], d)
				if p.probes == 1 {
					p.first = append(p.first, d)
				}
			}
			mu.Unlock()
			time.Sleep(time.Until(round.Add(time.Second)))
		}
		return p
	}
	start := time.Now()
	steady := probing(f.duration, 900*time.Millisecond, 900*time.Millisecond)
	perFrontend, etcdSent := wire(steady.probes)
	lat, perFE, unanswered, probes := steady.lat, steady.perFE, steady.unanswered, steady.probes
	elapsed := time.Since(start).Seconds()
	ecpu, etcdSum := etcdCPU(elapsed)
	pcpu, proxySum := proxyCPU(elapsed)
	// What the changes cost each frontend: all it did meanwhile, the
	// probes it answered included.
	var fcpu []float64
	for i, f := range fes {
		fcpu = append(fcpu, (harness.ProcCPU(f.p.Pid())-fcpu0[i]).Seconds()/elapsed*1000)
	}
	slices.Sort(fcpu)
	afterWrites := writes.between(after, time.Now())
	// The watches etcd serves: through proxies that coalesce their
	// frontends' watches, a few per proxy; direct, one per frontend.
	watchers := 0.0
	for _, e := range endpoints {
		watchers += harness.Metric(e, "etcd_debugging_mvcc_watcher_total")
	}

	total, read := restartCounts(fes)
	restarts := fmt.Sprintf("in the storm: %s; while probed: %s", restartsText(stormRestarts, nil, stormRead, n), restartsText(total, stormRestarts, read, n))

	var rss, anon []float64
	for _, f := range fes {
		m := f.p.Memory()
		rss = append(rss, float64(m["VmRSS"])/(1<<20))
		anon = append(anon, float64(m["RssAnon"])/(1<<20))
	}
	slices.Sort(rss)
	slices.Sort(anon)
	// The row's figures are read: the kill, if any, while the writers
	// go on.
	killed := ""
	if f.kill != "" {
		killed = f.killOne(t, fes, members, clients, pxs, probing, func(i int) { pcli = clients[i] })
	}
	close(quit)
	wg.Wait()
	failed := ""
	if n := failedPuts.Load(); n > 0 {
		failed = fmt.Sprintf(", %d puts failed and were made again (the last: %v)", n, lastFail.Load())
		t.Logf("writers: %s", failed)
	}
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
	row := fmt.Sprintf("| %d | %s | %.1f s (%d page retries) | %.2f / %.2f s | %s | %s | %s / %s ms%s | %d | %s / %s / %s ms | %d of %d | #%d (%s ms) | %.1f / %.1f ms/s | %s | %s | %.0f | %s | %s | %s | %.1f / %.1f MiB (anon %.1f / %.1f) |",
		n, path, coldStart.Seconds(), retried, startCPU[len(startCPU)/2], startCPU[len(startCPU)-1], cached, stormSent, ms(pct(stormWrites, 99)), ms(pct(afterWrites, 99)), failed,
		probes, ms(pct(lat, 50)), ms(pct(lat, 99)), ms(pct(lat, 100)), unanswered, probes*n,
		slowest, ms(slowP99), fcpu[len(fcpu)/2], fcpu[len(fcpu)-1], strings.Join(ecpu, " + "), proxyCol, watchers, perFrontend, etcdSent, restarts, rss[len(rss)/2], rss[len(rss)-1], anon[len(anon)/2], anon[len(anon)-1])
	if killed != "" {
		killed = fmt.Sprintf("| %d | %s | %s", n, path, killed)
	}
	return result{row: row, path: path, n: n, etcdCPU: etcdSum, proxyCPU: proxySum, measured: true, killed: killed}
}

// bandwidth reads what the frontends have read on their watch
// connections and what the members have sent their clients, now; the
// function it returns gives, for the changes made since (the writers'
// puts in w, and the probes it is told of), the bytes a change each
// frontend read (p50 / max: the wire between it and its
// member or proxy) and the bytes a change the members sent in all (gRPC
// payload, to every client: the frontends or proxies watching, the
// writers, the probes). A frontend that could not be read, or a build
// from before etcdns_dnsd_watch_received_bytes_total, shows "-".
func bandwidth(fes []frontend, members []string, w *writeLog) func(probes int) (perFrontend, etcdSent string) {
	const watchBytes = "etcdns_dnsd_watch_received_bytes_total"
	read := func() (fe []float64, sent float64) {
		fe = make([]float64, len(fes))
		for i := range fe {
			fe[i] = -1 // not asked: past the deadline
		}
		askMany(fes, 64, time.Now().Add(metricsTime), func(i int, f frontend) { fe[i] = harness.Metric(f.metrics, watchBytes) })
		return fe, etcdSent(members)
	}
	from := time.Now()
	fe0, sent0 := read()
	return func(probes int) (string, string) {
		fe1, sent1 := read()
		changes := len(w.between(from, time.Now())) + probes
		perFrontend, etcdSent := "-", "-"
		var per []float64
		for i := range fes {
			if fe0[i] >= 0 && fe1[i] >= 0 {
				per = append(per, (fe1[i]-fe0[i])/float64(max(changes, 1)))
			}
		}
		if len(per) == len(fes) && len(per) > 0 {
			slices.Sort(per)
			perFrontend = fmt.Sprintf("%.0f / %.0f B", per[len(per)/2], per[len(per)-1])
		}
		if sent0 >= 0 && sent1 >= 0 {
			etcdSent = fmt.Sprintf("%.1f KB", (sent1-sent0)/float64(max(changes, 1))/1000)
		}
		return perFrontend, etcdSent
	}
}

// etcdSent is what the members have sent their gRPC clients, in all
// (etcd counts each message's payload); -1 if a member cannot be read.
func etcdSent(members []string) float64 {
	sent := 0.0
	for _, m := range members {
		v := harness.Metric(m, "etcd_network_client_grpc_sent_bytes_total")
		if v < 0 {
			return -1
		}
		sent += v
	}
	return sent
}

// cpuSince reads each process's CPU now; the function it returns gives
// each one's CPU seconds a second since, over elapsed seconds, formatted,
// and their sum. gone, about to be killed, is not read and shows as
// "killed".
func cpuSince(procs []*harness.Process, gone *harness.Process) func(elapsed float64) ([]string, float64) {
	cpu0 := make([]time.Duration, len(procs))
	for i, p := range procs {
		if p != gone {
			cpu0[i] = p.CPU()
		}
	}
	return func(elapsed float64) (out []string, sum float64) {
		for i, p := range procs {
			if p == gone {
				out = append(out, "killed")
				continue
			}
			c := (p.CPU() - cpu0[i]).Seconds() / elapsed
			sum += c
			out = append(out, fmt.Sprintf("%.2f", c))
		}
		return out, sum
	}
}

func proxyProcs(pxs []*harness.GRPCProxy) []*harness.Process {
	out := make([]*harness.Process, len(pxs))
	for i, p := range pxs {
		out[i] = p.Process
	}
	return out
}

// leader is the index of the member that leads, by its own Status.
func leader(t *testing.T, clients []*clientv3.Client) int {
	for i, c := range clients {
		ctx, cancel := context.WithTimeout(context.Background(), putTimeout)
		st, err := c.Status(ctx, c.Endpoints()[0])
		cancel()
		if err == nil && st.Leader == st.Header.MemberId {
			return i
		}
	}
	t.Fatal("no member says it leads")
	return -1
}

// probed is what a spell of probing saw.
type probed struct {
	lat        []time.Duration   // every answer's put to answer
	perFE      [][]time.Duration // by frontend
	first      []time.Duration   // the first probe's, by frontend that answered it
	firstPut   time.Time         // when the first probe's change was committed
	unanswered int
	probes     int
}

// killFor is how long the fleet is probed after KILL's kill, and how long
// the first probe, written right after it, is waited for.
const (
	killFor   = 10 * time.Second
	killFirst = 10 * time.Second
)

// killOne kills proxy 0 (KILL=proxy) or the leader (KILL=member) while the
// writers go on, probes the fleet for killFor, and returns the rest of
// the KILL table's row: how long the first change after the kill took to
// reach every frontend (the most any was blind), the next changes' p99,
// changes a frontend did not answer in time, the restarts it caused by
// reason (a relist shows as compacted), and what the members and the
// proxies left spent meanwhile.
func (f fleet) killOne(t *testing.T, fes []frontend, members []*harness.Process, clients []*clientv3.Client, pxs []*harness.GRPCProxy,
	probing func(d, firstWait, wait time.Duration) probed, probeVia func(member int)) string {
	before := watchRestarts(fes)
	what := "proxy 0"
	var gone *harness.Process
	if f.kill == "proxy" {
		gone = pxs[0].Process
	} else {
		// The leader: the cluster elects another before it commits the
		// next change, the longest a member's loss can hold one back.
		l := leader(t, clients)
		what, gone = fmt.Sprintf("the leader (member %d)", l), members[l]
		// The probe is written through another member, which commits it
		// as soon as a new leader is elected: the first change's put to
		// answer then spans the frontends' move off the member killed.
		probeVia((l + 1) % len(clients))
	}
	etcdCPU, proxyCPU := cpuSince(members, gone), cpuSince(proxyProcs(pxs), gone)
	start := time.Now()
	gone.Kill()
	p := probing(killFor, killFirst, 900*time.Millisecond)
	elapsed := time.Since(start).Seconds()
	ecpu, _ := etcdCPU(elapsed)
	pcpu, _ := proxyCPU(elapsed)
	if len(pcpu) == 0 {
		pcpu = []string{"-"}
	}
	ms := func(d time.Duration) string {
		if d < 0 {
			return "-" // none measured
		}
		return fmt.Sprintf("%.1f", float64(d)/1e6)
	}
	return fmt.Sprintf("%s | %s ms | %d of %d frontends, max %s ms | %s ms | %d of %d | %s | %s | %s | %s |",
		what, ms(p.firstPut.Sub(start)), len(p.first), len(fes), ms(pct(p.first, 100)), ms(pct(p.lat[len(p.first):], 99)), p.unanswered, p.probes*len(fes),
		before, watchRestarts(fes), strings.Join(ecpu, " + "), strings.Join(pcpu, " + "))
}

// frontendCPU is each frontend's CPU seconds so far, sorted.
func frontendCPU(fes []frontend) []float64 {
	var out []float64
	for _, f := range fes {
		out = append(out, harness.ProcCPU(f.p.Pid()).Seconds())
	}
	slices.Sort(out)
	return out
}

// proxyCache is how many reads the proxies answered from their caches and
// how many they passed to etcd: in a storm, the loads' pages at a shared
// revision (dnsd's store.RevisionStep) that one frontend's read brought in.
func proxyCache(pxs []*harness.GRPCProxy) string {
	if len(pxs) == 0 {
		return "-"
	}
	var hits, misses float64
	for _, p := range pxs {
		hits += harness.Metric(p.Endpoint+"/proxy", "etcd_grpc_proxy_cache_hits_total")
		misses += harness.Metric(p.Endpoint+"/proxy", "etcd_grpc_proxy_cache_misses_total")
	}
	return fmt.Sprintf("%.0f / %.0f", hits, misses)
}

// loadRetries is how many pages of their loads the frontends had to ask
// for again (etcdns_dnsd_load_retries_total, summed): a storm that etcd
// cannot serve within the request timeout shows here. Asked many at a
// time, as stillStarting asks: a thousand starved frontends read one after
// another outlasted the 16-core run's deadline (stop 37).
func loadRetries(fes []frontend) int {
	var total atomic.Int64
	askMany(fes, 64, time.Now().Add(metricsTime), func(_ int, fe frontend) {
		if n := harness.Metric(fe.metrics, "etcdns_dnsd_load_retries_total"); n > 0 {
			total.Add(int64(n))
		}
	})
	return int(total.Load())
}

// metricsTime bounds a read of every frontend's metrics: a thousand
// starved frontends at 5 s each, 64 at a time, would take 80 s.
const metricsTime = 20 * time.Second

// watchRestarts sums etcdns_dnsd_watch_restarts_total over the frontends
// by reason, read once from each: a watch dropped after ready (a
// progress_timeout through a busy proxy, say) shows here and nowhere else
// in the row. Frontends that did not answer in time, or were not asked
// before metricsTime ran out, are counted as unread.
func watchRestarts(fes []frontend) string {
	total, read := restartCounts(fes)
	return restartsText(total, nil, read, len(fes))
}

// restartCounts is watchRestarts' sums, and how many frontends were read.
func restartCounts(fes []frontend) (total map[string]float64, read int) {
	const name = "etcdns_dnsd_watch_restarts_total{reason=\""
	var mu sync.Mutex
	total = map[string]float64{}
	askMany(fes, 64, time.Now().Add(metricsTime), func(_ int, fe frontend) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fe.metrics+"/metrics", nil)
		if err != nil {
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		counts := map[string]float64{}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			rest, ok := strings.CutPrefix(sc.Text(), name)
			if !ok {
				continue
			}
			reason, v, ok := strings.Cut(rest, "\"} ")
			n, err := strconv.ParseFloat(v, 64)
			if ok && err == nil {
				counts[reason] += n
			}
		}
		if sc.Err() != nil {
			return // cut off: a part would undercount
		}
		mu.Lock()
		defer mu.Unlock()
		read++
		for r, n := range counts {
			total[r] += n
		}
	})
	return total, read
}

// restartsText is total less before (nil: nothing), by reason, of n
// frontends of which read were read.
func restartsText(total, before map[string]float64, read, n int) string {
	var out []string
	for _, r := range slices.Sorted(maps.Keys(total)) {
		if d := total[r] - before[r]; d > 0 {
			out = append(out, fmt.Sprintf("%s %.0f", r, d))
		}
	}
	if len(out) == 0 {
		out = append(out, "none")
	}
	sum := strings.Join(out, ", ")
	if read < n {
		sum += fmt.Sprintf(" (%d unread)", n-read)
	}
	return sum
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

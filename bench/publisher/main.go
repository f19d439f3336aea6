// Command publisher benchmarks the publisher against an empty etcd: the
// initial sync of N services with M endpoints each, a restart over the
// unchanged world (which must write nothing), and the change-to-commit
// latency under a sustained rate of endpoint changes. It prints a table.
//
//	go run ./bench/publisher                         # small, for CI
//	go run ./bench/publisher -services 10000 -endpoints 10 -rate 1000
//
// etcd is the binary hack/tools.sh installs (or the one in ETCDNS_TOOLS_DIR,
// looked in first as the integration harness does: bench/remote.sh runs it
// so on a machine without the tools), started on loopback ports in a temp
// dir (-embedded runs it in this process instead, as `make run` does; -etcd
// http://127.0.0.1:2379 uses an existing, empty one). Run it from the
// repository root. The
// objects come from an in-memory source, so the figures are the publisher's
// and etcd's, not a fake API server's.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/etcdns/etcdns/config"
	"github.com/etcdns/etcdns/etcdclient"
	embedetcd "github.com/etcdns/etcdns/etcdclient/embedded"
	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/keys/kube"
	"github.com/etcdns/etcdns/publisher"
	"github.com/etcdns/etcdns/publisher/elect"
	"github.com/etcdns/etcdns/publisher/etcdstore"
	"github.com/etcdns/etcdns/publisher/source"
)

func main() {
	services := flag.Int("services", 500, "services")
	endpoints := flag.Int("endpoints", 10, "endpoints per service")
	headless := flag.Bool("headless", false, "headless services (4 records per endpoint) instead of ClusterIP")
	rate := flag.Int("rate", 200, "endpoint changes per second in the sustained phase")
	duration := flag.Duration("duration", 5*time.Second, "length of the sustained phase")
	workers := flag.Int("workers", 16, "concurrent units")
	endpoint := flag.String("etcd", "", "external etcd client URL, empty: start one (see -embedded)")
	embedded := flag.Bool("embedded", false, "run etcd in this process (go.etcd.io/etcd/server/v3/embed) instead of the etcd binary of hack/tools.sh")
	verbose := flag.Bool("v", false, "publisher logs on stderr")
	flag.Int64Var(&pageSize, "page", 0, "keys per range read when loading the owned index (0: etcdstore's default)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.StringVar(&sustainedProfile, "cpuprofile-sustained", "", "write a CPU profile of the sustained phase only to this file")
	flag.StringVar(&heapProfile, "memprofile", "", "write a heap profile taken after the restart's sync (after a GC) to this file")
	flag.StringVar(&restartProfile, "cpuprofile-restart", "", "write a CPU profile of the restart (load and full reconcile) only to this file")
	flag.StringVar(&syncProfile, "cpuprofile-sync", "", "write a CPU profile of the initial sync only to this file")
	flag.StringVar(&etcdSyncProfile, "etcd-cpuprofile-sync", "", "write a CPU profile of the etcd process (started with --enable-pprof) over the first -etcd-profile-seconds of the initial sync to this file")
	flag.StringVar(&etcdRestartProfile, "etcd-cpuprofile-restart", "", "the same, over the restart")
	flag.DurationVar(&etcdProfileFor, "etcd-profile-seconds", 5*time.Second, "length of the etcd profiles: the pprof handler needs it up front, so keep it below the phase's length")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer pprof.StopCPUProfile()
		}
	}

	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if err := run(log, *services, *endpoints, *headless, *rate, *duration, *workers, *endpoint, *embedded); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// Profiles of single phases, so that a profile of the sustained phase is
// not drowned in the initial sync's work.
var sustainedProfile, heapProfile, restartProfile, syncProfile string

// etcd's own profiles, through its /debug/pprof: etcd used more CPU than
// the publisher in a sync and as much in a restart, so its cycles count.
var (
	etcdSyncProfile, etcdRestartProfile string
	etcdProfileFor                      time.Duration
	etcdURL                             string
)

// etcdProfile starts a CPU profile of the etcd process into file ("" none)
// and returns a wait for it to be written.
func etcdProfile(file string) func() {
	if file == "" || etcdURL == "" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", etcdURL, int(etcdProfileFor.Seconds()))
		resp, err := http.Get(url)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: etcd profile:", err)
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(file)
		if err != nil {
			return
		}
		defer f.Close()
		io.Copy(f, resp.Body)
	}()
	return func() { <-done }
}

// pageSize is etcdstore.Store.PageSize: etcd 3.5 counts every key from a
// page's start to the range's end on each page, so pages of a million-key
// range cost it more than their keys.
var pageSize int64

// profile starts a CPU profile into file ("" none) and returns its stop.
func profile(file string) func() {
	if file == "" {
		return func() {}
	}
	f, err := os.Create(file)
	if err != nil || pprof.StartCPUProfile(f) != nil {
		return func() {}
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}

func run(log *slog.Logger, nsvc, nep int, headless bool, rate int, duration time.Duration, workers int, endpoint string, embedded bool) error {
	ctx := context.Background()
	etcdKind := "external " + endpoint
	if endpoint == "" && !embedded {
		bin := filepath.Join(".cache", "tools", "bin", "etcd")
		if dir := os.Getenv("ETCDNS_TOOLS_DIR"); dir != "" {
			if _, err := os.Stat(filepath.Join(dir, "etcd")); err == nil {
				bin = filepath.Join(dir, "etcd")
			}
		}
		if _, err := os.Stat(bin); err != nil {
			log.Warn("no etcd binary (run hack/tools.sh); using embedded etcd", "path", bin)
			embedded = true
		} else {
			url, pid, stop, err := startEtcd(bin)
			if err != nil {
				return err
			}
			defer stop()
			endpoint, etcdKind, etcdPID, etcdURL = url, "etcd binary, own process", pid, url
		}
	}
	if endpoint == "" {
		etcdKind = "embedded, in the bench process"
		dir, err := os.MkdirTemp("", "etcdns-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		e, url, err := embedetcd.Start(config.Embedded{
			DataDir: filepath.Join(dir, "etcd"), ClientURL: "http://127.0.0.1:0", PeerURL: "http://127.0.0.1:0",
		}, log)
		if err != nil {
			return err
		}
		defer e.Close()
		endpoint = url
	}
	cli, err := etcdclient.New(ctx, config.Etcd{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second}, log)
	if err != nil {
		return err
	}
	defer cli.Close()

	b, err := kube.NewBuilder(keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: "bench", TTL: 5}, "cluster.local")
	if err != nil {
		return err
	}
	src := newMem(nsvc, nep, headless)
	ranges, _ := etcdstore.Ranges("/skydns", "/skydns", "cluster.local")

	var latMu sync.Mutex
	var lats []time.Duration
	newCtrl := func() (*publisher.Controller, *publisher.Metrics) {
		m := publisher.NewMetrics()
		return publisher.NewController(publisher.Options{
			Zones: publisher.Zones{Cluster: b}, Source: src, Filter: publisher.Filter{},
			Store:  &etcdstore.Store{Client: cli, Timeout: 30 * time.Second, PageSize: pageSize},
			Ranges: ranges, MaxTxnOps: 128, MaxTxnBytes: 1572864, Workers: workers, Log: log, Metrics: m,
			OnProgrammed: func(_ string, d time.Duration) {
				latMu.Lock()
				lats = append(lats, d)
				latMu.Unlock()
			},
		}), m
	}
	// lead runs one leadership term with a real election fence until the
	// initial reconcile is done, and returns how long that took.
	type term struct {
		ctrl   *publisher.Controller
		cancel context.CancelFunc
		done   chan error
	}
	lead := func(c *publisher.Controller) (term, time.Duration, error) {
		tctx, cancel := context.WithCancel(ctx)
		el := &elect.Elector{Client: cli, Cluster: "bench", ID: "bench", TTL: 15 * time.Second, Log: log}
		start := time.Now()
		done := make(chan error, 1)
		src.notify = c.Notify
		c.SetSynced()
		go func() { done <- el.Run(tctx, c.Lead) }()
		for c.Ready() != nil || !leading(c) {
			select {
			case err := <-done:
				cancel()
				return term{}, 0, fmt.Errorf("publisher stopped: %v", err)
			case <-time.After(5 * time.Millisecond):
			}
		}
		return term{c, cancel, done}, time.Since(start), nil
	}

	records, _ := publisher.All(publisher.Zones{Cluster: b}, src, publisher.Filter{})
	rev0 := revision(ctx, cli)
	c1, m1 := newCtrl()
	stop := profile(syncProfile)
	etcdWait := etcdProfile(etcdSyncProfile)
	cpu0, e0 := cpuTime(), etcdCPU()
	t1, initial, err := lead(c1)
	syncCPU, syncEtcd := cpuTime()-cpu0, etcdCPU()-e0
	stop()
	etcdWait()
	if err != nil {
		return err
	}
	written := counter(m1.Written)
	t1.cancel()
	<-t1.done
	t1, c1, m1 = term{}, nil, nil // only the restarted publisher's heap counts below

	rev1 := revision(ctx, cli)
	c2, m2 := newCtrl()
	stop = profile(restartProfile)
	etcdWait = etcdProfile(etcdRestartProfile)
	cpu0, e0 = cpuTime(), etcdCPU()
	t2, restart, err := lead(c2)
	restartCPU, restartEtcd := cpuTime()-cpu0, etcdCPU()-e0
	stop()
	etcdWait()
	if err != nil {
		return err
	}
	rev2 := revision(ctx, cli)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if heapProfile != "" {
		if f, err := os.Create(heapProfile); err == nil {
			pprof.WriteHeapProfile(f)
			f.Close()
		}
	}
	// The election itself writes its key: count only record writes.
	restartWrites := counter(m2.Written) + counter(m2.Deleted)

	// Sustained phase: each change moves one endpoint of a random service
	// to a new address.
	latMu.Lock()
	lats = nil
	latMu.Unlock()
	// Changes are issued on a schedule, catching up after a slow moment,
	// so the offered rate is the target rate (a ticker would drop ticks).
	if sustainedProfile != "" {
		if f, err := os.Create(sustainedProfile); err == nil && pprof.StartCPUProfile(f) == nil {
			defer pprof.StopCPUProfile()
		}
	}
	start := time.Now()
	gc0 := gcCPU()
	cpu0, e0 = cpuTime(), etcdCPU()
	changes := 0
	for {
		el := time.Since(start)
		if el >= duration {
			break
		}
		due := int(el.Seconds() * float64(rate))
		for ; changes < due; changes++ {
			src.change(rand.IntN(nsvc))
		}
		time.Sleep(time.Millisecond)
	}
	offered := float64(changes) / time.Since(start).Seconds()
	// Let the queue drain.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		latMu.Lock()
		n := len(lats)
		latMu.Unlock()
		if n >= changes*9/10 {
			time.Sleep(500 * time.Millisecond)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	susCPU, susGC, susEtcd := cpuTime()-cpu0, gcCPU()-gc0, etcdCPU()-e0
	txn99 := bucketP99(m2.TxnLatency)
	t2.cancel()
	<-t2.done
	latMu.Lock()
	sorted := slices.Clone(lats)
	latMu.Unlock()
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })

	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "phase\tfigure\tvalue\t\n")
	fmt.Fprintf(w, "world\tservices x endpoints\t%d x %d (%s)\t\n", nsvc, nep, kind(headless))
	fmt.Fprintf(w, "world\trecords\t%d\t\n", len(records))
	fmt.Fprintf(w, "world\tetcd\t%s\t\n", etcdKind)
	fmt.Fprintf(w, "initial sync\ttime\t%s\t\n", initial.Round(time.Millisecond))
	fmt.Fprintf(w, "initial sync\tCPU of the bench process (publisher + source)\t%s\t\n", syncCPU.Round(time.Millisecond))
	fmt.Fprintf(w, "initial sync\trecords written\t%.0f\t\n", written)
	fmt.Fprintf(w, "initial sync\trecords/s\t%.0f\t\n", written/initial.Seconds())
	fmt.Fprintf(w, "initial sync\tetcd revisions\t%d\t\n", rev1-rev0)
	fmt.Fprintf(w, "restart\ttime\t%s\t\n", restart.Round(time.Millisecond))
	fmt.Fprintf(w, "initial sync\tCPU of etcd\t%s\t\n", syncEtcd.Round(time.Millisecond))
	fmt.Fprintf(w, "restart\tCPU of the bench process\t%s\t\n", restartCPU.Round(time.Millisecond))
	fmt.Fprintf(w, "restart\tCPU of etcd\t%s\t\n", restartEtcd.Round(time.Millisecond))
	fmt.Fprintf(w, "restart\trecord writes\t%.0f\t\n", restartWrites)
	fmt.Fprintf(w, "restart\tetcd revisions (election key only)\t%d\t\n", rev2-rev1)
	fmt.Fprintf(w, "restart\theap after sync (objects + owned index)\t%d MiB\t\n", ms.HeapAlloc>>20)
	fmt.Fprintf(w, "sustained\tchanges offered\t%d (%.0f/s for %s)\t\n", changes, offered, duration)
	fmt.Fprintf(w, "sustained\tcommits measured\t%d\t\n", len(sorted))
	fmt.Fprintf(w, "sustained\tchange-to-commit p50\t%s\t\n", pct(sorted, 0.50))
	fmt.Fprintf(w, "sustained\tchange-to-commit p99\t%s\t\n", pct(sorted, 0.99))
	fmt.Fprintf(w, "sustained\tchange-to-commit max\t%s\t\n", pct(sorted, 1))
	fmt.Fprintf(w, "sustained\tetcd transaction p99 (histogram bucket)\t<= %s\t\n", txn99)
	if changes > 0 {
		fmt.Fprintf(w, "sustained\tCPU of the bench process per change (GC share)\t%s (%.0f%%)\t\n",
			(susCPU / time.Duration(changes)).Round(time.Microsecond), 100*susGC.Seconds()/susCPU.Seconds())
		fmt.Fprintf(w, "sustained\tCPU of etcd per change\t%s\t\n", (susEtcd / time.Duration(changes)).Round(time.Microsecond))
	}
	w.Flush()
	if restartWrites != 0 {
		return fmt.Errorf("restart wrote %.0f records", restartWrites)
	}
	return nil
}

// startEtcd runs the etcd binary on free loopback ports in a temp dir,
// as a process of its own like a production etcd.
func startEtcd(bin string) (string, int, func(), error) {
	dir, err := os.MkdirTemp("", "etcdns-bench-etcd-")
	if err != nil {
		return "", 0, nil, err
	}
	client, peer := freePort(), freePort()
	args := []string{"--name=bench", "--data-dir=" + filepath.Join(dir, "data"),
		"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=bench=" + peer, "--log-level=error"}
	if etcdSyncProfile != "" || etcdRestartProfile != "" {
		// Only then: it also turns on etcd's mutex profiling, which costs.
		args = append(args, "--enable-pprof")
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return "", 0, nil, err
	}
	stop := func() {
		cmd.Process.Kill()
		cmd.Wait()
		os.RemoveAll(dir)
	}
	return client, cmd.Process.Pid, stop, nil
}

// cpuTime is the CPU this process has used, user and system: unlike wall
// times, it says what the publisher costs on a machine that others share.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// etcdPID is the etcd process the bench started, 0 for none.
var etcdPID int

// etcdCPU is the CPU the etcd process has used (user and system, from
// /proc), 0 when etcd is not a process of the bench's own: what a change
// costs etcd beside what it costs the publisher.
func etcdCPU() time.Duration {
	if etcdPID == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", etcdPID))
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses;
	// utime and stime are the 14th and 15th of the whole line.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

// gcCPU is the CPU the garbage collector has used (runtime/metrics'
// estimate), for the GC's share of a phase.
func gcCPU() time.Duration {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return time.Duration(s[0].Value.Float64() * float64(time.Second))
}

func freePort() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return "http://" + l.Addr().String()
}

// leading: Ready is true for a follower too; the bench waits for the
// leader's first full reconcile.
func leading(c *publisher.Controller) bool { return c.Leading() }

func kind(headless bool) string {
	if headless {
		return "headless"
	}
	return "ClusterIP"
}

func pct(d []time.Duration, p float64) string {
	if len(d) == 0 {
		return "-"
	}
	i := int(float64(len(d)-1) * p)
	return d[i].Round(10 * time.Microsecond).String()
}

func revision(ctx context.Context, cli *clientv3.Client) int64 {
	r, err := cli.Get(ctx, "/none")
	if err != nil {
		return 0
	}
	return r.Header.Revision
}

// bucketP99 is the upper bound of the histogram bucket that holds the 99th
// percentile: how much of the change-to-commit tail is etcd's.
func bucketP99(h prometheus.Histogram) string {
	var m dto.Metric
	if err := h.Write(&m); err != nil || m.GetHistogram().GetSampleCount() == 0 {
		return "-"
	}
	want := float64(m.GetHistogram().GetSampleCount()) * 0.99
	for _, b := range m.GetHistogram().GetBucket() {
		if float64(b.GetCumulativeCount()) >= want {
			return time.Duration(b.GetUpperBound() * float64(time.Second)).String()
		}
	}
	return "> last bucket"
}

func counter(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// mem is an in-memory source.Source: services with one slice each.
type mem struct {
	mu       sync.RWMutex
	services map[string]*corev1.Service
	slices   map[string]*discoveryv1.EndpointSlice
	next     int
	notify   source.Notify
}

func newMem(nsvc, nep int, headless bool) *mem {
	m := &mem{services: map[string]*corev1.Service{}, slices: map[string]*discoveryv1.EndpointSlice{}}
	pname, port, proto := "http", int32(8080), corev1.ProtocolTCP
	for i := range nsvc {
		ns, name := fmt.Sprintf("ns%d", i%100), fmt.Sprintf("svc%d", i)
		ip := fmt.Sprintf("10.%d.%d.%d", 96+i/65536, i/256%256, i%256)
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.ServiceSpec{ClusterIP: ip, ClusterIPs: []string{ip},
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: proto}}},
		}
		if headless {
			svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "None", []string{"None"}
		}
		sl := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &pname, Port: &port, Protocol: &proto}},
		}
		for range nep {
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{m.addr()}})
		}
		m.services[ns+"/"+name] = svc
		m.slices[ns+"/"+name] = cached(sl)
	}
	return m
}

// cached is sl as an informer's cache holds it, after the publisher's
// transform.
func cached(sl *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	o, _ := source.Lean(sl)
	return o.(*discoveryv1.EndpointSlice)
}

// addr hands out pod addresses from 100.64.0.0/10, never twice.
func (m *mem) addr() string {
	n := m.next
	m.next++
	return fmt.Sprintf("100.%d.%d.%d", 64+n/65536%64, n/256%256, n%256)
}

func (m *mem) change(i int) {
	ns, name := fmt.Sprintf("ns%d", i%100), fmt.Sprintf("svc%d", i)
	m.mu.Lock()
	old := m.slices[ns+"/"+name]
	sl := old.DeepCopy()
	if len(sl.Endpoints) > 0 {
		sl.Endpoints[rand.IntN(len(sl.Endpoints))].Addresses = []string{m.addr()}
	}
	m.slices[ns+"/"+name] = cached(sl)
	notify := m.notify
	m.mu.Unlock()
	notify(source.ServiceUnit(ns, name), time.Now())
}

func (m *mem) Start(context.Context, source.Notify) error { return nil }

func (m *mem) Service(ns, name string) (*corev1.Service, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	s, ok := m.services[ns+"/"+name]
	return s, ok
}

func (m *mem) Slices(ns, svc string) []*discoveryv1.EndpointSlice {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if s, ok := m.slices[ns+"/"+svc]; ok {
		return []*discoveryv1.EndpointSlice{s}
	}
	return nil
}

func (m *mem) Pod(string, string) (*corev1.Pod, bool) { return nil, false }

func (m *mem) Exported(string, string) bool { return false }

func (m *mem) Import(string, string) (*mcsv1alpha1.ServiceImport, bool) { return nil, false }

func (m *mem) ServicesAt(netip.Addr) []*corev1.Service { return nil }

func (m *mem) Units() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]string, 0, len(m.services))
	for _, s := range m.services {
		out = append(out, source.ServiceUnit(s.Namespace, s.Name))
	}
	return out
}

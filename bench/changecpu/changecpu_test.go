//go:build bench

// Package changecpu measures what one changed record costs a dnsd process
// (issue 18 item 4: at most 20 us of CPU a change, RSS at most 20 MiB at
// 10k records): a real etcd holding RECORDS records (SHAPE: see newWorld),
// a real dnsd loading and watching it, and RATE changes a second for
// DURATION seconds, each its own etcd transaction. The CPU is the
// process's CPU time (harness.ProcCPU, in nanoseconds) over the changes,
// until dnsd has shown the last one, divided by the changes made; the idle
// CPU (no changes) over IDLE seconds before is printed beside it, and the
// read and write system calls and the context switches of all its threads
// a change, which a busy machine does not blur as it does the CPU time.
//
// Several builds can be measured in one run, alternately, against the same
// etcd and records (VARIANTS), so that a change is compared side by side
// on a noisy machine. bench/changecpu/run.sh builds them from git refs.
package changecpu

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdns/etcdns/integration/harness"
	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/keys/kube"
)

func env(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v >= 0 {
		return v
	}
	return def
}

// variant is one dnsd build and the environment it runs with.
type variant struct {
	name, bin string
	env       []string
}

// variants reads VARIANTS: "name=path[:K=V...]" separated by spaces; by
// default the tree's own dnsd.
func variants(t *testing.T) []variant {
	spec := strings.Fields(os.Getenv("VARIANTS"))
	if len(spec) == 0 {
		return []variant{{name: "tree", bin: harness.BuildBinary(t, "./cmd/dnsd")}}
	}
	var out []variant
	for _, s := range spec {
		name, rest, ok := strings.Cut(s, "=")
		if !ok {
			t.Fatalf("VARIANTS: %q: want name=path[:K=V...]", s)
		}
		parts := strings.Split(rest, ":")
		out = append(out, variant{name: name, bin: parts[0], env: parts[1:]})
	}
	return out
}

// watchBytes is what dnsd read on its watch connections, as on the wire.
const watchBytes = "etcdns_dnsd_watch_received_bytes_total"

var layout = keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: "bench"}

// record is the i-th A record: 100 names a service, 100 services a
// namespace, as endpoint records are.
func record(t *testing.T, i int, base byte) keys.Record {
	owner := fmt.Sprintf("ep%d.svc%d.ns%d.svc.cluster.local", i%100, (i/100)%100, i/10000)
	r, err := layout.Address(owner, "bench", netip.AddrFrom4([4]byte{10, base, byte(i >> 8), byte(i)}))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A world is what etcd holds (records, written in batches of at most 128)
// and the n-th change, one transaction.
type world struct {
	shape   string
	records []keys.Record
	change  func(n int) []clientv3.Op
}

// newWorld is SHAPE's world of about n records:
//
//   - endpoints: n A records, each its own name; a change puts a new one
//     or deletes the one put before, in turn.
//   - services: n/3 ClusterIP services of one port (an A, a PTR and an
//     SRV each, in two zones, as bench/fleet's frontends hold); a change
//     readdresses one service: its new A and PTR put, the old ones
//     deleted, its SRV put again as it was.
func newWorld(t *testing.T, shape string, n int) world {
	switch shape {
	case "", "endpoints":
		w := world{shape: "endpoints"}
		for i := range n {
			w.records = append(w.records, record(t, i, 1))
		}
		w.change = func(c int) []clientv3.Op {
			r := record(t, n+c/2, 2)
			if c%2 == 0 {
				return []clientv3.Op{clientv3.OpPut(r.Key, string(r.Value.Encode()))}
			}
			return []clientv3.Op{clientv3.OpDelete(r.Key)}
		}
		return w
	case "services":
		services := min(max(n/3, 1), 62_500)
		b, err := kube.NewBuilder(keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: "bench", TTL: 5}, "cluster.local")
		if err != nil {
			t.Fatal(err)
		}
		// gen is a service's gen-th address.
		svc := func(i, gen int) []keys.Record {
			ip := fmt.Sprintf("10.%d.%d.%d", 100+gen%100, i/250%250, i%250+1)
			recs, errs := b.Service(&corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: fmt.Sprintf("svc-%d", i)},
				Spec: corev1.ServiceSpec{ClusterIP: ip, ClusterIPs: []string{ip},
					Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
			}, nil)
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			return recs
		}
		w := world{shape: "services"}
		for i := range services {
			w.records = append(w.records, svc(i, 0)...)
		}
		w.change = func(c int) []clientv3.Op {
			i, gen := c%services, c/services+1
			var ops []clientv3.Op
			put := map[string]bool{}
			for _, r := range svc(i, gen) {
				put[r.Key] = true
				ops = append(ops, clientv3.OpPut(r.Key, string(r.Value.Encode())))
			}
			for _, r := range svc(i, gen-1) {
				if !put[r.Key] {
					ops = append(ops, clientv3.OpDelete(r.Key))
				}
			}
			return ops
		}
		return w
	}
	t.Fatalf("SHAPE=%q: want endpoints or services", shape)
	return world{}
}

func TestChangeCPU(t *testing.T) {
	records := env("RECORDS", 10_000)
	rate := env("RATE", 100)
	duration := time.Duration(env("DURATION", 20)) * time.Second
	idle := time.Duration(env("IDLE", 5)) * time.Second
	rounds := env("ROUNDS", 2)
	profDir := os.Getenv("PROFILE")
	vs := variants(t)

	load1, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("Machine: %d x %s, Go %s; load average at start: %s", runtime.NumCPU(), cpuModel(), runtime.Version(), load1)
	etcd := harness.StartEtcd(t)
	cli := etcd.Client(t)
	ctx := context.Background()
	w := newWorld(t, os.Getenv("SHAPE"), records)
	for i := 0; i < len(w.records); {
		ops := make([]clientv3.Op, 0, 128)
		for ; i < len(w.records) && len(ops) < 128; i++ {
			ops = append(ops, clientv3.OpPut(w.records[i].Key, string(w.records[i].Value.Encode())))
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if w.shape == "endpoints" {
		fmt.Printf("%d records (A, %d names), %d single-record changes a second for %s, %d rounds of %d builds alternated\n\n",
			records, records, rate, duration, rounds, len(vs))
	} else {
		fmt.Printf("%d records (%d ClusterIP services: an A, a PTR and an SRV each), %d readdresses a second, each a transaction, for %s, %d rounds of %d builds alternated\n\n",
			len(w.records), len(w.records)/3, rate, duration, rounds, len(vs))
	}
	fmt.Println("| build | round | VmRSS after load (anon / file) | VmRSS after the changes (anon / file) | changes | idle CPU | read / write syscalls a change | context switches a change | allocated a change | collections | watch bytes a change | process CPU a change |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|")
	next := 0 // the next change's record number
	for round := 1; round <= rounds; round++ {
		for _, v := range vs {
			dnsAddr := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
			ops := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
			p := harness.StartProcess(t, v.bin, []string{
				"--etcd.endpoints=" + etcd.Endpoint, "--dnsd.listen=" + dnsAddr, "--dnsd.metrics-listen=" + ops,
			}, v.env, func() error { return harness.HTTPOK("http://" + ops + "/readyz") })
			pid := p.Pid()
			time.Sleep(idle)
			loaded := harness.ProcMemory(pid)
			if dir := os.Getenv("SMAPS"); dir != "" && round == 1 {
				copyFile(t, fmt.Sprintf("/proc/%d/smaps", pid), filepath.Join(dir, v.name+".smaps"))
			}
			idle0, idleSw0 := harness.ProcCPU(pid), harness.ProcSwitches(pid)
			time.Sleep(idle)
			idleCPU, idleSw := harness.ProcCPU(pid)-idle0, harness.ProcSwitches(pid)-idleSw0

			var prof chan error
			if profDir != "" && round == 1 {
				prof = make(chan error, 1)
				go func() {
					prof <- fetch(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", ops, int(duration.Seconds())-1),
						filepath.Join(profDir, v.name+".pprof"))
				}()
				time.Sleep(100 * time.Millisecond)
				// What the changes allocate: the allocs profile after them,
				// less this one (go tool pprof -base).
				if err := fetch("http://"+ops+"/debug/pprof/heap?gc=1", filepath.Join(profDir, v.name+".allocs-before")); err != nil {
					t.Errorf("allocs profile: %v", err)
				}
			}
			cpu0, io0, sw0 := harness.ProcCPU(pid), procIO(pid), harness.ProcSwitches(pid)
			alloc0, gcs0 := harness.Metric("http://"+ops, "go_memstats_alloc_bytes_total"), harness.Metric("http://"+ops, "go_gc_duration_seconds_count")
			wire0 := harness.Metric("http://"+ops, watchBytes)
			made, lastRev := 0, int64(0)
			tick := time.NewTicker(time.Second / time.Duration(rate))
			for end := time.Now().Add(duration); time.Now().Before(end); {
				<-tick.C
				resp, err := cli.Txn(ctx).Then(w.change(next)...).Commit()
				if err != nil {
					t.Fatal(err)
				}
				next++
				made++
				lastRev = resp.Header.Revision
			}
			tick.Stop()
			for deadline := time.Now().Add(10 * time.Second); harness.Metric("http://"+ops, "etcdns_dnsd_etcd_revision") < float64(lastRev); {
				if time.Now().After(deadline) {
					t.Fatalf("%s: dnsd did not reach revision %d", v.name, lastRev)
				}
				time.Sleep(10 * time.Millisecond)
			}
			cpu := harness.ProcCPU(pid) - cpu0
			// Read before the profiles below, which allocate and collect.
			allocs := harness.Metric("http://"+ops, "go_memstats_alloc_bytes_total") - alloc0
			gcs := harness.Metric("http://"+ops, "go_gc_duration_seconds_count") - gcs0
			wire := "-" // a build from before the metric
			if w := harness.Metric("http://"+ops, watchBytes); wire0 >= 0 && w >= 0 {
				wire = fmt.Sprintf("%.0f B", (w-wire0)/float64(made))
			}
			io1, sw1 := procIO(pid), harness.ProcSwitches(pid)
			after := harness.ProcMemory(pid)
			if dir := os.Getenv("SMAPS"); dir != "" && round == 1 {
				copyFile(t, fmt.Sprintf("/proc/%d/smaps", pid), filepath.Join(dir, v.name+".after.smaps"))
			}
			if prof != nil {
				if err := <-prof; err != nil {
					t.Errorf("profile: %v", err)
				}
				if err := fetch("http://"+ops+"/debug/pprof/heap?gc=1", filepath.Join(profDir, v.name+".allocs-after")); err != nil {
					t.Errorf("allocs profile: %v", err)
				}
				copyFile(t, v.bin, filepath.Join(profDir, v.name+".bin"))
			}
			p.Stop()
			per := func(a, b int64) string { return fmt.Sprintf("%.1f", float64(b-a)/float64(made)) }
			fmt.Printf("| %s | %d | %s | %s | %d | %.1f ms/s, %.0f switches/s | %s / %s | %s | %.0f B | %.0f | %s | %.0f us |\n", v.name, round, rss(loaded), rss(after), made,
				float64(idleCPU.Microseconds())/1000/idle.Seconds(), float64(idleSw)/idle.Seconds(), per(io0["syscr"], io1["syscr"]), per(io0["syscw"], io1["syscw"]),
				per(sw0, sw1), allocs/float64(made), gcs, wire, float64(cpu.Microseconds())/float64(made))
		}
	}
	load2, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("\nload average at the end: %s", load2)
}

// procIO is /proc/<pid>/io: syscr and syscw count the read and write
// system calls of all the process's threads.
func procIO(pid int) map[string]int64 {
	out := map[string]int64{}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return out
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ": "); ok {
			out[k], _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return out
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func rss(m map[string]int64) string {
	return fmt.Sprintf("%s (%.1f / %.1f)", mib(m["VmRSS"]), float64(m["RssAnon"])/(1<<20), float64(m["RssFile"])/(1<<20))
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "?"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func fetch(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	return cmp.Or(err, f.Close())
}

func copyFile(t *testing.T, from, to string) {
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

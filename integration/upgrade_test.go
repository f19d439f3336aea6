//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/etcdns/etcdns/integration/harness"
	"github.com/etcdns/etcdns/keys"
)

// TestEtcdRollingUpgrade is issue 23 item 4: a 3-member etcd cluster on the
// pinned 3.5 is upgraded to 3.6, then to 3.7, one member at a time
// (stopped, then started with the next release's binary on the same data
// directory and ports) while two dnsd
// frontends answer a steady query load, a writer changes a service
// throughout, and a real publisher (another cluster's, "up", from a
// kube-apiserver with its own etcd) writes a Service created at each step.
// No query may go unanswered or be answered wrongly, and after each
// member's upgrade a new change must be answered by every frontend within
// 5s of its put, and the publisher's Service within 5s of its creation.
//
// etcd's 3.5 -> 3.6 guide asks for 3.5.26 or later on every member (the
// learner and removed-member fixes; the pinned 3.5.35 has them) and a v2
// store without custom data: the harness never enables the v2 API, so
// there is nothing to migrate. The cluster version moves to 3.6 only once
// every member runs 3.6, which the test checks. The road goes on to 3.7 in
// the same way (its guide asks for 3.6.11 or later; 3.6.16 is installed).
func TestEtcdRollingUpgrade(t *testing.T) {
	const visibleBound = 5 * time.Second
	// Small, so that the writer makes every member snapshot within seconds.
	const snapshotCount = 100
	// Every minor release on the road from the pinned 3.5 to the newest, in
	// turn: etcd upgrades one minor release at a time.
	road := []struct{ tool, minor string }{{"etcd-3.6", "3.6"}, {"etcd-3.7", "3.7"}}
	for _, r := range road {
		harness.Tool(t, r.tool) // fail (or skip) before starting anything
	}
	step := 0

	c := harness.StartEtcdCluster(t, 3, harness.WithEtcdArgs(fmt.Sprintf("--snapshot-count=%d", snapshotCount)))
	cli := c.Client(t)
	b := dnsdBuilder(t)
	http80 := corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}
	service := func(name, ip string) []keys.Record {
		return dnsdRecords(b.Service(dnsdService("default", name, ip, http80), nil))
	}
	dnsdPut(t, cli, append([]keys.Record{b.Version()}, service("web", "10.96.1.10")...))

	endpoints := strings.Join(c.Endpoints(), ",")
	fronts := []*dnsdInstance{faultDnsd(t, endpoints), faultDnsd(t, endpoints)}

	steady := []check{
		{qname: "web.default.svc.cluster.local.", qtype: dns.TypeA,
			answer: []string{"web.default.svc.cluster.local. 5 IN A 10.96.1.10"}},
		{qname: "_http._tcp.web.default.svc.cluster.local.", qtype: dns.TypeSRV,
			answer: []string{"_http._tcp.web.default.svc.cluster.local. 5 IN SRV 10 100 80 web.default.svc.cluster.local."}},
		{qname: "10.1.96.10.in-addr.arpa.", qtype: dns.TypePTR,
			answer: []string{"10.1.96.10.in-addr.arpa. 5 IN PTR web.default.svc.cluster.local."}},
		{qname: "missing.default.svc.cluster.local.", qtype: dns.TypeA, rcode: dns.RcodeNameError},
	}
	var loads []*faultLoad
	for _, d := range fronts {
		waitFor(t, 10*time.Second, func() error { return faultAnswers(d.Addr, steady) })
		loads = append(loads, startFaultLoad(d.Addr, 200, steady))
	}

	w := startUpgradeWriter(cli, service)

	api := harness.StartKubeAPIServer(t, harness.StartEtcd(t))
	kc := faultKube(t, api)
	faultPublisher(t, endpoints, api, true, "--cluster.id=up")
	var published []check

	for ri, r := range road {
		for i, m := range c.Members {
			leader := c.Leader(t)
			start := time.Now()
			m.Upgrade(t, r.tool)
			v := etcdVersion(t, m.Endpoint).Server
			t.Logf("member %d (leader: %v) stopped and started on etcd %s: healthy %v after its stop began", i, i == leader, v, time.Since(start).Round(time.Millisecond))
			if !strings.HasPrefix(v, r.minor+".") {
				t.Fatalf("member %d reports etcd %s after its upgrade, want %s.x", i, v, r.minor)
			}

			// A change of its own after each step, timed from its put until
			// every frontend answers it.
			name := fmt.Sprintf("step%d", step)
			ip := fmt.Sprintf("10.96.3.%d", step+1)
			pub := fmt.Sprintf("pub%d", step)
			pubIP := fmt.Sprintf("10.96.4.%d", step+1)
			step++
			created := time.Now()
			faultCreate(t, kc, faultClusterIP(pub, pubIP, http80))
			published = append(published, check{qname: pub + ".default.svc.cluster.local.", qtype: dns.TypeA,
				answer: []string{pub + ".default.svc.cluster.local. 5 IN A " + pubIP}})
			put := upgradePut(t, cli, service(name, ip))
			want := []check{{qname: name + ".default.svc.cluster.local.", qtype: dns.TypeA,
				answer: []string{name + ".default.svc.cluster.local. 5 IN A " + ip}}}
			for j, d := range fronts {
				waitFor(t, 30*time.Second, func() error { return faultAnswers(d.Addr, want) })
				seen := time.Since(put)
				t.Logf("member %d on %s: frontend %d answers a change %v after its put", i, r.minor, j, seen.Round(time.Millisecond))
				if seen > visibleBound {
					t.Errorf("member %d on %s: frontend %d answered a change %v after its put, over %v", i, r.minor, j, seen.Round(time.Millisecond), visibleBound)
				}
				pubWant := published[len(published)-1:]
				waitFor(t, 30*time.Second, func() error { return faultAnswers(d.Addr, pubWant) })
				if seen := time.Since(created); seen > visibleBound {
					t.Errorf("member %d on %s: frontend %d answered the publisher's service %v after its creation, over %v", i, r.minor, j, seen.Round(time.Millisecond), visibleBound)
				}
			}
		}

		// The next minor release may only follow once the cluster as a
		// whole has moved to this one.
		waitFor(t, 30*time.Second, func() error {
			for i, m := range c.Members {
				if v := etcdVersion(t, m.Endpoint).Cluster; v != r.minor+".0" {
					return fmt.Errorf("member %d reports cluster version %s, want %s.0", i, v, r.minor)
				}
			}
			return nil
		})
		t.Logf("cluster version %s.0", r.minor)
		if ri == len(road)-1 {
			break
		}
		// A member must not replay raft entries the previous minor release
		// wrote: etcd 3.7.3 started on a WAL still holding 3.5's entries
		// (no snapshot since, as in a young cluster with the default
		// --snapshot-count of 10000) panics with "unmarshal should never
		// fail". So each member must have snapshotted since the cluster
		// moved to this release before the next one starts.
		index := upgradeRaftIndex(t, cli, c)
		for i, m := range c.Members {
			waitFor(t, 60*time.Second, func() error { return upgradeSnapshotted(m.DataDir, index) })
			t.Logf("member %d has a snapshot at or past raft index %d", i, index)
		}
	}

	last, writes, failed := w.Stop()
	t.Logf("writer: %d writes committed, %d failed (a write in flight to a member being stopped may fail; the publisher retries)", writes, failed)
	if writes == 0 {
		t.Fatal("the writer committed nothing")
	}
	// The writer's last committed state and every Service the publisher
	// was given, on every frontend: nothing stale, nothing lost.
	for j, d := range fronts {
		waitFor(t, visibleBound, func() error { return faultAnswers(d.Addr, append(last, published...)) })
		st := loads[j].Stop()
		t.Logf("frontend %d: %d queries in %v (%.0f/s), %d failed", j, st.sent, st.took.Round(time.Millisecond), float64(st.sent)/st.took.Seconds(), st.failed)
		if st.failed > 0 {
			t.Errorf("frontend %d: %d of %d queries failed or were answered wrongly; the first:\n%s", j, st.failed, st.sent, strings.Join(st.failures, "\n"))
		}
	}
}

// upgradeWriter changes one service's cluster IP again and again, as a
// publisher following a busy Kubernetes would.
type upgradeWriter struct {
	stop chan struct{}
	done chan struct{}

	mu             sync.Mutex
	last           []check // what the last committed write makes dnsd answer
	writes, failed int
}

func startUpgradeWriter(cli *clientv3.Client, service func(name, ip string) []keys.Record) *upgradeWriter {
	w := &upgradeWriter{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		var old []keys.Record
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			ip := fmt.Sprintf("10.96.2.%d", n%250+1)
			recs := service("busy", ip)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := faultTxn(ctx, cli, old, recs)
			cancel()
			w.mu.Lock()
			if err != nil {
				// Unknown whether it landed: the next write replaces both.
				w.failed++
				old = append(old, recs...)
			} else {
				w.writes++
				old = recs
				w.last = []check{{qname: "busy.default.svc.cluster.local.", qtype: dns.TypeA,
					answer: []string{"busy.default.svc.cluster.local. 5 IN A " + ip}}}
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *upgradeWriter) Stop() (last []check, writes, failed int) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last, w.writes, w.failed
}

// upgradePut writes recs, retrying for up to 10s (a write may meet a
// leader election), and returns when it was committed.
func upgradePut(t *testing.T, cli *clientv3.Client, recs []keys.Record) time.Time {
	t.Helper()
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = faultTxn(ctx, cli, nil, recs)
		cancel()
		if err == nil {
			return time.Now()
		}
	}
	t.Fatalf("write not committed within 10s: %v", err)
	return time.Time{}
}

type etcdVersions struct {
	Server  string `json:"etcdserver"`
	Cluster string `json:"etcdcluster"`
}

// etcdVersion reads a member's /version: its own release and the cluster
// version the members agreed on.
func etcdVersion(t *testing.T, endpoint string) etcdVersions {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(endpoint + "/version")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var v etcdVersions
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("%s/version: %v: %s", endpoint, err, body)
	}
	return v
}

// upgradeRaftIndex is the highest raft index any member reports.
func upgradeRaftIndex(t *testing.T, cli *clientv3.Client, c *harness.EtcdCluster) uint64 {
	t.Helper()
	var index uint64
	for _, ep := range c.Endpoints() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, err := cli.Status(ctx, ep)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		index = max(index, st.RaftIndex)
	}
	return index
}

// upgradeSnapshotted reports whether a member's data directory holds a
// snapshot at raft index index or later; etcd names them
// <term>-<index>.snap in hexadecimal.
func upgradeSnapshotted(dataDir string, index uint64) error {
	files, err := filepath.Glob(filepath.Join(dataDir, "member", "snap", "*.snap"))
	if err != nil {
		return err
	}
	var newest uint64
	for _, f := range files {
		_, ix, ok := strings.Cut(strings.TrimSuffix(filepath.Base(f), ".snap"), "-")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(ix, 16, 64); err == nil {
			newest = max(newest, n)
		}
	}
	if newest < index {
		return fmt.Errorf("%s: newest snapshot at raft index %d, want %d or later", dataDir, newest, index)
	}
	return nil
}

package publisher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/etcdns/etcdns/internal/testetcd"
	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/keys/kube"
	"github.com/etcdns/etcdns/publisher/elect"
	"github.com/etcdns/etcdns/publisher/etcdstore"
	"github.com/etcdns/etcdns/publisher/source"
)

// startEtcd runs an embedded etcd on loopback ports in t.TempDir.
func startEtcd(t testing.TB) *clientv3.Client { return testetcd.Start(t, quiet()) }

func quiet() *slog.Logger {
	if os.Getenv("PUBLISHER_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(discard{}, nil))
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func builder(t testing.TB, cluster string) kube.Builder {
	t.Helper()
	b, err := kube.NewBuilder(keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: cluster, TTL: 5}, "cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// pub is one publisher over a fake Kubernetes and a shared etcd.
type pub struct {
	t      testing.TB
	b      kube.Builder
	kc     kubernetes.Interface
	src    source.Source
	ctrl   *Controller
	m      *Metrics
	cancel context.CancelFunc
	done   chan error
}

type pubOpt func(*Options)

func newPub(t testing.TB, cli *clientv3.Client, cluster string, kc kubernetes.Interface, opts ...pubOpt) *pub {
	t.Helper()
	b := builder(t, cluster)
	src := source.NewKube(kc, nil, "", false)
	ranges, _ := etcdstore.Ranges("/skydns", "/skydns", "cluster.local")
	o := Options{
		Zones: Zones{Cluster: b}, Source: src, Store: &etcdstore.Store{Client: cli, Timeout: 5 * time.Second},
		Ranges: ranges, MaxTxnOps: 128, MaxTxnBytes: 1 << 20, Log: quiet(), Metrics: NewMetrics(),
	}
	for _, f := range opts {
		f(&o)
	}
	return &pub{t: t, b: b, kc: kc, src: src, ctrl: NewController(o), m: o.Metrics}
}

// start syncs the source and leads (without election) until stop.
func (p *pub) start(term *elect.Term) {
	p.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	if err := p.src.Start(ctx, p.ctrl.Notify); err != nil {
		p.t.Fatal(err)
	}
	p.ctrl.SetSynced()
	p.done = make(chan error, 1)
	go func() { p.done <- p.ctrl.Lead(ctx, term) }()
	waitFor(p.t, "initial reconcile", func() bool { return p.ctrl.Ready() == nil && p.ctrl.reconciled.Load() })
	p.t.Cleanup(p.stop)
}

func (p *pub) stop() {
	if p.cancel != nil {
		p.cancel()
		<-p.done
		p.cancel = nil
	}
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func dump(t testing.TB, cli *clientv3.Client) map[string]string {
	t.Helper()
	return dumpPrefix(t, cli, "/skydns/")
}

func dumpPrefix(t testing.TB, cli *clientv3.Client, prefix string) map[string]string {
	t.Helper()
	r, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range r.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

func revision(t testing.TB, cli *clientv3.Client) int64 {
	t.Helper()
	r, err := cli.Get(context.Background(), "/nothing")
	if err != nil {
		t.Fatal(err)
	}
	return r.Header.Revision
}

// want is what the pure builder says the objects should produce.
func want(t testing.TB, b kube.Builder, objs ...any) map[string]string {
	t.Helper()
	out := map[string]string{b.Version().Key: string(b.Version().Value.Encode())}
	var svcs []*corev1.Service
	var slices []*discoveryv1.EndpointSlice
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Service:
			svcs = append(svcs, o)
		case *discoveryv1.EndpointSlice:
			slices = append(slices, o)
		}
	}
	for _, s := range svcs {
		recs, problems := b.Service(s, slices)
		if len(problems) > 0 {
			t.Fatalf("fixture problems: %v", problems)
		}
		for _, r := range recs {
			out[r.Key] = string(r.Value.Encode())
		}
	}
	return out
}

func keysOf(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func waitDump(t testing.TB, cli *clientv3.Client, w map[string]string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := dump(t, cli)
		if reflect.DeepEqual(got, w) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd:\n%s\nwant:\n%s", strings.Join(keysOf(got), "\n"), strings.Join(keysOf(w), "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func clusterIP(ns, name string, ips ...string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: ips[0], ClusterIPs: ips,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
}

func headless(ns, name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{ClusterIP: "None", ClusterIPs: []string{"None"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
}

func slice(ns, svc, name string, ips ...string) *discoveryv1.EndpointSlice {
	port, pname, proto := int32(8080), "http", corev1.ProtocolTCP
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &pname, Port: &port, Protocol: &proto}},
	}
	for _, ip := range ips {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}})
	}
	return s
}

var bg = context.Background()

func counter(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// waitCounter gives a counter up to 5 s to reach at least min. Counters move
// just after the commit they count, which etcd (and so the test) may see first.
func waitCounter(c prometheus.Counter, min float64) {
	for deadline := time.Now().Add(5 * time.Second); counter(c) < min && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
}

func histCount(h prometheus.Histogram) uint64 {
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		return 0
	}
	return m.GetHistogram().GetSampleCount()
}

func TestCreateUpdateDelete(t *testing.T) {
	cli := startEtcd(t)
	kc := fake.NewClientset()
	p := newPub(t, cli, "c1", kc)
	p.start(nil)
	b := p.b
	waitDump(t, cli, want(t, b))

	svc := clusterIP("default", "kubernetes", "10.96.0.1")
	svc.Spec.Ports[0].Name, svc.Spec.Ports[0].Port = "https", 443
	if _, err := kc.CoreV1().Services("default").Create(bg, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hl := headless("apps", "db")
	sl := slice("apps", "db", "db-1", "10.244.1.10", "10.244.1.11")
	host := "db-0"
	sl.Endpoints[0].Hostname = &host
	kc.CoreV1().Services("apps").Create(bg, hl, metav1.CreateOptions{})
	kc.DiscoveryV1().EndpointSlices("apps").Create(bg, sl, metav1.CreateOptions{})
	w := want(t, b, svc, hl, sl)
	waitDump(t, cli, w)

	// A few keys spelled out, so the test does not only trust the builder.
	got := dump(t, cli)
	for _, k := range []string{
		"/skydns/arpa/in-addr/10/96/0/1",
		"/skydns/arpa/in-addr/10/244/1/10",
		"/skydns/arpa/in-addr/10/244/1/11",
	} {
		if _, ok := got[k]; !ok {
			t.Errorf("missing %s", k)
		}
	}
	if v := got["/skydns/arpa/in-addr/10/96/0/1"]; v != `{"host":"kubernetes.default.svc.cluster.local","ttl":5,"group":"1.0.96.10.in-addr.arpa","cluster":"c1","source":"service/default/kubernetes"}` {
		t.Errorf("PTR value %s", v)
	}
	prefixCount := func(prefix string) int {
		n := 0
		for k := range got {
			if strings.HasPrefix(k, prefix) {
				n++
			}
		}
		return n
	}
	if n := prefixCount("/skydns/local/cluster/svc/apps/db/db-0/"); n != 1 {
		t.Errorf("db-0 records: %d", n)
	}
	if n := prefixCount("/skydns/local/cluster/svc/apps/db/_tcp/_http/"); n != 2 {
		t.Errorf("SRV records: %d", n)
	}

	// Update: one endpoint leaves, one joins. Only the difference is written.
	// The counter moves just after etcd shows a commit: before reading it,
	// wait until it counts every record so far, each written once.
	waitCounter(p.m.Written, float64(len(w)))
	written := counter(p.m.Written)
	unchangedKey := "/skydns/arpa/in-addr/10/244/1/10"
	before, _ := cli.Get(bg, unchangedKey)
	sl2 := slice("apps", "db", "db-1", "10.244.1.10", "10.244.1.12")
	sl2.Endpoints[0].Hostname = &host
	kc.DiscoveryV1().EndpointSlices("apps").Update(bg, sl2, metav1.UpdateOptions{})
	waitDump(t, cli, want(t, b, svc, hl, sl2))
	after, _ := cli.Get(bg, unchangedKey)
	if before.Kvs[0].ModRevision != after.Kvs[0].ModRevision {
		t.Error("an unchanged record was rewritten")
	}
	// 10.244.1.12: A at the name, A at its dashed name, PTR, SRV. The
	// counter moves just after the commit etcd already shows, so give it
	// that moment before judging.
	waitCounter(p.m.Written, written+4)
	if d := counter(p.m.Written) - written; d != 4 {
		t.Errorf("update wrote %v records, want 4", d)
	}
	if histCount(p.m.Programming) == 0 {
		t.Error("no programming latency observed")
	}

	// Delete the headless service: all its records go, in one transaction.
	kc.CoreV1().Services("apps").Delete(bg, "db", metav1.DeleteOptions{})
	waitDump(t, cli, want(t, b, svc))
	kc.CoreV1().Services("default").Delete(bg, "kubernetes", metav1.DeleteOptions{})
	waitDump(t, cli, want(t, b))
}

func TestRestartWritesNothing(t *testing.T) {
	cli := startEtcd(t)
	svc := clusterIP("default", "web", "10.96.0.10", "fd00::a")
	hl, sl := headless("apps", "db"), slice("apps", "db", "db-1", "10.244.1.10", "10.244.1.11")
	kc := fake.NewClientset(svc, hl, sl)
	p := newPub(t, cli, "c1", kc)
	p.start(nil)
	w := want(t, p.b, svc, hl, sl)
	waitDump(t, cli, w)
	p.stop()

	rev := revision(t, cli)
	p2 := newPub(t, cli, "c1", kc)
	p2.start(nil)
	p2.stop()
	if got := revision(t, cli); got != rev {
		t.Fatalf("restart over an unchanged world moved etcd from revision %d to %d", rev, got)
	}
	if n := counter(p2.m.Written) + counter(p2.m.Deleted); n != 0 {
		t.Fatalf("restart wrote %v records", n)
	}
}

func TestOrphansDeletedForeignUntouched(t *testing.T) {
	cli := startEtcd(t)
	a, b := clusterIP("default", "a", "10.96.0.10"), clusterIP("default", "b", "10.96.0.11")
	kc := fake.NewClientset(a, b)
	p := newPub(t, cli, "c1", kc)
	p.start(nil)
	waitDump(t, cli, want(t, p.b, a, b))
	p.stop()

	// While the publisher is down: b is deleted, and someone else writes
	// keys in our ranges (another cluster, a human, garbage).
	foreign := map[string]string{
		"/skydns/local/cluster/svc/default/b/ext00001": `{"host":"10.1.1.1","cluster":"c2","source":"service/default/b"}`,
		"/skydns/local/cluster/svc/default/manual/x":   `{"host":"10.1.1.2"}`,
		"/skydns/local/cluster/svc/default/junk/y":     `not json`,
		"/skydns/arpa/in-addr/10/1/1/1":                `{"host":"b.default.svc.cluster.local","cluster":"c2","source":"service/default/b"}`,
		// Our own cluster id, but a source this publisher does not compute
		// (the multicluster export's PTR, another zone's version record).
		"/skydns/arpa/in-addr/10/42/42/42":           `{"host":"x.test.svc.clusterset.local","cluster":"c1","source":"serviceexport/test/x"}`,
		"/skydns/local/cluster/dns-version/zzzzzzzz": `{"text":"1.1.0","cluster":"c1","source":"zone/clusterset.local"}`,
	}
	for k, v := range foreign {
		cli.Put(bg, k, v)
	}
	kc2 := fake.NewClientset(a)
	p2 := newPub(t, cli, "c1", kc2)
	p2.start(nil)
	w := want(t, p2.b, a)
	for k, v := range foreign {
		w[k] = v
	}
	waitDump(t, cli, w)
	if got := counter(p2.m.Deleted); got == 0 {
		t.Fatal("orphans not counted as deleted")
	}
}

func TestBigServiceIsSplit(t *testing.T) {
	cli := startEtcd(t)
	hl := headless("apps", "big")
	var ips []string
	for i := range 60 {
		ips = append(ips, fmt.Sprintf("10.244.%d.%d", i/200, i%200+1))
	}
	sl := slice("apps", "big", "big-1", ips...)
	kc := fake.NewClientset(hl, sl)
	p := newPub(t, cli, "c1", kc, func(o *Options) { o.MaxTxnOps = 16 })
	p.start(nil)
	waitDump(t, cli, want(t, p.b, hl, sl))
	if counter(p.m.Splits) == 0 {
		t.Fatal("a unit of 240 records was not split with max-txn-ops 16")
	}
	// Shrinking it splits the deletes too.
	kc.DiscoveryV1().EndpointSlices("apps").Update(bg, slice("apps", "big", "big-1", ips[:2]...), metav1.UpdateOptions{})
	waitDump(t, cli, want(t, p.b, hl, slice("apps", "big", "big-1", ips[:2]...)))
}

func TestTwoClustersShareEtcd(t *testing.T) {
	cli := startEtcd(t)
	// The same service in both clusters, the same cluster IP: forward
	// records get a key each (the id hashes the cluster), the PTR exact key
	// can only hold one, and the second cluster must not overwrite it.
	svc := clusterIP("default", "web", "10.96.0.10")
	only1 := clusterIP("default", "only1", "10.96.0.20")
	kc1, kc2 := fake.NewClientset(svc, only1), fake.NewClientset(svc.DeepCopy())
	p1 := newPub(t, cli, "c1", kc1)
	p1.start(nil)
	w1 := want(t, p1.b, svc, only1)
	waitDump(t, cli, w1)

	p2 := newPub(t, cli, "c2", kc2)
	p2.start(nil)
	w2 := want(t, p2.b, svc)
	both := map[string]string{}
	for k, v := range w1 {
		both[k] = v
	}
	for k, v := range w2 {
		if _, ok := both[k]; !ok {
			both[k] = v
		}
	}
	waitDump(t, cli, both)
	if counter(p2.m.Conflicts) != 1 {
		t.Fatalf("conflicts %v, want 1 (the PTR)", counter(p2.m.Conflicts))
	}

	// Cluster 2 deletes its service: cluster 1's records stay.
	kc2.CoreV1().Services("default").Delete(bg, "web", metav1.DeleteOptions{})
	w := map[string]string{}
	for k, v := range w1 {
		w[k] = v
	}
	w[p2.b.Version().Key] = string(p2.b.Version().Value.Encode())
	waitDump(t, cli, w)

	// Cluster 1 restarting as usual never touches cluster 2's version record.
	p1.stop()
	p1b := newPub(t, cli, "c1", kc1)
	p1b.start(nil)
	if n := counter(p1b.m.Written) + counter(p1b.m.Deleted); n != 0 {
		t.Fatalf("cluster 1 restart wrote %v records", n)
	}
	waitDump(t, cli, w)
}

func TestGuardFailureRereadsAndRetries(t *testing.T) {
	cli := startEtcd(t)
	svc := clusterIP("default", "web", "10.96.0.10")
	kc := fake.NewClientset(svc)
	p := newPub(t, cli, "c1", kc)
	p.start(nil)
	w := want(t, p.b, svc)
	waitDump(t, cli, w)

	// Someone edits one of our records behind our back (same owner, new
	// TTL). The next change of the service, which deletes that record,
	// fails its guard, re-reads and deletes it at its new revision.
	var srv string
	for k := range w {
		if strings.Contains(k, "/_tcp/_http/") {
			srv = k
		}
	}
	v, _ := keys.Decode([]byte(w[srv]))
	v.TTL = 99
	cli.Put(bg, srv, string(v.Encode()))
	svc2 := svc.DeepCopy()
	svc2.Spec.Ports[0].Name = "web"
	kc.CoreV1().Services("default").Update(bg, svc2, metav1.UpdateOptions{})
	waitDump(t, cli, want(t, p.b, svc2))
	if counter(p.m.Retries) == 0 {
		t.Fatal("no guard retry")
	}
}

func TestInvalidObjectsSkipped(t *testing.T) {
	cli := startEtcd(t)
	bad := clusterIP("default", "bad", "10.96.0.300")
	badName := clusterIP("default", "Not_A_Label", "10.96.0.11")
	good := clusterIP("default", "good", "10.96.0.12")
	kc := fake.NewClientset(bad, badName, good)
	p := newPub(t, cli, "c1", kc)
	p.start(nil)
	waitDump(t, cli, want(t, p.b, good))
	waitCounter(p.m.Invalid, 2) // the good service may be done before the bad ones are seen
	if counter(p.m.Invalid) < 2 {
		t.Fatalf("invalid objects counted: %v", counter(p.m.Invalid))
	}
}

// TestFailoverFence: a leader that lost its lease (paused past its TTL)
// cannot write even though it still holds its old fence.
func TestFailoverFence(t *testing.T) {
	cli := startEtcd(t)
	kc := fake.NewClientset(clusterIP("default", "a", "10.96.0.10"))

	type term struct {
		term *elect.Term
		ctx  context.Context
	}
	run := func(p *pub, name string, leases chan<- term, ctx context.Context) {
		el := &elect.Elector{Client: cli, Cluster: "c1", ID: name, TTL: 2 * time.Second, Log: quiet()}
		go el.Run(ctx, func(lctx context.Context, t *elect.Term) error {
			leases <- term{t, lctx}
			return p.ctrl.Lead(lctx, t)
		})
	}
	p1, p2 := newPub(t, cli, "c1", kc), newPub(t, cli, "c1", kc)
	ctx1, cancel1 := context.WithCancel(bg)
	ctx2, cancel2 := context.WithCancel(bg)
	defer cancel2()
	for _, p := range []*pub{p1, p2} {
		if err := p.src.Start(ctx2, p.ctrl.Notify); err != nil {
			t.Fatal(err)
		}
		p.ctrl.SetSynced()
	}
	l1, l2 := make(chan term, 4), make(chan term, 4)
	run(p1, "one", l1, ctx1)
	first := <-l1
	run(p2, "two", l2, ctx2)
	waitDump(t, cli, want(t, p1.b, clusterIP("default", "a", "10.96.0.10")))

	// Take the leader's lease away as an expiry would, without telling it.
	resp, err := cli.Get(bg, elect.Key("c1"), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatal(err)
	}
	if _, err := cli.Revoke(bg, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	<-l2 // the second replica leads
	// The deposed leader's transaction, with its old fence, is refused.
	store := &etcdstore.Store{Client: cli, Timeout: 5 * time.Second}
	before := revision(t, cli)
	fence, _ := first.term.Fence()
	_, err = store.Apply(bg, fence, []planOp{{Key: "/skydns/local/cluster/stale/x", Value: []byte(`{"host":"10.9.9.9","cluster":"c1","source":"service/default/stale"}`)}})
	if !errors.Is(err, etcdstore.ErrFenced) {
		t.Fatalf("stale write: %v, want ErrFenced", err)
	}
	if got := revision(t, cli); got != before {
		t.Fatalf("a fenced transaction changed etcd (revision %d -> %d)", before, got)
	}
	// The new leader keeps publishing.
	kc.CoreV1().Services("default").Create(bg, clusterIP("default", "b", "10.96.0.11"), metav1.CreateOptions{})
	waitDump(t, cli, want(t, p2.b, clusterIP("default", "a", "10.96.0.10"), clusterIP("default", "b", "10.96.0.11")))
	cancel1()
}

func TestFilesSourceEndToEnd(t *testing.T) {
	cli := startEtcd(t)
	dir := t.TempDir()
	manifest := `apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec: {clusterIP: 10.96.0.10, clusterIPs: [10.96.0.10], ports: [{name: http, port: 80, protocol: TCP}]}
`
	if err := os.WriteFile(filepath.Join(dir, "web.yaml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	files := source.NewFiles(dir, false, quiet())
	files.Interval = 20 * time.Millisecond
	p := newPub(t, cli, "c1", fake.NewClientset())
	p.src = files
	p.ctrl.o.Source = files
	p.start(nil)
	waitDump(t, cli, want(t, p.b, clusterIP("default", "web", "10.96.0.10")))

	// Edit the file: the records follow, without a restart.
	time.Sleep(20 * time.Millisecond) // a new mtime even on coarse clocks
	edited := strings.ReplaceAll(manifest, "10.96.0.10", "10.96.0.11")
	if err := os.WriteFile(filepath.Join(dir, "web.yaml"), []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	waitDump(t, cli, want(t, p.b, clusterIP("default", "web", "10.96.0.11")))
	os.Remove(filepath.Join(dir, "web.yaml"))
	waitDump(t, cli, want(t, p.b))
}

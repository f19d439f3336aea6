package publisher

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsfake "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/fake"

	"github.com/etcdns/etcdns/internal/testetcd"
	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/keys/kube"
	"github.com/etcdns/etcdns/publisher/elect"
	"github.com/etcdns/etcdns/publisher/etcdstore"
	"github.com/etcdns/etcdns/publisher/source"
)

// The publisher's promise under churn: whatever sequence of changes came
// before, once it has caught up etcd holds exactly the records the objects
// want now (none lost, none twice, none stale), the same as a publisher
// started afresh over those objects writes, and a restart finds nothing to
// do. A failure names its seed and the operations that led to it; run one
// seed with -run 'TestConverge/seed=N'.

// convergeCase is one seed and the configuration it churns under: between
// them the cases turn on every tree the publisher writes, its filters,
// split transactions and a lossy etcd.
type convergeCase struct {
	seed       uint64
	ops        int
	namespaces []string // watched and published; nil: all
	selector   string
	pods       bool
	maxTxnOps  int
	lossy      bool // some write transactions fail, before or after they commit
}

var convergeCases = []convergeCase{
	{seed: 1, ops: 150, pods: true, maxTxnOps: 128},
	{seed: 2, ops: 150, namespaces: []string{"default", "apps"}, selector: "dns!=off", maxTxnOps: 3},
	{seed: 3, ops: 150, pods: true, maxTxnOps: 8, lossy: true},
	{seed: 4, ops: 150, pods: true, maxTxnOps: 128, lossy: true},
}

func TestConverge(t *testing.T) {
	for _, c := range convergeCases {
		t.Run(fmt.Sprintf("seed=%d", c.seed), func(t *testing.T) { c.run(t) })
	}
}

// The universe is small on purpose: names are reused after a delete,
// slices move between services, and addresses are shared, so that two
// objects want the same PTR.
var (
	churnNamespaces = []string{"default", "apps", "team-b"}
	churnServices   = []string{"web", "db", "api", "cache", "auth", "mail"}
	churnSlices     = []string{"es0", "es1", "es2", "es3", "es4", "es5", "es6", "es7"}
	churnPods       = []string{"pod0", "pod1", "pod2", "pod3"}
	clusterIPv4     = []string{"10.96.0.1", "10.96.0.2", "10.96.0.3", "10.96.0.4", "10.96.0.5", "10.96.0.6"}
	clusterIPv6     = []string{"fd00::1", "fd00::2", "fd00::3"}
	endpointIPv4    = []string{"10.244.0.1", "10.244.0.2", "10.244.0.3", "10.244.0.4", "10.244.0.5", "10.244.0.6", "10.244.0.7", "10.244.0.8"}
	endpointIPv6    = []string{"fd00:10::1", "fd00:10::2", "fd00:10::3"}
	clustersetIPs   = []string{"10.112.0.1", "10.112.0.2", "10.96.0.1"} // one is also a cluster IP: the PTRs share a tree
	ingressIPs      = []string{"203.0.113.1", "203.0.113.2"}
	externalNames   = []string{"example.com", "db.example.org", "web.apps.svc.cluster.local"}
	hostnames       = []string{"h0", "h1", "h2"}
)

// world is what the test has put into the fake API, kept apart from it: it
// is the source the expected records are computed from, so the publisher's
// informers are checked against it rather than trusted.
type world struct {
	svcs    map[string]*corev1.Service // namespace/name
	slices  map[string]*discoveryv1.EndpointSlice
	pods    map[string]*corev1.Pod
	exports map[string]*mcsv1alpha1.ServiceExport
	imports map[string]*mcsv1alpha1.ServiceImport
}

func newWorld() *world {
	return &world{svcs: map[string]*corev1.Service{}, slices: map[string]*discoveryv1.EndpointSlice{},
		pods: map[string]*corev1.Pod{}, exports: map[string]*mcsv1alpha1.ServiceExport{}, imports: map[string]*mcsv1alpha1.ServiceImport{}}
}

func (w *world) Start(context.Context, source.Notify) error { return nil }

func (w *world) Service(ns, name string) (*corev1.Service, bool) {
	s, ok := w.svcs[ns+"/"+name]
	return s, ok
}

func (w *world) Slices(ns, svc string) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	for _, s := range w.slices {
		if s.Namespace == ns && s.Labels[discoveryv1.LabelServiceName] == svc {
			out = append(out, s)
		}
	}
	return out
}

func (w *world) Pod(ns, name string) (*corev1.Pod, bool) {
	p, ok := w.pods[ns+"/"+name]
	return p, ok
}

func (w *world) Exported(ns, name string) bool {
	e, ok := w.exports[ns+"/"+name]
	return ok && !meta.IsStatusConditionFalse(e.Status.Conditions, string(mcsv1alpha1.ServiceExportValid))
}

func (w *world) ServicesAt(ip netip.Addr) []*corev1.Service {
	var out []*corev1.Service
	for _, s := range w.svcs {
		for _, raw := range s.Spec.ClusterIPs {
			if a, err := netip.ParseAddr(raw); err == nil && a == ip {
				out = append(out, s)
			}
		}
	}
	return out
}

func (w *world) Import(ns, name string) (*mcsv1alpha1.ServiceImport, bool) {
	i, ok := w.imports[ns+"/"+name]
	return i, ok
}

func (w *world) Units() []string {
	var out []string
	for _, s := range w.svcs {
		out = append(out, source.ServiceUnit(s.Namespace, s.Name))
	}
	for _, p := range w.pods {
		out = append(out, source.PodUnit(p.Namespace, p.Name))
	}
	for _, e := range w.exports {
		out = append(out, source.ExportUnit(e.Namespace, e.Name))
	}
	for _, i := range w.imports {
		out = append(out, source.ImportUnit(i.Namespace, i.Name))
	}
	return out
}

// wanted is every key some unit wants, with the value each such unit
// wants there. A key two units want (the PTR of an address two objects
// share) is held by whichever wrote it first and never taken from it, so
// any of their values is right, and none is the only right one.
type wanted struct {
	vals     map[string][]string
	problems int
}

func wantedOf(z Zones, src source.Source, f Filter) wanted {
	w := wanted{vals: map[string][]string{}}
	for _, u := range Units(z, src) {
		recs, problems := Desired(z, src, f, u)
		w.problems += len(problems)
		seen := map[string]bool{}
		for _, r := range recs {
			if !seen[r.Key] { // a unit writes the first of two at one key
				seen[r.Key] = true
				w.vals[r.Key] = append(w.vals[r.Key], string(r.Value.Encode()))
			}
		}
	}
	return w
}

// any is one right etcd for w.
func (w wanted) any() map[string]string {
	out := make(map[string]string, len(w.vals))
	for k, vs := range w.vals {
		out[k] = vs[0]
	}
	return out
}

func (w wanted) contested(k string) bool { return len(w.vals[k]) > 1 }

// check lists how etcd's records differ from what is wanted.
func (w wanted) check(got map[string]string) []string {
	var out []string
	for k, vs := range w.vals {
		v, ok := got[k]
		switch {
		case !ok:
			out = append(out, "lost  "+k+" "+strings.Join(vs, " or "))
		case !slices.Contains(vs, v):
			out = append(out, "wrong "+k+" "+v+"\n      want "+strings.Join(vs, "\n        or "))
		}
	}
	for k, v := range got {
		if _, ok := w.vals[k]; !ok {
			out = append(out, "stale "+k+" "+v)
		}
	}
	sort.Strings(out)
	return out
}

// against lists how the churned etcd (-) differs from a fresh
// publisher's (+): exactly, but for which of its wanters holds a
// contested key.
func (w wanted) against(churned, fresh map[string]string) []string {
	var out []string
	for _, k := range keysOf(mergeMaps(churned, fresh)) {
		a, inA := churned[k]
		b, inB := fresh[k]
		if inA && inB && (a == b || w.contested(k) && slices.Contains(w.vals[k], a) && slices.Contains(w.vals[k], b)) {
			continue
		}
		if inA {
			out = append(out, "- "+k+" "+a)
		}
		if inB {
			out = append(out, "+ "+k+" "+b)
		}
	}
	return out
}

func mergeMaps(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// churnEnv is the configuration every publisher of one case shares: they
// differ only in the etcd they write and how they read it.
type churnEnv struct {
	c      convergeCase
	zones  Zones
	filter Filter
	ranges []string
	kc     *fake.Clientset
	mc     *mcsfake.Clientset
}

func newChurnEnv(t *testing.T, c convergeCase) *churnEnv {
	t.Helper()
	l := keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: "c1", TTL: 5}
	b, err := kube.NewBuilder(l, "cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	b.Nameserver = "apps/web"
	cs, err := kube.NewBuilder(l, kube.ClustersetZone)
	if err != nil {
		t.Fatal(err)
	}
	fed, err := kube.NewFederation(l, "federation", "fed")
	if err != nil {
		t.Fatal(err)
	}
	filter, err := NewFilter(c.namespaces, c.selector, c.pods)
	if err != nil {
		t.Fatal(err)
	}
	e := &churnEnv{c: c, zones: Zones{Cluster: b, Clusterset: &cs, Federation: &fed}, filter: filter,
		kc: fake.NewClientset(), mc: mcsfake.NewSimpleClientset()}
	// The fake API serves the MCS group, as one with the CRDs installed.
	e.kc.Resources = []*metav1.APIResourceList{{GroupVersion: mcsv1alpha1.SchemeGroupVersion.String(),
		APIResources: []metav1.APIResource{{Name: "serviceexports"}, {Name: "serviceimports"}}}}
	for _, tree := range []kube.Builder{b, cs, fed.Builder} {
		rs, err := etcdstore.Ranges(tree.Prefix, tree.ReversePrefix, tree.Zone)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if !slices.Contains(e.ranges, r) {
				e.ranges = append(e.ranges, r)
			}
		}
	}
	return e
}

func (e *churnEnv) publisher(t *testing.T, cli *clientv3.Client, pageSize int64) *pub {
	src := source.NewKube(e.kc, e.c.namespaces, "", e.c.pods).WithMulticluster(e.mc)
	o := Options{
		Zones: e.zones, Source: src, Filter: e.filter,
		Store:  &etcdstore.Store{Client: cli, Timeout: 5 * time.Second, PageSize: pageSize},
		Ranges: e.ranges, MaxTxnOps: e.c.maxTxnOps, MaxTxnBytes: 1 << 20, Log: quiet(), Metrics: NewMetrics(),
	}
	return &pub{t: t, b: e.zones.Cluster, kc: e.kc, src: src, ctrl: NewController(o), m: o.Metrics}
}

// lossy fails one write transaction in three: half before etcd sees it,
// half after it committed, as a timeout or a lost connection does. Which
// ones depends on the workers' order; the promise holds for any. At most
// budget fail between two refills (one a batch): a unit failing again and
// again waits out the work queue's backoff, which doubles each time, and
// the test would measure that instead of the outcome.
type lossy struct {
	mu       sync.Mutex
	r        *rand.Rand
	budget   int
	injected int
}

func newLossy(seed uint64) *lossy { return &lossy{r: rand.New(rand.NewPCG(seed, 0x1055))} }

func (l *lossy) refill() {
	l.mu.Lock()
	l.budget = 4
	l.mu.Unlock()
}

func (l *lossy) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if txn, ok := req.(*pb.TxnRequest); !ok || method != "/etcdserverpb.KV/Txn" || !writes(txn) {
		return invoke(ctx, method, req, reply, cc, opts...)
	}
	l.mu.Lock()
	n := 2
	if l.budget > 0 {
		if n = l.r.IntN(6); n < 2 {
			l.budget--
			l.injected++
		}
	}
	l.mu.Unlock()
	switch n {
	case 0:
		return status.Error(codes.Unavailable, "injected: transaction lost before etcd")
	case 1:
		if err := invoke(ctx, method, req, reply, cc, opts...); err != nil {
			return err
		}
		return status.Error(codes.Unavailable, "injected: committed, reply lost")
	}
	return invoke(ctx, method, req, reply, cc, opts...)
}

// intercepted is testetcd.Intercepted with the client's own log off: the
// failures are on purpose, and it would report each one.
func intercepted(t *testing.T, cli *clientv3.Client, f grpc.UnaryClientInterceptor) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints: cli.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(f)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func writes(txn *pb.TxnRequest) bool {
	for _, op := range txn.Success {
		switch r := op.Request.(type) {
		case *pb.RequestOp_RequestPut, *pb.RequestOp_RequestDeleteRange:
			return true
		case *pb.RequestOp_RequestTxn:
			if writes(r.RequestTxn) {
				return true
			}
		}
	}
	return false
}

// churnRun is one case under way.
type churnRun struct {
	*churnEnv
	r     *rand.Rand
	w     *world
	log   []string
	cli   *clientv3.Client // the churned publisher's etcd
	fresh *clientv3.Client // a fresh publisher's, emptied before each use
	p     *pub
	lossy *lossy // nil: etcd loses nothing
}

func (c convergeCase) run(t *testing.T) {
	e := newChurnEnv(t, c)
	r := &churnRun{churnEnv: e, r: rand.New(rand.NewPCG(c.seed, 0xc0ffee)), w: newWorld(), cli: startEtcd(t), fresh: startEtcd(t)}
	writer := r.cli
	if c.lossy {
		r.lossy = newLossy(c.seed)
		writer = intercepted(t, r.cli, r.lossy.intercept)
	}
	r.p = e.publisher(t, writer, 0)
	r.p.start(nil)
	r.converge(t, "start")

	everInvalid := false
	for done, batch := 0, 1; done < c.ops; batch++ {
		if r.lossy != nil {
			r.lossy.refill()
		}
		n := min(1+r.r.IntN(10), c.ops-done)
		for range n {
			r.step(t)
		}
		done += n
		stage := fmt.Sprintf("batch %d (op %d)", batch, done)
		r.log = append(r.log, "-- "+stage)
		w := r.converge(t, stage)
		everInvalid = everInvalid || w.problems > 0
		if batch%4 == 0 || done == c.ops {
			r.compareFresh(t, stage, w)
		}
	}
	if everInvalid {
		waitCounter(r.p.m.Invalid, 1)
		if counter(r.p.m.Invalid) == 0 {
			r.fail(t, "end", "invalid objects were never counted")
		}
	}

	// Stopped, the publisher has nothing in flight: what etcd holds now
	// is what it leaves behind.
	r.p.stop()
	w := wantedOf(e.zones, r.w, e.filter)
	if d := w.check(dump(t, r.cli)); len(d) > 0 {
		r.fail(t, "after the publisher stopped", d...)
	}
	// A restart reads everything back (in pages of two keys, cut at the
	// services' names, so that the load's pieces are exercised) and finds
	// every record as it wants it.
	rev := revision(t, r.cli)
	p2 := e.publisher(t, r.cli, 2)
	p2.start(nil)
	p2.stop()
	if got := revision(t, r.cli); got != rev {
		r.fail(t, "restart", fmt.Sprintf("a restart over the unchanged world moved etcd from revision %d to %d", rev, got))
	}
	if n := counter(p2.m.Written) + counter(p2.m.Deleted) + counter(p2.m.Retries); n != 0 {
		r.fail(t, "restart", fmt.Sprintf("a restart wrote, deleted or retried %v records", n))
	}
	lost := 0
	if r.lossy != nil {
		r.lossy.mu.Lock()
		lost = r.lossy.injected
		r.lossy.mu.Unlock()
	}
	t.Logf("seed %d: %d ops, %d records, %d contested keys, %v invalid parts counted, %d transactions failed on purpose",
		c.seed, c.ops, len(w.vals), contestedCount(w), counter(r.p.m.Invalid), lost)
}

func contestedCount(w wanted) int {
	n := 0
	for k := range w.vals {
		if w.contested(k) {
			n++
		}
	}
	return n
}

// converge waits until the publisher's informers show the world (the
// records they make are the world's) and etcd holds what the world wants.
// Nothing changes meanwhile, so the first is the signal that every change
// reached the publisher; the second is then only its queue draining.
func (r *churnRun) converge(t *testing.T, stage string) wanted {
	t.Helper()
	w := wantedOf(r.zones, r.w, r.filter)
	deadline := time.Now().Add(20 * time.Second)
	for {
		var d []string
		why := stage
		if seen := wantedOf(r.zones, r.p.src, r.filter); !reflect.DeepEqual(seen, w) {
			why += fmt.Sprintf(": the publisher's informers never showed the world (%d invalid parts, the world %d); the records they want (-) and the world's (+)",
				seen.problems, w.problems)
			d = w.against(seen.any(), w.any())
		} else if d = w.check(dump(t, r.cli)); len(d) == 0 {
			return w
		}
		if time.Now().After(deadline) {
			r.fail(t, why, d...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// compareFresh starts a publisher over the same objects into an empty
// etcd: once ready, it must have written what the churned one holds.
func (r *churnRun) compareFresh(t *testing.T, stage string, w wanted) {
	t.Helper()
	if _, err := r.fresh.Delete(bg, "/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	p := r.publisher(t, r.fresh, 0)
	p.start(nil)
	fresh := dump(t, r.fresh)
	p.stop()
	if d := w.check(fresh); len(d) > 0 {
		r.fail(t, stage+": fresh publisher", d...)
	}
	if d := w.against(dump(t, r.cli), fresh); len(d) > 0 {
		r.fail(t, stage+": churned (-) against fresh (+)", d...)
	}
	if got := counter(p.m.Invalid); w.problems == 0 && got != 0 || got < float64(w.problems) {
		r.fail(t, stage+": fresh publisher", fmt.Sprintf("counted %v invalid parts, the objects have %d", got, w.problems))
	}
}

func (r *churnRun) fail(t *testing.T, stage string, diff ...string) {
	t.Helper()
	t.Fatalf("seed %d, %s: %d differences:\n%s\n\noperations:\n%s", r.c.seed, stage, len(diff),
		strings.Join(diff, "\n"), strings.Join(r.log, "\n"))
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

// oneIn is true once in n draws.
func oneIn(r *rand.Rand, n int) bool { return r.IntN(n) == 0 }

// existing picks a key of m, false when m is empty.
func existing[V any](r *rand.Rand, m map[string]V) (string, bool) {
	if len(m) == 0 {
		return "", false
	}
	return pick(r, keysOfAny(m)), true
}

func keysOfAny[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out) // map order would make the seed choose differently each run
	return out
}

// step makes one random change through the fake API and to the world.
func (r *churnRun) step(t *testing.T) {
	t.Helper()
	ns, name := pick(r.r, churnNamespaces), pick(r.r, churnServices)
	if oneIn(r.r, 40) {
		name = "Not_A_Label" // invalid: skipped, counted, and nothing else lost
	}
	switch n := r.r.IntN(100); {
	case n < 22:
		r.putService(t, r.service(ns, name))
	case n < 32:
		if k, ok := existing(r.r, r.w.svcs); ok {
			r.putService(t, r.editService(r.w.svcs[k].DeepCopy()))
		}
	case n < 40:
		if k, ok := existing(r.r, r.w.svcs); ok {
			s := r.w.svcs[k]
			r.apply(t, "delete service "+k, r.kc.CoreV1().Services(s.Namespace).Delete(bg, s.Name, metav1.DeleteOptions{}))
			delete(r.w.svcs, k)
		}
	case n < 58:
		r.putSlice(t, r.slice(ns, pick(r.r, churnSlices)))
	case n < 66:
		if k, ok := existing(r.r, r.w.slices); ok {
			r.putSlice(t, r.editSlice(r.w.slices[k].DeepCopy()))
		}
	case n < 71:
		r.moveEndpoint(t)
	case n < 78:
		if k, ok := existing(r.r, r.w.slices); ok {
			s := r.w.slices[k]
			r.apply(t, "delete endpointslice "+k, r.kc.DiscoveryV1().EndpointSlices(s.Namespace).Delete(bg, s.Name, metav1.DeleteOptions{}))
			delete(r.w.slices, k)
		}
	case n < 84:
		r.putPod(t, r.pod(ns, pick(r.r, churnPods)))
	case n < 87:
		if k, ok := existing(r.r, r.w.pods); ok {
			p := r.w.pods[k]
			r.apply(t, "delete pod "+k, r.kc.CoreV1().Pods(p.Namespace).Delete(bg, p.Name, metav1.DeleteOptions{}))
			delete(r.w.pods, k)
		}
	case n < 91:
		k := ns + "/" + name
		mcs := r.mc.MulticlusterV1alpha1()
		if _, ok := r.w.exports[k]; ok {
			r.apply(t, "delete serviceexport "+k, mcs.ServiceExports(ns).Delete(bg, name, metav1.DeleteOptions{}))
			delete(r.w.exports, k)
			break
		}
		e := &mcsv1alpha1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if oneIn(r.r, 5) { // the MCS controller found it invalid: it publishes nothing
			e.Status.Conditions = []metav1.Condition{{Type: string(mcsv1alpha1.ServiceExportValid), Status: metav1.ConditionFalse, Reason: "ServiceNotFound"}}
		}
		_, err := mcs.ServiceExports(ns).Create(bg, e, metav1.CreateOptions{})
		r.apply(t, "create serviceexport "+k, err)
		r.w.exports[k] = e
	case n < 97:
		r.putImport(t, r.serviceImport(ns, name))
	default:
		if k, ok := existing(r.r, r.w.imports); ok {
			i := r.w.imports[k]
			r.apply(t, "delete serviceimport "+k, r.mc.MulticlusterV1alpha1().ServiceImports(i.Namespace).Delete(bg, i.Name, metav1.DeleteOptions{}))
			delete(r.w.imports, k)
		}
	}
}

func (r *churnRun) apply(t *testing.T, what string, err error) {
	t.Helper()
	r.log = append(r.log, what)
	if err != nil {
		r.fail(t, what, err.Error())
	}
}

// typedAPI is a fake clientset's API of one kind.
type typedAPI[T any] interface {
	Create(context.Context, T, metav1.CreateOptions) (T, error)
	Update(context.Context, T, metav1.UpdateOptions) (T, error)
}

// upsert creates obj, or updates it where held says the API has it, and
// returns the verb used.
func upsert[T interface{ DeepCopy() T }](api typedAPI[T], obj T, held bool) (string, error) {
	if held {
		_, err := api.Update(bg, obj.DeepCopy(), metav1.UpdateOptions{})
		return "update", err
	}
	_, err := api.Create(bg, obj.DeepCopy(), metav1.CreateOptions{})
	return "create", err
}

func (r *churnRun) putService(t *testing.T, s *corev1.Service) {
	t.Helper()
	k := s.Namespace + "/" + s.Name
	_, held := r.w.svcs[k]
	verb, err := upsert(r.kc.CoreV1().Services(s.Namespace), s, held)
	r.apply(t, verb+" service "+k+" "+describeService(s), err)
	r.w.svcs[k] = s
}

func (r *churnRun) putSlice(t *testing.T, s *discoveryv1.EndpointSlice) {
	t.Helper()
	k := s.Namespace + "/" + s.Name
	_, held := r.w.slices[k]
	verb, err := upsert(r.kc.DiscoveryV1().EndpointSlices(s.Namespace), s, held)
	r.apply(t, verb+" endpointslice "+k+" "+describeSlice(s), err)
	r.w.slices[k] = s
}

func (r *churnRun) putPod(t *testing.T, p *corev1.Pod) {
	t.Helper()
	k := p.Namespace + "/" + p.Name
	_, held := r.w.pods[k]
	verb, err := upsert(r.kc.CoreV1().Pods(p.Namespace), p, held)
	r.apply(t, fmt.Sprintf("%s pod %s %s %v", verb, k, p.Status.Phase, p.Status.PodIPs), err)
	r.w.pods[k] = p
}

func (r *churnRun) putImport(t *testing.T, i *mcsv1alpha1.ServiceImport) {
	t.Helper()
	k := i.Namespace + "/" + i.Name
	_, held := r.w.imports[k]
	verb, err := upsert(r.mc.MulticlusterV1alpha1().ServiceImports(i.Namespace), i, held)
	r.apply(t, fmt.Sprintf("%s serviceimport %s %s ips=%v ports=%v", verb, k, i.Spec.Type, i.Spec.IPs, i.Spec.Ports), err)
	r.w.imports[k] = i
}

func (r *churnRun) servicePorts() []corev1.ServicePort {
	all := []corev1.ServicePort{
		{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
		{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
		{Name: "grpc", Port: 9090, Protocol: corev1.ProtocolSCTP},
		{Port: 8080}, // unnamed, protocol left to the default
	}
	var out []corev1.ServicePort
	for _, p := range all {
		if oneIn(r.r, 2) {
			out = append(out, p)
		}
	}
	if oneIn(r.r, 30) {
		out = append(out, corev1.ServicePort{Name: "Bad_Port", Port: 81}) // invalid
	}
	return out
}

func (r *churnRun) clusterIPs() []string {
	switch r.r.IntN(4) {
	case 0:
		return []string{pick(r.r, clusterIPv6)}
	case 1:
		return []string{pick(r.r, clusterIPv4), pick(r.r, clusterIPv6)}
	case 2:
		return []string{pick(r.r, clusterIPv6), pick(r.r, clusterIPv4)}
	}
	return []string{pick(r.r, clusterIPv4)}
}

func (r *churnRun) service(ns, name string) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	switch n := r.r.IntN(10); {
	case n < 4:
		s.Spec.Type = corev1.ServiceTypeClusterIP
		s.Spec.ClusterIPs = r.clusterIPs()
	case n < 7:
		s.Spec.ClusterIPs = []string{corev1.ClusterIPNone}
	case n < 8:
		s.Spec.Type = corev1.ServiceTypeExternalName
		s.Spec.ExternalName = pick(r.r, externalNames)
		if oneIn(r.r, 5) {
			s.Spec.ExternalName = "10.1.2.3" // invalid: an address is not a name
		}
	default:
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.ClusterIPs = r.clusterIPs()
		for _, ip := range ingressIPs {
			if oneIn(r.r, 2) {
				s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
			}
		}
	}
	if oneIn(r.r, 30) && s.Spec.Type != corev1.ServiceTypeExternalName {
		s.Spec.ClusterIPs = []string{"10.96.0.300"} // invalid
	}
	if len(s.Spec.ClusterIPs) > 0 {
		s.Spec.ClusterIP = s.Spec.ClusterIPs[0]
	}
	s.Spec.Ports = r.servicePorts()
	s.Spec.PublishNotReadyAddresses = oneIn(r.r, 6)
	if oneIn(r.r, 3) {
		s.Annotations = map[string]string{kube.FederatedAnnotation: "true"}
	}
	if oneIn(r.r, 10) {
		s.Labels = map[string]string{"dns": "off"}
	}
	return s
}

// editService changes one thing of a service, as most updates do.
func (r *churnRun) editService(s *corev1.Service) *corev1.Service {
	switch r.r.IntN(6) {
	case 0:
		if len(s.Spec.Ports) > 0 {
			p := &s.Spec.Ports[r.r.IntN(len(s.Spec.Ports))]
			p.Port++
			p.Protocol = pick(r.r, []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, ""})
		}
	case 1: // dual-stack on or off
		switch len(s.Spec.ClusterIPs) {
		case 1:
			if ip, err := netip.ParseAddr(s.Spec.ClusterIPs[0]); err == nil && ip.Is4() {
				s.Spec.ClusterIPs = append(s.Spec.ClusterIPs, pick(r.r, clusterIPv6))
			}
		case 2:
			s.Spec.ClusterIPs = s.Spec.ClusterIPs[:1]
		}
	case 2:
		if s.Annotations[kube.FederatedAnnotation] == "true" {
			s.Annotations = nil
		} else {
			s.Annotations = map[string]string{kube.FederatedAnnotation: "true"}
		}
	case 3:
		if s.Labels["dns"] == "off" {
			s.Labels = nil
		} else {
			s.Labels = map[string]string{"dns": "off"}
		}
	case 4:
		s.Spec.PublishNotReadyAddresses = !s.Spec.PublishNotReadyAddresses
	default:
		s.Spec.Ports = r.servicePorts()
	}
	return s
}

func (r *churnRun) slice(ns, name string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		Labels: map[string]string{discoveryv1.LabelServiceName: r.sliceService(ns)}}}
	if oneIn(r.r, 20) {
		s.Labels = nil // no service: read by nobody
	}
	pool := endpointIPv4
	switch n := r.r.IntN(10); {
	case n < 7:
		s.AddressType = discoveryv1.AddressTypeIPv4
	case n < 9:
		s.AddressType, pool = discoveryv1.AddressTypeIPv6, endpointIPv6
	default:
		s.AddressType, pool = discoveryv1.AddressTypeFQDN, []string{"a.example.com", "b.example.com"}
	}
	http, metrics, dns := "http", "metrics", "dns"
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	p8080, p9100, p53, p7000 := int32(8080), int32(9100), int32(53), int32(7000)
	for _, p := range []discoveryv1.EndpointPort{
		{Name: &http, Port: &p8080, Protocol: &tcp},
		{Name: &metrics, Port: &p9100}, // protocol unset: TCP
		{Name: &dns, Port: &p53, Protocol: &udp},
		{Port: &p7000}, // unnamed: no SRV
	} {
		if oneIn(r.r, 2) {
			s.Ports = append(s.Ports, p)
		}
	}
	for range r.r.IntN(5) {
		s.Endpoints = append(s.Endpoints, r.endpoint(pool))
	}
	return s
}

func (r *churnRun) endpoint(pool []string) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{pick(r.r, pool)}}
	if oneIn(r.r, 40) {
		e.Addresses[0] = "10.244.0.999" // invalid
	}
	yes, no := true, false
	switch r.r.IntN(6) {
	case 0: // ready unknown: read as ready
	case 1:
		e.Conditions = discoveryv1.EndpointConditions{Ready: &no, Serving: &no}
	case 2: // terminating, still serving
		e.Conditions = discoveryv1.EndpointConditions{Ready: &no, Serving: &yes, Terminating: &yes}
	default:
		e.Conditions = discoveryv1.EndpointConditions{Ready: &yes, Serving: &yes}
	}
	switch r.r.IntN(8) {
	case 0, 1:
		h := pick(r.r, hostnames)
		e.Hostname = &h
	case 2:
		if oneIn(r.r, 4) {
			h := "Bad_Host" // invalid
			e.Hostname = &h
		}
	}
	return e
}

// editSlice changes one thing of a slice: an endpoint's readiness or
// hostname, an endpoint more or less, or the service it belongs to.
func (r *churnRun) editSlice(s *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	pool := endpointIPv4
	if s.AddressType == discoveryv1.AddressTypeIPv6 {
		pool = endpointIPv6
	}
	switch r.r.IntN(5) {
	case 0:
		if len(s.Endpoints) > 0 {
			e := &s.Endpoints[r.r.IntN(len(s.Endpoints))]
			ready := e.Conditions.Ready != nil && !*e.Conditions.Ready
			e.Conditions.Ready = &ready
		}
	case 1:
		if len(s.Endpoints) > 0 {
			e := &s.Endpoints[r.r.IntN(len(s.Endpoints))]
			if e.Hostname != nil {
				e.Hostname = nil
			} else {
				h := pick(r.r, hostnames)
				e.Hostname = &h
			}
		}
	case 2:
		s.Endpoints = append(s.Endpoints, r.endpoint(pool))
	case 3:
		if len(s.Endpoints) > 0 {
			s.Endpoints = slices.Delete(s.Endpoints, 0, 1)
		}
	default:
		s.Labels = map[string]string{discoveryv1.LabelServiceName: r.sliceService(s.Namespace)}
	}
	return s
}

// sliceService is the service a slice is labelled with: mostly one that
// exists, so that endpoints have records, sometimes one that does not yet.
func (r *churnRun) sliceService(ns string) string {
	var here []string
	for _, k := range keysOfAny(r.w.svcs) {
		if s := r.w.svcs[k]; s.Namespace == ns {
			here = append(here, s.Name)
		}
	}
	if len(here) > 0 && !oneIn(r.r, 4) {
		return pick(r.r, here)
	}
	return pick(r.r, churnServices)
}

// moveEndpoint moves an endpoint from one slice to another of the same
// namespace, in two updates, as the EndpointSlice controller rebalances:
// in between the address is in neither.
func (r *churnRun) moveEndpoint(t *testing.T) {
	t.Helper()
	k, ok := existing(r.r, r.w.slices)
	if !ok || len(r.w.slices[k].Endpoints) == 0 {
		return
	}
	from := r.w.slices[k].DeepCopy()
	var tos []string
	for _, k2 := range keysOfAny(r.w.slices) {
		if s := r.w.slices[k2]; k2 != k && s.Namespace == from.Namespace && s.AddressType == from.AddressType {
			tos = append(tos, k2)
		}
	}
	if len(tos) == 0 {
		return
	}
	to := r.w.slices[pick(r.r, tos)].DeepCopy()
	i := r.r.IntN(len(from.Endpoints))
	e := from.Endpoints[i]
	from.Endpoints = slices.Delete(from.Endpoints, i, i+1)
	to.Endpoints = append(to.Endpoints, e)
	r.putSlice(t, from)
	r.putSlice(t, to)
}

func (r *churnRun) pod(ns, name string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	p.Status.Phase = pick(r.r, []corev1.PodPhase{corev1.PodRunning, corev1.PodRunning, corev1.PodPending, corev1.PodSucceeded, corev1.PodFailed})
	ip := pick(r.r, endpointIPv4)
	if oneIn(r.r, 30) {
		ip = "not-an-ip" // invalid
	}
	p.Status.PodIP = ip
	p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	if oneIn(r.r, 3) {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: pick(r.r, endpointIPv6)})
	}
	return p
}

func (r *churnRun) serviceImport(ns, name string) *mcsv1alpha1.ServiceImport {
	i := &mcsv1alpha1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if oneIn(r.r, 4) {
		i.Spec.Type = mcsv1alpha1.Headless
	} else {
		i.Spec.Type = mcsv1alpha1.ClusterSetIP
		i.Spec.IPs = []string{pick(r.r, clustersetIPs)}
		if oneIn(r.r, 4) {
			i.Spec.IPs = append(i.Spec.IPs, "fd00:112::1")
		}
		if oneIn(r.r, 30) {
			i.Spec.IPs = []string{"10.112.0.256"} // invalid
		}
	}
	for _, p := range []mcsv1alpha1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}, {Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53}} {
		if oneIn(r.r, 2) {
			i.Spec.Ports = append(i.Spec.Ports, p)
		}
	}
	return i
}

func describeService(s *corev1.Service) string {
	var b strings.Builder
	fmt.Fprintf(&b, "type=%s", s.Spec.Type)
	if s.Spec.ExternalName != "" {
		fmt.Fprintf(&b, " externalName=%s", s.Spec.ExternalName)
	}
	if len(s.Spec.ClusterIPs) > 0 {
		fmt.Fprintf(&b, " ips=%v", s.Spec.ClusterIPs)
	}
	var ports []string
	for _, p := range s.Spec.Ports {
		ports = append(ports, fmt.Sprintf("%s/%d/%s", p.Name, p.Port, p.Protocol))
	}
	fmt.Fprintf(&b, " ports=%v", ports)
	for _, ing := range s.Status.LoadBalancer.Ingress {
		fmt.Fprintf(&b, " ingress=%s", ing.IP)
	}
	if s.Spec.PublishNotReadyAddresses {
		b.WriteString(" publishNotReady")
	}
	if kube.IsFederated(s) {
		b.WriteString(" federated")
	}
	if s.Labels["dns"] != "" {
		b.WriteString(" dns=" + s.Labels["dns"])
	}
	return b.String()
}

func describeSlice(s *discoveryv1.EndpointSlice) string {
	var b strings.Builder
	fmt.Fprintf(&b, "service=%q %s ports=[", s.Labels[discoveryv1.LabelServiceName], s.AddressType)
	for i, p := range s.Ports {
		if i > 0 {
			b.WriteString(" ")
		}
		if p.Name != nil {
			b.WriteString(*p.Name)
		}
		fmt.Fprintf(&b, "/%d", *p.Port)
	}
	b.WriteString("] endpoints=[")
	for i, e := range s.Endpoints {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(strings.Join(e.Addresses, ","))
		if e.Hostname != nil {
			b.WriteString("(" + *e.Hostname + ")")
		}
		switch c := e.Conditions; {
		case c.Ready == nil:
			b.WriteString("?")
		case !*c.Ready && c.Terminating != nil && *c.Terminating:
			b.WriteString("~terminating")
		case !*c.Ready:
			b.WriteString("~unready")
		}
	}
	b.WriteString("]")
	return b.String()
}

// lostReply makes a publisher's write transactions fail on purpose:
// etcdLosesReply lets the next one commit and then reports a failure (a
// reply lost to a timeout or a dropped connection: etcd has it, the
// publisher does not know), and turns into after; etcdDown fails every one
// before it reaches etcd until the test sets etcdUp; etcdGone fails every
// request, reads too, as a cluster without a quorum does.
type lostReply struct {
	mode    atomic.Int32
	after   int32        // the mode etcdLosesReply turns into
	refused atomic.Int64 // writes failed while etcdDown or etcdGone
}

const (
	etcdUp int32 = iota
	etcdLosesReply
	etcdDown
	etcdGone
)

func (l *lostReply) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	txn, ok := req.(*pb.TxnRequest)
	write := ok && method == "/etcdserverpb.KV/Txn" && writes(txn)
	if l.mode.Load() == etcdGone {
		if write {
			l.refused.Add(1)
		}
		return status.Error(codes.Unavailable, "injected: etcd has no leader")
	}
	if !write {
		return invoke(ctx, method, req, reply, cc, opts...)
	}
	switch {
	case l.mode.CompareAndSwap(etcdLosesReply, l.after):
		if err := invoke(ctx, method, req, reply, cc, opts...); err != nil {
			return err
		}
		return status.Error(codes.Unavailable, "injected: committed, reply lost")
	case l.mode.Load() == etcdDown:
		l.refused.Add(1)
		return status.Error(codes.Unavailable, "injected: etcd unreachable")
	}
	return invoke(ctx, method, req, reply, cc, opts...)
}

// startDB starts a publisher, through icpt, of the headless service
// apps/db with one endpoint at 10.244.1.10, and waits for its records.
func startDB(t *testing.T, cli *clientv3.Client, icpt grpc.UnaryClientInterceptor) (*pub, *fake.Clientset, *corev1.Service) {
	t.Helper()
	hl := headless("apps", "db")
	kc := fake.NewClientset(hl, slice("apps", "db", "db-1", "10.244.1.10"))
	p := newPub(t, intercepted(t, cli, icpt), "c1", kc)
	p.start(nil)
	waitDump(t, cli, want(t, p.b, hl, slice("apps", "db", "db-1", "10.244.1.10")))
	return p, kc, hl
}

// updateSlice writes sl over the slice of its name, and returns it.
func updateSlice(t *testing.T, kc *fake.Clientset, sl *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	t.Helper()
	if _, err := kc.DiscoveryV1().EndpointSlices(sl.Namespace).Update(bg, sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return sl
}

// TestConvergeLostReplyLeavesNothingStale is what seed 3 first found, made
// deterministic: records a transaction wrote though the publisher was
// told it failed are the unit's all the same, and go when the unit no
// longer wants them.
func TestConvergeLostReplyLeavesNothingStale(t *testing.T) {
	cli := startEtcd(t)
	l := &lostReply{after: etcdDown}
	p, kc, hl := startDB(t, cli, l.intercept)
	l.mode.Store(etcdLosesReply)
	sl := updateSlice(t, kc, slice("apps", "db", "db-1", "10.244.1.11"))
	waitDump(t, cli, want(t, p.b, hl, sl)) // in etcd, unknown to the publisher
	// The endpoint changes again before any retry gets through.
	sl = updateSlice(t, kc, slice("apps", "db", "db-1", "10.244.1.12"))
	waitFor(t, "the informer to see 10.244.1.12", func() bool {
		s := p.src.Slices("apps", "db")
		return len(s) == 1 && s[0].Endpoints[0].Addresses[0] == "10.244.1.12"
	})
	l.mode.Store(etcdUp)
	waitDump(t, cli, want(t, p.b, hl, sl))
}

// TestConvergeRetriesWhenEtcdReturns: a change made while etcd answers
// nothing is written as soon as it answers again, not after the retry
// delay its failures have doubled to meanwhile.
func TestConvergeRetriesWhenEtcdReturns(t *testing.T) {
	cli := startEtcd(t)
	l := &lostReply{}
	p, kc, hl := startDB(t, cli, l.intercept)
	l.mode.Store(etcdGone)
	sl := updateSlice(t, kc, slice("apps", "db", "db-1", "10.244.1.11"))
	// The first write and its retries 0.1, 0.3, 0.7, 1.5, 3.1 and 6.3 s
	// after it fail: the next retry is due 6.4 s later.
	waitFor(t, "seven failed writes", func() bool { return l.refused.Load() >= 7 })
	l.mode.Store(etcdUp)
	back := time.Now()
	waitDump(t, cli, want(t, p.b, hl, sl))
	t.Logf("in etcd %v after etcd answered again", time.Since(back).Round(time.Millisecond))
	if d := time.Since(back); d > 3*time.Second {
		t.Errorf("the change reached etcd %v after etcd answered again, want within %v and a write", d.Round(time.Millisecond), recoveryProbeEvery)
	}
}

// TestConvergeLostReplyFreesKeys: a PTR two services want is held by the
// first; when it lets the address go in a transaction whose reply was
// lost, the second must still get the PTR.
func TestConvergeLostReplyFreesKeys(t *testing.T) {
	cli := startEtcd(t)
	l := &lostReply{after: etcdUp}
	a, sa := headless("apps", "a"), slice("apps", "a", "a-1", "10.244.1.10")
	b, sb := headless("apps", "b"), slice("apps", "b", "b-1", "10.244.1.10")
	kc := fake.NewClientset(a, sa)
	p := newPub(t, intercepted(t, cli, l.intercept), "c1", kc)
	p.start(nil)
	first := want(t, p.b, a, sa)
	waitDump(t, cli, first)

	kc.CoreV1().Services("apps").Create(bg, b, metav1.CreateOptions{})
	kc.DiscoveryV1().EndpointSlices("apps").Create(bg, sb, metav1.CreateOptions{})
	both := want(t, p.b, b, sb)
	for k, v := range first {
		both[k] = v // a's PTR of 10.244.1.10, not b's
	}
	waitDump(t, cli, both)

	l.mode.Store(etcdLosesReply)
	sa = updateSlice(t, kc, slice("apps", "a", "a-1", "10.244.1.11"))
	w := want(t, p.b, a, sa)
	for k, v := range want(t, p.b, b, sb) {
		w[k] = v
	}
	waitDump(t, cli, w)
}

// heldRead holds the answer of the next re-read (a transaction of gets
// only) once armed: read is closed when etcd has answered it, and the
// answer goes back when the test closes release.
type heldRead struct {
	armed         atomic.Bool
	read, release chan struct{}
}

func (h *heldRead) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if txn, ok := req.(*pb.TxnRequest); !ok || method != "/etcdserverpb.KV/Txn" || writes(txn) || !h.armed.CompareAndSwap(true, false) {
		return invoke(ctx, method, req, reply, cc, opts...)
	}
	err := invoke(ctx, method, req, reply, cc, opts...)
	close(h.read)
	<-h.release
	return err
}

// arpaKey is the one key of w under a reverse zone but except.
func arpaKey(t *testing.T, w map[string]string, except string) string {
	t.Helper()
	var out []string
	for k := range w {
		if strings.Contains(k, "/arpa/") && k != except {
			out = append(out, k)
		}
	}
	if len(out) != 1 {
		t.Fatalf("reverse keys %v, want one", out)
	}
	return out[0]
}

// TestRefreshOlderThanADelete: a unit re-reads its keys after a guard
// failed, and finds a PTR it wants held by another unit; that unit's
// delete of the PTR commits, and the publisher learns of it, before the
// re-read comes back. The re-read must not give the PTR back to its old
// holder: the unit that wants it would wait for it forever.
func TestRefreshOlderThanADelete(t *testing.T) {
	cli := startEtcd(t)
	h := &heldRead{read: make(chan struct{}), release: make(chan struct{})}
	b, sb := headless("apps", "b"), slice("apps", "b", "b-1", "10.244.1.10")
	kc := fake.NewClientset(b, sb)
	p := newPub(t, intercepted(t, cli, h.intercept), "c1", kc)
	p.start(nil)
	wb := want(t, p.b, b, sb)
	waitDump(t, cli, wb)
	ptr := arpaKey(t, wb, "")

	// a wants b's PTR too, and waits for it.
	a, sa := headless("apps", "a"), slice("apps", "a", "a-1", "10.244.1.10", "10.244.1.20")
	kc.CoreV1().Services("apps").Create(bg, a, metav1.CreateOptions{})
	kc.DiscoveryV1().EndpointSlices("apps").Create(bg, sa, metav1.CreateOptions{})
	w := want(t, p.b, a, sa)
	own := arpaKey(t, w, ptr)
	for k, v := range wb {
		w[k] = v
	}
	waitDump(t, cli, w)

	// Someone touches a's other PTR: a's next transaction, which deletes
	// it, fails its guard, and a re-reads its keys, b's PTR among them.
	v, err := keys.Decode([]byte(w[own]))
	if err != nil {
		t.Fatal(err)
	}
	v.TTL = 99
	if _, err := cli.Put(bg, own, string(v.Encode())); err != nil {
		t.Fatal(err)
	}
	h.armed.Store(true)
	sa = updateSlice(t, kc, slice("apps", "a", "a-1", "10.244.1.10"))
	select {
	case <-h.read:
	case <-time.After(20 * time.Second):
		t.Fatal("a never re-read its keys")
	}
	// b lets the address go while a's re-read, which saw b's PTR, is on
	// its way back.
	sb = updateSlice(t, kc, slice("apps", "b", "b-1", "10.244.1.11"))
	waitFor(t, "b's delete of the PTR to be applied", func() bool {
		p.ctrl.mu.Lock()
		defer p.ctrl.mu.Unlock()
		_, held := p.ctrl.idx.HeldBy("service/apps/a")(ptr)
		return !held
	})
	close(h.release)

	w = want(t, p.b, a, sa)
	for k, v := range want(t, p.b, b, sb) {
		w[k] = v
	}
	waitDump(t, cli, w) // the PTR is a's now
}

// TestSettleReadsInOrder: the keys of a transaction whose reply was lost
// are read again in a transaction with a write, which etcd orders after
// the lost one through raft (etcdstore.Store.GetOrdered), and that write
// changes nothing.
func TestSettleReadsInOrder(t *testing.T) {
	cli := startEtcd(t)
	l := &lostReply{after: etcdUp}
	var mu sync.Mutex
	var lost []string      // keys of the transaction whose reply was lost
	var settles [][]string // keys each ordered read gets
	var problems []string
	record := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		txn, ok := req.(*pb.TxnRequest)
		if !ok || method != "/etcdserverpb.KV/Txn" {
			return invoke(ctx, method, req, reply, cc, opts...)
		}
		var gets, dels []string
		for _, op := range txn.Success {
			switch r := op.Request.(type) {
			case *pb.RequestOp_RequestRange:
				gets = append(gets, string(r.RequestRange.Key))
			case *pb.RequestOp_RequestPut:
				dels = append(dels, string(r.RequestPut.Key))
			case *pb.RequestOp_RequestDeleteRange:
				dels = append(dels, string(r.RequestDeleteRange.Key))
			}
		}
		if len(gets) == 0 {
			if l.mode.Load() == etcdLosesReply {
				mu.Lock()
				lost = dels
				mu.Unlock()
			}
			return l.intercept(ctx, method, req, reply, cc, invoke, opts...)
		}
		r, err := cli.Get(ctx, "/nothing")
		if err != nil {
			return err
		}
		before := r.Header.Revision
		err = l.intercept(ctx, method, req, reply, cc, invoke, opts...)
		if err == nil && len(dels) > 0 {
			mu.Lock()
			settles = append(settles, gets)
			if r := reply.(*pb.TxnResponse); r.Header.Revision != before {
				problems = append(problems, fmt.Sprintf("the ordered read moved etcd from revision %d to %d", before, r.Header.Revision))
			}
			if len(dels) != 1 || dels[0] != gets[0]+"\x00" {
				problems = append(problems, fmt.Sprintf("the ordered read deletes %q", dels))
			}
			mu.Unlock()
		}
		return err
	}
	p, kc, hl := startDB(t, cli, record)
	l.mode.Store(etcdLosesReply)
	sl := updateSlice(t, kc, slice("apps", "db", "db-1", "10.244.1.11"))
	waitFor(t, "the lost transaction's keys to be read again", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(settles) > 0
	})
	waitDump(t, cli, want(t, p.b, hl, sl))
	mu.Lock()
	defer mu.Unlock()
	if len(settles) != 1 || !slices.Equal(settles[0], lost) {
		t.Errorf("ordered reads of %q, want one of the lost transaction's keys %q", settles, lost)
	}
	for _, s := range problems {
		t.Error(s)
	}
}

// campaign wins cluster's election for the test and returns the term.
func campaign(t *testing.T, cli *clientv3.Client, cluster string) *elect.Term {
	t.Helper()
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(60))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	e := concurrency.NewElection(sess, elect.Key(cluster))
	if err := e.Campaign(bg, "test"); err != nil {
		t.Fatal(err)
	}
	return elect.NewTerm(e.Key(), e.Rev(), sess.Lease(), "test")
}

// TestHeldWriteNeverCommitsLate: a transaction whose caller timed out is
// held by a member and reaches etcd only after the publisher has re-read
// its keys, written them again and deleted them. It creates keys only, so
// every guard of its own still holds then: the fence, moved on before the
// re-read, is what must refuse it, or the deleted endpoint comes back.
func TestHeldWriteNeverCommitsLate(t *testing.T) {
	cli := startEtcd(t)
	h := testetcd.NewHeld(writes)
	hl, one := headless("apps", "db"), slice("apps", "db", "db-1", "10.244.1.10")
	kc := fake.NewClientset(hl, one)
	p := newPub(t, intercepted(t, cli, h.Intercept), "c1", kc)
	p.start(campaign(t, cli, "c1"))
	waitDump(t, cli, want(t, p.b, hl, one))

	h.Arm()
	two := updateSlice(t, kc, slice("apps", "db", "db-1", "10.244.1.10", "10.244.1.11"))
	waitDump(t, cli, want(t, p.b, hl, two)) // written again, after the timeout
	if !h.Holding() {
		t.Fatal("no transaction was held")
	}
	updateSlice(t, kc, one)
	waitDump(t, cli, want(t, p.b, hl, one))

	if h.Release() {
		t.Error("the held transaction reached etcd late and was not refused by the fence")
	}
	if got, w := dump(t, cli), want(t, p.b, hl, one); !reflect.DeepEqual(got, w) {
		t.Fatalf("after the held transaction, etcd:\n%s\nwant:\n%s", strings.Join(keysOf(got), "\n"), strings.Join(keysOf(w), "\n"))
	}
}

// txnCount is the publisher's etcdns_publisher_txns_total of result.
func txnCount(t *testing.T, m *Metrics, result string) float64 {
	t.Helper()
	var d dto.Metric
	if err := m.Txns.WithLabelValues(result).Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetCounter().GetValue()
}

// TestAdvanceMidWriteKeepsTheTerm: a transaction sent with the fence of
// before an Advance (another unit's settle) fails the fence. The term
// goes on, and the transaction is planned again with the new fence.
func TestAdvanceMidWriteKeepsTheTerm(t *testing.T) {
	cli := startEtcd(t)
	var term *elect.Term
	var armed atomic.Bool
	advanced := make(chan error, 1)
	advance := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if txn, ok := req.(*pb.TxnRequest); ok && writes(txn) && len(txn.Compare) == 1 && armed.CompareAndSwap(true, false) {
			advanced <- term.Advance(ctx, cli, term.Epoch())
		}
		return invoke(ctx, method, req, reply, cc, opts...)
	}
	hl, one := headless("apps", "db"), slice("apps", "db", "db-1", "10.244.1.10")
	kc := fake.NewClientset(hl, one)
	p := newPub(t, intercepted(t, cli, advance), "c1", kc)
	term = campaign(t, cli, "c1")
	p.start(term)
	waitDump(t, cli, want(t, p.b, hl, one))

	before := term.Epoch()
	armed.Store(true)
	two := updateSlice(t, kc, slice("apps", "db", "db-1", "10.244.1.10", "10.244.1.11"))
	waitDump(t, cli, want(t, p.b, hl, two))
	if err := <-advanced; err != nil || term.Epoch() <= before {
		t.Fatalf("advance: %v, epoch %d -> %d", err, before, term.Epoch())
	}
	if n := txnCount(t, p.m, "fenced"); n != 0 {
		t.Errorf("%v transactions counted fenced; the term did not end", n)
	}
	if n := txnCount(t, p.m, "conflict"); n != 1 {
		t.Errorf("%v transactions counted conflicts, want the one sent with the old fence", n)
	}
	select {
	case err := <-p.done:
		t.Fatalf("the term ended: %v", err)
	default:
	}
	// It keeps writing with the new fence.
	updateSlice(t, kc, one)
	waitDump(t, cli, want(t, p.b, hl, one))
}

// TestLostAdvanceKeepsTheTerm: an Advance (settle's, after a write timed
// out on a frozen member) whose put commits but whose answer is lost
// leaves the term at its old epoch; the next transaction fails the fence
// at that epoch. The term goes on: the store's Advance finds the move the
// term made, and the transaction is planned again. It ended the term
// before, and with it every write until a new term had loaded the world.
func TestLostAdvanceKeepsTheTerm(t *testing.T) {
	cli := startEtcd(t)
	lose := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoke(ctx, method, req, reply, cc, opts...)
		if _, ok := req.(*pb.TxnRequest); ok && err == nil {
			return status.Error(codes.Unavailable, "the answer was lost")
		}
		return err
	}
	hl, one := headless("apps", "db"), slice("apps", "db", "db-1", "10.244.1.10")
	kc := fake.NewClientset(hl, one)
	p := newPub(t, cli, "c1", kc)
	term := campaign(t, cli, "c1")
	p.start(term)
	waitDump(t, cli, want(t, p.b, hl, one))

	before := term.Epoch()
	if err := term.Advance(context.Background(), intercepted(t, cli, lose), before); err == nil || term.Epoch() != before {
		t.Fatalf("advance: %v, epoch %d -> %d; want its answer lost, the epoch as it was", err, before, term.Epoch())
	}
	two := updateSlice(t, kc, slice("apps", "db", "db-1", "10.244.1.10", "10.244.1.11"))
	waitDump(t, cli, want(t, p.b, hl, two))
	select {
	case err := <-p.done:
		t.Fatalf("the term ended: %v", err)
	default:
	}
	if n := txnCount(t, p.m, "fenced"); n != 0 {
		t.Errorf("%v transactions counted fenced; the term did not end", n)
	}
	if term.Epoch() <= before {
		t.Errorf("epoch %d after the change; want the one the lost Advance moved it to", term.Epoch())
	}
}

package store

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/etcdns/etcdns/internal/testetcd"
	"github.com/etcdns/etcdns/server/snap"
)

var testZones = []snap.Config{
	{Name: "cluster.local", Prefix: "/skydns", TTL: 5},
	{Name: "in-addr.arpa", Prefix: "/skydns", TTL: 5},
}

// testPageSize makes the loads of these tests take several pages.
const testPageSize = 100

// quietStore is a store of testZones on c that logs nothing.
func quietStore(c *clientv3.Client) *Store {
	return New(c, testZones, 5*time.Second, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func startStore(t *testing.T, cli *clientv3.Client, hook func()) *Store {
	t.Helper()
	s := quietStore(cli)
	s.afterLoad, s.pageSize = hook, testPageSize
	runStore(t, s)
	return s
}

// runStore runs s until the test ends and waits for its first load.
func runStore(t *testing.T, s *Store) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-s.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("store not ready")
	}
}

func mustPut(t *testing.T, cli *clientv3.Client, k, v string) int64 {
	t.Helper()
	r, err := cli.Put(context.Background(), k, v)
	if err != nil {
		t.Fatal(err)
	}
	return r.Header.Revision
}

// addrs returns the A records held for name, as strings.
func addrs(s *snap.Snapshot, name string) []string {
	z := s.Zone(name)
	if z == nil {
		return nil
	}
	var out []string
	for _, r := range z.Node(name).RRSet(dns.TypeA).RRs {
		out = append(out, r.(*dns.A).A.String())
	}
	return out
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestLoadPaginatesAtOneRevision(t *testing.T) {
	cli := testetcd.Start(t, nil)
	n := testPageSize*2 + 17
	for i := range n {
		mustPut(t, cli, fmt.Sprintf("/skydns/local/cluster/svc/ns/s%d/x", i), fmt.Sprintf(`{"host":"10.1.%d.%d"}`, i/250, i%250))
	}
	last := mustPut(t, cli, "/skydns/arpa/in-addr/10/0/0/1", `{"host":"s1.ns.svc.cluster.local"}`)
	mustPut(t, cli, "/other/local/cluster/svc/ns/ignored/x", `{"host":"10.9.9.9"}`)
	s := startStore(t, cli, nil)
	sn := s.Snapshot()
	if got := sn.Zone("cluster.local").Records; got != n {
		t.Fatalf("loaded %d records of cluster.local, want %d", got, n)
	}
	if sn.Zone("in-addr.arpa").Records != 1 || sn.Rev < last {
		t.Fatalf("reverse records %d at rev %d, want 1 at >= %d", sn.Zone("in-addr.arpa").Records, sn.Rev, last)
	}
	if got := value(s.records.WithLabelValues("cluster.local")); got != float64(n) {
		t.Fatalf("records metric %v", got)
	}
}

func TestWatchAppliesTransactionsWhole(t *testing.T) {
	cli := testetcd.Start(t, nil)
	mustPut(t, cli, "/skydns/local/cluster/svc/ns/a/x1", `{"host":"10.0.0.1"}`)
	s := startStore(t, cli, nil)
	if got := addrs(s.Snapshot(), "a.ns.svc.cluster.local"); len(got) != 1 {
		t.Fatalf("loaded %v", got)
	}

	// Watch every snapshot published while a transaction replaces a's
	// address, moves the PTR and adds b: none may show part of it.
	stop := make(chan struct{})
	seen := make(chan string, 1)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			sn := s.Snapshot()
			a := strings.Join(addrs(sn, "a.ns.svc.cluster.local"), ",")
			b := strings.Join(addrs(sn, "b.ns.svc.cluster.local"), ",")
			if state := a + "|" + b; state != "10.0.0.1|" && state != "10.0.0.2|10.0.0.3" {
				select {
				case seen <- state:
				default:
				}
			}
		}
	}()
	resp, err := cli.Txn(context.Background()).Then(
		clientv3.OpDelete("/skydns/local/cluster/svc/ns/a/x1"),
		clientv3.OpPut("/skydns/local/cluster/svc/ns/a/x2", `{"host":"10.0.0.2"}`),
		clientv3.OpPut("/skydns/local/cluster/svc/ns/b/x1", `{"host":"10.0.0.3"}`),
		clientv3.OpPut("/skydns/arpa/in-addr/10/0/0/2", `{"host":"a.ns.svc.cluster.local"}`),
	).Commit()
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the transaction", func() bool {
		return strings.Join(addrs(s.Snapshot(), "b.ns.svc.cluster.local"), ",") == "10.0.0.3"
	})
	close(stop)
	select {
	case st := <-seen:
		t.Fatalf("a query could see half a transaction: %s", st)
	default:
	}
	sn := s.Snapshot()
	if sn.Zone("in-addr.arpa").Node("2.0.0.10.in-addr.arpa") == nil {
		t.Fatal("PTR of the same transaction missing")
	}
	if z := sn.Zone("cluster.local"); z.Serial != uint32(resp.Header.Revision) {
		t.Fatalf("serial %d, want the transaction's revision %d", z.Serial, resp.Header.Revision)
	}

	// A delete removes the name and the empty non-terminals above it.
	if _, err := cli.Delete(context.Background(), "/skydns/local/cluster/svc/ns/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the delete", func() bool { return s.Snapshot().Zone("cluster.local").Node("ns.svc.cluster.local") == nil })
}

func TestMalformedValueIsSkippedAndCounted(t *testing.T) {
	cli := testetcd.Start(t, nil)
	mustPut(t, cli, "/skydns/local/cluster/svc/ns/a/good", `{"host":"10.0.0.1"}`)
	mustPut(t, cli, "/skydns/local/cluster/svc/ns/a/bad", `{"host":`)
	s := startStore(t, cli, nil)
	if got := addrs(s.Snapshot(), "a.ns.svc.cluster.local"); len(got) != 1 || got[0] != "10.0.0.1" {
		t.Fatalf("a = %v, want the good value only", got)
	}
	if got := value(s.malformed.WithLabelValues("cluster.local")); got != 1 {
		t.Fatalf("malformed counter %v, want 1", got)
	}
	if m := s.MalformedAt("a.ns.svc.cluster.local"); len(m) != 1 || m[0].Key != "/skydns/local/cluster/svc/ns/a/bad" {
		t.Fatalf("MalformedAt = %v", m)
	}

	// A valid value turned invalid by a watch event no longer answers.
	mustPut(t, cli, "/skydns/local/cluster/svc/ns/a/good", `{"host":"10.0.0.1","mail":true}`)
	eventually(t, "the broken value to be dropped", func() bool { return len(addrs(s.Snapshot(), "a.ns.svc.cluster.local")) == 0 })
	if got := value(s.malformed.WithLabelValues("cluster.local")); got != 2 {
		t.Fatalf("malformed counter %v, want 2", got)
	}
	// And fixed, it answers again.
	mustPut(t, cli, "/skydns/local/cluster/svc/ns/a/bad", `{"host":"10.0.0.9"}`)
	eventually(t, "the fixed value", func() bool { return len(addrs(s.Snapshot(), "a.ns.svc.cluster.local")) == 1 })
	if m := s.MalformedAt("a.ns.svc.cluster.local"); len(m) != 1 {
		t.Fatalf("MalformedAt after the fix = %v", m)
	}
}

func TestCompactionRelists(t *testing.T) {
	cli := testetcd.Start(t, nil)
	mustPut(t, cli, "/skydns/local/cluster/svc/ns/a/x", `{"host":"10.0.0.1"}`)
	var once bool
	// Between the first load and its watch, the data moves on and the
	// history the watch needs is compacted away.
	s := startStore(t, cli, func() {
		if once {
			return
		}
		once = true
		mustPut(t, cli, "/skydns/local/cluster/svc/ns/b/x", `{"host":"10.0.0.2"}`)
		rev := mustPut(t, cli, "/skydns/local/cluster/svc/ns/c/x", `{"host":"10.0.0.3"}`)
		if _, err := cli.Compact(context.Background(), rev); err != nil {
			t.Error(err)
		}
	})
	eventually(t, "the relist", func() bool {
		sn := s.Snapshot()
		return len(addrs(sn, "b.ns.svc.cluster.local")) == 1 && len(addrs(sn, "c.ns.svc.cluster.local")) == 1
	})
	if got := value(s.restarts.WithLabelValues(ReasonCompacted)); got != 1 {
		t.Fatalf("watch restarts %v, want 1", got)
	}
	// And the new watch works.
	mustPut(t, cli, "/skydns/local/cluster/svc/ns/d/x", `{"host":"10.0.0.4"}`)
	eventually(t, "a change after the relist", func() bool { return len(addrs(s.Snapshot(), "d.ns.svc.cluster.local")) == 1 })
}

func value(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}

// Stub keys are loaded and watched with their zone, into the stub table
// and never into records; a broken one is skipped and counted.
func TestStubKeysAreWatched(t *testing.T) {
	cli := testetcd.Start(t, nil)
	const k1 = "/skydns/local/cluster/dns/stub/federation/svc/myfed/ns1"
	const k2 = "/skydns/local/cluster/dns/stub/federation/svc/myfed/ns2"
	mustPut(t, cli, k1, `{"host":"10.0.0.1","port":53}`)
	s := startStore(t, cli, nil)
	stub := func() string {
		st := s.Snapshot().Stub("web.ns.myfed.svc.federation")
		if st == nil {
			return ""
		}
		var out []string
		for _, ns := range st.Servers {
			out = append(out, ns.Addr.String())
		}
		return strings.Join(out, ",")
	}
	if got := stub(); got != "10.0.0.1:53" {
		t.Fatalf("loaded %q", got)
	}
	if z := s.Snapshot().Zone("cluster.local"); z.Records != 0 || z.Node("stub.dns.cluster.local") != nil {
		t.Fatalf("a stub key became a record: %d records", z.Records)
	}

	mustPut(t, cli, k2, `{"host":"10.0.0.2","port":5353}`)
	eventually(t, "the second nameserver", func() bool { return stub() == "10.0.0.1:53,10.0.0.2:5353" })
	mustPut(t, cli, k1, `{"host":"ns.example.com"}`)
	eventually(t, "the broken nameserver to be dropped", func() bool { return stub() == "10.0.0.2:5353" })
	if got := value(s.malformed.WithLabelValues("cluster.local")); got != 1 {
		t.Fatalf("malformed counter %v, want 1", got)
	}
	if m := s.MalformedAt("myfed.svc.federation"); len(m) != 1 || m[0].Key != k1 {
		t.Fatalf("MalformedAt = %v", m)
	}
	if _, err := cli.Delete(context.Background(), "/skydns/local/cluster/dns/stub/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the stub domain to go", func() bool { return stub() == "" })
	if m := s.MalformedAt("myfed.svc.federation"); len(m) != 0 {
		t.Fatalf("a deleted key still reported: %v", m)
	}
}

// Each zone's records gauge counts that zone's records, though a snapshot
// holds its zones in another order than the configuration's (the most
// specific first), through the load and through a change.
func TestRecordsGaugeCountsEachZone(t *testing.T) {
	cli := testetcd.Start(t, nil)
	for _, k := range []string{"/skydns/org/example/www/x", "/skydns/org/example/api/x", "/skydns/net/example/a/www/x"} {
		mustPut(t, cli, k, `{"host":"10.0.0.1"}`)
	}
	zones := []snap.Config{{Name: "example.org", Prefix: "/skydns", TTL: 5}, {Name: "a.example.net", Prefix: "/skydns", TTL: 5}}
	s := New(cli, zones, 5*time.Second, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	runStore(t, s)
	if org, net := value(s.records.WithLabelValues("example.org")), value(s.records.WithLabelValues("a.example.net")); org != 2 || net != 1 {
		t.Fatalf("after the load: example.org %v, a.example.net %v; want 2 and 1", org, net)
	}
	mustPut(t, cli, "/skydns/net/example/a/api/x", `{"host":"10.0.0.2"}`)
	eventually(t, "a.example.net's gauge to count the new record", func() bool {
		return value(s.records.WithLabelValues("a.example.net")) == 2
	})
	if org := value(s.records.WithLabelValues("example.org")); org != 2 {
		t.Fatalf("after a change in a.example.net: example.org %v, want 2", org)
	}
}

// loadPaged loads n records in pages of testPageSize through a store
// whose requests have timeout. page sees each page request, numbered from
// 1, before etcd does, and an error it returns fails the request instead.
// It checks that all n records were loaded.
func loadPaged(t *testing.T, n int, timeout time.Duration, page func(ctx context.Context, i int, r *etcdserverpb.RangeRequest) error) *Store {
	t.Helper()
	cli := testetcd.Start(t, nil)
	for i := range n {
		mustPut(t, cli, fmt.Sprintf("/skydns/local/cluster/svc/ns/s%d/x", i), fmt.Sprintf(`{"host":"10.1.%d.%d"}`, i/250, i%250))
	}
	var pages atomic.Int32
	c := testetcd.Intercepted(t, cli, func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if r, ok := req.(*etcdserverpb.RangeRequest); ok && r.Limit == testPageSize {
			if err := page(ctx, int(pages.Add(1)), r); err != nil {
				return err
			}
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	s := New(c, testZones, timeout, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.pageSize = testPageSize
	runStore(t, s)
	if got := s.Snapshot().Zone("cluster.local").Records; got != n {
		t.Fatalf("loaded %d records, want %d", got, n)
	}
	return s
}

// A page that fails mid-load (etcd too busy to answer it within the
// timeout, as when a fleet starts at once) is asked for again alone, at the
// load's revision and with twice the time: the load does not start over
// from its first page.
func TestLoadRetriesOnlyTheFailedPage(t *testing.T) {
	type request struct {
		r    *etcdserverpb.RangeRequest
		time time.Duration // the time it was given
	}
	var mu sync.Mutex
	var pages []request
	// Well above a page's time, even under -race on two busy cores: the
	// page after one that took over half of it would be given more.
	timeout := time.Second
	s := loadPaged(t, testPageSize*3+5, timeout, func(ctx context.Context, i int, r *etcdserverpb.RangeRequest) error {
		deadline, _ := ctx.Deadline()
		mu.Lock()
		pages = append(pages, request{r, time.Until(deadline)})
		mu.Unlock()
		if i == 2 { // etcd still busy with it when the time is up
			<-ctx.Done()
			return status.FromContextError(ctx.Err()).Err()
		}
		return nil
	})
	if got := value(s.loadRetries); got != 1 {
		t.Fatalf("load retries %v, want 1", got)
	}
	mu.Lock()
	defer mu.Unlock()
	// The failed page is asked for again as it was, and the load goes on
	// from there: no later request starts from the zone's first key.
	if len(pages) < 4 {
		t.Fatalf("%d page requests, want the failed one again among them", len(pages))
	}
	failed, again := pages[1], pages[2]
	if string(again.r.Key) != string(failed.r.Key) || string(again.r.RangeEnd) != string(failed.r.RangeEnd) || again.r.Revision != failed.r.Revision || failed.r.Revision == 0 {
		t.Fatalf("retried page %q..%q rev %d, failed page %q..%q rev %d", again.r.Key, again.r.RangeEnd, again.r.Revision, failed.r.Key, failed.r.RangeEnd, failed.r.Revision)
	}
	for _, p := range pages[1:] {
		if string(p.r.Key) == string(pages[0].r.Key) {
			t.Fatalf("a later request started at the zone's first key %q again: the load started over", p.r.Key)
		}
	}
	if failed.time > timeout || again.time <= timeout || pages[3].time > timeout {
		t.Fatalf("time given: failed page %v, its retry %v, the next page %v; want %v, more, %v", failed.time, again.time, pages[3].time, timeout, timeout)
	}
}

// A page that took long (a fleet's cold start, every frontend reading at
// once) gives the next page twice as long as it took, so that the next is
// not read only to run out of the timeout; a quick page gives the one after
// it the timeout again.
func TestLoadGivesTheNextPageTwiceWhatASlowOneTook(t *testing.T) {
	// slow leaves etcd a good part of the timeout to answer in, and twice
	// it is well past the timeout.
	const timeout, slow = 2 * time.Second, 1400 * time.Millisecond
	var mu sync.Mutex
	var given []time.Duration // each page request's time
	s := loadPaged(t, testPageSize*3+5, timeout, func(ctx context.Context, i int, _ *etcdserverpb.RangeRequest) error {
		deadline, _ := ctx.Deadline()
		mu.Lock()
		given = append(given, time.Until(deadline))
		mu.Unlock()
		if i == 2 {
			time.Sleep(slow)
		}
		return nil
	})
	if got := value(s.loadRetries); got != 0 {
		t.Fatalf("load retries %v, want none", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(given) < 4 {
		t.Fatalf("%d page requests, want 4 or more", len(given))
	}
	if given[1] > timeout || given[2] < 2*slow-100*time.Millisecond || given[3] > timeout {
		t.Fatalf("time given: the slow page %v, the next %v, the one after %v; want %v, twice %v, %v", given[1], given[2], given[3], timeout, slow, timeout)
	}
}

// A change that copies a good share of a zone's tables has them packed
// once the changes pause: the snapshot published then holds the same
// records at the same revision.
func TestTablesArePackedWhenChangesPause(t *testing.T) {
	cli := testetcd.Start(t, nil)
	s := startStore(t, cli, nil)
	var ops []clientv3.Op
	for i := range 100 {
		ops = append(ops, clientv3.OpPut(fmt.Sprintf("/skydns/local/cluster/svc/ns/s%d/x", i), fmt.Sprintf(`{"host":"10.2.0.%d"}`, i)))
	}
	resp, err := cli.Txn(context.Background()).Then(ops...).Commit()
	if err != nil {
		t.Fatal(err)
	}
	var changed *snap.Snapshot
	eventually(t, "the change", func() bool {
		changed = s.Snapshot()
		return changed.Rev >= resp.Header.Revision
	})
	if got := changed.Zone("cluster.local").Scattered(); got < packScattered || got >= packBusy {
		t.Fatalf("the change left the tables %.2f scattered; the test needs them between %v and %v", got, packScattered, packBusy)
	}
	eventually(t, "the pause's packing", func() bool { return s.Snapshot() != changed })
	sn := s.Snapshot()
	if z := sn.Zone("cluster.local"); z.Scattered() != 0 || z.Records != 100 || sn.Rev != changed.Rev {
		t.Fatalf("after the pause: %.2f scattered, %d records at %d; want packed, 100 at %d", z.Scattered(), z.Records, sn.Rev, changed.Rev)
	}
	if got := addrs(sn, "s42.ns.svc.cluster.local"); len(got) != 1 || got[0] != "10.2.0.42" {
		t.Fatalf("s42 after packing: %v", got)
	}
}

// Frontends that start within a RevisionStep of each other load at the
// same revision with the same requests, so that an etcd grpc-proxy can
// answer the later ones from its cache; each watch then replays what was
// written after that revision. A shared revision that etcd has compacted
// is not used.
func TestLoadsShareARevision(t *testing.T) {
	cli := testetcd.Start(t, nil)
	const step = 64
	for i := range 3 * testPageSize {
		mustPut(t, cli, fmt.Sprintf("/skydns/local/cluster/svc/ns/s%d/x", i), fmt.Sprintf(`{"host":"10.1.%d.%d"}`, i/250, i%250))
	}
	// Past the next multiple of the step, nearly to the one after, then a
	// late record: one newer than the shared revision.
	rev := mustPut(t, cli, "/elsewhere/tick", "0")
	for rev%step != 0 {
		rev = mustPut(t, cli, "/elsewhere/tick", "0")
	}
	for rev%step != step-3 {
		rev = mustPut(t, cli, "/elsewhere/tick", "0")
	}
	shared := rev - rev%step
	mustPut(t, cli, "/skydns/local/cluster/svc/ns/late/x", `{"host":"10.2.0.1"}`)

	type request struct {
		key, end     string
		limit, rev   int64
		serializable bool
	}
	start := func() (*Store, *snap.Snapshot, []request) {
		var mu sync.Mutex
		var reqs []request
		record := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if r, ok := req.(*etcdserverpb.RangeRequest); ok && r.Limit > 0 {
				mu.Lock()
				reqs = append(reqs, request{string(r.Key), string(r.RangeEnd), r.Limit, r.Revision, r.Serializable})
				mu.Unlock()
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		c := testetcd.Intercepted(t, cli, record)
		s := quietStore(c)
		s.pageSize, s.step = testPageSize, step
		loaded := make(chan *snap.Snapshot, 1)
		s.afterLoad = func() {
			select {
			case loaded <- s.Snapshot():
			default:
			}
		}
		runStore(t, s)
		// Ready only once the watch has replayed what the shared revision
		// lacks.
		if got := addrs(s.Snapshot(), "late.ns.svc.cluster.local"); len(got) != 1 {
			t.Fatalf("ready without the record written after the shared revision: %v", got)
		}
		mu.Lock()
		defer mu.Unlock()
		return s, <-loaded, slices.Clone(reqs)
	}

	_, first, firstReqs := start()
	if first.Rev != shared || first.Zone("cluster.local").Records != 3*testPageSize {
		t.Fatalf("first frontend loaded %d records at revision %d, want %d at the shared %d", first.Zone("cluster.local").Records, first.Rev, 3*testPageSize, shared)
	}
	mustPut(t, cli, "/elsewhere/tick", "1") // the cluster moves on, within the step
	_, second, secondReqs := start()
	if second.Rev != shared || !slices.Equal(firstReqs, secondReqs) {
		t.Fatalf("second frontend loaded at %d with requests\n%v\nthe first at %d with\n%v\nwant the same", second.Rev, secondReqs, first.Rev, firstReqs)
	}
	if len(firstReqs) < 4 || slices.ContainsFunc(firstReqs, func(r request) bool { return r.rev != shared || !r.serializable }) {
		t.Fatalf("page requests %v: want several, every one serializable at %d", firstReqs, shared)
	}

	compacted := mustPut(t, cli, "/elsewhere/tick", "2")
	for compacted%step == 0 { // the shared revision is then the cluster's
		compacted = mustPut(t, cli, "/elsewhere/tick", "2")
	}
	if _, err := cli.Compact(context.Background(), compacted); err != nil {
		t.Fatal(err)
	}
	_, third, _ := start()
	if third.Rev != compacted || third.Zone("cluster.local").Records != 3*testPageSize+1 {
		t.Fatalf("after a compaction at %d, past the shared revision: loaded %d records at %d, want %d at %d", compacted, third.Zone("cluster.local").Records, third.Rev, 3*testPageSize+1, compacted)
	}
}

// cloneRange is a copy of r with a buffer of its own.
func cloneRange(t *testing.T, r *rawRange) *rawRange {
	c := &rawRange{buf: slices.Clone(r.buf)}
	if err := c.parse(); err != nil {
		t.Error(err)
	}
	return c
}

// An etcd grpc-proxy keeps answering a page at a revision etcd has since
// compacted (it never sees the compaction), so a load at the shared
// revision can succeed there and the watch after it be refused. The relist
// that follows must not load at that revision again, or it would loop on
// the cached pages forever.
func TestRelistDoesNotLoopOnACachedCompactedRevision(t *testing.T) {
	cli := testetcd.Start(t, nil)
	const step = 64
	for i := range 10 {
		mustPut(t, cli, fmt.Sprintf("/skydns/local/cluster/svc/ns/s%d/x", i), fmt.Sprintf(`{"host":"10.1.0.%d"}`, i+1))
	}
	rev := mustPut(t, cli, "/elsewhere/tick", "0")
	for rev < step || rev%step != step/2 {
		rev = mustPut(t, cli, "/elsewhere/tick", "0")
	}
	// A cache of serializable pages at a fixed revision, as the proxy's.
	var mu sync.Mutex
	cache := map[string]*rawRange{}
	caching := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		r, ok := req.(*etcdserverpb.RangeRequest)
		if !ok || !r.Serializable || r.Revision == 0 {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		key := r.String()
		mu.Lock()
		hit := cache[key]
		mu.Unlock()
		if hit != nil {
			*reply.(*rawRange) = *cloneRange(t, hit)
			return nil
		}
		if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
			return err
		}
		mu.Lock()
		cache[key] = cloneRange(t, reply.(*rawRange))
		mu.Unlock()
		return nil
	}
	c := testetcd.Intercepted(t, cli, caching)
	newStore := func() *Store {
		s := quietStore(c)
		s.pageSize, s.step = testPageSize, step
		return s
	}
	runStore(t, newStore()) // fills the cache at the shared revision
	mustPut(t, cli, "/skydns/local/cluster/svc/ns/late/x", `{"host":"10.2.0.1"}`)
	compacted := mustPut(t, cli, "/elsewhere/tick", "1")
	if _, err := cli.Compact(context.Background(), compacted); err != nil {
		t.Fatal(err)
	}

	s := newStore()
	runStore(t, s) // loaded at the shared revision from the cache
	eventually(t, "the record written after the compacted revision", func() bool {
		return len(addrs(s.Snapshot(), "late.ns.svc.cluster.local")) == 1
	})
	if n := value(s.restarts.WithLabelValues(ReasonCompacted)); n != 1 {
		t.Fatalf("%v relists after compaction, want the one", n)
	}
}

// Zones under different prefixes get a watcher each on the one stream,
// created in turn; changes under every prefix are applied, and the store
// is ready only once the last watcher is in place.
func TestWatchFollowsEveryPrefix(t *testing.T) {
	cli := testetcd.Start(t, nil)
	zones := []snap.Config{
		{Name: "cluster.local", Prefix: "/skydns", TTL: 5},
		{Name: "example.org", Prefix: "/other", TTL: 30},
		{Name: "example.net", Prefix: "/third", TTL: 30},
	}
	s := New(cli, zones, 5*time.Second, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	runStore(t, s)
	mustPut(t, cli, "/third/net/example/www/x1", `{"host":"10.0.0.3"}`)
	mustPut(t, cli, "/other/org/example/www/x1", `{"host":"10.0.0.2"}`)
	mustPut(t, cli, "/skydns/local/cluster/svc/ns/a/x1", `{"host":"10.0.0.1"}`)
	eventually(t, "a change under every prefix", func() bool {
		sn := s.Snapshot()
		return strings.Join(addrs(sn, "a.ns.svc.cluster.local"), ",") == "10.0.0.1" &&
			strings.Join(addrs(sn, "www.example.org"), ",") == "10.0.0.2" &&
			strings.Join(addrs(sn, "www.example.net"), ",") == "10.0.0.3"
	})
	if got := value(s.restarts.WithLabelValues(ReasonError)); got != 0 {
		t.Errorf("restarts{error} = %v, want none", got)
	}
}

// A cluster id no record carries is most likely not the publisher's: dnsd
// says so once loaded, as it would answer no clusterset IP.
func TestCheckClusterIDWarns(t *testing.T) {
	kvs := []snap.KV{{Key: "/skydns/local/cluster/svc/default/kubernetes/x", Value: []byte(`{"host":"10.96.0.1","cluster":"east"}`)}}
	for _, c := range []struct {
		cluster string
		warns   bool
	}{{"east", false}, {"west", true}, {"", false}} {
		sn, _ := snap.Build([]snap.Config{{Name: "cluster.local", Prefix: "/skydns", TTL: 5, Cluster: c.cluster}}, 1, kvs)
		var out strings.Builder
		s := &Store{log: slog.New(slog.NewTextHandler(&out, nil))}
		s.checkClusterID(sn)
		if got := strings.Contains(out.String(), "no record names this dnsd's cluster.id"); got != c.warns {
			t.Errorf("cluster.id %q: warned %v, want %v\n%s", c.cluster, got, c.warns, out.String())
		}
	}
}

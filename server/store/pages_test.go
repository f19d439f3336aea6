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

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/etcdns/etcdns/internal/testetcd"
	"github.com/etcdns/etcdns/server/snap"
)

// A load reads its pages into buffers that later pages reuse, so nothing
// it keeps may point into one. Here every buffer is overwritten as soon as
// its page is decoded, and the snapshot must still equal one built from
// copies of the same keys and values: records of every kind, ids packed
// and raw, origins, stub nameservers, a SkyDNS zone, and malformed values,
// whose keys and values the store reports.
func TestLoadKeepsNoPageBytes(t *testing.T) {
	cli := testetcd.Start(t, nil)
	zones := []snap.Config{
		{Name: "cluster.local", Prefix: "/skydns", TTL: 5, Cluster: "c1"},
		{Name: "in-addr.arpa", Prefix: "/skydns", TTL: 5},
		{Name: "example.org", Prefix: "/skydns", TTL: 30, SkyDNS: true},
	}
	var kvs []snap.KV
	add := func(k, v string) { kvs = append(kvs, snap.KV{Key: k, Value: []byte(v)}) }
	for i := range 12 * testPageSize {
		ns := fmt.Sprintf("ns%d", i%7)
		src := fmt.Sprintf(`"cluster":"c%d","source":"service/%s/s%d"`, i%3, ns, i)
		switch i % 8 {
		case 0:
			add(fmt.Sprintf("/skydns/local/cluster/svc/%s/s%d/%08x", ns, i, i), fmt.Sprintf(`{"host":"10.1.%d.%d",%s}`, i/250, i%250, src))
		case 1:
			add(fmt.Sprintf("/skydns/local/cluster/svc/%s/s%d/raw-id-%d", ns, i, i), fmt.Sprintf(`{"host":"fd00::%x",%s}`, i, src))
		case 2:
			// Half as the publisher writes them, the target the name the
			// owner is under (which the entry takes from the owner's name).
			key := fmt.Sprintf("/skydns/local/cluster/svc/%s/_tcp/_http/s%d/x", ns, i)
			if i%16 == 2 {
				key = fmt.Sprintf("/skydns/local/cluster/svc/%s/s%d/_tcp/_http/x", ns, i)
			}
			add(key, fmt.Sprintf(`{"host":"s%d.%s.svc.cluster.local","port":%d,"priority":10,"weight":%d,%s}`, i, ns, 8000+i, i%100, src))
		case 3:
			add(fmt.Sprintf("/skydns/local/cluster/svc/%s/alias%d/x", ns, i), fmt.Sprintf(`{"host":"Target%d.Example.COM"}`, i))
		case 4:
			add(fmt.Sprintf("/skydns/local/cluster/svc/%s/t%d/x", ns, i), fmt.Sprintf(`{"text":"text of %d","ttl":%d}`, i, 10+i%50))
		case 5:
			add(fmt.Sprintf("/skydns/arpa/in-addr/10/2/%d/%d", i/250, i%250), fmt.Sprintf(`{"host":"s%d.%s.svc.cluster.local"}`, i, ns))
		case 6:
			add(fmt.Sprintf("/skydns/org/example/h%d/x%d", i, i), fmt.Sprintf(`{"host":"10.3.%d.%d","ttl":60,"text":"sky %d"}`, i/250, i%250, i))
		case 7:
			add(fmt.Sprintf("/skydns/local/cluster/svc/%s/bad%d/x", ns, i), fmt.Sprintf(`{"host":"not an address %d"`, i))
		}
	}
	add("/skydns/local/cluster/dns/stub/federation/svc/myfed/ns1", `{"host":"10.0.0.1","port":53}`)
	add("/skydns/local/cluster/dns/stub/federation/svc/myfed/ns2", `{"host":"ns.example.com"}`)
	add("/skydns/org/example/broken/x", `{"host":`)
	var rev int64
	for _, kv := range kvs {
		rev = mustPut(t, cli, kv.Key, string(kv.Value))
	}

	s := New(cli, zones, 5*time.Second, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.pageSize = testPageSize
	pages := 0
	s.decoded = func(b []byte) {
		pages++
		for i := range b {
			b[i] = 'Z'
		}
	}
	runStore(t, s)
	if pages < 8 {
		t.Fatalf("%d pages decoded; the test means buffers to be reused", pages)
	}
	want, _ := snap.Build(zones, rev, kvs)
	got, wantDump := dump(s.Snapshot()), dump(want)
	if got != wantDump {
		t.Errorf("the loaded snapshot differs from one built from copies:\n%s", diffLines(got, wantDump))
	}
	for _, owner := range []string{"bad7.ns0.svc.cluster.local", "myfed.svc.federation"} {
		m := s.MalformedAt(owner)
		if len(m) != 1 || strings.Contains(m[0].Key+m[0].Value+m[0].Owner+m[0].Err, "ZZZ") || !slices.ContainsFunc(kvs, func(kv snap.KV) bool { return kv.Key == m[0].Key && string(kv.Value) == m[0].Value }) {
			t.Errorf("MalformedAt(%s) = %+v", owner, m)
		}
	}
}

// dump is every zone's names, entries, records, stub domains and SkyDNS
// values, one per line, sorted.
func dump(sn *snap.Snapshot) string {
	var lines []string
	for _, z := range sn.Zones {
		z.Names(func(n *snap.Node) {
			for _, e := range n.Entries() {
				v := e.Value()
				lines = append(lines, fmt.Sprintf("%s %s %s %+v", z.Name, n.Name, z.Key(n.Name, &e), v))
			}
			for _, set := range n.Sets() {
				for _, rr := range set.RRs {
					lines = append(lines, z.Name+" rr "+rr.String())
				}
			}
		})
		for _, st := range z.Stubs() {
			for _, ns := range st.Servers {
				lines = append(lines, fmt.Sprintf("%s stub %s %s %s", z.Name, st.Domain, ns.Key, ns.Addr))
			}
		}
		if z.Sky != nil {
			for _, it := range z.Sky.Prefix("") {
				lines = append(lines, fmt.Sprintf("%s sky %s %+v", z.Name, it.Key, it.Service))
			}
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// diffLines is the lines only one of a and b holds, the first few.
func diffLines(a, b string) string {
	as, bs := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out []string
	for _, l := range as {
		if !slices.Contains(bs, l) {
			out = append(out, "loaded only: "+l)
		}
	}
	for _, l := range bs {
		if !slices.Contains(as, l) {
			out = append(out, "built only:  "+l)
		}
	}
	return strings.Join(out[:min(len(out), 20)], "\n")
}

// A page larger than gRPC's default 4 MiB receive limit loads: the load's
// own Range calls pass clientv3's call options.
func TestLoadReadsPagesOverFourMiB(t *testing.T) {
	cli := testetcd.Start(t, nil)
	junk := `{"text":"` + strings.Repeat("x", 1<<20) + `"`
	for i := range 5 {
		mustPut(t, cli, fmt.Sprintf("/skydns/local/cluster/svc/ns/big%d/x", i), junk) // malformed: skipped, still read
	}
	mustPut(t, cli, "/skydns/local/cluster/svc/ns/web/x", `{"host":"10.1.0.1"}`)
	s := startStore(t, cli, nil)
	if got := addrs(s.Snapshot(), "web.ns.svc.cluster.local"); len(got) != 1 || got[0] != "10.1.0.1" {
		t.Fatalf("web: %v", got)
	}
	if n := value(s.loadRetries); n != 0 {
		t.Fatalf("%v pages retried", n)
	}
}

// A member that answers a page Unavailable (a leader change) is asked
// again at once, within the page's time, as clientv3 asks again for a
// Get: not a counted retry with a doubled timeout.
func TestLoadAsksAgainWhenUnavailable(t *testing.T) {
	var pages atomic.Int32
	s := loadPaged(t, testPageSize*2+5, 5*time.Second, func(_ context.Context, i int, _ *etcdserverpb.RangeRequest) error {
		pages.Store(int32(i))
		if i == 2 {
			return status.Error(codes.Unavailable, "etcdserver: leader changed")
		}
		return nil
	})
	if got := value(s.loadRetries); got != 0 {
		t.Fatalf("%v counted page retries, want none", got)
	}
	if pages.Load() < 4 {
		t.Fatalf("%d page requests; the refused one was not asked again", pages.Load())
	}
}

// SetPageSize bounds every range read of a load (dnsd.page-size: through an
// etcd grpc-proxy, which keeps up to 2,048 responses whatever their size,
// pages are kept small), and a load in such pages holds every record.
func TestLoadReadsPagesOfTheSetSize(t *testing.T) {
	const n, page = 450, 100
	cli := testetcd.Start(t, nil)
	for i := range n {
		mustPut(t, cli, fmt.Sprintf("/skydns/local/cluster/svc/ns/s%d/x", i), fmt.Sprintf(`{"host":"10.1.%d.%d"}`, i/250, i%250))
	}
	var mu sync.Mutex
	var limits []int64
	c := testetcd.Intercepted(t, cli, func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		// Not the one-key reads: the revision's, the liveness checks'.
		if r, ok := req.(*etcdserverpb.RangeRequest); ok && !r.CountOnly && !r.KeysOnly && strings.HasPrefix(string(r.Key), "/skydns/local/cluster/") {
			mu.Lock()
			limits = append(limits, r.Limit)
			mu.Unlock()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	s := quietStore(c)
	s.SetPageSize(0) // no setting: the default
	if s.pageSize != PageSize {
		t.Fatalf("page size %d after SetPageSize(0), want the default %d", s.pageSize, PageSize)
	}
	s.SetPageSize(page)
	runStore(t, s)
	if got := s.Snapshot().Zone("cluster.local").Records; got != n {
		t.Fatalf("loaded %d records, want %d", got, n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(limits) < n/page+1 || slices.ContainsFunc(limits, func(l int64) bool { return l != page }) {
		t.Fatalf("cluster.local read with limits %v, want %d reads or more, each of %d keys", limits, n/page+1, page)
	}
}

// A store whose endpoints are not all members (a grpc-proxy, here a member
// under a name the member list does not give) warns when its pages are
// larger than a proxy should cache, and not when they are not.
func TestLargePagesThroughANonMemberWarn(t *testing.T) {
	cli := testetcd.Start(t, nil)
	alias := strings.Replace(cli.Endpoints()[0], "127.0.0.1", "localhost", 1)
	for _, c := range []struct {
		page int64
		warn bool
	}{{PageSize, true}, {proxyPageSize, false}} {
		var log lockedBuffer
		s := New(cli, testZones, 5*time.Second, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(&log, nil)))
		s.SetPageSize(c.page)
		s.WatchOn([]Endpoint{{Name: "alias", Client: client(t, alias)}}, DefaultLiveness)
		runStore(t, s)
		eventually(t, "the member list", func() bool { return strings.Contains(log.String(), "members among the watch endpoints") })
		if got := strings.Contains(log.String(), "set dnsd.page-size to 1000"); got != c.warn {
			t.Errorf("pages of %d through a non-member: warned %v, want %v; log:\n%s", c.page, got, c.warn, log.String())
		}
	}
}

// A page's pairs carry their keys' leases: a SkyDNS value without a ttl
// at a leased key answers skydns.LeaseTTL.
func TestRangeParseReadsLeases(t *testing.T) {
	resp := &etcdserverpb.RangeResponse{Kvs: []*mvccpb.KeyValue{
		{Key: []byte("/skydns/a"), Value: []byte(`{"host":"10.0.0.1"}`), Lease: 7, ModRevision: 3},
		{Key: []byte("/skydns/b"), Value: []byte(`{"host":"10.0.0.2"}`)},
	}, More: true, Count: 2}
	b, err := resp.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	r := &rawRange{buf: b}
	if err := r.parse(); err != nil {
		t.Fatal(err)
	}
	if len(r.kvs) != 2 || r.kvs[0].lease != 7 || r.kvs[1].lease != 0 || string(r.kvs[0].key) != "/skydns/a" || !r.more || r.count != 2 {
		t.Errorf("parsed %+v, more %v, count %d", r.kvs, r.more, r.count)
	}
}

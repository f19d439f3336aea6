package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/etcdns/etcdns/internal/testetcd"
)

// Whatever the keys, the reads stops chooses cover the range exactly, in
// order, each key once: the stops only change where the pages are cut.
// The ranges are read as etcd reads them, from a sorted list.
func TestStopsCoverTheRange(t *testing.T) {
	const prefix = "/skydns/local/cluster/"
	end := clientv3.GetPrefixRangeEnd(prefix)
	rng := rand.New(rand.NewPCG(3, 4))
	worlds := map[string][]string{"empty": nil, "one": {prefix + "x"}}
	var lumpy, long, bytes []string
	for ns := range 9 {
		for svc := range 1 + rng.IntN(40) {
			for ep := range 1 + rng.IntN(60) {
				lumpy = append(lumpy, fmt.Sprintf("%ssvc/ns%d/svc%d/10-%d/%016x", prefix, ns, svc, ep, rng.Uint64()))
			}
		}
	}
	// Keys alike for longer than a stop can tell apart.
	for i := range 700 {
		long = append(long, prefix+strings.Repeat("a", 2*keyDigits)+fmt.Sprint(i))
	}
	for range 500 {
		b := make([]byte, 1+rng.IntN(80))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		bytes = append(bytes, prefix+string(b))
	}
	worlds["lumpy"], worlds["long"], worlds["bytes"] = lumpy, long, bytes
	for name, keys := range worlds {
		slices.Sort(keys)
		keys = slices.Compact(keys)
		for _, c := range []struct {
			page   int
			honest bool // false: a count that is only the page's own keys
		}{{1, true}, {7, true}, {100, true}, {7, false}, {100, false}} {
			page := c.page
			var got []string
			start, stop, reads := prefix, end, 0
			st := newStops(prefix, end, int64(page))
			for ok := true; ok; reads++ {
				if stop <= start || reads > 10*len(keys)+10 {
					t.Fatalf("%s, page %d (honest count %v): read %d is %q..%q", name, page, c.honest, reads, start, stop)
				}
				i, _ := slices.BinarySearch(keys, start)
				j, _ := slices.BinarySearch(keys, stop)
				n := min(j-i, page)
				got = append(got, keys[i:i+n]...)
				mid, last := "", ""
				if n > 0 {
					mid, last = keys[i+n/2], keys[i+n-1]
				}
				count := int64(j - i)
				if !c.honest {
					count = int64(n)
				}
				start, stop, ok = st.next(start, mid, last, n, j-i > n, count)
			}
			if !slices.Equal(got, keys) {
				t.Fatalf("%s, page %d (honest count %v): read %d keys, want the %d of the range, once each", name, page, c.honest, len(got), len(keys))
			}
		}
	}
}

// A load's pages stop short of the zone's end, so etcd counts about the
// keys it returns, not every key to the end for every page.
func TestLoadPagesStopShort(t *testing.T) {
	cli := testetcd.Start(t, nil)
	const page = 100
	// The schema version's TXT record sits below the svc/ tree, as in a
	// publisher's zone: the first page's one key far from the rest.
	ops := []clientv3.Op{clientv3.OpPut("/skydns/local/cluster/dns-version/x", `{"text":"1.0.1"}`)}
	for ns := range 7 {
		for svc := range 30 + ns*20 {
			for ep := range 1 + (svc*7)%23 {
				ops = append(ops, clientv3.OpPut(fmt.Sprintf("/skydns/local/cluster/svc/ns%d/svc%d/10-%d-%d-%d/x", ns, svc, ns, svc, ep), fmt.Sprintf(`{"host":"10.%d.%d.%d"}`, ns, svc, ep)))
			}
		}
	}
	for i := 0; i < len(ops); i += 100 {
		if _, err := cli.Txn(context.Background()).Then(ops[i:min(i+100, len(ops))]...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	n := len(ops)
	var mu sync.Mutex
	var reads, counted int
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if r, ok := reply.(*rawRange); ok && err == nil && strings.HasPrefix(string(req.(*etcdserverpb.RangeRequest).Key), "/skydns/local/cluster/") {
			mu.Lock()
			reads++
			counted += int(r.count)
			mu.Unlock()
		}
		return err
	}
	c := testetcd.Intercepted(t, cli, count)
	s := quietStore(c)
	s.pageSize = page
	runStore(t, s)
	z := s.Snapshot().Zone("cluster.local")
	if z.Records != n {
		t.Fatalf("loaded %d records, want %d", z.Records, n)
	}
	if z.Node("10-6-149-8.svc149.ns6.svc.cluster.local") == nil {
		t.Fatal("the last service's last endpoint is not loaded")
	}
	mu.Lock()
	defer mu.Unlock()
	pages := (n + page - 1) / page
	// Read to the end each time, the pages counted about n*pages/2 keys
	// (286,000 here); the stops count about 4n (30,248). A stride measured
	// from the first page's outlying key counted 44,500; gaps crossed in
	// one long stretch, 46,736.
	t.Logf("%d keys: %d reads (%d pages), etcd counted %d keys", n, reads, pages, counted)
	if counted > 5*n {
		t.Errorf("etcd counted %d keys for a load of %d in %d reads, want at most %d", counted, n, reads, 5*n)
	}
	// Gaps between namespaces are crossed by reads that find nothing,
	// cheap beside counting keys: at a million keys, 85 reads counting
	// 3.2M keys took etcd 1.9 s of CPU where 49 counting 5.6M took 2.3.
	if reads > 6*pages {
		t.Errorf("%d reads for %d pages of keys, want at most %d", reads, pages, 6*pages)
	}
}

package etcdstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/etcdns/etcdns/config"
	"github.com/etcdns/etcdns/etcdclient"
	"github.com/etcdns/etcdns/etcdclient/embedded"
	"github.com/etcdns/etcdns/internal/freeze"
	"github.com/etcdns/etcdns/internal/testetcd"
	"github.com/etcdns/etcdns/publisher/plan"
)

func start(t *testing.T) *clientv3.Client { return testetcd.Start(t, nil) }

func TestRanges(t *testing.T) {
	r, err := Ranges("/skydns", "/rev", "cluster.local")
	if err != nil || r[0] != "/skydns/local/cluster/" || r[1] != "/rev/arpa/" {
		t.Fatalf("%v %v", r, err)
	}
	if _, err := Ranges("/a/b", "/rev", "cluster.local"); err == nil {
		t.Fatal("two-segment prefix accepted")
	}
}

func TestLoadPagesAtOneRevision(t *testing.T) {
	cli := start(t)
	ctx := context.Background()
	for i := range 25 {
		cli.Put(ctx, fmt.Sprintf("/skydns/local/cluster/k%02d", i), "v")
	}
	cli.Put(ctx, "/skydns/local/clusterx/not-ours", "v")
	cli.Put(ctx, "/skydns/arpa/in-addr/1", "v")
	s := &Store{Client: cli, PageSize: 7}
	kvs, rev, err := s.Load(ctx, []string{"/skydns/local/cluster/", "/skydns/arpa/"})
	if err != nil {
		t.Fatal(err)
	}
	if len(kvs) != 26 || rev == 0 {
		t.Fatalf("%d keys at %d", len(kvs), rev)
	}
}

func TestApplyGuardsAndFence(t *testing.T) {
	cli := start(t)
	ctx := context.Background()
	s := &Store{Client: cli}
	rev, err := s.Apply(ctx, nil, []plan.Op{{Kind: plan.Put, Key: "/a", Value: []byte("1")}})
	if err != nil {
		t.Fatal(err)
	}
	// A create of an existing key is a conflict, and writes nothing.
	if _, err := s.Apply(ctx, nil, []plan.Op{{Kind: plan.Put, Key: "/a", Value: []byte("2")}, {Kind: plan.Put, Key: "/b", Value: []byte("2")}}); !errors.Is(err, ErrConflict) {
		t.Fatalf("create over existing: %v", err)
	}
	if r, _ := cli.Get(ctx, "/b"); len(r.Kvs) != 0 {
		t.Fatal("a failed transaction wrote part of itself")
	}
	// Overwrite and delete guarded by the revision we saw.
	if _, err := s.Apply(ctx, nil, []plan.Op{{Kind: plan.Delete, Key: "/a", ModRev: rev + 1}}); !errors.Is(err, ErrConflict) {
		t.Fatalf("delete at a wrong revision: %v", err)
	}
	if _, err := s.Apply(ctx, nil, []plan.Op{{Kind: plan.Delete, Key: "/a", ModRev: rev}}); err != nil {
		t.Fatal(err)
	}
	// The fence is checked before the guards.
	fence := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision("/leader"), "=", 12345)}
	if _, err := s.Apply(ctx, fence, []plan.Op{{Kind: plan.Put, Key: "/c", Value: []byte("1")}}); !errors.Is(err, ErrFenced) {
		t.Fatalf("fenced: %v", err)
	}
	lr, _ := cli.Put(ctx, "/leader", "me")
	fence = []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision("/leader"), "=", lr.Header.Revision)}
	if _, err := s.Apply(ctx, fence, []plan.Op{{Kind: plan.Put, Key: "/c", Value: []byte("1")}}); err != nil {
		t.Fatal(err)
	}
	present, absent, grev, err := s.Get(ctx, []string{"/c", "/a"})
	if err != nil || len(present) != 1 || present[0].Key != "/c" || len(absent) != 1 || absent[0] != "/a" || grev < present[0].ModRev {
		t.Fatalf("get: %v %v at %d: %v", present, absent, grev, err)
	}
}

// With Endpoints, a transaction that timed out on a frozen first endpoint
// is retried on the next one, where it commits at once, and the reads
// follow it there: no request of the store goes to the frozen member
// again, nor through Client.
func TestEndpointsMovePastAFrozenMember(t *testing.T) {
	cli := start(t)
	m := freeze.New(t, cli.Endpoints()[0])
	frozen := m.Client
	const writeTimeout = 300 * time.Millisecond
	s := &Store{
		Client:       frozen,
		Endpoints:    etcdclient.NewFailover([]*clientv3.Client{frozen, cli}, []string{"frozen", "next"}, nil, nil, ""),
		WriteTimeout: writeTimeout,
	}
	ctx := context.Background()
	m.Hung.Store(true)
	start := time.Now()
	op := []plan.Op{{Kind: plan.Put, Key: "/skydns/local/cluster/a", Value: []byte("1")}}
	if _, err := s.Apply(ctx, nil, op); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a write through the frozen member: %v", err)
	}
	if _, err := s.Apply(ctx, nil, op); err != nil {
		t.Fatalf("the retry: %v", err)
	}
	if d := time.Since(start); d >= 2*writeTimeout {
		t.Errorf("the write committed %v after it was first sent, want less than two write timeouts (%v)", d, 2*writeTimeout)
	}
	if present, absent, _, err := s.Get(ctx, []string{"/skydns/local/cluster/a", "/skydns/local/cluster/b"}); err != nil || len(present) != 1 || len(absent) != 1 {
		t.Fatalf("get: %v %v %v", present, absent, err)
	}
	kvs, _, err := s.Load(ctx, []string{"/skydns/local/cluster/"})
	if err != nil || len(kvs) != 1 || kvs[0].Key != "/skydns/local/cluster/a" || string(kvs[0].Value) != "1" {
		t.Fatalf("load: %v %v", kvs, err)
	}
}

// Answers is false for a member that holds the read (frozen, or a
// follower waiting for an election), once its timeout has passed, and true
// for one that answers.
func TestAnswersWithinItsTimeout(t *testing.T) {
	cli := start(t)
	m := freeze.New(t, cli.Endpoints()[0])
	ctx := context.Background()
	if !(&Store{Client: m.Client}).Answers(ctx, "/skydns/local/cluster/", time.Second) {
		t.Fatal("a member that answers: false")
	}
	m.Hung.Store(true)
	const timeout = 200 * time.Millisecond
	start := time.Now()
	if (&Store{Client: m.Client}).Answers(ctx, "/skydns/local/cluster/", timeout) {
		t.Fatal("a member that holds the read: true")
	}
	if d := time.Since(start); d > 5*timeout {
		t.Errorf("Answers took %v with a timeout of %v", d, timeout)
	}
}

// TestEachWithCuts reads one store through many page sizes and sets of cuts
// (keys, names between keys, repeats, strings outside the ranges) and wants
// every key exactly once each time: cuts change how the ranges are read,
// never what. Pieces are read at once, so the pages come in any order.
func TestEachWithCuts(t *testing.T) {
	cli := start(t)
	ctx := context.Background()
	var want []string
	for ns := range 3 {
		for svc := range 7 {
			for r := range 1 + (ns*7+svc)%9 {
				k := fmt.Sprintf("/skydns/local/cluster/svc/ns%d/svc%d/r%02d", ns, svc, r)
				want = append(want, k)
			}
		}
	}
	want = append(want, "/skydns/local/cluster/dns-version/x", "/skydns/arpa/in-addr/10/1") // the second range
	slices.Sort(want)
	for _, k := range append(want, "/skydns/local/clusterx/not-ours") {
		if _, err := cli.Put(ctx, k, "v"); err != nil {
			t.Fatal(err)
		}
	}
	var svcCuts []string
	for ns := range 4 {
		for svc := range 8 {
			svcCuts = append(svcCuts, fmt.Sprintf("/skydns/local/cluster/svc/ns%d/svc%d/", ns, svc))
		}
	}
	for _, cuts := range [][]string{
		nil,
		svcCuts,
		{"/a", "/skydns/local/cluster/svc/ns1/", "/skydns/local/cluster/svc/ns1/", "/skydns/local/cluster/svc/ns1/svc3/r00", "/z"},
		{"/skydns/local/cluster/", "/skydns/local/cluster0"},
	} {
		for _, page := range []int64{1, 2, 5, 50, 1000} {
			s := &Store{Client: cli, PageSize: page}
			var got []string
			if _, err := s.Each(ctx, []string{"/skydns/local/cluster/", "/skydns/arpa/"}, cuts, func(p []plan.KV) {
				for _, kv := range p {
					got = append(got, kv.Key)
				}
			}); err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("cuts %q, page %d:\n got %q\nwant %q", cuts, page, got, want)
			}
		}
	}
}

// A read that fails ends the load with its error, whichever it was: the
// revision's read, the first piece's, or one while the other reader is in
// the middle of its own piece.
func TestEachEndsOnAFailedRead(t *testing.T) {
	cli := start(t)
	ctx := context.Background()
	var cuts []string
	for svc := range 20 {
		for r := range 5 {
			if _, err := cli.Put(ctx, fmt.Sprintf("/skydns/local/cluster/svc/ns/s%02d/r%d", svc, r), "v"); err != nil {
				t.Fatal(err)
			}
		}
		cuts = append(cuts, fmt.Sprintf("/skydns/local/cluster/svc/ns/s%02d/", svc))
	}
	injected := status.Error(codes.Internal, "injected failure")
	for _, fail := range []int32{1, 2, 3, 8} {
		var reads atomic.Int32
		c := testetcd.Intercepted(t, cli, func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if _, ok := req.(*pb.RangeRequest); ok && reads.Add(1) == fail {
				return injected
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		})
		s := &Store{Client: c, PageSize: 3}
		got := 0
		_, err := s.Each(ctx, []string{"/skydns/local/cluster/"}, cuts, func(p []plan.KV) { got += len(p) })
		if err == nil || !strings.Contains(err.Error(), "injected failure") {
			t.Errorf("read %d failed: Each returned %v after %d keys; want the failure", fail, err, got)
		}
	}
}

// TestTxnRequestIsClientv3s wants txnRequest's bytes on the wire to be those
// of the request clientv3's Txn builds from the same compares and ops
// (written out here as its Commit and Op.toRequestOp do).
func TestTxnRequestIsClientv3s(t *testing.T) {
	ops := []plan.Op{
		{Kind: plan.Put, Key: "/skydns/local/cluster/a/x", Value: []byte(`{"host":"10.0.0.1"}`)},
		{Kind: plan.Put, Key: "/skydns/local/cluster/b/x", Value: []byte(`{"host":"10.0.0.2"}`), ModRev: 41},
		{Kind: plan.Delete, Key: "/skydns/local/cluster/c/x", ModRev: 7},
		{Kind: plan.Put, Key: "/skydns/local/cluster/d/x", Value: []byte(`{"text":"v"}`)},
		{Kind: plan.Delete, Key: "/skydns/local/cluster/e/x", ModRev: 9},
	}
	fence := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision("/etcdns/leader/c/1"), "=", 5)}
	var guards, outer []*pb.Compare
	var writes []*pb.RequestOp
	for _, o := range ops {
		var c clientv3.Cmp
		if o.ModRev == 0 {
			c = clientv3.Compare(clientv3.CreateRevision(o.Key), "=", 0)
		} else {
			c = clientv3.Compare(clientv3.ModRevision(o.Key), "=", o.ModRev)
		}
		guards = append(guards, (*pb.Compare)(&c))
		if o.Kind == plan.Put {
			writes = append(writes, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(o.Key), Value: o.Value}}})
		} else {
			writes = append(writes, &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(o.Key)}}})
		}
	}
	for i := range fence {
		outer = append(outer, (*pb.Compare)(&fence[i]))
	}
	for _, tc := range []struct {
		name  string
		fence []clientv3.Cmp
		want  *pb.TxnRequest
	}{
		{"unfenced", nil, &pb.TxnRequest{Compare: guards, Success: writes}},
		{"fenced", fence, &pb.TxnRequest{Compare: outer, Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestTxn{
			RequestTxn: &pb.TxnRequest{Compare: guards, Success: writes}}}}}},
	} {
		got, err := txnRequest(tc.fence, ops).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		want, _ := tc.want.Marshal()
		if !bytes.Equal(got, want) {
			t.Errorf("%s: txnRequest differs from clientv3's:\n got %v\nwant %v", tc.name, txnRequest(tc.fence, ops), tc.want)
		}
	}
}

// TestGetOrderedWritesNothing: GetOrdered reads as Get does, in
// transactions with a delete, so that etcd orders them through raft, and
// the delete changes nothing: no key goes, not even one at the probe, and
// the revision stays.
func TestGetOrderedWritesNothing(t *testing.T) {
	cli := start(t)
	ctx := context.Background()
	var ks []string
	for i := range 150 { // two transactions
		k := fmt.Sprintf("/skydns/local/cluster/k%03d", i)
		ks = append(ks, k)
		if i%2 == 0 {
			if _, err := cli.Put(ctx, k, "v"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := cli.Put(ctx, ks[0]+"\x00", "someone's"); err != nil { // the first probe
		t.Fatal(err)
	}
	var txns []*pb.TxnRequest
	var resps []*pb.TxnResponse
	c := testetcd.Intercepted(t, cli, func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if txn, ok := req.(*pb.TxnRequest); ok && err == nil {
			txns, resps = append(txns, txn), append(resps, reply.(*pb.TxnResponse))
		}
		return err
	})
	before, err := cli.Get(ctx, "/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	s := &Store{Client: c}
	present, absent, rev, err := s.GetOrdered(ctx, ks)
	if err != nil || len(present) != 75 || len(absent) != 75 || present[0].Key != ks[0] || absent[0] != ks[1] {
		t.Fatalf("GetOrdered: %d present, %d absent: %v", len(present), len(absent), err)
	}
	if rev != before.Header.Revision {
		t.Errorf("read at %d, etcd was at %d", rev, before.Header.Revision)
	}
	after, err := cli.Get(ctx, "/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if after.Header.Revision != before.Header.Revision || len(after.Kvs) != len(before.Kvs) {
		t.Errorf("etcd went from revision %d with %d keys to %d with %d", before.Header.Revision, len(before.Kvs), after.Header.Revision, len(after.Kvs))
	}
	if len(txns) != 2 {
		t.Fatalf("%d transactions, want 2", len(txns))
	}
	for i, txn := range txns {
		part := ks[100*i : min(100*(i+1), len(ks))]
		var gets []string
		var dels int
		for _, op := range txn.Success {
			switch r := op.Request.(type) {
			case *pb.RequestOp_RequestRange:
				gets = append(gets, string(r.RequestRange.Key))
			case *pb.RequestOp_RequestDeleteRange:
				dels++
				if k := string(r.RequestDeleteRange.Key); k != part[0]+"\x00" || r.RequestDeleteRange.RangeEnd != nil {
					t.Errorf("transaction %d deletes %q to %q", i, k, r.RequestDeleteRange.RangeEnd)
				}
			}
		}
		if !slices.Equal(gets, part) || dels != 1 {
			t.Errorf("transaction %d gets %d keys of its %d and deletes %d: not ordered through raft", i, len(gets), len(part), dels)
		}
		for _, r := range resps[i].Responses {
			if d := r.GetResponseDeleteRange(); d != nil && d.Deleted != 0 {
				t.Errorf("transaction %d deleted %d keys", i, d.Deleted)
			}
		}
	}
	if resps[0].Succeeded {
		t.Error("the first probe exists, and its delete ran")
	}
}

// An etcd run with a smaller --max-txn-ops, the publisher set to match:
// a re-read of more keys than that (a unit's owned and desired keys,
// after a conflict or a lost answer) fits in its transactions. Read in
// parts of 100, it failed every time, and the unit never updated again.
func TestReadsFitMaxTxnOps(t *testing.T) {
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	var urls [2]*url.URL
	for i := range urls {
		u, err := embedded.LoopbackURL("test", "http://127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		urls[i] = u
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*urls[0]}, []url.URL{*urls[0]}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*urls[1]}, []url.URL{*urls[1]}
	cfg.InitialCluster = cfg.Name + "=" + urls[1].String()
	cfg.LogLevel = "error"
	cfg.MaxTxnOps = 64
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	<-e.Server.ReadyNotify()
	cli, err := etcdclient.New(context.Background(), config.Etcd{Endpoints: []string{urls[0].String()}, DialTimeout: 5 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	s := &Store{Client: cli, MaxTxnOps: 64}
	var ops []plan.Op
	var ks []string
	for i := range 150 {
		k := fmt.Sprintf("/skydns/local/cluster/svc/ns/db/%03d", i)
		ks = append(ks, k)
		if i < 120 {
			ops = append(ops, plan.Op{Kind: plan.Put, Key: k, Value: []byte(`{"host":"10.0.0.1"}`)})
		}
	}
	for _, txn := range plan.Split(ops, s.MaxTxnOps, 1<<20) {
		if _, err := s.Apply(context.Background(), nil, txn); err != nil {
			t.Fatal(err)
		}
	}
	for name, get := range map[string]func(context.Context, []string) ([]plan.KV, []string, int64, error){"Get": s.Get, "GetOrdered": s.GetOrdered} {
		present, absent, _, err := get(context.Background(), ks)
		if err != nil || len(present) != 120 || len(absent) != 30 {
			t.Errorf("%s of 150 keys: %d present, %d absent, %v; want 120, 30, no error", name, len(present), len(absent), err)
		}
	}
}

package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"
	"unsafe"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/etcdns/etcdns/etcdclient"
	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/publisher/elect"
	"github.com/etcdns/etcdns/publisher/plan"
)

var (
	// ErrFenced means the leader fence failed: this publisher is no longer
	// the leader and nothing was written.
	ErrFenced = errors.New("not the leader any more: the fenced transaction was refused")
	// ErrConflict means a key guard failed: a key changed since we read it.
	// Nothing was written; re-read the keys and plan again.
	ErrConflict = errors.New("a key changed since it was read")
)

// Store reads and writes one cluster's records.
type Store struct {
	Client *clientv3.Client
	// Endpoints, when set, carries the reads and transactions instead of
	// Client: one endpoint at a time, and the next after one timed out or
	// was unavailable, so that the caller's retry does not go back to a
	// frozen member, as Client's balancing can send it. Client still asks
	// etcd what its auth refused.
	Endpoints *etcdclient.Failover
	Timeout   time.Duration // per request
	// WriteTimeout bounds a transaction (Apply, Get), when set: etcd drops
	// a proposal in flight when the leader dies, and a frozen member holds
	// a request forever, so a short deadline makes the caller's retry, on
	// another member, come soon. Loads keep Timeout: a page is large.
	WriteTimeout time.Duration
	// PageSize bounds one range response, so that a large store is read in
	// pieces (all at the same revision) instead of one huge message.
	PageSize int64
	// User is the etcd user the client runs as (etcdclient.User): a
	// refused request names it, since the fix is a grant to that user.
	User string
	// MaxTxnOps is the most operations etcd takes in one transaction
	// (its --max-txn-ops; 0: its default, 128): a read of many keys (Get,
	// GetOrdered) is split to fit. Apply's caller splits its own
	// (plan.Split).
	MaxTxnOps int
}

// readChunk is the keys one read transaction of get asks for, with room
// for GetOrdered's probe.
func (s *Store) readChunk() int {
	n := 100
	if s.MaxTxnOps > 0 {
		n = min(n, max(1, s.MaxTxnOps-1))
	}
	return n
}

// Ranges returns the key prefixes a cluster writes: its domain's subtree
// under prefix and the reverse zones under reversePrefix. The trailing
// slash keeps /skydns/local/cluster from matching /skydns/local/clusterx.
func Ranges(prefix, reversePrefix, domain string) ([]string, error) {
	fwd, err := keys.Key(prefix, domain)
	if err != nil {
		return nil, err
	}
	if err := keys.CheckPrefix(reversePrefix); err != nil {
		return nil, err
	}
	return []string{fwd + "/", reversePrefix + "/arpa/"}, nil
}

func (s *Store) timeout() time.Duration {
	if s.Timeout <= 0 {
		return 5 * time.Second
	}
	return s.Timeout
}

func (s *Store) writeTimeout() time.Duration {
	if s.WriteTimeout > 0 {
		return s.WriteTimeout
	}
	return s.timeout()
}

// do runs one request, bounded by timeout, through Endpoints or Client.
func (s *Store) do(ctx context.Context, timeout time.Duration, req func(context.Context, *clientv3.Client) error) error {
	if s.Endpoints != nil {
		return s.Endpoints.Do(ctx, timeout, req)
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return req(rctx, s.Client)
}

// write is do for a transaction that writes (etcdclient.Failover.DoWrite).
func (s *Store) write(ctx context.Context, req func(context.Context, *clientv3.Client) error) error {
	if s.Endpoints != nil {
		return s.Endpoints.DoWrite(ctx, s.writeTimeout(), req)
	}
	return s.do(ctx, s.writeTimeout(), req)
}

// Load reads every key under the given prefixes at one revision, so the
// index it feeds is a consistent snapshot, and returns that revision.
func (s *Store) Load(ctx context.Context, prefixes []string) ([]plan.KV, int64, error) {
	var out []plan.KV
	rev, err := s.Each(ctx, prefixes, nil, func(page []plan.KV) {
		out = append(out, page...)
	})
	if err != nil {
		return nil, 0, err
	}
	return out, rev, nil
}

// Each is Load a page at a time: each is called with every page as it
// arrives and must not keep the slice. A publisher that owns a million
// records builds its index from the pages instead of first holding all of
// them (their values alone are 150 MB, and growing one slice of them was a
// fifth of a restart's CPU: bench/publisher/README.md). Pages are read
// while each takes the one before: etcd's reading and the index's building
// overlap, which is most of a restart over a large store.
//
// cuts, sorted, are keys at which the ranges may be cut into pieces (nil:
// none); they change what is read in how many requests, never what is
// read. etcd 3.5 counts every key from a limited read's start to its
// range's end, so paging a million-key range 50,000 keys at a time made it
// visit ten million keys, half of its CPU in a restart
// (bench/publisher/README.md); a piece ending at a cut is counted only to
// that cut. The publisher cuts at its services' names. Pieces are read
// loadReaders at a time: the pages of one piece come in key order, those
// of pieces and of prefixes interleave.
func (s *Store) Each(ctx context.Context, prefixes, cuts []string, each func(page []plan.KV)) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // the readers still reading when each's caller gives up
	pages := make(chan loaded, 1)
	go s.fetch(ctx, prefixes, cuts, pages)
	var rev int64
	for p := range pages {
		if p.err != nil {
			return 0, p.err
		}
		rev = p.rev
		each(p.kvs)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return rev, nil
}

// loadReaders is how many pieces a load reads at once. One left etcd
// idle while the index took each page, and the index idle while etcd read
// the next (a restart over a million records, bench/publisher/README.md).
const loadReaders = 2

// loaded is one page of Each, or why the reading stopped.
type loaded struct {
	kvs []plan.KV
	rev int64
	err error
}

// fetch reads the pieces of every prefix, all at one revision, into pages,
// and closes it after the last one or an error.
func (s *Store) fetch(ctx context.Context, prefixes, cuts []string, pages chan<- loaded) {
	defer close(pages)
	if len(prefixes) == 0 {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fail := func(err error) {
		select {
		case pages <- loaded{err: err}:
		case <-ctx.Done():
		}
		cancel()
	}
	page := s.PageSize
	if page <= 0 {
		page = 50000
	}
	// The revision every page is read at: of one key, not of a first
	// page, so the readers can start together.
	var rev int64
	err := s.do(ctx, s.timeout(), func(ctx context.Context, cli *clientv3.Client) error {
		resp, err := cli.Get(ctx, prefixes[0], clientv3.WithCountOnly())
		if err == nil {
			rev = resp.Header.Revision
		}
		return err
	})
	if err != nil {
		fail(s.readError(prefixes[0], err))
		return
	}
	ranges := make([]*pieces, len(prefixes))
	for i, p := range prefixes {
		end := clientv3.GetPrefixRangeEnd(p)
		ranges[i] = &pieces{cuts: inside(cuts, p, end), next: p, end: end, page: int(page)}
	}
	var mu sync.Mutex // ranges'
	claim := func() (prefix int, start, stop string, span int, ok bool) {
		mu.Lock()
		defer mu.Unlock()
		for i, pc := range ranges {
			if pc.next != pc.end {
				start, stop = pc.next, pc.stop(pc.next)
				pc.next = stop
				return i, start, stop, pc.span, true
			}
		}
		return 0, "", "", 0, false
	}
	// piece reads [start, stop), span intervals of prefix i, page by page;
	// false: stop.
	piece := func(i int, start, stop string, span int) bool {
		for first := true; start != stop; first = false {
			var resp *clientv3.GetResponse
			err := s.do(ctx, s.timeout(), func(ctx context.Context, cli *clientv3.Client) (err error) {
				resp, err = cli.Get(ctx, start, clientv3.WithRange(stop), clientv3.WithLimit(page), clientv3.WithRev(rev))
				return err
			})
			if err != nil {
				fail(s.readError(prefixes[i], err))
				return false
			}
			// A page of its own: the one before may still be in each.
			kvs := make([]plan.KV, len(resp.Kvs))
			for j, kv := range resp.Kvs {
				kvs[j] = plan.KV{Key: string(kv.Key), Value: kv.Value, ModRev: kv.ModRevision}
			}
			select {
			case pages <- loaded{kvs: kvs, rev: rev}:
			case <-ctx.Done():
				return false
			}
			more := resp.More && len(resp.Kvs) > 0
			if first { // the rest of a piece that overflowed says nothing of its span
				mu.Lock()
				ranges[i].read(span, len(resp.Kvs), more)
				mu.Unlock()
			}
			start = stop
			if more {
				start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
			}
		}
		return true
	}
	var wg sync.WaitGroup
	for range loadReaders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i, start, stop, span, ok := claim()
				if !ok || !piece(i, start, stop, span) {
					return
				}
			}
		}()
	}
	wg.Wait()
}

// readError is why reading prefix failed, as the caller is told.
func (s *Store) readError(prefix string, err error) error {
	if etcdclient.IsDenied(err) {
		return &etcdclient.DeniedError{User: s.User, Op: "read", Key: prefix}
	}
	return fmt.Errorf("reading %s: %w", prefix, err)
}

// pieces chooses where each read of one range stops: after as many of the
// intervals between cuts as are expected to fill about a page. It starts
// with one and doubles while the pieces come back less than half full, and
// halves when one overflows a page, so a range of evenly sized services is
// read in about as many requests as pages, and a run of keys no cut
// splits is paged as before, counted only to the next cut.
type pieces struct {
	cuts []string
	next string // where the next piece starts; end when all are claimed
	end  string
	page int
	span int // intervals the next piece covers
}

// stop is where the read from start ends: a cut past start, or the end.
func (pc *pieces) stop(start string) string {
	if pc.span == 0 {
		pc.span = 1
	}
	i := sort.SearchStrings(pc.cuts, start)
	if i < len(pc.cuts) && pc.cuts[i] == start {
		i++
	}
	if j := i + pc.span - 1; j < len(pc.cuts) {
		return pc.cuts[j]
	}
	return pc.end
}

// read adjusts the span after the first read of a piece of span
// intervals, which got n keys and left more before its stop (more) or
// reached it. The other reader's pieces may have moved the span since this
// one was cut: a piece that overflowed only ever shrinks it, one that came
// back short only ever grows it.
func (pc *pieces) read(span, n int, more bool) {
	switch {
	case more && span > 1:
		pc.span = min(pc.span, span/2)
	case !more && 2*n < pc.page && span < len(pc.cuts):
		pc.span = max(pc.span, 2*span)
	}
}

// inside returns the cuts strictly between start and end, sorted and
// without repeats.
func inside(cuts []string, start, end string) []string {
	var out []string
	for _, c := range cuts {
		if c > start && (end == "\x00" || c < end) && (len(out) == 0 || out[len(out)-1] < c) {
			out = append(out, c)
		}
	}
	return out
}

// Get re-reads single keys, in one transaction a hundred keys at a time so
// that each part is consistent. rev is the revision the reads saw, the
// oldest part's when there are several: the index must not take a read
// for newer than it is (plan.Index.Refresh).
func (s *Store) Get(ctx context.Context, ks []string) (present []plan.KV, absent []string, rev int64, err error) {
	return s.get(ctx, ks, false)
}

// Answers is whether etcd answers a linearizable read of key within
// timeout (a quorum and a leader do; a follower that lost its leader holds
// the read until an election ends). It goes through Client, not
// Endpoints: asked over and over while etcd is down, it must not move the
// writes from one endpoint to the next, nor log each time it fails.
func (s *Store) Answers(ctx context.Context, key string, timeout time.Duration) bool {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := s.Client.Get(rctx, key, clientv3.WithCountOnly())
	return err == nil
}

// GetOrdered is Get ordered after every transaction the member it goes to
// took before it, as the keys of a transaction whose outcome was lost must
// be read: the client gave up on it, but etcd may still hold it, proposed
// and not committed, and commit it after a plain read, which waits only
// for what was committed when it arrived. Each part is a transaction with
// a write (the delete of a key next to its first key, only while that key
// does not exist), which etcd applies in raft log order: its reads come
// after that transaction, which commits before it or never. Deleting
// nothing makes no revision and no event. A transaction held up in another
// member (Failover moved on from it) is not covered.
func (s *Store) GetOrdered(ctx context.Context, ks []string) (present []plan.KV, absent []string, rev int64, err error) {
	return s.get(ctx, ks, true)
}

func (s *Store) get(ctx context.Context, ks []string, ordered bool) (present []plan.KV, absent []string, rev int64, err error) {
	chunk := s.readChunk()
	for i := 0; i < len(ks); i += chunk {
		part := ks[i:min(i+chunk, len(ks))]
		gets := make([]clientv3.Op, len(part))
		for j, k := range part {
			gets[j] = clientv3.OpGet(k)
		}
		txn := func(t clientv3.Txn) clientv3.Txn { return t.Then(gets...) }
		var writes []string
		if ordered {
			// Under the first key's prefix, which the publisher's role
			// may write; the guard keeps it from deleting a key that
			// someone did put there.
			probe := part[0] + "\x00"
			writes = []string{probe}
			txn = func(t clientv3.Txn) clientv3.Txn {
				return t.If(clientv3.Compare(clientv3.CreateRevision(probe), "=", 0)).
					Then(append(slices.Clip(gets), clientv3.OpDelete(probe))...).Else(gets...)
			}
		}
		var resp *clientv3.TxnResponse
		err := s.do(ctx, s.writeTimeout(), func(ctx context.Context, cli *clientv3.Client) (err error) {
			resp, err = txn(cli.Txn(ctx)).Commit()
			return err
		})
		if etcdclient.IsDenied(err) {
			return nil, nil, 0, etcdclient.Denied(ctx, s.Client, s.User, writes, append(slices.Clip(writes), part...))
		}
		if err != nil {
			return nil, nil, 0, err
		}
		if rev == 0 || resp.Header.Revision < rev {
			rev = resp.Header.Revision
		}
		for j, k := range part {
			kvs := resp.Responses[j].GetResponseRange().Kvs
			if len(kvs) == 0 {
				absent = append(absent, k)
				continue
			}
			present = append(present, plan.KV{Key: string(kvs[0].Key), Value: kvs[0].Value, ModRev: kvs[0].ModRevision})
		}
	}
	return present, absent, rev, nil
}

// Advance moves term's fence past epoch (elect.Term.Advance) through the
// current endpoint, so that no transaction sent with that fence can
// commit after a read that follows. It returns ErrFenced when the term
// has ended.
func (s *Store) Advance(ctx context.Context, term *elect.Term, epoch int64) error {
	err := s.write(ctx, func(ctx context.Context, cli *clientv3.Client) error {
		return term.Advance(ctx, cli, epoch)
	})
	switch {
	case errors.Is(err, elect.ErrTermEnded):
		return fmt.Errorf("%w (%v)", ErrFenced, err)
	case etcdclient.IsDenied(err):
		k := []string{term.Key()}
		return etcdclient.Denied(ctx, s.Client, s.User, k, k)
	}
	return err
}

// Apply commits ops in one transaction, each guarded by the revision the
// plan saw (creates by the key's absence), all of it inside the leader
// fence. The fence is the outer condition and the guards the inner one, so
// the two failures can be told apart: ErrFenced stops writing, ErrConflict
// asks for a re-read. It returns the commit revision.
func (s *Store) Apply(ctx context.Context, fence []clientv3.Cmp, ops []plan.Op) (int64, error) {
	req := txnRequest(fence, ops)
	var resp *pb.TxnResponse
	err := s.write(ctx, func(ctx context.Context, cli *clientv3.Client) (err error) {
		resp, err = clientv3.RetryKVClient(cli).Txn(ctx, req, txnCallOpts...)
		return clientv3.ContextError(ctx, err)
	})
	if etcdclient.IsDenied(err) {
		return 0, s.denied(ctx, fence, ops)
	}
	if err != nil {
		return 0, err
	}
	if !resp.Succeeded {
		if len(fence) == 0 {
			return 0, ErrConflict
		}
		return 0, ErrFenced
	}
	if len(fence) > 0 && !resp.Responses[0].GetResponseTxn().Succeeded {
		return 0, ErrConflict
	}
	return resp.Header.Revision, nil
}

// txnCallOpts are what clientv3's Txn passes to gRPC, and gogoCodec.
var txnCallOpts = append(slices.Clip(etcdclient.CallOptions), grpc.ForceCodec(gogoCodec{}))

// txnRequest is the request clientv3's Txn would send for Apply, built
// without it: through clientv3's Op and Cmp every key was copied twice and
// every value three times, in a few small allocations per operation, 2 GB
// over a million-record sync (bench/publisher/README.md). Here each kind of
// message is one array per transaction, and keys and values are the plan's
// own bytes, which nothing writes while the request lives.
func txnRequest(fence []clientv3.Cmp, ops []plan.Op) *pb.TxnRequest {
	n := len(ops)
	cmps := make([]pb.Compare, n)
	guards := make([]*pb.Compare, n)
	creates := make([]pb.Compare_CreateRevision, n)
	mods := make([]pb.Compare_ModRevision, n)
	reqs := make([]pb.RequestOp, n)
	writes := make([]*pb.RequestOp, n)
	var puts []pb.PutRequest
	var putOps []pb.RequestOp_RequestPut
	var dels []pb.DeleteRangeRequest
	var delOps []pb.RequestOp_RequestDeleteRange
	for i, o := range ops {
		key := bytesOf(o.Key)
		c := &cmps[i]
		c.Key, c.Result = key, pb.Compare_EQUAL
		if o.ModRev == 0 {
			c.Target, c.TargetUnion = pb.Compare_CREATE, &creates[i]
		} else {
			mods[i].ModRevision = o.ModRev
			c.Target, c.TargetUnion = pb.Compare_MOD, &mods[i]
		}
		guards[i] = c
		if o.Kind == plan.Put {
			if puts == nil {
				puts, putOps = make([]pb.PutRequest, 0, n), make([]pb.RequestOp_RequestPut, 0, n)
			}
			puts = append(puts, pb.PutRequest{Key: key, Value: o.Value})
			putOps = append(putOps, pb.RequestOp_RequestPut{RequestPut: &puts[len(puts)-1]})
			reqs[i].Request = &putOps[len(putOps)-1]
		} else {
			if dels == nil {
				dels, delOps = make([]pb.DeleteRangeRequest, 0, n), make([]pb.RequestOp_RequestDeleteRange, 0, n)
			}
			dels = append(dels, pb.DeleteRangeRequest{Key: key})
			delOps = append(delOps, pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &dels[len(dels)-1]})
			reqs[i].Request = &delOps[len(delOps)-1]
		}
		writes[i] = &reqs[i]
	}
	if len(fence) == 0 {
		return &pb.TxnRequest{Compare: guards, Success: writes}
	}
	outer := make([]*pb.Compare, len(fence))
	for i := range fence {
		outer[i] = (*pb.Compare)(&fence[i])
	}
	inner := &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Compare: guards, Success: writes}}}
	return &pb.TxnRequest{Compare: outer, Success: []*pb.RequestOp{inner}}
}

// bytesOf is s's bytes, not a copy: only for messages that are marshaled,
// never written.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// gogoCodec marshals etcd's messages with their own generated methods, as
// etcd's server does. gRPC's default codec sees them as legacy messages
// and, having no Size for them, marshals each request once to learn its
// size and again to send it: a third of the publisher's gRPC CPU in a sync.
type gogoCodec struct{}

type gogoMessage interface {
	Marshal() ([]byte, error)
	Unmarshal([]byte) error
}

func (gogoCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(gogoMessage)
	if !ok {
		return nil, fmt.Errorf("etcdstore: cannot marshal %T", v)
	}
	return m.Marshal()
}

// Unmarshal copies what it keeps (the generated code appends bytes and
// converts strings), so gRPC may reuse data after it.
func (gogoCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(gogoMessage)
	if !ok {
		return fmt.Errorf("etcdstore: cannot unmarshal into %T", v)
	}
	return m.Unmarshal(data)
}

func (gogoCodec) Name() string { return "proto" }

// denied names the key of a refused transaction: its writes need write
// permission, and the fence and guards compare keys, which needs read.
func (s *Store) denied(ctx context.Context, fence []clientv3.Cmp, ops []plan.Op) error {
	ks := make([]string, len(ops))
	for i, o := range ops {
		ks[i] = o.Key
	}
	reads := make([]string, 0, len(fence)+len(ks))
	for _, f := range fence {
		reads = append(reads, string(f.Key))
	}
	return etcdclient.Denied(ctx, s.Client, s.User, ks, append(reads, ks...))
}

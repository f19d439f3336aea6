package etcdclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
)

// Failover sends requests through one endpoint at a time, with the clients
// of DialEach, and makes the next endpoint current when one fails a
// request: it held the request for the whole timeout (a frozen member), or
// answered that it is unavailable (no leader, the connection lost). The
// caller's retry then goes to the next endpoint. A client of several
// endpoints cannot do this: it balances requests over its members round
// robin, and a frozen member's connection still looks ready to gRPC, so a
// retry of a request that timed out there goes back to it one time in
// three, and a publisher's write waited out two or three timeouts.
type Failover struct {
	clients []*clientv3.Client
	names   []string
	log     *slog.Logger
	moved   func()
	// probe asks an endpoint for its raft term with a serializable read;
	// ok is false when it gave no answer within answerTimeout. A test
	// may replace it.
	probe func(*clientv3.Client) (term uint64, ok bool)
	// terms are the raft terms the probes last saw, one an endpoint (0:
	// none yet, or the probe was refused), and asked when a probe last
	// answered (unix nanoseconds): a write's probes compare with the term
	// known when it was sent, so that an election between its send and
	// its first probe is seen too.
	terms []atomic.Uint64
	asked []atomic.Int64

	mu  sync.Mutex
	cur int
}

// NewFailover starts on the first of clients (the first endpoint
// configured); names are their endpoints, as DialEach returns them, for the
// log. moved, if set, is called at each move (a metric). probeKey is a key
// the clients' user may read: the probes of a write that waits read it,
// and learn the endpoint's raft term from the answer (a refusal answers
// too, but tells no term). Empty: "health", which etcdctl's endpoint
// health reads.
func NewFailover(clients []*clientv3.Client, names []string, log *slog.Logger, moved func(), probeKey string) *Failover {
	if probeKey == "" {
		probeKey = "health"
	}
	probe := func(cli *clientv3.Client) (uint64, bool) { return raftTerm(cli, probeKey) }
	return &Failover{clients: clients, names: names, log: logger(log), moved: moved, probe: probe,
		terms: make([]atomic.Uint64, len(clients)), asked: make([]atomic.Int64, len(clients))}
}

// probeEvery is how often Do asks the endpoint of a request that has not
// come back whether it still answers (watch).
const probeEvery = 250 * time.Millisecond

var (
	// ErrNotAnswering is what a request returns that Do gave up on
	// because its endpoint stopped answering reads: a frozen member.
	ErrNotAnswering = errors.New("the etcd endpoint stopped answering")
	// ErrLeaderChanged is what a request returns that Do gave up on
	// because etcd elected a leader while it waited: a write the old
	// leader had not yet replicated is lost, and would be waited for
	// until the timeout.
	ErrLeaderChanged = errors.New("etcd elected a new leader while the request waited")
)

// Do runs req with the current endpoint's client and a context that ends
// after timeout, and returns req's error. When the endpoint failed the
// request, the next becomes current, unless another request's failure
// moved the current endpoint on meanwhile: the requests that waited on a
// frozen member together time out together, and each moving on would
// skip healthy endpoints and could come round to the frozen one again.
//
// A request that has not come back is not always waited for until the
// timeout (watch): Do ends it early with ErrNotAnswering when its
// endpoint stops answering reads, and moves on. The request may yet
// commit; the caller must treat the error as a timeout.
func (f *Failover) Do(ctx context.Context, timeout time.Duration, req func(context.Context, *clientv3.Client) error) error {
	return f.do(ctx, timeout, false, req)
}

// DoWrite is Do for a write, which Do also ends early with
// ErrLeaderChanged, and without moving, when etcd elects a leader while
// it waits: a proposal the old leader had taken but not replicated is
// lost, and nothing would come back before the timeout.
func (f *Failover) DoWrite(ctx context.Context, timeout time.Duration, req func(context.Context, *clientv3.Client) error) error {
	return f.do(ctx, timeout, true, req)
}

func (f *Failover) do(ctx context.Context, timeout time.Duration, write bool, req func(context.Context, *clientv3.Client) error) error {
	i, cli := f.current()
	tctx, tcancel := context.WithTimeout(ctx, timeout)
	defer tcancel()
	rctx, cancel := context.WithCancelCause(tctx)
	defer cancel(nil)
	if len(f.clients) > 1 && timeout > probeEvery {
		stop := f.watch(rctx, i, write, cancel)
		defer stop()
	}
	err := req(rctx, cli)
	if err == nil || ctx.Err() != nil {
		return err // the caller gave up: no fault of the endpoint's
	}
	switch cause := context.Cause(rctx); {
	case errors.Is(cause, ErrNotAnswering):
		err = fmt.Errorf("%w: %w", cause, err)
		f.move(i, "not answering", err)
	case errors.Is(cause, ErrLeaderChanged):
		err = fmt.Errorf("%w: %w", cause, err)
	case errors.Is(tctx.Err(), context.DeadlineExceeded):
		f.move(i, "timeout", err)
	case unavailable(err):
		f.move(i, "unavailable", err)
	}
	return err
}

// watch probes endpoint i every probeEvery while ctx lives, from
// probeEvery on, and cancels ctx when a probe gets no answer, or, for a
// write, a raft term other than the one known when it was sent: the last
// probe's of i, if it answered within termFresh, else one made before the
// write is sent. With no term known, the first periodic probe could come
// after an election (a follower forwards the write to a leader frozen for
// most of the election timeout already), and the write would wait out its
// timeout: what a CI run saw of the first write a publisher sent after its
// leader froze. An older term could be from before an election since,
// and end a healthy write that is only slow. A request that comes back
// at once costs a timer. stop ends it.
func (f *Failover) watch(ctx context.Context, i int, write bool, cancel context.CancelCauseFunc) (stop func()) {
	done := make(chan struct{})
	first := f.terms[i].Load()
	if write && time.Since(time.Unix(0, f.asked[i].Load())) > termFresh {
		var ok bool
		if first, ok = f.answers(i); !ok {
			cancel(fmt.Errorf("%w: no answer to a read within %v", ErrNotAnswering, answerTimeout))
		}
	}
	t := time.AfterFunc(probeEvery, func() {
		tick := time.NewTicker(probeEvery)
		defer tick.Stop()
		for {
			term, ok := f.answers(i)
			switch {
			case ctx.Err() != nil:
				return
			case !ok:
				cancel(fmt.Errorf("%w: no answer to a read within %v", ErrNotAnswering, answerTimeout))
				return
			case !write || term == 0: // a refusal: alive, its term unknown
			case first == 0:
				first = term
			case term != first:
				cancel(fmt.Errorf("%w (raft term %d, then %d)", ErrLeaderChanged, first, term))
				return
			}
			select {
			case <-tick.C:
			case <-done:
				return
			}
		}
	})
	return func() {
		t.Stop()
		close(done)
	}
}

// current is the current endpoint, unless its connection is failing (a
// member down refuses it at once, and gRPC says so): then the first one
// after it that is not, so that a request does not wait out its timeout on
// an endpoint known to be down. A frozen member's connection never looks
// failing while it is held open; that is what the timeout is for.
func (f *Failover) current() (int, *clientv3.Client) {
	f.mu.Lock()
	i := f.cur
	f.mu.Unlock()
	if len(f.clients) > 1 && failing(f.clients[i]) {
		for k := 1; k < len(f.clients); k++ {
			j := (i + k) % len(f.clients)
			if !failing(f.clients[j]) {
				f.moveTo(i, j, "unreachable", nil)
				break
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cur, f.clients[f.cur]
}

func failing(cli *clientv3.Client) bool {
	return cli.ActiveConnection().GetState() == connectivity.TransientFailure
}

// move makes the first endpoint after from that answers current. A
// request can time out on a member that is alive: a write it forwarded to
// a frozen leader is lost with the leader. The next endpoint in line may
// then be that frozen leader itself, and a retry sent there waited out a
// second timeout (4.4 s in bench/faults, where 2.1 s is one timeout and
// the retry).
func (f *Failover) move(from int, reason string, err error) {
	f.mu.Lock()
	moved := f.cur != from
	f.mu.Unlock()
	if moved || len(f.clients) < 2 {
		return
	}
	to := (from + 1) % len(f.clients)
	for k := 1; k < len(f.clients); k++ {
		if j := (from + k) % len(f.clients); f.answerable(j) {
			to = j
			break
		}
	}
	f.moveTo(from, to, reason, err)
}

// termFresh is how long a probe's term stands for its endpoint's: a write
// sent later asks again first. Elections are rare, so this costs a
// publisher that writes all the time one read a second an endpoint.
const termFresh = time.Second

// answerTimeout bounds the read that tells an endpoint that answers from
// one that is frozen. A member answers a serializable read from its own
// store, without its peers, in well under a millisecond.
const answerTimeout = 500 * time.Millisecond

// answers is whether endpoint i answers a serializable read at once, with
// the raft term its answer carried, which it keeps. Any answer counts, a
// refusal too (0, no term): a frozen member gives none.
func (f *Failover) answers(i int) (term uint64, ok bool) {
	term, ok = f.probe(f.clients[i])
	if ok {
		f.terms[i].Store(term)
		f.asked[i].Store(time.Now().UnixNano())
	}
	return term, ok
}

func (f *Failover) answerable(i int) bool {
	_, ok := f.answers(i)
	return ok
}

// raftTerm reads key from cli, serializable, within answerTimeout: ok is
// whether the endpoint answered (a refusal is an answer), term the raft
// term its answer carried, 0 with a refusal.
func raftTerm(cli *clientv3.Client, key string) (uint64, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), answerTimeout)
	defer cancel()
	resp, err := cli.Get(ctx, key, clientv3.WithSerializable())
	if err != nil {
		return 0, ctx.Err() == nil && !unavailable(err)
	}
	return resp.Header.RaftTerm, true
}

// moveTo makes to current if from still is, and says so once.
func (f *Failover) moveTo(from, to int, reason string, err error) {
	if from == to {
		return // one endpoint: nowhere to go
	}
	f.mu.Lock()
	if f.cur != from {
		f.mu.Unlock()
		return
	}
	f.cur = to
	f.mu.Unlock()
	attrs := []any{"from", f.names[from], "to", f.names[to], "reason", reason}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	f.log.Warn("etcd requests moved to the next endpoint", attrs...)
	if f.moved != nil {
		f.moved()
	}
}

// unavailable is etcd's or gRPC's Unavailable: the member has no leader,
// is stopping, or the connection to it broke. etcd's own errors are not
// gRPC statuses once the client has converted them.
func unavailable(err error) bool {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code() == codes.Unavailable
	}
	return status.Code(err) == codes.Unavailable
}

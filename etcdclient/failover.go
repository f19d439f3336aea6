package etcdclient

import (
	"context"
	"errors"
	"log/slog"
	"sync"
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

	mu  sync.Mutex
	cur int
}

// NewFailover starts on the first of clients (the first endpoint
// configured); names are their endpoints, as DialEach returns them, for the
// log. moved, if set, is called at each move (a metric).
func NewFailover(clients []*clientv3.Client, names []string, log *slog.Logger, moved func()) *Failover {
	return &Failover{clients: clients, names: names, log: logger(log), moved: moved}
}

// Do runs req with the current endpoint's client and a context that ends
// after timeout, and returns req's error. When the endpoint failed the
// request, the next becomes current, unless another request's failure
// moved the current endpoint on meanwhile: the requests that waited on a
// frozen member together time out together, and each moving on would
// skip healthy endpoints and could come round to the frozen one again.
func (f *Failover) Do(ctx context.Context, timeout time.Duration, req func(context.Context, *clientv3.Client) error) error {
	i, cli := f.current()
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := req(rctx, cli)
	if err == nil || ctx.Err() != nil {
		return err // the caller gave up: no fault of the endpoint's
	}
	switch {
	case errors.Is(rctx.Err(), context.DeadlineExceeded):
		f.move(i, "timeout", err)
	case unavailable(err):
		f.move(i, "unavailable", err)
	}
	return err
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
		if j := (from + k) % len(f.clients); answers(f.clients[j]) {
			to = j
			break
		}
	}
	f.moveTo(from, to, reason, err)
}

// answerTimeout bounds the read that tells an endpoint that answers from
// one that is frozen. A member answers a serializable read from its own
// store, without its peers, in well under a millisecond.
const answerTimeout = 500 * time.Millisecond

// answers is whether the endpoint answers a serializable read at once. Any
// answer counts, a refusal too (the read is of a key the user may not be
// granted, as etcdctl's endpoint health reads it): a frozen member gives
// none.
func answers(cli *clientv3.Client) bool {
	ctx, cancel := context.WithTimeout(context.Background(), answerTimeout)
	defer cancel()
	_, err := cli.Get(ctx, "health", clientv3.WithSerializable())
	return err == nil || ctx.Err() == nil && !unavailable(err)
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

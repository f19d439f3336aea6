package elect

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// ErrTermEnded means the leader's election key is gone or is another
// session's: the term is over, and its writes are refused.
var ErrTermEnded = errors.New("election: the term's key is gone")

// Term is one leadership term: the fence every write of the leader
// carries, and the means to move it on.
//
// The fence compares the election key's mod revision, not its create
// revision. A write whose answer was lost (a timeout on a frozen member)
// may still be held somewhere and commit later, after the publisher has
// re-read its keys and moved on: it would bring back what a newer write
// deleted. Advance puts the key again, so every write sent with the
// fence from before fails when it reaches etcd; a read after Advance sees
// all the earlier writes that will ever commit. Nothing else puts the
// key: it is this session's, under its lease. A later leader's key is
// another key, so no fence of this term matches once its session is gone.
type Term struct {
	key    string
	create int64
	lease  clientv3.LeaseID
	value  string

	mu  sync.Mutex // one Advance at a time
	mod atomic.Int64
}

// NewTerm is the term of an election key put once, at revision create,
// with value under lease, as a fresh session's campaign puts it.
func NewTerm(key string, create int64, lease clientv3.LeaseID, value string) *Term {
	t := &Term{key: key, create: create, lease: lease, value: value}
	t.mod.Store(create)
	return t
}

// won is the term e's campaign just won with a fresh session's lease.
func won(e *concurrency.Election, lease clientv3.LeaseID, value string) *Term {
	return NewTerm(e.Key(), e.Rev(), lease, value)
}

// Key is the term's election key.
func (t *Term) Key() string { return t.key }

// Fence is the compare a write carries, and the epoch it stands for. A
// nil Term (a controller run without one, as some tests do) has none.
func (t *Term) Fence() ([]clientv3.Cmp, int64) {
	if t == nil {
		return nil, 0
	}
	mod := t.mod.Load()
	return []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(t.key), "=", mod)}, mod
}

// Epoch is the epoch of the fence writes carry now.
func (t *Term) Epoch() int64 {
	if t == nil {
		return 0
	}
	return t.mod.Load()
}

// Advance makes every write fenced at epoch or before fail from now on,
// with one write through cli unless an earlier Advance already did. It
// returns ErrTermEnded when the key is no longer the term's. When it fails
// otherwise, its put may still commit: the next Advance is guarded by the
// same epoch, so either that put or the next one wins, and the fence
// moves on either way.
func (t *Term) Advance(ctx context.Context, cli *clientv3.Client, epoch int64) error {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	mod := t.mod.Load()
	if mod > epoch {
		return nil
	}
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(t.key), "=", mod)).
		Then(clientv3.OpPut(t.key, t.value, clientv3.WithLease(t.lease))).
		Else(clientv3.OpGet(t.key)).
		Commit()
	if err != nil {
		return err
	}
	if resp.Succeeded {
		t.mod.Store(resp.Header.Revision)
		return nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 || kvs[0].CreateRevision != t.create || clientv3.LeaseID(kvs[0].Lease) != t.lease {
		return ErrTermEnded
	}
	// An earlier put whose answer was lost committed: it moved the
	// fence as well.
	t.mod.Store(kvs[0].ModRevision)
	return nil
}

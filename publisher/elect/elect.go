package elect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Prefix is where elections live; one key per cluster id, so publishers of
// different clusters sharing an etcd each have their own leader.
const Prefix = "/etcdns-election/"

// Lead is run while this replica leads; fence goes into every transaction.
// It returns when ctx ends (leadership lost or shutdown) or with an error.
type Lead func(ctx context.Context, fence []clientv3.Cmp) error

// Elector campaigns for a cluster's leadership and runs Lead while it holds it.
type Elector struct {
	Client  *clientv3.Client
	Cluster string
	ID      string        // this replica, shown as the leader's value
	TTL     time.Duration // session lease; a dead leader is replaced after it
	Log     *slog.Logger
	// OnState is told about leadership changes (metrics, readiness).
	OnState func(leading bool)
}

// Key is the election prefix of a cluster.
func Key(cluster string) string { return Prefix + cluster }

// Fence is the compare every leader write carries: the leader's own
// election key still exists with the create revision it won with. A new
// leader's key is a different key, so an old leader's fence can never match
// again once its session is gone.
func Fence(e *concurrency.Election) []clientv3.Cmp {
	return []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(e.Key()), "=", e.Rev())}
}

// Run campaigns until ctx ends. When ctx ends while leading it resigns, so
// the next replica takes over at once instead of after the lease TTL.
func (el *Elector) Run(ctx context.Context, lead Lead) error {
	log := el.Log
	if log == nil {
		log = slog.Default()
	}
	ttl := int(el.TTL / time.Second)
	if ttl < 2 {
		ttl = 2
	}
	for ctx.Err() == nil {
		sess, err := concurrency.NewSession(el.Client, concurrency.WithTTL(ttl), concurrency.WithContext(ctx))
		if err != nil {
			log.Warn("election: no session; retrying", "err", err)
			sleep(ctx, time.Second)
			continue
		}
		e := concurrency.NewElection(sess, Key(el.Cluster))
		// A session that expires while campaigning must restart the
		// campaign: our candidate key is gone with it.
		cctx, ccancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-sess.Done():
				ccancel()
			case <-cctx.Done():
			}
		}()
		log.Info("election: campaigning", "key", Key(el.Cluster), "id", el.ID)
		err = e.Campaign(cctx, el.ID)
		if err != nil {
			ccancel()
			sess.Close()
			if ctx.Err() == nil {
				log.Warn("election: campaign ended; retrying", "err", err)
				sleep(ctx, time.Second)
			}
			continue
		}
		log.Info("election: leading", "key", e.Key(), "revision", e.Rev(), "id", el.ID)
		if el.OnState != nil {
			el.OnState(true)
		}
		err = lead(cctx, Fence(e))
		if el.OnState != nil {
			el.OnState(false)
		}
		ccancel()
		switch {
		case ctx.Err() != nil:
			// Shutdown: hand over now, with a context of its own since
			// ctx is done.
			rctx, rcancel := context.WithTimeout(context.Background(), 3*time.Second)
			if rerr := e.Resign(rctx); rerr != nil {
				log.Warn("election: resign failed; the lease expires on its own", "err", rerr)
			} else {
				log.Info("election: resigned")
			}
			// The session's context is ctx, so Close could not revoke the
			// lease; revoke it here so nothing of ours lingers for a TTL.
			sess.Orphan()
			_, _ = el.Client.Revoke(rctx, sess.Lease())
			rcancel()
			return nil
		case err != nil:
			log.Warn("election: leadership lost", "err", err)
		default:
			log.Warn("election: session ended; leadership lost")
		}
		sess.Close()
		sleep(ctx, time.Second)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// ErrLeading means another replica leads the cluster: a running publisher.
var ErrLeading = errors.New("a publisher of this cluster is running")

// Exclusive runs f as the cluster's leader, but only if nobody leads now:
// it is for one-off jobs (a withdrawal) that must neither race a running
// publisher nor let one start halfway through. It resigns when f returns.
func Exclusive(ctx context.Context, cli *clientv3.Client, cluster, id string, f Lead) error {
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		return err
	}
	defer sess.Close()
	e := concurrency.NewElection(sess, Key(cluster))
	switch leader, err := e.Leader(ctx); {
	case err == nil:
		return fmt.Errorf("%w: %s (leader key %s); stop it first", ErrLeading, leader.Kvs[0].Value, leader.Kvs[0].Key)
	case !errors.Is(err, concurrency.ErrElectionNoLeader):
		return err
	}
	// Campaign only waits if a publisher started since the check above.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := e.Campaign(cctx, id); err != nil {
		if cctx.Err() != nil && ctx.Err() == nil {
			return fmt.Errorf("%w: it started during the check", ErrLeading)
		}
		return err
	}
	defer e.Resign(context.WithoutCancel(ctx))
	return f(ctx, Fence(e))
}

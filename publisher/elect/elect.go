package elect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/etcdns/etcdns/etcdclient"
)

// Prefix is where elections live; one key per cluster id, so publishers of
// different clusters sharing an etcd each have their own leader.
const Prefix = "/etcdns-election/"

// Lead is run while this replica leads; the term's fence goes into every
// transaction. It returns when ctx ends (leadership lost or shutdown) or
// with an error.
type Lead func(ctx context.Context, term *Term) error

// Elector campaigns for a cluster's leadership and runs Lead while it holds it.
type Elector struct {
	Client  *clientv3.Client
	Cluster string
	ID      string        // this replica, shown as the leader's value
	TTL     time.Duration // session lease; a dead leader is replaced after it
	Log     *slog.Logger
	// OnState is told about leadership changes (metrics, readiness).
	OnState func(leading bool)
	// User is the etcd user (etcdclient.User), named when etcd's auth
	// refuses the campaign.
	User string
	// Keepers renew the session's lease, one at a time, moving to the
	// next when one does not answer: clients pinned to one member each
	// (etcdclient.DialEach). None: Client renews it.
	Keepers []*clientv3.Client
	// Solo, when set, names an election of this replica's own inside the
	// cluster's (publisher.leader-election: false): nobody else campaigns
	// there, so it leads at once, and its key fences its writes as a
	// leader's do. A one-off job's check for a running publisher
	// (Exclusive) sees it, since it reads the cluster's whole prefix; a
	// replica that does run the election waits behind it.
	Solo string
}

// Key is the election prefix of a cluster.
func Key(cluster string) string { return Prefix + cluster }

// key is the prefix this Elector campaigns under.
func (el *Elector) key() string {
	if el.Solo != "" {
		return Key(el.Cluster) + "/writers/" + el.Solo
	}
	return Key(el.Cluster)
}

// Retries after a term that ended in an error wait retryFirst, doubling up
// to retryMax while terms keep ending so within a minute: with leader
// election off every replica leads, and a load that fails must not be
// repeated by all of them every second.
const (
	retryFirst = time.Second
	retryMax   = 30 * time.Second
)

// Run campaigns until ctx ends. When ctx ends while leading it resigns, so
// the next replica takes over at once instead of after the lease TTL. A
// request etcd's auth refuses (the campaign, or one of lead's) ends it with
// that error: campaigning again cannot succeed before a grant changes.
func (el *Elector) Run(ctx context.Context, lead Lead) error {
	log := el.Log
	if log == nil {
		log = slog.Default()
	}
	ttl := int(el.TTL / time.Second)
	if ttl < 2 {
		ttl = 2
	}
	var stale []clientv3.LeaseID // see release
	retry := retryFirst
	for ctx.Err() == nil {
		sess, err := concurrency.NewSession(el.Client, concurrency.WithTTL(ttl), concurrency.WithContext(ctx))
		if err != nil {
			log.Warn("election: no session; retrying", "err", err)
			sleep(ctx, time.Second)
			continue
		}
		// The session's own keep-alive stream stays on the member it
		// was opened on: frozen, that member let the lease expire under a
		// leader whose every other member was fine (14 s into a freeze,
		// with gRPC's keepalive still waiting to give up on it). keep
		// renews it instead, through one member at a time.
		sess.Orphan()
		kctx, kcancel := context.WithCancel(ctx) // the session's end ends it: a stale lease must expire
		lost := el.keep(kctx, sess.Lease(), time.Duration(ttl)*time.Second, log)
		stale = el.revokeStale(ctx, stale, log)
		e := concurrency.NewElection(sess, el.key())
		// A session that expires while campaigning must restart the
		// campaign: our candidate key is gone with it.
		cctx, ccancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-lost:
				ccancel()
			case <-cctx.Done():
			}
		}()
		log.Info("election: campaigning", "key", el.key(), "id", el.ID)
		err = e.Campaign(cctx, el.ID)
		if etcdclient.IsDenied(err) {
			ccancel()
			kcancel()
			sess.Close()
			return &etcdclient.DeniedError{User: el.User, Op: "write", Key: Key(el.Cluster) + "/"}
		}
		if err != nil {
			ccancel()
			kcancel()
			stale = release(sess, stale)
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
		began := time.Now()
		err = lead(cctx, won(e, sess.Lease(), el.ID))
		if el.OnState != nil {
			el.OnState(false)
		}
		ccancel()
		kcancel()
		denied := etcdclient.IsDenied(err)
		switch {
		case ctx.Err() != nil || denied:
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
			if denied {
				return err
			}
			return nil
		case err != nil:
			if time.Since(began) > time.Minute {
				retry = retryFirst
			}
			log.Warn("election: leadership lost", "err", err, "retry_in", retry)
		default:
			log.Warn("election: session ended; leadership lost")
		}
		stale = release(sess, stale)
		if err != nil {
			sleep(ctx, retry)
			retry = min(2*retry, retryMax)
		} else {
			sleep(ctx, time.Second)
		}
	}
	return nil
}

// keep renews lease, of ttl, until ctx ends or the lease is lost, and
// returns a channel closed then. A renewal is due every third of the TTL;
// one that gets no answer within a sixth is tried again at once through
// the next keeper, so a frozen member costs a sixth of the TTL, not the
// lease. The lease counts as lost when etcd says it is gone, or when no
// renewal has succeeded for a whole TTL: etcd may have let it expire by
// then, and the writes it fences would fail anyway.
func (el *Elector) keep(ctx context.Context, lease clientv3.LeaseID, ttl time.Duration, log *slog.Logger) <-chan struct{} {
	keepers := el.Keepers
	if len(keepers) == 0 {
		keepers = []*clientv3.Client{el.Client}
	}
	lost := make(chan struct{})
	go func() {
		defer close(lost)
		renewed := time.Now() // granted just before
		for i := 0; ; {
			sleep(ctx, time.Until(renewed.Add(ttl/3)))
			for failed := 0; ; failed++ {
				if ctx.Err() != nil {
					return
				}
				if time.Since(renewed) >= ttl {
					log.Warn("election: no member renewed the lease for its TTL", "lease", fmt.Sprintf("%x", int64(lease)), "ttl", ttl)
					return
				}
				sent := time.Now() // etcd's TTL runs from no earlier than this
				rctx, cancel := context.WithTimeout(ctx, ttl/6)
				_, err := keepers[i].KeepAliveOnce(rctx, lease)
				cancel()
				if err == nil {
					renewed = sent
					if failed > 0 {
						log.Info("election: renewed the lease through another member", "keeper", i, "failed", failed)
					}
					break
				}
				if errors.Is(err, rpctypes.ErrLeaseNotFound) {
					log.Warn("election: the lease expired", "lease", fmt.Sprintf("%x", int64(lease)))
					return
				}
				if ctx.Err() != nil {
					return
				}
				if failed == 0 {
					log.Warn("election: renewing the lease failed; trying the next member", "err", err, "keeper", i)
				}
				i = (i + 1) % len(keepers)
				sleep(ctx, min(ttl/30, 100*time.Millisecond)) // all away and refusing at once: no spin
			}
		}
	}()
	return lost
}

// release closes an ended session and returns stale with the session's
// lease added if the revoke could not reach etcd. etcd gives every lease a
// fresh TTL when it elects a leader (a restart, a leader change), so the
// key of a session lost in an etcd outage would stay at the head of the
// election and hold every replica, this one included, out for a whole
// lease TTL after etcd is back (issue 9 item 1: 16s with the default 15s).
func release(sess *concurrency.Session, stale []clientv3.LeaseID) []clientv3.LeaseID {
	if err := sess.Close(); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return append(stale, sess.Lease())
	}
	return stale
}

// revokeStale revokes the leases release kept, now that etcd answers, and
// returns those it still could not. Nothing of this process uses them: the
// term they fenced has ended.
func (el *Elector) revokeStale(ctx context.Context, stale []clientv3.LeaseID, log *slog.Logger) []clientv3.LeaseID {
	var left []clientv3.LeaseID
	for _, id := range stale {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := el.Client.Revoke(rctx, id)
		cancel()
		switch {
		case err == nil:
			log.Info("election: revoked the lease of a session lost while etcd was unreachable", "lease", fmt.Sprintf("%x", int64(id)))
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
		default:
			left = append(left, id)
		}
	}
	return left
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
// user is the etcd user, named if etcd's auth refuses the election.
func Exclusive(ctx context.Context, cli *clientv3.Client, cluster, id, user string, f Lead) error {
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		return err
	}
	defer sess.Close()
	e := concurrency.NewElection(sess, Key(cluster))
	switch leader, err := e.Leader(ctx); {
	case etcdclient.IsDenied(err):
		return &etcdclient.DeniedError{User: user, Op: "read", Key: Key(cluster) + "/"}
	case err == nil:
		return fmt.Errorf("%w: %s (leader key %s); stop it first", ErrLeading, leader.Kvs[0].Value, leader.Kvs[0].Key)
	case !errors.Is(err, concurrency.ErrElectionNoLeader):
		return err
	}
	// Campaign only waits if a publisher started since the check above.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := e.Campaign(cctx, id); err != nil {
		if etcdclient.IsDenied(err) {
			return &etcdclient.DeniedError{User: user, Op: "write", Key: Key(cluster) + "/"}
		}
		if cctx.Err() != nil && ctx.Err() == nil {
			return fmt.Errorf("%w: it started during the check", ErrLeading)
		}
		return err
	}
	defer e.Resign(context.WithoutCancel(ctx))
	return f(ctx, won(e, sess.Lease(), id))
}

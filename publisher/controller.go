package publisher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/util/workqueue"

	"github.com/etcdns/etcdns/etcdclient"
	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/publisher/elect"
	"github.com/etcdns/etcdns/publisher/etcdstore"
	"github.com/etcdns/etcdns/publisher/plan"
	"github.com/etcdns/etcdns/publisher/source"
)

// Options configure a Controller.
type Options struct {
	Zones       Zones
	Source      source.Source
	Filter      Filter
	Store       *etcdstore.Store
	Ranges      []string // etcdstore.Ranges of this cluster
	MaxTxnOps   int
	MaxTxnBytes int
	Workers     int // concurrent units; etcd batches concurrent commits
	Log         *slog.Logger
	Metrics     *Metrics
	// OnProgrammed, if set, is told each programming latency as it is
	// measured (benchmarks want exact percentiles, not histogram buckets).
	OnProgrammed func(unit string, latency time.Duration)
}

// Controller reconciles units while it leads. One Controller serves every
// leadership term of a process; each term starts from a fresh read of etcd.
type Controller struct {
	o   Options
	log *slog.Logger
	m   *Metrics

	mu      sync.Mutex
	idx     *plan.Index
	pending map[string]time.Time       // unit -> first unprocessed change
	waiting map[string]map[string]bool // key held by someone else -> units that want it
	unsure  map[string]unsure          // unit -> its transactions that may have committed
	failing map[string]bool            // units waiting out a retry's delay
	queue   workqueue.TypedRateLimitingInterface[string]

	synced     atomic.Bool // the source's initial state is loaded
	leading    atomic.Bool
	reconciled atomic.Bool // the first full reconcile of this term is done
}

// unsure is what a unit's failed transactions may have written: their keys,
// and the newest fence epoch one of them carried (elect.Term.Fence).
type unsure struct {
	keys  []string
	epoch int64
}

func NewController(o Options) *Controller {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
	}
	if o.Workers <= 0 {
		o.Workers = 16
	}
	return &Controller{o: o, log: o.Log, m: o.Metrics}
}

// Notify is the source's callback: it queues a unit while this replica leads
// (a new leader reconciles everything anyway) and remembers when the change
// was first seen, for the programming latency.
func (c *Controller) Notify(unit string, seen time.Time) {
	kind, _, _ := source.ParseUnit(unit)
	c.m.Events.WithLabelValues(kind).Inc()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.queue == nil {
		return
	}
	if _, ok := c.pending[unit]; !ok {
		c.pending[unit] = seen
	}
	c.queue.Add(unit)
}

// SetSynced marks the source's initial state as loaded.
func (c *Controller) SetSynced() { c.synced.Store(true) }

// Ready reports whether the publisher is serving: the source is synced and,
// when leading, the term's first full reconcile is done.
func (c *Controller) Ready() error {
	if !c.synced.Load() {
		return errors.New("source not synced")
	}
	if c.leading.Load() && !c.reconciled.Load() {
		return errors.New("leader: initial reconcile in progress")
	}
	return nil
}

// Leading reports whether this replica leads and has finished the term's
// first full reconcile.
func (c *Controller) Leading() bool { return c.leading.Load() && c.reconciled.Load() }

// Lead writes while ctx lives: it loads what this cluster owns, reconciles
// every unit (including orphans: owned sources without an object), then
// follows changes. term's fence is added to every transaction (none when
// term is nil, and then nothing moves a timed-out write out of the way
// of a re-read: the publisher always runs with one); it returns
// etcdstore.ErrFenced as soon as a transaction shows leadership was lost,
// and an etcdclient.DeniedError as soon as etcd's auth refuses a request:
// a missing grant is no failure of one unit that a retry could fix.
func (c *Controller) Lead(ctx context.Context, term *elect.Term) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	c.leading.Store(true)
	c.m.Leader.Set(1)
	defer func() {
		c.leading.Store(false)
		c.reconciled.Store(false)
		c.m.Leader.Set(0)
	}()

	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 30*time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "publisher"})
	c.mu.Lock()
	c.queue, c.pending, c.waiting, c.unsure = q, map[string]time.Time{}, map[string]map[string]bool{}, map[string]unsure{}
	c.failing = map[string]bool{}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.queue = nil
		c.mu.Unlock()
		q.ShutDown()
	}()

	if err := c.load(ctx); err != nil {
		return err
	}
	if err := c.FullSync(ctx, term); err != nil {
		return err
	}
	c.reconciled.Store(true)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.retryOnRecovery(ctx, q)
	}()
	for range c.o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c.work(ctx, q, term, cancel) {
			}
		}()
	}
	<-ctx.Done()
	q.ShutDown()
	wg.Wait()
	if err := context.Cause(ctx); errors.Is(err, etcdstore.ErrFenced) || etcdclient.IsDenied(err) {
		return err
	}
	return nil
}

func (c *Controller) work(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], term *elect.Term, stop context.CancelCauseFunc) bool {
	unit, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(unit)
	err := c.Reconcile(ctx, unit, term)
	switch {
	case err == nil:
		q.Forget(unit)
		c.mu.Lock()
		delete(c.failing, unit)
		c.mu.Unlock()
	case errors.Is(err, etcdstore.ErrFenced) || etcdclient.IsDenied(err):
		stop(err)
		return false
	case ctx.Err() != nil:
		return false
	default:
		c.log.Warn("reconcile failed; will retry", "unit", unit, "err", err, "retries", q.NumRequeues(unit))
		c.requeue(unit)
	}
	return true
}

// recoveryProbeEvery is how often etcd is read while units wait to be
// retried (retryOnRecovery).
const recoveryProbeEvery = time.Second

// retryOnRecovery retries at once every unit that waits out a retry's
// delay when etcd answers again after it did not. The delays double with
// each failure, so a unit that failed all through an outage would be
// retried as long after etcd's return as the outage had lasted (30 s at
// most): a Service created while etcd had lost its quorum would be
// published that late. While units wait, it reads a key of the cluster's
// first range every recoveryProbeEvery (Store.Answers); after a read that
// failed or was not answered within half of that (held while the members
// elect a leader: a short outage), the first that succeeds retries them,
// their delays back to the first. A unit that fails while etcd answers
// keeps its delays.
func (c *Controller) retryOnRecovery(ctx context.Context, q workqueue.TypedRateLimitingInterface[string]) {
	tick := time.NewTicker(recoveryProbeEvery)
	defer tick.Stop()
	down := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		c.mu.Lock()
		waiting := len(c.failing)
		c.mu.Unlock()
		if waiting == 0 {
			down = false
			continue
		}
		ok := c.o.Store.Answers(ctx, c.o.Ranges[0], recoveryProbeEvery/2)
		switch {
		case ctx.Err() != nil:
			return
		case !ok:
			down = true
		case down:
			down = false
			c.mu.Lock()
			units := make([]string, 0, len(c.failing))
			for u := range c.failing {
				units = append(units, u)
			}
			c.mu.Unlock()
			c.log.Info("etcd answers again; retrying the units that failed now", "units", len(units))
			for _, u := range units {
				q.Forget(u) // a failure now is etcd's first since it returned
				q.Add(u)
			}
		}
	}
}

func (c *Controller) load(ctx context.Context) error {
	start := time.Now()
	l := plan.NewLoader(c.o.Zones.Cluster.Cluster)
	rev, err := c.o.Store.Each(ctx, c.o.Ranges, c.cuts(), l.Add)
	if etcdclient.IsDenied(err) {
		return err // names the range already
	}
	if err != nil {
		return fmt.Errorf("loading owned records: %w", err)
	}
	idx, st := l.Done()
	c.mu.Lock()
	c.idx = idx
	c.mu.Unlock()
	c.m.Owned.Set(float64(st.Owned))
	c.m.Malformed.Set(float64(st.Foreign + st.Malformed))
	c.log.Info("loaded owned records", "ranges", c.o.Ranges, "revision", rev, "owned", st.Owned,
		"sources", len(idx.Sources()), "foreign", st.Foreign, "malformed", st.Malformed, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// cuts are where the load may cut its ranges (etcdstore.Store.Each): at the
// name of every service the source knows, under which that service's
// records lie, so that the pieces between them hold whole services.
func (c *Controller) cuts() []string {
	b := c.o.Zones.Cluster
	var cuts []string
	for _, u := range c.o.Source.Units() {
		kind, ns, name := source.ParseUnit(u)
		if kind != "service" {
			continue
		}
		if k, err := keys.Key(b.Prefix, name+"."+ns+".svc."+b.Zone); err == nil {
			cuts = append(cuts, k+"/")
		}
	}
	sort.Strings(cuts)
	return cuts
}

// FullSync reconciles every unit the source knows and every unit that owns
// records, with progress logged every few seconds on a large sync.
func (c *Controller) FullSync(ctx context.Context, term *elect.Term) error {
	start := time.Now()
	set := map[string]bool{}
	for _, u := range Units(c.o.Zones, c.o.Source) {
		set[u] = true
	}
	c.m.Units.Set(float64(len(set) - 1))
	c.mu.Lock()
	orphans := 0
	for _, s := range c.idx.Sources() {
		if !set[s] && Manages(c.o.Zones, s) {
			set[s] = true
			orphans++
		}
	}
	c.mu.Unlock()
	units := make([]string, 0, len(set))
	for u := range set {
		units = append(units, u)
	}
	sort.Strings(units)
	c.log.Info("full reconcile started", "units", len(units), "orphan_sources", orphans)

	var done, records, written, failed atomic.Int64
	work := make(chan string)
	errc := make(chan error, 1)
	var wg sync.WaitGroup
	for range c.o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u := range work {
				st, err := c.reconcile(ctx, u, term)
				switch {
				case err == nil:
				case etcdclient.IsDenied(err):
					// Said once, by whoever stops the publisher: every
					// other unit is likely refused the same way.
					select {
					case errc <- err:
					default:
					}
					continue
				case errors.Is(err, etcdstore.ErrFenced) || ctx.Err() != nil:
					select {
					case errc <- fmt.Errorf("unit %s: %w", u, err):
					default:
					}
					continue
				default:
					// One failing unit must not hold up the others: it
					// is retried from the queue with backoff.
					failed.Add(1)
					c.log.Warn("reconcile failed; will retry", "unit", u, "err", err)
					c.requeue(u)
					continue
				}
				records.Add(int64(st.records))
				written.Add(int64(st.ops))
				done.Add(1)
			}
		}()
	}
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	var ferr error
feed:
	for _, u := range units {
		for {
			select {
			case work <- u:
				continue feed
			case ferr = <-errc:
				break feed
			case <-ctx.Done():
				ferr = context.Cause(ctx)
				break feed
			case <-tick.C:
				el := time.Since(start)
				n := done.Load()
				rate := float64(n) / el.Seconds()
				var eta time.Duration
				if rate > 0 {
					eta = time.Duration(float64(int64(len(units))-n) / rate * float64(time.Second))
				}
				c.log.Info("full reconcile progress", "units_done", n, "units", len(units),
					"records_done", records.Load(), "records_changed", written.Load(),
					"units_per_second", int(rate), "remaining", eta.Round(time.Second))
			}
		}
	}
	close(work)
	wg.Wait()
	if ferr == nil {
		select {
		case ferr = <-errc:
		default:
		}
	}
	if ferr != nil {
		return ferr
	}
	d := time.Since(start)
	c.m.SyncSeconds.Set(d.Seconds())
	c.log.Info("full reconcile done", "units", len(units), "records", records.Load(),
		"records_changed", written.Load(), "failed_units", failed.Load(), "took", d.Round(time.Millisecond))
	return nil
}

// requeue retries unit after a delay that doubles with each failure.
func (c *Controller) requeue(unit string) {
	c.mu.Lock()
	q := c.queue
	if q != nil {
		c.failing[unit] = true
	}
	c.mu.Unlock()
	if q != nil {
		q.AddRateLimited(unit)
	}
}

// Reconcile brings one unit's records in etcd to what its objects want now.
func (c *Controller) Reconcile(ctx context.Context, unit string, term *elect.Term) error {
	_, err := c.reconcile(ctx, unit, term)
	return err
}

type unitStats struct{ records, ops int }

const maxAttempts = 5

func (c *Controller) reconcile(ctx context.Context, unit string, term *elect.Term) (unitStats, error) {
	c.mu.Lock()
	seen, hasSeen := c.pending[unit]
	delete(c.pending, unit)
	c.mu.Unlock()

	var st unitStats
	if !Manages(c.o.Zones, unit) {
		return st, nil // never delete what another source kind owns
	}
	desired, problems := Desired(c.o.Zones, c.o.Source, c.o.Filter, unit)
	if len(problems) > 0 {
		c.m.Invalid.Add(float64(len(problems)))
		c.log.Warn("skipped invalid parts of an object", "unit", unit, "problems", errors.Join(problems...).Error())
	}
	st.records = len(desired)
	if err := c.settle(ctx, unit, term); err != nil {
		return st, err
	}
	// Encoded before the lock: 16 workers share the index.
	want := plan.Encode(desired)
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		c.mu.Lock()
		res := c.idx.Diff(unit, want)
		for _, cf := range res.Conflicts {
			w := c.waiting[cf.Key]
			if w == nil {
				w = map[string]bool{}
				c.waiting[cf.Key] = w
			}
			if !w[unit] {
				w[unit] = true
				c.m.Conflicts.Inc()
				c.log.Warn("record key held by another owner; not overwriting it", "unit", unit, "key", cf.Key, "holder", cf.Owner)
			}
		}
		c.mu.Unlock()
		if len(res.Ops) == 0 {
			return st, nil
		}
		err := c.apply(ctx, unit, res.Ops, term)
		if err == nil {
			st.ops = len(res.Ops)
			if hasSeen {
				d := time.Since(seen)
				c.m.Programming.Observe(d.Seconds())
				if c.o.OnProgrammed != nil {
					c.o.OnProgrammed(unit, d)
				}
			}
			return st, nil
		}
		if !errors.Is(err, etcdstore.ErrConflict) || attempt >= maxAttempts {
			return st, err
		}
		// Someone changed a key we planned on: read those keys again
		// (what we own and what we wanted) and plan from the truth.
		c.m.Retries.Inc()
		c.mu.Lock()
		ks := c.idx.Keys(unit)
		c.mu.Unlock()
		for _, r := range desired {
			ks = append(ks, r.Key)
		}
		if err := c.reread(ctx, unit, ks, c.o.Store.Get); err != nil {
			return st, err
		}
		c.log.Info("a record changed behind the publisher; re-read and retrying", "unit", unit, "attempt", attempt)
		select {
		case <-ctx.Done():
			return st, context.Cause(ctx)
		case <-time.After(backoff + rand.N(backoff)):
		}
		backoff *= 2
	}
}

// settle re-reads the keys of a unit's transactions that failed without
// saying whether they committed (a timeout, a lost reply): what they wrote
// is the unit's all the same, and a record the index does not know of is
// never deleted, however the unit changes.
//
// Such a transaction may also be held still, and commit after the read:
// then it would bring back what the unit wrote since. With a term, the
// fence is moved on first, so that it never commits (elect.Term.Advance),
// wherever it is held. Without one, the read is ordered after whatever
// the member it goes to holds (etcdstore.Store.GetOrdered); a transaction
// held by a member the requests moved away from is not covered.
func (c *Controller) settle(ctx context.Context, unit string, term *elect.Term) error {
	c.mu.Lock()
	u := c.unsure[unit]
	c.mu.Unlock()
	if len(u.keys) == 0 {
		return nil
	}
	get := c.o.Store.GetOrdered
	if term != nil {
		if err := c.o.Store.Advance(ctx, term, u.epoch); err != nil {
			return err
		}
		get = c.o.Store.Get // it comes after the advance, and so does anything of before that commits
	}
	if err := c.reread(ctx, unit, u.keys, get); err != nil {
		return err
	}
	c.mu.Lock()
	delete(c.unsure, unit) // a unit is reconciled by one worker at a time
	c.mu.Unlock()
	return nil
}

// reread reads keys again with get and puts what it found into the index.
// The index is told before the read starts, so that it can tell the read
// from a newer commit of another unit's (plan.Index.BeginRead). A key
// found gone may be one another unit waits for, freed by a transaction the
// index never saw commit: that unit can have it now, as after apply.
func (c *Controller) reread(ctx context.Context, unit string, ks []string, get func(context.Context, []string) ([]plan.KV, []string, int64, error)) error {
	c.mu.Lock()
	x := c.idx
	x.BeginRead()
	c.mu.Unlock()
	present, absent, rev, err := get(ctx, ks)
	c.mu.Lock()
	if err == nil {
		x.Refresh(present, absent, rev)
	}
	x.EndRead()
	retry, q := c.waitersOf(unit, absent), c.queue
	c.mu.Unlock()
	wake(q, retry)
	return err
}

// waitersOf forgets who waits for keys, which are free now, and returns
// the units but unit that did. c.mu is held.
func (c *Controller) waitersOf(unit string, keys []string) []string {
	var units []string
	for _, k := range keys {
		for u := range c.waiting[k] {
			if u != unit {
				units = append(units, u)
			}
		}
		delete(c.waiting, k)
	}
	return units
}

// wake queues units on q, the queue read under c.mu (nil: not leading).
func wake(q workqueue.TypedRateLimitingInterface[string], units []string) {
	if q == nil {
		return
	}
	for _, u := range units {
		q.Add(u)
	}
}

func (c *Controller) apply(ctx context.Context, unit string, ops []plan.Op, term *elect.Term) error {
	txns := plan.Split(ops, c.o.MaxTxnOps, c.o.MaxTxnBytes)
	if len(txns) > 1 {
		c.m.Splits.Inc()
		c.log.Info("unit exceeds one etcd transaction; splitting it", "unit", unit, "ops", len(ops),
			"txns", len(txns), "max_txn_ops", c.o.MaxTxnOps, "max_txn_bytes", c.o.MaxTxnBytes)
	}
	for _, t := range txns {
		start := time.Now()
		fence, epoch := term.Fence()
		rev, err := c.o.Store.Apply(ctx, fence, t)
		c.m.TxnLatency.Observe(time.Since(start).Seconds())
		switch {
		case err == nil:
			c.m.Txns.WithLabelValues("ok").Inc()
		case errors.Is(err, etcdstore.ErrFenced) && term.Epoch() != epoch:
			// Another unit's settle moved the fence on meanwhile: the
			// term goes on, and this transaction is planned again.
			c.m.Txns.WithLabelValues("conflict").Inc()
			return etcdstore.ErrConflict
		case errors.Is(err, etcdstore.ErrConflict):
			c.m.Txns.WithLabelValues("conflict").Inc()
			return err
		case errors.Is(err, etcdstore.ErrFenced):
			// At the epoch the term still holds: the term has ended, or
			// an Advance whose answer was lost moved the fence after all
			// (settle's, after a write timed out). Advance tells the two
			// apart, taking a move of this term's own as it finds it.
			if aerr := c.o.Store.Advance(ctx, term, epoch); aerr == nil {
				c.m.Txns.WithLabelValues("conflict").Inc()
				return etcdstore.ErrConflict
			} else if !errors.Is(aerr, etcdstore.ErrFenced) {
				c.m.Txns.WithLabelValues("error").Inc()
				return aerr
			}
			c.m.Txns.WithLabelValues("fenced").Inc()
			return err
		default:
			c.m.Txns.WithLabelValues("error").Inc()
			c.mu.Lock()
			u := c.unsure[unit]
			for _, o := range t {
				u.keys = append(u.keys, o.Key)
			}
			u.epoch = max(u.epoch, epoch)
			c.unsure[unit] = u
			c.mu.Unlock()
			return err
		}
		puts := 0
		for _, o := range t {
			if o.Kind == plan.Put {
				puts++
			}
		}
		c.m.Written.Add(float64(puts))
		c.m.Deleted.Add(float64(len(t) - puts))
		c.mu.Lock()
		freed := c.idx.Applied(unit, t, rev)
		c.m.Owned.Set(float64(c.idx.Len()))
		retry, q := c.waitersOf(unit, freed), c.queue
		c.mu.Unlock()
		// Units that wanted a key this one just freed can have it now.
		wake(q, retry)
		c.log.Debug("applied", "unit", unit, "puts", puts, "deletes", len(t)-puts, "revision", rev)
	}
	return nil
}

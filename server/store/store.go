package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/connectivity"

	"github.com/etcdns/etcdns/etcdclient"
	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/server/snap"
)

// PageSize bounds one range request of the initial load by default
// (dnsd.page-size), so a large zone never becomes one huge etcd response.
// It is large because a load from members is fastest in few pages: at a
// million records 10,000-key pages took 3-5% longer and 15-18% more of
// dnsd's CPU. (Before pages stopped short of the end, stops.go, etcd 3.5
// counted every key from a limited read's start to its range's end,
// etcd-io/etcd#11057, and 1,000-key pages of a million-key zone took
// minutes.) A page is about 15 MiB. An etcd grpc-proxy keeps every page it
// passes on, up to 2,048 of them, whatever their size: through proxies
// pages should be small (1,000 keys: 9.7 s for a million records).
const PageSize = 50_000

// proxyPageSize is the page size docs/fleet.md and
// deploy/overlays/node-local-proxied give frontends on etcd grpc-proxies:
// larger, a store that finds endpoints other than members says so.
const proxyPageSize = 1000

// RevisionStep is the grain of the revisions loads are made at. A load
// learns the cluster's revision with one linearizable read, then reads
// every page at that revision rounded down to a multiple of the step, so
// that the frontends of a fleet started together (a DaemonSet rollout, a
// cluster restart) ask for the same pages at the same revision, and an
// etcd grpc-proxy answers each request that comes after the first answer
// is in its cache (it has no single-flight for those that come sooner): a
// page at a fixed revision never changes. Each frontend's watch then
// replays the at most RevisionStep-1 transactions between the two before
// the frontend is ready (see caughtUp). A cluster that keeps less history
// than a step (the rounded revision compacted) is read at its revision.
const RevisionStep = 1024

// Store holds the current snapshot and keeps it current.
type Store struct {
	cli     *clientv3.Client
	zones   []snap.Config
	timeout time.Duration
	// oneKey is what the store reads when it wants a revision, not data:
	// the first zone's range itself, a key that a role granting the zone's
	// range may read (its prefix alone, without the slash, is outside it).
	oneKey string
	log    *slog.Logger

	cur    atomic.Pointer[snap.Snapshot]
	ready  chan struct{}
	packed atomic.Uint64 // bytes of tables packing has left to the collector (PackedBytes)

	mu  sync.Mutex
	bad map[string]Malformed // by key
	// skippedNow holds the keys the load in progress skipped; nil while
	// none is. A complete load drops every other key from bad: one
	// deleted while the watch was down is in no event a relist replays,
	// and stayed listed as skipped for good. Only Run's goroutine uses it.
	skippedNow map[string]bool
	// unordered: endpoints said to order no progress answers (checkOrder).
	unordered map[string]bool

	// The watch runs on one of these at a time, and moves to the next when
	// its stream fails or goes quiet; the initial load and relists use cli.
	endpoints []Endpoint
	live      Liveness
	// noProgress names the endpoints found to drop progress requests
	// (etcd's grpc-proxy), progress those that answered one; only Run's
	// goroutine uses them.
	noProgress map[string]bool
	progress   map[string]bool
	// members holds the client addresses (host:port, lower case) of the
	// cluster's members once a member list has answered; nil until then.
	// A watch endpoint among them is a member, never a proxy.
	members atomic.Pointer[map[string]bool]
	// heard is when (unix ns) the snapshot was last proven current: a load,
	// or any response on the watch stream.
	heard atomic.Int64
	// behind is a revision heard of from another endpoint that the watch
	// stream has not yet shown (0: none), and behindSince when it was
	// heard; the next stream inherits it. Only Run's goroutine uses them;
	// behindAt mirrors behindSince (unix ns, 0: none) for the metrics.
	behind      int64
	behindSince time.Time
	behindAt    atomic.Int64
	// startJitter: the first load waits a random time up to this.
	startJitter time.Duration

	records     *prometheus.GaugeVec
	zoneRecords map[string]prometheus.Gauge // records' children, by zone name
	revision    prometheus.Gauge
	restarts    *prometheus.CounterVec
	endpoint    *prometheus.GaugeVec
	lag         prometheus.Gauge
	malformed   *prometheus.CounterVec
	loadRetries prometheus.Counter

	pageSize int64 // PageSize; tests page a small load
	step     int64 // RevisionStep; tests share small revisions
	// gone is a revision known to be compacted away (a watch or a page
	// refused at it), so that no load is made at it again: an etcd
	// grpc-proxy would still answer such a page from its cache, never
	// having seen the compaction, and the frontend would relist forever.
	// Only Run's goroutine uses it.
	gone int64
	// readyAt is the cluster's revision the first load's watch must show
	// before the store is ready, or 0 once it is; readyBy ends the wait
	// (caughtUp). Only Run's goroutine uses them.
	readyAt int64
	readyBy time.Time
	// watched is where the last watch left off: the snapshot it had
	// applied every change to. resumeAfter is, for each prefix, the
	// revision up to which its watcher delivered (and the store applied)
	// every change, which changes outside the zones, to values as they
	// were, and an ordered member's progress answers move on without
	// publishing (see watch); nil: the snapshot's revision. The next
	// watch starts after the least, and drops what each prefix replays
	// up to its own.
	// Only Run's goroutine uses them.
	watched     *snap.Snapshot
	resumeAfter map[string]int64

	// afterLoad runs between a load and its watch; tests use it to make
	// etcd compact the revision the watch is about to start from.
	afterLoad func()
	// decoded sees each page's buffer once its records are in the batch,
	// before a later page reuses it; tests scribble on it.
	decoded func([]byte)
	// orders is ordersProgress; tests stand in for an older etcd.
	orders func(context.Context, *clientv3.Client) (bool, string)
}

// Endpoint is a client of one etcd member or proxy that the watch may run on.
type Endpoint struct {
	Name   string // its URL, for logs and etcdns_dnsd_watch_endpoint
	Client *clientv3.Client
	// Reset, if set, closes the client's connections, so that the next
	// stream dials again (etcdclient.WatchConns.Reset): through a Service
	// in front of grpc-proxies, a way to another proxy where there is no
	// other endpoint to move to.
	Reset func()
}

// Liveness is how long a silent or late watch stream is trusted.
type Liveness struct {
	// Interval: after this long without a response the stream is asked
	// for a progress report (at most once per Interval).
	Interval time.Duration
	// Timeout: after this long without any response the stream is dropped
	// and the watch resumes on the next endpoint.
	Timeout time.Duration
	// LagProbe: how often another endpoint is asked for its revision, to
	// catch a stream that answers but has fallen behind; 0 never (and
	// never with a single endpoint).
	LagProbe time.Duration
	// MaxLag: how long the stream may take to show a revision heard of
	// from another endpoint before it is dropped as behind.
	MaxLag time.Duration
	// Coalesce: how long the stream's reads may hold a change back
	// (etcdclient.WatchReads). A revision heard of elsewhere is held to the
	// stream only this long after it was heard: a stream that is merely
	// reading a burst late is not behind, and is not asked for progress.
	Coalesce time.Duration
	// ProxyMaxLag: through an endpoint that is not a member and has not
	// answered a progress request (an etcd grpc-proxy drops them), how
	// long a quiet stream may take to show a revision read linearizably
	// through another endpoint; 0: not checked. A proxy keeps its upstream
	// watch on the member it chose, and one cut off from its peers still
	// serves it, so without this its frontends stay on their last snapshot
	// until the member rejoins; with it they leave within about 1.5 times
	// it (a read every half of it). Through a proxy a quiet stream shows a
	// revision only with etcd's per-watcher progress notifications, which
	// etcd skips for a watcher after an interval that sent it an event and
	// sends with up to a tenth of jitter: so at least 2.5 times the
	// members' --experimental-watch-progress-notify-interval.
	ProxyMaxLag time.Duration
}

// DefaultLiveness is dnsd's default: a frozen member or proxy is left
// within about 1.6 s, and a member that answers but lags within about
// 1.4 s of the change, so that a change is seen within 2 s (issue 23). It
// costs at most two cheap requests a second per idle frontend on its own
// endpoint (none while changes flow) and about 1.3 single-key reads a
// second on the others.
var DefaultLiveness = Liveness{
	Interval: 500 * time.Millisecond, Timeout: 1500 * time.Millisecond,
	LagProbe: 750 * time.Millisecond, MaxLag: 500 * time.Millisecond,
}

// Watch restart reasons, the values of etcdns_dnsd_watch_restarts_total's
// reason label.
const (
	ReasonCompacted       = "compacted"
	ReasonProgressTimeout = "progress_timeout"
	ReasonNoLeader        = "no_leader"
	ReasonLagging         = "lagging"
	ReasonClosed          = "closed"
	ReasonUnreachable     = "unreachable"
	ReasonError           = "error"
)

// Malformed is a key whose value dnsd skips.
type Malformed struct {
	Key, Owner, Value, Err string
}

// New returns a store of zones; timeout bounds each etcd request. Its
// metrics are registered on reg.
func New(cli *clientv3.Client, zones []snap.Config, timeout time.Duration, reg prometheus.Registerer, log *slog.Logger) *Store {
	s := &Store{
		cli: cli, zones: zones, timeout: timeout, log: log, pageSize: PageSize, step: RevisionStep,
		oneKey: zones[0].KeyRange(),
		ready:  make(chan struct{}),
		bad:    map[string]Malformed{}, unordered: map[string]bool{},
		orders: ordersProgress,

		endpoints:  []Endpoint{{Name: "default", Client: cli}},
		live:       DefaultLiveness,
		noProgress: map[string]bool{}, progress: map[string]bool{},

		records: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "etcdns_dnsd_records", Help: "Valid values held, per zone.",
		}, []string{"zone"}),
		revision: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "etcdns_dnsd_etcd_revision", Help: "The etcd revision the served snapshot is current at.",
		}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "etcdns_dnsd_watch_restarts_total",
			Help: "Watches lost and restarted, by reason: compacted (followed by a relist), progress_timeout (the stream went quiet), lagging (the stream fell behind a revision another endpoint reported), unreachable (its connection failed: a member or proxy stopped), no_leader, closed, error (resumed on the next endpoint without a relist).",
		}, []string{"reason"}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "etcdns_dnsd_watch_lag_revisions",
			Help: "How many revisions the watch stream is behind the newest revision another etcd endpoint reported, until the stream shows it (0: caught up).",
		}),
		endpoint: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "etcdns_dnsd_watch_endpoint", Help: "1 for the etcd endpoint the watch runs on, 0 for the others.",
		}, []string{"endpoint"}),
		malformed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "etcdns_dnsd_malformed_values_total", Help: "Values skipped because they are not valid records, per zone.",
		}, []string{"zone"}),
		loadRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "etcdns_dnsd_load_retries_total",
			Help: "Pages of a load or relist that failed and were asked for again (each with a longer timeout).",
		}),
	}
	// Looked up once: by label on every change it was a fiftieth of a
	// change's CPU (bench/changecpu's perf record, stop 38). By name: a
	// snapshot orders its zones most specific first, not as configured.
	s.zoneRecords = make(map[string]prometheus.Gauge, len(zones))
	for _, z := range zones {
		s.zoneRecords[z.Name] = s.records.WithLabelValues(z.Name)
	}
	for _, r := range []string{ReasonCompacted, ReasonProgressTimeout, ReasonLagging, ReasonNoLeader, ReasonClosed, ReasonUnreachable, ReasonError} {
		s.restarts.WithLabelValues(r)
	}
	s.heard.Store(time.Now().UnixNano())
	staleness := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "etcdns_dnsd_snapshot_staleness_seconds",
		Help: "Seconds the served snapshot may have been behind etcd: since it was last proven current (a load, or any response on the watch stream within the progress timeout), or since another endpoint reported a revision the stream has not shown; 0 while proven.",
	}, s.staleness)
	reg.MustRegister(s.records, s.revision, s.restarts, s.endpoint, s.lag, staleness, s.malformed, s.loadRetries)
	return s
}

// WatchOn makes the watch run on eps, one at a time in turn, with the
// liveness check l. Call it before Run; without it the watch runs on the
// store's client with DefaultLiveness.
func (s *Store) WatchOn(eps []Endpoint, l Liveness) {
	if len(eps) > 0 {
		s.endpoints = eps
	}
	if l.Interval > 0 && l.Timeout > 0 {
		s.live = l
	}
	if len(s.endpoints) < 2 {
		s.live.LagProbe = 0 // no other endpoint to compare with
		if s.live.ProxyMaxLag > 0 && s.endpoints[0].Reset == nil {
			// A stream dropped as behind would resume on the same
			// connection, so through the same proxy and its same
			// upstream watch, again and again.
			s.live.ProxyMaxLag = 0
			s.log.Warn("dnsd.watch-proxy-max-lag is off: with one etcd endpoint the watch has nowhere to move", "endpoint", s.endpoints[0].Name)
		}
	}
	for _, e := range s.endpoints {
		s.endpoint.WithLabelValues(e.Name).Set(0)
	}
}

// SpreadStart makes the first load wait a random time up to d, so that a
// fleet started at once (a DaemonSet rollout, a cluster restart) does not
// read etcd all in the same instant. Call it before Run.
func (s *Store) SpreadStart(d time.Duration) { s.startJitter = max(d, 0) }

// SetPageSize makes each range read of a load ask for at most n keys
// (PageSize by default; n below 1 leaves it). An etcd grpc-proxy caches up
// to 2,048 responses whatever their size, so through proxies pages should
// be small (docs/fleet.md). Call it before Run.
func (s *Store) SetPageSize(n int64) {
	if n > 0 {
		s.pageSize = n
	}
}

// staleness is how long the snapshot may have been behind: the time since
// another endpoint reported a revision the stream has not shown yet, or
// else 0 while the stream was heard from within the liveness timeout and
// the time since it was last heard from (or loaded) after that.
func (s *Store) staleness() float64 {
	var behind time.Duration
	if at := s.behindAt.Load(); at != 0 {
		behind = time.Since(time.Unix(0, at))
	}
	quiet := time.Since(time.Unix(0, s.heard.Load()))
	if quiet <= s.live.Timeout {
		quiet = 0
	}
	return max(behind, quiet).Seconds()
}

// heardOf notes rev, reported by another endpoint, against what the
// stream has shown (shown); it returns true when rev is a new target the
// stream must reach within MaxLag.
func (s *Store) heardOf(rev, shown int64) bool {
	s.lag.Set(float64(max(0, rev-shown)))
	if rev <= shown || s.behind != 0 {
		return false // caught up, or already held to an older target
	}
	s.behind, s.behindSince = rev, time.Now()
	s.behindAt.Store(s.behindSince.UnixNano())
	return true
}

// shown notes that the stream has shown every change up to rev.
func (s *Store) shown(rev int64) {
	if s.behind != 0 && rev >= s.behind {
		s.behind = 0
		s.behindAt.Store(0)
		s.lag.Set(0)
	}
}

func (s *Store) proven() { s.heard.Store(time.Now().UnixNano()) }

// probe reads one key from ep: the check of an endpoint that does not
// answer progress requests. Serializable, so a proxy answers it from its
// cache and a member without its leader: what it proves is that the
// process in front of the stream still serves. It gets what is left of
// the timeout after a quiet interval, so a frozen proxy is left as soon as
// a frozen member is.
func (s *Store) probe(ctx context.Context, ep Endpoint, linearizable bool, at int64) (rev int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.live.Timeout-s.live.Interval)
	defer cancel()
	opts := []clientv3.OpOption{clientv3.WithKeysOnly(), clientv3.WithRev(at)}
	if !linearizable {
		opts = append(opts, clientv3.WithSerializable())
	}
	resp, err := ep.Client.Get(ctx, s.oneKey, opts...)
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// learnMembers asks the cluster for its member list until one answers,
// and keeps the members' client addresses: an endpoint among them is
// known to be a member, which answers progress requests once its revision
// reaches the watch's start, so its stream can be held to revisions heard
// of elsewhere from the start, and its silence is never taken for a
// proxy's. An endpoint not among them (a grpc-proxy, or a member under
// another name) is judged by what its stream does, as before.
func (s *Store) learnMembers(ctx context.Context) {
	wait := time.Second
	for {
		rctx, cancel := context.WithTimeout(ctx, s.timeout)
		resp, err := s.cli.MemberList(rctx)
		cancel()
		if err == nil {
			// An etcd grpc-proxy started with an advertised address
			// answers the list itself, naming itself (or its peers) as
			// the members, with no member ID and no response header:
			// nothing in such a list is a member.
			set := map[string]bool{}
			for _, m := range resp.Members {
				if resp.Header == nil || resp.Header.ClusterId == 0 || m.ID == 0 {
					continue
				}
				for _, u := range m.ClientURLs {
					set[hostOf(u)] = true
				}
			}
			s.members.Store(&set)
			var named []string
			for _, e := range s.endpoints {
				if s.isMember(e) {
					named = append(named, e.Name)
				}
			}
			s.log.Info("etcd members among the watch endpoints", "members", named, "endpoints", len(s.endpoints))
			if len(named) < len(s.endpoints) && s.pageSize > proxyPageSize {
				s.log.Warn("some etcd endpoints are not members: an etcd grpc-proxy keeps up to 2,048 of the pages a load reads, whatever their size; through proxies set dnsd.page-size to 1000 (docs/fleet.md)", "page_size", s.pageSize, "members", named, "endpoints", len(s.endpoints))
			}
			return
		}
		if !sleep(ctx, jitter(wait)) {
			return
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// isMember reports whether ep's client dials an address the member list
// named; false while the list is unknown.
func (s *Store) isMember(ep Endpoint) bool {
	m := s.members.Load()
	if m == nil {
		return false
	}
	eps := ep.Client.Endpoints()
	return len(eps) > 0 && (*m)[hostOf(eps[0])]
}

// hostOf is an endpoint URL's host:port in lower case, or the whole of it
// when it is not a URL (etcd's client also takes a bare host:port).
func hostOf(endpoint string) string {
	if u, err := url.Parse(endpoint); err == nil && u.Host != "" {
		return strings.ToLower(u.Host)
	}
	return strings.ToLower(endpoint)
}

// probeOthers reads one key from each other endpoint in turn, one every
// LagProbe, and sends the revision it answered at to heard, the newest
// only. Serializable: a member answers from what it has applied, so one
// that is behind itself reports less and raises no alarm, and none of it
// costs the leader anything.
func (s *Store) probeOthers(ctx context.Context, on Endpoint, heard chan int64) {
	t := time.NewTicker(s.live.LagProbe)
	defer t.Stop()
	next := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var ep Endpoint
		for range s.endpoints {
			ep = s.endpoints[next%len(s.endpoints)]
			next++
			if ep.Name != on.Name {
				break
			}
		}
		rctx, cancel := context.WithTimeout(ctx, s.live.LagProbe)
		resp, err := ep.Client.Get(rctx, s.oneKey, clientv3.WithSerializable(), clientv3.WithKeysOnly())
		cancel()
		if err != nil {
			continue // that endpoint's trouble is not this stream's
		}
		if s.live.Coalesce > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(s.live.Coalesce):
			}
		}
		select {
		case <-heard: // an older one nobody took yet
		default:
		}
		heard <- resp.Header.Revision
	}
}

// Snapshot is what queries read: one atomic load, never blocked. It is
// nil until the first load is complete.
func (s *Store) Snapshot() *snap.Snapshot { return s.cur.Load() }

// Ready is closed after the first full load of every zone.
func (s *Store) Ready() <-chan struct{} { return s.ready }

// MalformedAt returns the skipped keys of an owner name.
func (s *Store) MalformedAt(owner string) []Malformed {
	return s.malformedWhere(func(m Malformed) bool { return m.Owner == owner })
}

// Malformed returns every skipped key, what an operator alerted by
// etcdns_dnsd_malformed_values_total looks for.
func (s *Store) Malformed() []Malformed {
	return s.malformedWhere(func(Malformed) bool { return true })
}

func (s *Store) malformedWhere(keep func(Malformed) bool) []Malformed {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Malformed
	for _, m := range s.bad {
		if keep(m) {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b Malformed) int { return cmp.Compare(a.Key, b.Key) })
	return out
}

// Run loads and watches until ctx ends. A watch lost to compaction is
// replaced by a full relist, the previous snapshot served until it is
// complete; a watch lost any other way (a stream gone quiet, no leader, an
// error) resumes on the next endpoint after the last revision it applied,
// since etcd still holds the history it needs.
func (s *Store) Run(ctx context.Context) error {
	loadBackoff, watchBackoff := 100*time.Millisecond, 100*time.Millisecond
	relogged := false // the last watch was asked again for a refused token
	first := true
	var cur *snap.Snapshot // nil: load before watching
	ep := 0
	if s.startJitter > 0 && !sleep(ctx, rand.N(s.startJitter)) {
		return nil
	}
	go s.learnMembers(ctx)
	for {
		if cur == nil {
			loaded, now, err := s.load(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				wait := jitter(loadBackoff)
				s.log.Warn("loading zones from etcd failed; retrying", "err", err, "in", wait)
				if !sleep(ctx, wait) {
					return nil
				}
				loadBackoff = min(2*loadBackoff, 5*time.Second)
				continue
			}
			loadBackoff = 100 * time.Millisecond
			s.publish(loaded)
			s.proven()
			if first {
				first = false
				s.log.Info("loaded all zones", "revision", loaded.Rev, "cluster_revision", now, "records", countRecords(loaded))
				s.checkClusterID(loaded)
				s.readyAt, s.readyBy = now, time.Now().Add(s.live.Timeout)
				s.caughtUp(loaded.Rev)
			} else {
				s.log.Info("relisted all zones", "revision", loaded.Rev, "records", countRecords(loaded))
			}
			if s.afterLoad != nil {
				s.afterLoad()
			}
			cur, s.resumeAfter = loaded, nil
		}
		s.caughtUp(s.resumePoint(cur)) // a watch that keeps failing still ends the wait
		e := s.endpoints[ep]
		s.setEndpoint(e.Name)
		began := time.Now()
		err := s.watch(ctx, cur, e)
		if ctx.Err() != nil {
			return nil
		}
		// A watch that etcd refuses at once (no read permission on the
		// prefix, say, or no leader) must not make a loop at full speed:
		// only one that served a while earns a quick retry. The cap is a
		// second so that a cluster that regains its quorum is followed
		// again within one.
		if time.Since(began) >= healthyWatch {
			watchBackoff, relogged = 100*time.Millisecond, false
		}
		reason := reasonOf(err)
		s.restarts.WithLabelValues(reason).Inc()
		// What the watch applied before it failed is in s.watched, and
		// s.resumeAfter is where each prefix's watcher left off: a new
		// watch starts after it.
		cur = s.watched
		after := s.resumePoint(cur)
		switch {
		case reason == ReasonCompacted:
			s.log.Warn("watch lost; relisting", "err", err, "endpoint", e.Name)
			s.gone = max(s.gone, after+1) // where the watch started
			cur = nil
		case etcdclient.RefusedToken(err) && !relogged:
			// A password login's token lapses on a member that has not
			// seen it used for etcd's --auth-token-ttl, and the watch
			// carries the one the other requests use: the client has
			// dropped it, and the same endpoint is asked again at once,
			// with a new one.
			relogged = true
			s.log.Info("etcd refused the watch's login token; resuming on the same endpoint with a new one", "endpoint", e.Name, "revision", after+1)
			continue
		case reason == ReasonLagging && len(s.endpoints) == 1 && e.Reset != nil:
			// The one endpoint (a Service in front of proxies): a stream
			// on the same connection would reach the same proxy, whose
			// upstream watch fell behind. A new connection may reach
			// another.
			e.Reset()
			s.log.Warn("watch lost; resuming on a new connection to the same endpoint", "err", err, "reason", reason,
				"endpoint", e.Name, "revision", after+1)
		default:
			ep = (ep + 1) % len(s.endpoints)
			s.log.Warn("watch lost; resuming on the next endpoint", "err", err, "reason", reason,
				"from", e.Name, "to", s.endpoints[ep].Name, "revision", after+1)
		}
		if !sleep(ctx, jitter(watchBackoff)) {
			return nil
		}
		watchBackoff = min(2*watchBackoff, time.Second)
	}
}

// resumePoint is the revision the next watch from cur starts after: the
// least of its prefixes' (s.resumeAfter), or cur's own after a load. Up to
// it every prefix's changes are in cur; past it, some may not be.
func (s *Store) resumePoint(cur *snap.Snapshot) int64 {
	if len(s.resumeAfter) == 0 {
		return cur.Rev
	}
	return slices.Min(slices.Collect(maps.Values(s.resumeAfter)))
}

// jitter is d less up to half of it, at random: frontends that failed
// together (a member lost, a compaction) come back spread out rather than
// in step, and never later than their backoff.
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d - rand.N(d/2)
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func (s *Store) setEndpoint(name string) {
	for _, e := range s.endpoints {
		v := 0.0
		if e.Name == name {
			v = 1
		}
		s.endpoint.WithLabelValues(e.Name).Set(v)
	}
}

// reasonOf names why a watch ended.
func reasonOf(err error) string {
	switch {
	case errors.Is(err, rpctypes.ErrCompacted):
		return ReasonCompacted
	case errors.Is(err, errProgressTimeout):
		return ReasonProgressTimeout
	case errors.Is(err, errLagging):
		return ReasonLagging
	case errors.Is(err, errUnreachable):
		return ReasonUnreachable
	case errors.Is(err, rpctypes.ErrNoLeader), err != nil && strings.Contains(err.Error(), rpctypes.ErrNoLeader.Error()):
		return ReasonNoLeader
	case errors.Is(err, errWatchClosed):
		return ReasonClosed
	}
	return ReasonError
}

// healthyWatch is how long a watch must have run for its end to count as
// a new failure rather than the last one again.
const healthyWatch = 10 * time.Second

func countRecords(sn *snap.Snapshot) int {
	n := 0
	for _, z := range sn.Zones {
		n += z.Records
	}
	return n
}

// PackedBytes is about how many bytes of tables the store's packings (see
// packScattered) have left to the collector, in all. The collector's last
// count of the live heap still counts them: at a million records, packing
// after the load took 29 MB off the live heap that a frontend would
// otherwise have kept as RSS while nothing else made it worth returning.
func (s *Store) PackedBytes() uint64 { return s.packed.Load() }

func (s *Store) publish(sn *snap.Snapshot) {
	s.cur.Store(sn)
	s.revision.Set(float64(sn.Rev))
	for _, z := range sn.Zones {
		s.zoneRecords[z.Name].Set(float64(z.Records))
	}
}

// load reads every zone at a single revision, shared with the frontends
// loading about now (see RevisionStep), so the snapshot is one point in
// etcd's history even when the load takes several requests.
func (s *Store) load(ctx context.Context) (sn *snap.Snapshot, now int64, err error) {
	if s.oneKey == "" {
		return nil, 0, fmt.Errorf("zone %s: prefix %q is not valid", s.zones[0].Name, s.zones[0].Prefix)
	}
	// Linearizable, so that the load is never of a point older than a
	// step before the cluster's. One key, counted only: it costs the
	// leader a read index and etcd next to nothing.
	rctx, cancel := context.WithTimeout(ctx, s.timeout)
	resp, err := s.cli.Get(rctx, s.oneKey, clientv3.WithCountOnly())
	cancel()
	if err != nil {
		return nil, 0, fmt.Errorf("reading the cluster's revision: %w", err)
	}
	now = resp.Header.Revision
	at := sharedRevision(now, s.step)
	// A relist is published as soon as it is loaded: at a shared revision
	// older than the snapshot served, it took back every change since
	// (names created answered NXDOMAIN) until the watch replayed them.
	// Where one prefix's watcher resumes behind the others, a compaction
	// past it makes such a relist.
	if served := s.Snapshot(); at <= s.gone || served != nil && at < served.Rev {
		at = now
	}
	sn, err = s.loadAt(ctx, at)
	if at != now && errors.Is(err, rpctypes.ErrCompacted) {
		s.gone = max(s.gone, at)
		s.log.Info("the shared load revision is compacted; loading at the cluster's", "shared", at, "revision", now)
		sn, err = s.loadAt(ctx, now)
	}
	return sn, now, err
}

// sharedRevision is rev rounded down to a multiple of step, or rev itself
// where that would be no revision.
func sharedRevision(rev, step int64) int64 {
	if step <= 1 || rev < step {
		return rev
	}
	return rev - rev%step
}

// caughtUp makes the store ready once the first load's watch has shown
// the cluster's revision read before the load (shown: the revision up to
// which it has delivered every change), so that a frontend is never ready
// with the older, shared revision's records: a name created since would
// be answered NXDOMAIN, and cached so. Kubernetes' apiserver waits the
// same way before it serves a consistent list from its watch cache. A
// stream through an etcd grpc-proxy cannot be asked for progress, and
// shows nothing where nothing changed, so the wait ends after the
// liveness timeout regardless; the replay, when there is one, comes well
// within it.
func (s *Store) caughtUp(shown int64) {
	if s.readyAt == 0 || shown < s.readyAt && time.Now().Before(s.readyBy) {
		return
	}
	if shown < s.readyAt {
		s.log.Info("ready before the watch showed the cluster's revision (no progress answers through this endpoint)", "revision", s.readyAt, "shown", shown)
	}
	s.readyAt = 0
	close(s.ready)
}

// loadAt reads every zone at rev.
func (s *Store) loadAt(ctx context.Context, rev int64) (*snap.Snapshot, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // a fetch still running when a page fails
	s.skippedNow = map[string]bool{}
	defer func() { s.skippedNow = nil }()
	out := make([]*snap.Zone, len(s.zones)) // in the configuration's order, as a snapshot built from it is
	h := &heldNames{}
	// Reverse zones last, so that their PTRs find the names they point at.
	order := make([]int, len(s.zones))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int {
		return cmp.Compare(reverseLast(s.zones[i]), reverseLast(s.zones[j]))
	})
	for _, i := range order {
		c := s.zones[i]
		z := snap.NewZone(c)
		if z.Range == "" {
			return nil, fmt.Errorf("zone %s: prefix %q is not valid", c.Name, c.Prefix)
		}
		b := z.Edit()
		h.zones, h.batches = append(h.zones, z), append(h.batches, b)
		reserved := false
		// The next page is asked for while this one is decoded: etcd's
		// work and ours overlap. A page's buffer goes back to spare once
		// decoded, for a later page.
		pages, spare := make(chan page, 1), make(chan *rawRange, 3)
		go s.fetch(ctx, z.Range, clientv3.GetPrefixRangeEnd(z.Range), rev, pages, spare)
		for p := range pages {
			if p.err != nil {
				return nil, fmt.Errorf("range %s: %w", z.Range, p.err)
			}
			if !reserved {
				b.Reserve(int(p.resp.count)) // every key of the range, not just this page's
				reserved = true
			}
			for _, kv := range p.resp.kvs {
				s.put(z, b, view(kv.key), kv.value, kv.lease != 0, h.name)
			}
			if s.decoded != nil {
				s.decoded(p.resp.buf)
			}
			select {
			case spare <- p.resp:
			default:
			}
		}
		// Deletions leave no trace in a range, so the serial is the load's
		// revision until a change moves it on. Each frontend has its own,
		// and a restart may take it back by less than a RevisionStep;
		// nothing transfers zones by it (AXFR and IXFR are refused).
		out[i] = b.Done(uint32(rev))
		h.zones[len(h.zones)-1], h.batches[len(h.batches)-1] = out[i], nil
	}
	s.mu.Lock()
	for key := range s.bad {
		if !s.skippedNow[key] {
			delete(s.bad, key)
		}
	}
	s.mu.Unlock()
	return snap.NewSnapshot(rev, out), nil
}

// view is a key as a string without a copy: keys are parsed, and what is
// kept of them (a record id, a malformed key) is copied, so a million-key
// load does not copy every key once more. It must be: a page's buffer is
// overwritten by a later page (TestLoadKeepsNoPageBytes).
func view(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

type page struct {
	resp *rawRange
	err  error
}

// fetch sends the pages of [key, end) at rev to pages, and closes it
// after the last one or an error. It reads each into a buffer from spare
// when there is one.
//
// Every page is serializable: any member answers it from its own store
// without asking the leader, and an etcd grpc-proxy from its cache once
// one frontend has asked for it. A member that has not applied the
// revision yet says so, and the page is asked for again linearizably.
//
// A page that fails is asked for again, alone: when a fleet starts at
// once, a page of tens of thousands of keys can take etcd longer than the
// request timeout, and starting the whole load over would only ask etcd
// for every page again while it still serves the abandoned ones. Each
// retry backs off with jitter and gives the page twice the time the last
// try had, and the page after one that took long is given twice what it
// took. Only a compacted revision ends the load: it must start again at a
// newer one.
//
// Each page after the first stops where stops expects about a page of keys
// to end, so that etcd counts no further.
func (s *Store) fetch(ctx context.Context, key, end string, rev int64, pages chan<- page, spare <-chan *rawRange) {
	defer close(pages)
	backoff, deadline := 100*time.Millisecond, s.timeout
	cut := newStops(key, end, s.pageSize)
	stop := end
	var resp *rawRange // kept through a page's retries
	for {
		if resp == nil {
			select {
			case resp = <-spare:
			default:
				resp = new(rawRange)
			}
		}
		req := &etcdserverpb.RangeRequest{Key: []byte(key), RangeEnd: []byte(stop), Limit: s.pageSize, Revision: rev, Serializable: true}
		began := time.Now()
		rctx, cancel := context.WithTimeout(ctx, deadline)
		err := s.rangeInto(rctx, req, resp)
		if errors.Is(err, rpctypes.ErrFutureRev) {
			req.Serializable = false
			err = s.rangeInto(rctx, req, resp)
		}
		cancel()
		if err != nil && ctx.Err() == nil && !errors.Is(err, rpctypes.ErrCompacted) {
			wait := jitter(backoff)
			backoff, deadline = min(2*backoff, 5*time.Second), min(2*deadline, maxPageTimeout)
			s.loadRetries.Inc()
			s.log.Warn("reading a page of a zone from etcd failed; retrying it", "err", err, "key", key, "revision", rev, "in", wait, "timeout", deadline)
			if !sleep(ctx, wait) {
				return
			}
			continue
		}
		if err != nil {
			select {
			case pages <- page{err: err}:
			case <-ctx.Done():
			}
			return
		}
		// In a fleet's cold start every page is slow: the next one, given
		// only the timeout, would run out of it with every other
		// frontend's and be read again.
		backoff, deadline = 100*time.Millisecond, max(s.timeout, min(2*time.Since(began), maxPageTimeout))
		// Read before the page is sent: its buffer is the loader's then.
		var mid, last string
		n := len(resp.kvs)
		if n > 0 {
			mid, last = string(resp.kvs[n/2].key), string(resp.kvs[n-1].key)
		}
		next, nextStop, more := cut.next(key, mid, last, n, resp.more && n > 0, resp.count)
		select {
		case pages <- page{resp: resp}:
		case <-ctx.Done():
			return
		}
		if !more {
			return
		}
		key, stop, resp = next, nextStop, nil
	}
}

// maxPageTimeout caps the time a page is given: one retried, or one after a
// page that took long. Any other has the request timeout.
const maxPageTimeout = time.Minute

// reverseLast sorts the reverse zones after the others.
func reverseLast(c snap.Config) int {
	if keys.IsReverseZone(c.Name) {
		return 1
	}
	return 0
}

// checkClusterID warns when dnsd has a cluster id that no record carries:
// most likely not the one its cluster's publisher writes, and then it
// puts no cluster's records first and answers no clusterset IP.
func (s *Store) checkClusterID(sn *snap.Snapshot) {
	cluster := ""
	for _, z := range sn.Zones {
		if z.Cluster == "" || z.Records == 0 || z.SkyDNS { // a SkyDNS zone's values are read as CoreDNS reads them: no cluster
			continue
		}
		if z.Carries(z.Cluster) {
			return
		}
		cluster = z.Cluster
	}
	if cluster != "" {
		s.log.Warn("no record names this dnsd's cluster.id; if its cluster's publisher writes another (its log says \"cluster id\" at start), dnsd answers none of that cluster's clusterset IPs and puts no cluster's records first", "cluster", cluster)
	}
}

// heldNames finds the names nodes have already, for snap.ParseHeld: in
// the zones of a load or a change, each as the batch editing it
// (batches[i], where not nil) has it so far.
type heldNames struct {
	zones   []*snap.Zone
	batches []*snap.Batch
}

func (h *heldNames) name(name string) string {
	for i, z := range h.zones {
		if !keys.IsSubdomain(name, z.Name) {
			continue
		}
		held := z.NameHeld(name)
		if b := h.batches[i]; b != nil {
			held = b.NameHeld(name)
		}
		if held != "" {
			return held
		}
	}
	return ""
}

// put applies one stored value; a malformed one removes what the key held
// before, so a broken write never leaves a stale record behind. Its
// target, where a node holds the name already, keeps that node's string.
func (s *Store) put(z *snap.Zone, b *snap.Batch, key string, value []byte, leased bool, held snap.Held) {
	if z.SkyDNS {
		// In a SkyDNS zone every key is data, dns/stub/ included, as
		// CoreDNS's etcd plugin reads it.
		if err := b.PutSkyDNS(key, value, leased); err != nil {
			s.skip(z, key, "", value, err)
		} else {
			s.forget(key)
		}
		return
	}
	if z.IsStubKey(key) {
		if domain, err := b.PutStub(key, value); err != nil {
			s.skip(z, key, domain, value, err)
		} else {
			s.forget(key)
		}
		return
	}
	owner, e, err := z.ParseHeld(key, value, held)
	if err == nil {
		b.Put(owner, e)
		s.forget(key)
		return
	}
	if owner != "" {
		b.Delete(owner, e.ID())
	}
	s.skip(z, key, owner, value, err)
}

// skip counts and remembers a malformed value, logging each key once per
// distinct error.
func (s *Store) skip(z *snap.Zone, key, owner string, value []byte, err error) {
	s.malformed.WithLabelValues(z.Name).Inc()
	key = strings.Clone(key) // it may share an etcd response's memory
	m := Malformed{Key: key, Owner: owner, Value: string(value), Err: err.Error()}
	s.mu.Lock()
	old, seen := s.bad[key]
	s.bad[key] = m
	s.mu.Unlock()
	if s.skippedNow != nil {
		s.skippedNow[key] = true
	}
	if !seen || old.Err != m.Err {
		s.log.Warn("skipping malformed value", "key", key, "err", m.Err) // err may hold the key's view of a page
	}
}

func (s *Store) forget(key string) {
	// Only this goroutine writes s.bad, so it may read it unlocked; the
	// lock is for the readers of Malformed. A load forgets every key.
	if len(s.bad) == 0 {
		return
	}
	s.mu.Lock()
	delete(s.bad, key)
	s.mu.Unlock()
}

// maxCoalesced bounds the events of waiting watch responses applied as
// one snapshot.
const maxCoalesced = 100_000

// A zone's shard tables are packed (snap.Zone.Pack) once changes have
// paused for packQuiet, if batches copied at least packScattered of them;
// without a pause, once they copied packBusy times as many. A burst of
// changes leaves the live tables scattered among dead copies, which keeps
// 27 MiB of heap in use for nothing at a million records, however often
// the collector runs; a steady trickle of changes scatters them slowly,
// and packing copies every table, so it waits longer.
const (
	packQuiet     = time.Second
	packScattered = 0.25
	packBusy      = 2
)

// errWatchClosed reports a watch stream etcd ended without an error.
var errWatchClosed = errors.New("watch stream ended by etcd")

// maxCheck bounds the back-off of the linearizable reads that tell a
// member from a grpc-proxy while nothing has been written since the load.
const maxCheck = 30 * time.Second

// errLagging reports a stream that did not show, within MaxLag, a revision
// another endpoint had reported.
var errLagging = errors.New("watch stream fell behind a revision another endpoint reported")

// errUnreachable reports a stream whose connection failed and could not
// be made again.
var errUnreachable = errors.New("etcd endpoint unreachable")

// errProgressTimeout reports a stream that sent nothing for the liveness
// timeout, not even an answer to a progress request.
var errProgressTimeout = errors.New("watch stream sent nothing, not even progress, within the timeout")

// watch follows every prefix from the revision after cur until the watch
// fails. One watch per etcd prefix, not per zone: a transaction writing a
// service's A record and its PTR (two zones, one prefix) then arrives in
// one response and is published in one snapshot.
//
// The stream is proven alive by any response on it: events, etcd's own
// progress notifications, the created notification, or the answer to a
// progress request, which is sent when it has been quiet for the liveness
// interval. Quiet for the liveness timeout, it is dropped.
func (s *Store) watch(ctx context.Context, cur *snap.Snapshot, ep Endpoint) error {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	var prefixes []string
	for _, z := range cur.Zones {
		if p := z.Prefix + "/"; !slices.Contains(prefixes, p) {
			prefixes = append(prefixes, p)
		}
	}
	// seen[i] is the revision up to which the stream has delivered every
	// change under prefixes[i]: its watcher's last event's, etcd's last
	// notification for it, or an answer to a progress request, which
	// speaks for every watcher. Each watcher catches up on its own (etcd
	// sends one far behind 1,000 revisions at a time), so one prefix's
	// events say nothing of another's. done[i] is seen[i] moved only by
	// events and by the answers and notifications of a member that orders
	// them (ordered): where the next watch of prefixes[i] resumes
	// (s.resumeAfter).
	//
	// Every watcher starts after the least of them, from: etcd answers a
	// progress request only once its revision has reached every watcher's
	// start, so a watcher started after its own prefix's point on a
	// cluster written to no further left the stream unanswered, held to
	// revisions it could not show, dropped as lagging on every endpoint
	// in turn. So the others replay what the snapshot holds, and replayed
	// drops it: applied again, a key changed twice showed its older value,
	// and its zone's SOA serial stepped back, until the replay caught up.
	seen, done := make([]int64, len(prefixes)), make([]int64, len(prefixes))
	for i, p := range prefixes {
		seen[i] = cur.Rev
		if r, ok := s.resumeAfter[p]; ok {
			seen[i] = r
		}
		done[i] = seen[i]
	}
	had := slices.Clone(done)
	from := slices.Min(done)
	defer func() {
		s.watched, s.resumeAfter = cur, make(map[string]int64, len(prefixes))
		for i, p := range prefixes {
			s.resumeAfter[p] = done[i]
		}
	}()
	// replayed drops the events of r that its watcher's prefix held before
	// the watch (had), and reports whether r had events and all were such.
	// A watcher's events come in revision order.
	replayed := func(r *result) bool {
		i, evs := r.prefix, r.resp.Events
		if i < 0 || len(evs) == 0 || evs[0].Kv.ModRevision > had[i] {
			return false
		}
		k, _ := slices.BinarySearchFunc(evs, had[i]+1, func(e *mvccpb.Event, rev int64) int { return cmp.Compare(e.Kv.ModRevision, rev) })
		r.resp.Events = evs[k:]
		return k == len(evs)
	}
	// The stream is opened off this goroutine: gRPC waits for a ready
	// connection, and a frozen member never answers the creates, so the
	// liveness checks below run meanwhile (see
	// TestWatchResumedOntoAFrozenMemberMovesOn). Failing, they cancel ctx,
	// which ends the wait. ch is buffered so that responses queue there
	// while one is applied, where the loop below can take them together.
	ch := make(chan result, 1024)
	var open atomic.Pointer[stream] // nil until every watcher is created
	// ordered: the member's answers to progress requests follow every
	// event before them (ordersProgress), so they move the resume point.
	var ordered atomic.Bool
	go func() {
		st, err := openStream(ctx, ep.Client, prefixes[0], from+1)
		if err != nil {
			select {
			case ch <- result{err: err}:
			case <-ctx.Done():
			}
			return
		}
		go s.checkOrder(ctx, ep, &ordered)
		st.receive(ctx, prefixes, from+1, ch, func() { open.Store(st) })
	}()
	// A quarter of the interval: the timeout is noticed at most that late
	// while the stream is in flux (nextCheck).
	quarter := min(s.live.Interval, max(s.live.MaxLag, time.Millisecond)) / 4
	check := time.NewTimer(quarter)
	defer check.Stop()
	began := time.Now()
	last, asked, probed := began, time.Time{}, time.Time{}
	// applied: when the last change was applied; zero once the tables
	// have been considered for packing since.
	var applied time.Time
	// answered: a progress report came on this stream, so its member
	// answers progress requests and its silence means it stopped. past:
	// when a read first showed the endpoint past the watch's start, after
	// which a member answers them.
	answered := false
	var past time.Time
	// unanswered: progress requests sent before the stream answered one,
	// the last at lastUnanswered (not counting those the lag checks send).
	unanswered, lastUnanswered := 0, time.Time{}
	// checked: the last linearizable read that looked for the cluster
	// past the watch's start; they back off to maxCheck, since a cluster
	// nothing is written to may stay where it is for hours.
	checked, checkEvery := began, s.live.Timeout
	// Through a proxy (ProxyMaxLag): lin is a revision read
	// linearizably at linAt that the stream has not shown yet (0: none),
	// linRead the last such read, linNext the endpoint it goes to next.
	// The read runs off this goroutine, as probeOthers' do: an endpoint
	// that is down, or a cut-off member behind a proxy, holds it for the
	// whole read timeout, and the stream's changes must not wait for it.
	// linDone brings its revision (0: it failed), and then another may go.
	var lin int64
	var linAt, linRead time.Time
	linNext, linFlying := 0, false
	linDone := make(chan int64, 1)
	// notified: when etcd's last per-watcher progress notification came.
	// The hold judges only a stream that gets them: one cut off from its
	// peers sends them still, at its old revision; members left at etcd's
	// ten minutes send none, and their quiet streams are never judged (nor
	// read for), so the hold is harmless where it cannot work.
	var notified time.Time
	// ask sends a progress request on the watch's own stream, so that its
	// answer proves that stream. Off this goroutine: a send to a frozen
	// member must not stop the timeout from being noticed. Before every
	// watcher is created there is nothing to ask (see receive).
	ask := func() {
		asked = time.Now()
		if st := open.Load(); st != nil {
			go func() { _ = st.requestProgress() }()
		}
	}
	askUnanswered := func() {
		ask()
		unanswered++
		lastUnanswered = asked
	}
	// shown is the revision up to which the stream has delivered every
	// change: the least of seen. A created response's revision is not:
	// the events before it may still come.
	shown := from
	// held: the stream can be held to revisions heard of elsewhere, since
	// its endpoint answered a progress request before or is a member.
	member := s.isMember(ep)
	held := s.progress[ep.Name] || member
	if !held {
		s.shown(math.MaxInt64) // held only once it proves it can show
	}
	// heard carries revisions other endpoints report. Through a proxy
	// there is none: it cannot be asked for progress, so a quiet stream
	// through it could never show a newer revision.
	var heard chan int64
	stopProbes := func() {}
	if s.live.LagProbe > 0 && !s.noProgress[ep.Name] {
		heard = make(chan int64, 1)
		var pctx context.Context
		pctx, stopProbes = context.WithCancel(ctx)
		go s.probeOthers(pctx, ep, heard)
	}
	defer stopProbes()
	// nextCheck is how long the checks below may sleep: until the first
	// moment one of them would act. A steady tick woke an idle frontend
	// eight times a second for checks that act twice, and was more than
	// a third of its idle CPU (bench/changecpu at one P, stop 37: 2.3-2.7
	// ms/s with the tick, 1.4 with these deadlines). While the stream is
	// in flux (its watchers not all created, readiness waiting on it, or
	// a revision heard of elsewhere not yet shown) they run every quarter
	// interval, as they always did.
	//
	// Every deadline is absolute: a timer pushed back to "a quarter from
	// now" by each response would never fire while responses came faster
	// (a member streaming its events ever later, never dropped as behind;
	// the review of stop 37 measured it). ran is when the checks last
	// ran. The connection's TransientFailure poll has no deadline: a stream
	// that is open fails with its connection, so it matters only while
	// the stream is opening, which is in flux.
	ran := began
	nextCheck := func(now time.Time) time.Duration {
		if open.Load() == nil || s.readyAt != 0 || s.behind != 0 {
			return max(ran.Add(quarter).Sub(now), 0)
		}
		// Never later than the liveness timeout after the last run, the
		// longest anything may go unnoticed; an interval would land just
		// before the next read of the endpoint, which is an interval
		// after the last one ended, and wake the loop twice each time.
		due := ran.Add(s.live.Timeout)
		at := func(t time.Time) {
			if t.Before(due) {
				due = t
			}
		}
		if !applied.IsZero() {
			at(applied.Add(packQuiet))
		}
		if answered {
			at(later(last, asked).Add(s.live.Interval)) // the next progress request
			at(last.Add(s.live.Timeout))
		} else {
			at(later(last, probed).Add(s.live.Interval)) // the next read of the endpoint
		}
		return max(due.Sub(now), time.Millisecond)
	}
	// report takes a response without events. The last watcher's created
	// response: readiness waits for the revision a progress request will
	// show quickest. The answer to a progress request (watch ID -1): the
	// stream answers them, and nothing in its prefixes changed up to its
	// revision; where the member sends it after every event before it
	// (ordered), it moves the resume point (done) too, so writes outside
	// the prefixes (an apiserver's, the publisher's election) do: a
	// frontend of a quiet prefix resumes without a relist after etcd has
	// compacted past its last change. Responses drained into a batch of
	// events come here as well: an answer taken there for just another
	// event once left the stream judged silent, a member's dropped as
	// lagging and anything else's taken for a grpc-proxy.
	report := func(r result) {
		resp := r.resp
		if resp.Created {
			if s.readyAt != 0 && !s.noProgress[ep.Name] {
				ask()
			}
			return
		}
		if resp.WatchId != clientv3.InvalidWatchID {
			// etcd's own notification for one watcher, sent each
			// --experimental-watch-progress-notify-interval (10 minutes
			// by default): its prefix has no change up to its revision.
			// A grpc-proxy passes these on while it drops progress
			// requests: taken for an answer, it left a proxy's stream
			// held to answers that never came, dropped as silent or
			// lagging at each notification. It is no answer. From a
			// member that orders its answers it comes after its
			// watcher's events as they do, and moves that prefix's
			// resume point: the one way through a proxy that a quiet
			// prefix beside a busy one stops holding it back.
			if i := r.prefix; i >= 0 {
				rev := resp.GetHeader().GetRevision()
				seen[i] = max(seen[i], rev)
				if ordered.Load() {
					done[i] = max(done[i], rev)
				}
				shown = slices.Min(seen)
				notified = time.Now()
			}
			return
		}
		answered = true
		s.progress[ep.Name] = true
		held = true
		rev := resp.GetHeader().GetRevision()
		for i := range seen {
			seen[i] = max(seen[i], rev)
			if ordered.Load() {
				done[i] = max(done[i], rev)
			}
		}
		shown = slices.Min(seen)
	}
	// saw notes the events of r as delivered for its watcher's prefix.
	// etcd sends a watcher's created response before its events, so
	// receive knows the prefix of every event response.
	saw := func(r result) {
		if i := r.prefix; i >= 0 {
			rev := r.resp.Events[len(r.resp.Events)-1].Kv.ModRevision
			seen[i], done[i] = max(seen[i], rev), max(done[i], rev)
		}
	}
	for {
		now := time.Now()
		wait := nextCheck(now)
		due := now.Add(wait)
		check.Reset(wait)
		var r result
		select {
		case r = <-ch:
		case rev := <-linDone:
			linFlying = false
			if rev > shown {
				lin, linAt = rev, time.Now()
			}
			continue
		case h := <-heard:
			if !held && s.isMember(ep) {
				// The member list came after the stream began: a member's
				// stream is held from now on, or a withheld one would be
				// left to the liveness timeout.
				held = true
			}
			switch {
			case s.noProgress[ep.Name]:
			case !held:
				// Only an endpoint known to answer progress requests can
				// be held to a revision: this request finds out.
				if h > shown && time.Since(asked) >= s.live.MaxLag/2 {
					ask()
				}
			case s.heardOf(h, shown):
				ask()
			}
			continue
		case <-check.C:
			ran = time.Now()
			// Time past the check's due that this process did not run
			// (frozen, or starved of CPU by its node, its CPU limit or
			// its own queries) is not the stream's silence: the responses
			// sent meanwhile wait unread in the socket. Counted against
			// the stream, a frontend frozen for longer than the timeout
			// dropped a healthy watch as soon as it ran again. The
			// staleness metric still counts it: the snapshot did fall
			// behind. The silences are judged as of ran, not of each
			// judgement's own clock: a freeze that lands between the two
			// (a packing, an ask) is counted at the next check, as lateness.
			if late := ran.Sub(due); late > 0 {
				last = last.Add(late)
				if !asked.IsZero() {
					asked = asked.Add(late)
				}
				if !past.IsZero() {
					past = past.Add(late)
				}
				if s.behind != 0 {
					s.behindSince = s.behindSince.Add(late)
				}
				if lin != 0 {
					linAt = linAt.Add(late)
				}
				if !notified.IsZero() {
					notified = notified.Add(late)
				}
			}
			s.caughtUp(shown)
			// A stopped member or proxy refuses the connection at once,
			// but etcd's client only retries it, on the same endpoint,
			// and waits for it to be ready: the stream would wait out the
			// liveness timeout for nothing.
			if conn := ep.Client.ActiveConnection(); conn != nil && conn.GetState() == connectivity.TransientFailure {
				return errUnreachable
			}
			if !applied.IsZero() && time.Since(applied) >= packQuiet {
				applied = time.Time{}
				if p, freed := cur.Pack(packScattered); freed > 0 {
					cur = p
					s.publish(cur)
					s.revision.Set(float64(max(cur.Rev, shown))) // as an answer had set it
					s.packed.Add(uint64(freed))
				}
			}
			if s.behind != 0 && !s.noProgress[ep.Name] {
				// A new stream gets the whole MaxLag to catch up.
				if ran.Sub(s.behindSince) >= s.live.MaxLag && ran.Sub(began) >= s.live.MaxLag {
					return fmt.Errorf("%w: revision %d, reported elsewhere %v ago, not shown; shown %d",
						errLagging, s.behind, ran.Sub(s.behindSince).Round(time.Millisecond), shown)
				}
				if time.Since(asked) >= s.live.MaxLag/2 {
					ask()
				}
			}
			switch {
			case answered:
				if ordered.Load() && slices.Min(done) < cur.Rev && time.Since(asked) >= s.live.Timeout {
					// A prefix whose watcher has sent nothing beside a
					// busy one, which keeps the stream from going quiet:
					// an answer moves its resume point.
					ask()
				}
			case !past.IsZero() && !s.noProgress[ep.Name] && unanswered < maxUnanswered && time.Since(asked) >= s.live.Interval:
				// etcd drops a request that comes while a watcher of the
				// stream is catching up (it answers only once every one is
				// synced, and sends one far behind 1,000 revisions at a
				// time): asked once, with the first event, a stream that
				// started far behind was dropped as lagging once quiet, and
				// one kept busy was never asked again. A few times, not
				// more: a grpc-proxy logs each one as an error.
				askUnanswered()
			}
			quiet := ran.Sub(last)
			if answered {
				// It answers progress requests: its silence means it
				// stopped.
				if quiet >= s.live.Timeout {
					return errProgressTimeout
				}
				if quiet >= s.live.Interval && time.Since(asked) >= s.live.Interval {
					ask()
				}
				continue
			}
			// Not known to answer progress requests: etcd's grpc-proxy
			// drops them, and a member leaves them unanswered until its
			// revision reaches the watch's start (nothing written since
			// the load). So a read of the endpoint proves it alive, once
			// an interval. Which one it is shows once the cluster is past
			// the watch's start (an event, or a linearizable read, which
			// a proxy does not answer from its cache, now and then):
			// progress requests then, up to maxUnanswered an interval
			// apart, answered by a member and left unanswered by a proxy.
			if quiet < s.live.Interval || time.Since(probed) < s.live.Interval {
				continue
			}
			probed = time.Now()
			if _, err := s.probe(ctx, ep, false, 0); err != nil {
				return fmt.Errorf("%w: %w", errProgressTimeout, err)
			}
			last = time.Now()
			s.proven()
			if s.live.ProxyMaxLag > 0 && !s.isMember(ep) {
				// What may be a proxy, found to drop progress requests or
				// not yet (one whose member is cut off from the start
				// gives nothing to find it by): held to a revision read
				// linearizably, so never from a proxy's cache, through
				// another endpoint, since this one's member may be the
				// one cut off and could not answer. Responses still
				// waiting to be taken may show it: not judged then.
				if lin > shown && time.Since(linAt) >= s.live.ProxyMaxLag && notified.After(linAt) && len(ch) == 0 {
					return fmt.Errorf("%w: revision %d, read linearizably elsewhere %v ago, not shown through this endpoint (a proxy); shown %d",
						errLagging, lin, time.Since(linAt).Round(time.Millisecond), shown)
				}
				if lin <= shown {
					lin = 0
				}
				if lin == 0 && !linFlying && time.Since(linRead) >= s.live.ProxyMaxLag/2 && time.Since(notified) < s.live.ProxyMaxLag {
					linRead, linFlying = time.Now(), true
					at := s.endpoints[linNext%len(s.endpoints)]
					linNext++
					switch {
					case len(s.endpoints) == 1:
						// The store's own client: a connection of its
						// own, which through a Service may reach another
						// proxy, and through this one's, a proxy's client
						// turns its reads over the members.
						at = Endpoint{Name: "default", Client: s.cli}
					case at.Name == ep.Name:
						at = s.endpoints[linNext%len(s.endpoints)]
						linNext++
					}
					go func() {
						rev, _ := s.probe(ctx, at, true, 0)
						linDone <- rev
					}()
				}
			}
			if s.noProgress[ep.Name] {
				continue
			}
			if past.IsZero() && time.Since(checked) >= checkEvery {
				checked, checkEvery = time.Now(), min(2*checkEvery, maxCheck)
				// Read at the watch's start: a start etcd has compacted
				// fails the read as it fails the watch. An etcd grpc-proxy
				// restarted under frontends that resumed on it together
				// has been seen to deliver the watch's compaction error to
				// none of them, leaving them on streams that never show
				// anything (TestGRPCProxy, about one run in four). A start
				// etcd has not reached is a read of the future: not past.
				rev, err := s.probe(ctx, ep, true, from+1)
				if errors.Is(err, rpctypes.ErrCompacted) {
					return fmt.Errorf("watch from revision %d: %w", from+1, err)
				}
				if err == nil && rev > from {
					past = time.Now()
					askUnanswered()
				}
			}
			// Judged once the last request has had the time an answer
			// takes, less the interval it was asked after.
			if !past.IsZero() && time.Since(past) >= s.live.Timeout && time.Since(lastUnanswered) >= s.live.Timeout-s.live.Interval {
				if member {
					// A member past the watch's start that neither sends
					// events nor answers progress is withholding them.
					return fmt.Errorf("%w: a member past revision %d shows nothing on its stream", errLagging, from)
				}
				s.noProgress[ep.Name] = true
				s.shown(math.MaxInt64) // nothing to hold it to
				stopProbes()
				s.log.Info("etcd endpoint answers reads but not watch progress requests (an etcd grpc-proxy); its liveness is checked with a read each interval",
					"endpoint", ep.Name)
			}
			continue
		case <-ctx.Done():
			return ctx.Err()
		}
		if r.err != nil {
			return r.err
		}
		last = time.Now()
		s.proven()
		if len(r.resp.Events) > 0 && !answered && past.IsZero() && !s.noProgress[ep.Name] {
			past = time.Now() // the cluster is past the watch's start
			askUnanswered()
		}
		if replayed(&r) {
			continue // the snapshot holds every one
		}
		if len(r.resp.Events) == 0 {
			report(r)
			s.shown(shown)
			s.caughtUp(shown)
			if r.resp.Created {
				s.revision.Set(float64(max(cur.Rev, r.resp.GetHeader().GetRevision())))
			} else {
				s.revision.Set(float64(max(cur.Rev, shown)))
			}
			continue
		}
		// A response never splits a revision, and applying it whole keeps
		// every transaction in it atomic for queries. Responses that are
		// already waiting go into the same snapshot: under a burst one
		// snapshot per response would copy the touched shards again and
		// again, and the burst would land later, not sooner.
		events := r.resp.Events
		saw(r)
		var pending error
	drain:
		for yielded := false; len(events) < maxCoalesced; {
			var more result
			select {
			case more = <-ch:
			default:
				// The receiving goroutine hands on what gRPC has queued
				// one response at a time: let it pass the next before the
				// batch is taken as complete.
				if yielded {
					break drain
				}
				yielded = true
				runtime.Gosched()
				continue
			}
			yielded = false
			if more.err != nil {
				pending = more.err
				break drain
			}
			if replayed(&more) {
				continue
			}
			if len(more.resp.Events) == 0 {
				report(more)
				continue
			}
			saw(more)
			events = append(events[:len(events):len(events)], more.resp.Events...)
		}
		shown = slices.Min(seen)
		s.shown(shown)
		next, changed := s.apply(cur, events)
		if pending != nil {
			if changed {
				s.publish(next)
			}
			cur = next
			return pending
		}
		if !changed {
			// Keys under the prefix but outside our zones (another cluster's
			// tree in a shared etcd), or values written again as they were:
			// republishing would only throw away the response cache that
			// hangs off the snapshot. The next watch still starts after
			// them: resumed from the published revision once etcd had
			// compacted past it, it failed, and the frontend relisted.
			cur = next
			s.revision.Set(float64(max(cur.Rev, r.resp.GetHeader().GetRevision())))
			s.caughtUp(shown)
			continue
		}
		// A stream of changes that never pauses still gets its tables
		// packed, less often.
		var freed int
		cur, freed = next.Pack(packBusy)
		s.publish(cur)
		s.revision.Set(float64(max(cur.Rev, shown))) // never back below an answer's
		s.packed.Add(uint64(freed))
		s.caughtUp(shown)
		// The time spent applying is ours, not the stream's silence.
		last = time.Now()
		applied = last
	}
}

// checkOrder sets ordered if ep's member orders its progress answers
// (ordersProgress), and says once per endpoint when it does not.
func (s *Store) checkOrder(ctx context.Context, ep Endpoint, ordered *atomic.Bool) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	ok, version := s.orders(ctx, ep.Client)
	ordered.Store(ok)
	if ok || ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	first := !s.unordered[ep.Name]
	s.unordered[ep.Name] = true
	s.mu.Unlock()
	if first {
		s.log.Info("etcd endpoint's progress answers may run ahead of its events (etcd before 3.4.31 or 3.5.13, or no Status); its watch resumes after the last change under the watched prefixes, and a relist follows a move once etcd has compacted past it",
			"endpoint", ep.Name, "version", version)
	}
}

// maxUnanswered is how many progress requests a stream that has answered
// none is sent before its endpoint is judged (see watch).
const maxUnanswered = 3

// later is the later of two times.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// result is one watch response, or why the watch ended.
type result struct {
	resp   *etcdserverpb.WatchResponse
	prefix int // of the watcher it is for; -1: none (see receive)
	err    error
}

// apply derives the next snapshot from events: only the zones they change
// are edited, the others are shared with the previous snapshot. changed is
// false when no event changed a served zone: every key outside them, or
// every value the same as the one held (a writer's resync).
func (s *Store) apply(cur *snap.Snapshot, events []*mvccpb.Event) (next *snap.Snapshot, changed bool) {
	next = &snap.Snapshot{Rev: cur.Rev, Zones: slices.Clone(cur.Zones)}
	batches := make([]*snap.Batch, len(next.Zones))
	serials := make([]int64, len(next.Zones))
	h := &heldNames{zones: cur.Zones, batches: batches}
	for _, ev := range events {
		key := view(ev.Kv.Key)
		next.Rev = max(next.Rev, ev.Kv.ModRevision)
		// Nested zones each hold the whole of their own range.
		for i, z := range cur.Zones {
			if !strings.HasPrefix(key, z.Range) {
				continue
			}
			if batches[i] == nil {
				batches[i] = z.Edit()
			}
			serials[i] = ev.Kv.ModRevision
			if ev.Type == mvccpb.PUT {
				s.put(z, batches[i], key, ev.Kv.Value, ev.Kv.Lease != 0, h.name)
				continue
			}
			s.forget(key)
			if z.SkyDNS {
				batches[i].DeleteSkyDNS(key)
				continue
			}
			if z.IsStubKey(key) {
				batches[i].DeleteStub(key)
				continue
			}
			if owner, id, err := z.Owner(key); err == nil {
				batches[i].Delete(owner, id)
			}
		}
	}
	for i, b := range batches {
		if b != nil && b.Changed() {
			next.Zones[i] = b.Done(uint32(serials[i]))
			changed = true
		}
	}
	return next, changed
}

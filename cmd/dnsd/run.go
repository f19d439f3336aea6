package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/etcdns/etcdns/config"
	"github.com/etcdns/etcdns/etcdclient"
	"github.com/etcdns/etcdns/internal/heaplimit"
	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/server"
	"github.com/etcdns/etcdns/server/answer"
	"github.com/etcdns/etcdns/server/forward"
	"github.com/etcdns/etcdns/server/snap"
	"github.com/etcdns/etcdns/server/store"
)

func run(ctx context.Context, cfg *config.Config) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// Once shutting down, a second signal ends the process at once, as
	// an operator sending it expects, instead of being swallowed.
	context.AfterFunc(ctx, stop)
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	// Before server.New and the releaser, which size the answer cache and
	// their warnings by the limit.
	heaplimit.Set(log)
	d := cfg.Dnsd

	parsed, err := d.ParsedZones()
	if err != nil {
		return err
	}
	zones := make([]snap.Config, len(parsed))
	fedZone, _ := keys.CanonicalName(cfg.Cluster.FederationDomain)
	for i, z := range parsed {
		zones[i] = snap.Config{Name: z.Name, Prefix: z.Prefix, TTL: d.TTL, Cluster: cfg.Cluster.ID,
			Shared: z.Name == keys.ClustersetZone || z.Name == fedZone}
		if z.SkyDNS {
			// CoreDNS's etcd plugin gives values without a ttl 300
			// seconds; a drop-in keeps what its clients cached.
			zones[i].TTL, zones[i].SkyDNS = skydnsTTL, true
		}
	}
	cli, err := etcdclient.Dial(ctx, cfg.Etcd, log)
	if err != nil {
		return err
	}
	defer cli.Close()

	fed, err := federation(cfg, parsed, log)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	st := store.New(cli, zones, cfg.Etcd.RequestTimeout, reg, log)
	// The watch gets a client per endpoint, so that it can be moved past a
	// member that has gone quiet (server/store's doc says why).
	conns := new(etcdclient.WatchConns)
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "etcdns_dnsd_watch_received_bytes_total",
		Help: "Bytes read from etcd on the watch's connections (the watch stream, its liveness and lag reads), as on the wire: what this frontend costs its etcd member or proxy in bandwidth.",
	}, func() float64 { return float64(conns.Received()) }))
	wclis, weps, err := etcdclient.DialEach(ctx, cfg.Etcd, etcdclient.WatchReads(cfg.Etcd, d.WatchCoalesce, conns))
	if err != nil {
		return err
	}
	defer func() {
		for _, c := range wclis {
			c.Close()
		}
	}()
	// The watch starts on an endpoint of the list at random and goes round
	// it from there: frontends given the same list (a DaemonSet) spread
	// over the members or proxies instead of all watching the first.
	eps := make([]store.Endpoint, len(wclis))
	first := rand.N(len(wclis))
	for i := range wclis {
		j := (first + i) % len(wclis)
		eps[i] = store.Endpoint{Name: weps[j], Client: wclis[j]}
	}
	if len(eps) == 1 {
		// A Service in front of grpc-proxies: a new connection is the
		// way to another proxy (dnsd.watch-proxy-max-lag).
		eps[0].Reset = conns.Reset
	}
	st.WatchOn(eps, store.Liveness{
		Interval: d.WatchProgressInterval, Timeout: d.WatchProgressTimeout,
		LagProbe: d.WatchLagProbe, MaxLag: d.WatchMaxLag, Coalesce: d.WatchCoalesce,
		ProxyMaxLag: d.WatchProxyMaxLag,
	})
	st.SpreadStart(d.StartJitter)
	st.SetPageSize(int64(d.PageSize))
	srv := server.New(st.Snapshot, answer.Options{
		Pods:   answer.PodMode(cfg.Cluster.Pods),
		Rotate: d.Rotate,
		SOA: answer.SOA{
			Mname: d.SOAMname, Rname: d.SOARname, TTL: d.SOATTL,
			Refresh: d.SOARefresh, Retry: d.SOARetry, Expire: d.SOAExpire, Minimum: d.SOAMinimum,
		},
		Federation: fed,
		Autopath:   autopath(d, cfg.Cluster.Pods, log),
	}, reg, log)
	srv.TCPIdle, srv.TCPMaxConns = d.TCPIdleTimeout, d.TCPMaxConnections
	if len(d.QueryLog) > 0 {
		classes, err := server.ParseLogClasses(d.QueryLog)
		if err != nil {
			return fmt.Errorf("dnsd.query-log: %w", err)
		}
		srv.SetQueryLog(classes)
		log.Info("logging queries", "classes", d.QueryLog)
	}
	if d.Forward {
		f, err := forwarder(d, reg, log)
		if err != nil {
			return err
		}
		if f != nil {
			srv.SetForwarder(f)
		}
	}

	l, err := server.Listen(d.Listen)
	if err != nil {
		return fmt.Errorf("dnsd.listen: %w", err)
	}
	stubs, err := stubForwarder(cfg, l.Addr, reg, log)
	if err != nil {
		return err
	}
	srv.SetStubs(stubs)
	// Both stop when ctx ends; run returns once they have, so in-flight
	// queries are answered before the process exits.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 3)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); errs <- st.Run(ctx) }()
	go func() { defer wg.Done(); errs <- srv.Serve(ctx, l) }()
	go newHeapReleaser(reg, log, st.PackedBytes).run(ctx)
	// The cores are GOMAXPROCS: a UDP socket and its reader each, and the
	// memory and wake-ups that come with them (deploy/components/node-local).
	log.Info("serving DNS", "listen", l.Addr, "zones", d.Zones, "pods", cfg.Cluster.Pods, "cluster", cfg.Cluster.ID, "cores", runtime.GOMAXPROCS(0))

	var ops *http.Server
	if d.MetricsListen != "" {
		ln, err := net.Listen("tcp", d.MetricsListen)
		if err != nil {
			return fmt.Errorf("dnsd.metrics-listen: %w", err)
		}
		ops = &http.Server{
			Handler:           server.Ops{Gatherer: reg, Ready: st.Ready(), Snapshot: st.Snapshot, Malformed: st.MalformedAt, Skipped: st.Malformed}.Handler(),
			ReadHeaderTimeout: 5 * time.Second,
		}
		go func() {
			if err := ops.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				errs <- err
			}
		}()
		log.Info("serving operations endpoints", "listen", ln.Addr().String())
	}

	go func() {
		select {
		case <-st.Ready():
			log.Info("ready")
			// The load leaves its etcd pages behind as garbage, as much
			// again as the snapshot at a million records, and no later
			// change comes near that: hand it back to the system now
			// rather than hold it as RSS until the scavenger gets to it.
			// It takes two collections: the receive buffers of the last
			// pages sit in gRPC's sync.Pools, which keep what they hold
			// through one (at a million records, 31 MiB that stayed
			// resident for as long as nothing else ran a collection).
			runtime.GC()
			debug.FreeOSMemory()
			if before, after, err := pageOutImage(); err != nil {
				log.Info("kept the binary's start-up pages mapped", "err", err)
			} else {
				log.Info("returned the binary's start-up pages to the system", "file_rss_mib_before", before>>20, "file_rss_mib_after", after>>20)
			}
		case <-ctx.Done():
		}
	}()

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case runErr = <-errs:
		log.Error("stopping", "err", runErr)
	}
	cancel()
	if ops != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = ops.Shutdown(sctx)
	}
	wg.Wait()
	return runErr
}

const resolvConf = "/etc/resolv.conf"

// skydnsTTL is the TTL of a SkyDNS zone's values that carry none:
// CoreDNS's etcd plugin default.
const skydnsTTL = 300

// forwarder builds the ClusterFirst forwarder, or nil when there is no
// upstream to forward to: then dnsd stays authoritative-only, as with
// dnsd.forward false, and says so in its log.
func forwarder(d config.Dnsd, reg prometheus.Registerer, log *slog.Logger) (*forward.Forwarder, error) {
	ups, err := d.ParsedUpstreams()
	if err != nil {
		return nil, err
	}
	key := "dnsd.upstreams"
	if len(ups) == 0 {
		key += " (from " + resolvConf + ")"
		if ups, err = forward.ResolvConf(resolvConf); err != nil || len(ups) == 0 {
			log.Warn("forwarding off: dnsd.upstreams is empty and "+resolvConf+" lists no nameserver", "err", err)
			return nil, nil
		}
	}
	allow, err := d.ParsedForwardAllow()
	if err != nil {
		return nil, err
	}
	// A sixteenth of the memory limit at most, as the answer cache takes
	// an eighth: a small frontend's caches stay small.
	cacheBytes := int(min(forward.DefaultCacheBytes, max(debug.SetMemoryLimit(-1)/16, 1<<20)))
	f, err := forward.New(forward.Config{
		Upstreams: ups, Timeout: d.ForwardTimeout, CacheSize: d.ForwardCache, CacheBytes: cacheBytes, MaxTTL: d.ForwardMaxTTL,
		Allow: allow, Listen: d.Listen,
	}, reg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	log.Info("forwarding questions outside the zones", key, ups, "allow", d.ForwardAllow)
	return f, nil
}

// autopath turns the dnsd.autopath-* settings into the engine's.
func autopath(d config.Dnsd, pods config.PodMode, log *slog.Logger) answer.Autopath {
	a := answer.Autopath{Suffix: d.AutopathSuffix, Client: d.AutopathClient}
	if d.AutopathOption {
		a.Option = d.AutopathOptionCode
	}
	if a.Client && pods != config.PodsVerified {
		// dnsd reads pod records whatever this says; the publisher only
		// writes them when it says verified.
		log.Warn("dnsd.autopath-client finds clients by their pod records, which the publisher writes with cluster.pods: verified only", "cluster.pods", pods)
	}
	return a
}

// stubForwarder sends the questions for stub domains, always on: the keys
// turn it on. It shares dnsd.forward-allow and dnsd.forward-timeout with
// ClusterFirst forwarding; listen is the bound address, so a stub
// nameserver there is known as dnsd itself even with port 0 configured.
func stubForwarder(cfg *config.Config, listen string, reg prometheus.Registerer, log *slog.Logger) (*forward.Stubs, error) {
	d := cfg.Dnsd
	allow, err := d.ParsedForwardAllow()
	if err != nil {
		return nil, err
	}
	st, err := forward.NewStubs(forward.StubConfig{
		Timeout: d.ForwardTimeout, Allow: allow, Listen: listen,
		Option: d.SourceClusterOption, Cluster: cfg.Cluster.ID, Log: log,
	}, reg)
	if err != nil {
		return nil, fmt.Errorf("stub domains: %w", err)
	}
	return st, nil
}

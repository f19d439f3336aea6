package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/etcdns/etcdns/config"
	"github.com/etcdns/etcdns/etcdclient"
	"github.com/etcdns/etcdns/etcdclient/embedded"
	"github.com/etcdns/etcdns/internal/heaplimit"
	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/keys/kube"
	"github.com/etcdns/etcdns/publisher"
	"github.com/etcdns/etcdns/publisher/elect"
	"github.com/etcdns/etcdns/publisher/etcdstore"
	"github.com/etcdns/etcdns/publisher/source"
)

func run(ctx context.Context, cfg *config.Config) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	// Once shutting down, a second signal ends the process at once, as
	// an operator sending it expects, instead of being swallowed.
	context.AfterFunc(ctx, stop)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	slog.SetDefault(log)
	heaplimit.Set(log)
	p := cfg.Publisher

	pods := cfg.Cluster.Pods == config.PodsVerified
	filter, err := publisher.NewFilter(p.Namespaces, p.LabelSelector, pods)
	if err != nil {
		return err
	}
	src, err := newSource(p, pods, log)
	if err != nil {
		return err
	}
	zones, err := buildZones(ctx, cfg, src, log)
	if err != nil {
		return err
	}

	if p.DryRun {
		return dryRun(ctx, zones, src, filter, os.Stdout, log)
	}

	m := publisher.NewMetrics()
	// The HTTP server starts before the controller exists, so that
	// /healthz answers during a long embedded-etcd start.
	var ready atomic.Pointer[publisher.Controller]
	if p.MetricsListen != "" {
		l, err := net.Listen("tcp", p.MetricsListen)
		if err != nil {
			return fmt.Errorf("publisher.metrics-listen: %w", err)
		}
		srv := &http.Server{Handler: handler(m, func() error {
			c := ready.Load()
			if c == nil {
				return errors.New("starting")
			}
			return c.Ready()
		}), ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(l)
		defer srv.Close()
		log.Info("serving metrics", "addr", l.Addr().String())
	}

	ecfg := cfg.Etcd
	if len(ecfg.Endpoints) == 0 {
		e, url, err := embedded.Start(ecfg.Embedded, log)
		if err != nil {
			return err
		}
		defer e.Close()
		ecfg.Endpoints = []string{url}
	}
	cli, err := etcdclient.New(ctx, ecfg, log)
	if err != nil {
		return err
	}
	defer cli.Close()

	ranges, err := zoneRanges(zones)
	if err != nil {
		return err
	}
	user := etcdclient.User(ecfg)
	store := &etcdstore.Store{Client: cli, Timeout: ecfg.RequestTimeout, WriteTimeout: p.WriteTimeout, User: user, MaxTxnOps: p.MaxTxnOps}
	var keepers []*clientv3.Client
	if len(ecfg.Endpoints) > 1 {
		// The reads and writes go through one endpoint at a time, so that
		// a write held by a frozen member is retried on another, once the
		// member leaves a probe unanswered, and costs the publisher that
		// once. The probes read the cluster's first range, which its etcd
		// user may read, so their answers carry the raft term. The
		// election's lease is renewed the same way (elect.Elector.Keepers).
		each, names, err := etcdclient.DialEach(ctx, ecfg)
		if err != nil {
			return err
		}
		defer func() {
			for _, c := range each {
				c.Close()
			}
		}()
		store.Endpoints = etcdclient.NewFailover(each, names, log, m.EndpointMoves.Inc, ranges[0])
		keepers = each
	}
	ctrl := publisher.NewController(publisher.Options{
		Zones:       zones,
		Source:      src,
		Filter:      filter,
		Store:       store,
		Ranges:      ranges,
		MaxTxnOps:   p.MaxTxnOps,
		MaxTxnBytes: p.MaxTxnBytes,
		Log:         log,
		Metrics:     m,
	})

	ready.Store(ctrl)
	terms := &leadership{ctrl: ctrl}
	stopStubAPI, err := serveStubAPI(cfg, zones, store, terms, log)
	if err != nil {
		return err
	}
	defer stopStubAPI()
	log.Info("waiting for the source to sync", "source", p.Source)
	start := time.Now()
	if err := src.Start(ctx, ctrl.Notify); err != nil {
		return err
	}
	ctrl.SetSynced()
	log.Info("source synced", "units", len(src.Units()), "took", time.Since(start).Round(time.Millisecond))

	// A request etcd's auth refuses ends the process with that one line
	// (main prints it), with or without leader election: no retry can
	// succeed before an administrator changes the grants, and a publisher
	// that stays up publishing nothing is the silent failure. Exiting
	// makes it loud instead (CrashLoopBackOff, the line in kubectl logs
	// --previous), the kubelet's restart backoff is the retry, and the
	// records already in etcd stay served meanwhile.
	host, _ := os.Hostname()
	id := host + "/" + strconv.Itoa(os.Getpid())
	el := &elect.Elector{
		Client:  cli,
		Cluster: zones.Cluster.Cluster,
		ID:      id,
		TTL:     p.LeaseTTL,
		Log:     log,
		User:    user,
		Keepers: keepers,
	}
	if !p.LeaderElection {
		// Every replica writes, each with an election of its own that it
		// wins at once: its key is the fence settle moves (elect.Term),
		// so a write a member held past its timeout cannot commit after
		// the re-read. The random part keeps a restarted container (the
		// same host and pid) from waiting on its predecessor's key.
		el.Solo = id + "/" + strconv.FormatUint(rand.Uint64()>>32, 16)
	}
	err = el.Run(ctx, terms.lead)
	log.Info("stopped")
	return err
}

func newSource(p config.Publisher, pods bool, log *slog.Logger) (source.Source, error) {
	if dir := p.Files(); dir != "" {
		return source.NewFiles(dir, pods, log), nil
	}
	rc, err := restConfig(p.Kubeconfig)
	if err != nil {
		return nil, err
	}
	rc.UserAgent = "etcdns-publisher"
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	k := source.NewKube(client, p.Namespaces, p.LabelSelector, pods).WithProperties(dyn)
	if p.Clusterset {
		mcs, err := mcsclient.NewForConfig(rc)
		if err != nil {
			return nil, err
		}
		k.WithMulticluster(mcs)
	}
	return k, nil
}

// buildZones settles the cluster id (configured, else what the cluster says
// about itself) and the record builders of the trees this cluster writes.
func buildZones(ctx context.Context, cfg *config.Config, src source.Source, log *slog.Logger) (publisher.Zones, error) {
	p := cfg.Publisher
	var ident source.Identity
	if cfg.Cluster.ID == "" {
		idf, ok := src.(source.Identifier)
		if !ok {
			return publisher.Zones{}, errors.New("cluster.id is empty and the source cannot tell the cluster's identity; set cluster.id")
		}
		var err error
		if ident, err = idf.Identity(ctx); err != nil {
			return publisher.Zones{}, fmt.Errorf("cluster id: %w", err)
		}
	}
	id, from, err := source.ClusterID(cfg.Cluster.ID, ident)
	if err != nil {
		return publisher.Zones{}, err
	}
	log.Info("cluster id", "id", id, "from", from)
	b, err := kube.NewBuilder(keys.Layout{Prefix: p.Prefix, ReversePrefix: p.ReversePrefix, Cluster: id, TTL: p.TTL}, cfg.Cluster.Domain)
	if err != nil {
		return publisher.Zones{}, err
	}
	b.Nameserver = p.DNSService
	z := publisher.Zones{Cluster: b}
	if p.Clusterset {
		// The clusterset tree is shared; the PTRs of ClusterSetIPs go into
		// this cluster's own reverse tree, next to its cluster-local ones:
		// service CIDRs of different clusters may overlap.
		cs, err := kube.NewBuilder(keys.Layout{Prefix: p.ClustersetPrefix, ReversePrefix: p.ReversePrefix, Cluster: id, TTL: p.TTL}, kube.ClustersetZone)
		if err != nil {
			return publisher.Zones{}, err
		}
		if cs.Zone == b.Zone {
			return publisher.Zones{}, fmt.Errorf("cluster.domain %s is the clusterset zone; pick another cluster domain", b.Zone)
		}
		z.Clusterset = &cs
	}
	if p.Federation != "" {
		f, err := kube.NewFederation(keys.Layout{Prefix: p.FederationPrefix, ReversePrefix: p.ReversePrefix, Cluster: id, TTL: p.TTL},
			cfg.Cluster.FederationDomain, p.Federation)
		if err != nil {
			return publisher.Zones{}, err
		}
		z.Federation = &f
		log.Info("federation on", "federation", f.Name, "domain", f.Zone, "annotation", kube.FederatedAnnotation+"=true")
	}
	return z, nil
}

// zoneRanges are the etcd ranges a cluster's records can be in.
func zoneRanges(z publisher.Zones) ([]string, error) {
	trees := []kube.Builder{z.Cluster}
	if z.Clusterset != nil {
		trees = append(trees, *z.Clusterset)
	}
	if z.Federation != nil {
		trees = append(trees, z.Federation.Builder)
	}
	var r []string
	for _, b := range trees {
		rs, err := etcdstore.Ranges(b.Prefix, b.ReversePrefix, b.Zone)
		if err != nil {
			return nil, err
		}
		for _, x := range rs {
			if !slices.Contains(r, x) {
				r = append(r, x)
			}
		}
	}
	return r, nil
}

// restConfig follows kubectl: the given file, else $KUBECONFIG, else the
// in-cluster service account.
func restConfig(path string) (*rest.Config, error) {
	if path == "" && os.Getenv("KUBECONFIG") == "" {
		rc, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("publisher.kubeconfig is empty, KUBECONFIG is unset and not in a cluster: %w", err)
		}
		return rc, nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return rc, nil
}

// dryRun prints every record as "key value", sorted by key, without
// touching etcd. Invalid objects are reported on stderr, as in a real run.
func dryRun(ctx context.Context, z publisher.Zones, src source.Source, f publisher.Filter, out io.Writer, log *slog.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := src.Start(ctx, func(string, time.Time) {}); err != nil {
		return err
	}
	recs, problems := publisher.All(z, src, f)
	for _, p := range problems {
		log.Warn("skipped invalid object", "problem", p.Error())
	}
	for _, r := range recs {
		if _, err := fmt.Fprintln(out, r.String()); err != nil {
			return err
		}
	}
	return nil
}

func handler(m *publisher.Metrics, ready func() error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	})
	return mux
}

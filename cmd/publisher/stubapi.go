package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"

	"github.com/etcdns/etcdns/config"
	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/publisher"
	"github.com/etcdns/etcdns/publisher/elect"
	"github.com/etcdns/etcdns/publisher/etcdstore"
	"github.com/etcdns/etcdns/publisher/stubapi"
)

// leadership wraps the controller's terms so the federation endpoint
// writes with the fence of the term in force, and only during one.
type leadership struct {
	ctrl *publisher.Controller
	term atomic.Pointer[*elect.Term] // nil: no term
}

// lead is ctrl.Lead, remembering the term while it runs.
func (l *leadership) lead(ctx context.Context, term *elect.Term) error {
	l.term.Store(&term)
	defer l.term.Store(nil)
	return l.ctrl.Lead(ctx, term)
}

// leader is the endpoint's stubapi.Leader: the controller must have
// finished the term's first reconcile, so a new leader's writes never
// race the end of its predecessor's.
func (l *leadership) leader() (*elect.Term, bool) {
	t := l.term.Load()
	if t == nil || !l.ctrl.Leading() {
		return nil, false
	}
	return *t, true
}

// serveStubAPI starts the federation endpoint when publisher.stub-api-listen
// is set; the returned function stops it. Missing or unreadable
// certificates stop the publisher at start: the endpoint never runs
// without client authentication.
func serveStubAPI(cfg *config.Config, zones publisher.Zones, store *etcdstore.Store, l *leadership, log *slog.Logger) (stop func(), err error) {
	p := cfg.Publisher
	if p.StubAPIListen == "" {
		return func() {}, nil
	}
	tc, err := stubapi.TLSConfig(p.StubAPICertFile, p.StubAPIKeyFile, p.StubAPIClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("publisher.stub-api: %w", err)
	}
	h, err := stubapi.New(stubapi.Config{
		Store:  store,
		Layout: keys.Layout{Prefix: zones.Cluster.Prefix, Cluster: zones.Cluster.Cluster},
		Zone:   zones.Cluster.Zone,
		Domain: cfg.Cluster.FederationDomain,
		Leader: l.leader,
		Log:    log,
	})
	if err != nil {
		return nil, fmt.Errorf("publisher.stub-api: %w", err)
	}
	ln, err := net.Listen("tcp", p.StubAPIListen)
	if err != nil {
		return nil, fmt.Errorf("publisher.stub-api-listen: %w", err)
	}
	srv := stubapi.NewServer(h, tc, log)
	go func() {
		if err := srv.ServeTLS(ln, "", ""); !errors.Is(err, http.ErrServerClosed) {
			log.Error("federation endpoint stopped", "err", err)
		}
	}()
	log.Info("serving the federation endpoint", "addr", ln.Addr().String(), "client_ca", p.StubAPIClientCAFile,
		"stub_domains", "<name>.svc."+cfg.Cluster.FederationDomain)
	return func() { srv.Close() }, nil
}

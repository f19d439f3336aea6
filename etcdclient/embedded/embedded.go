package embedded

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/etcdns/etcdns/config"
)

// Start runs a single-member etcd in this process with its data in
// c.DataDir, serving clients at c.ClientURL. Both URLs must be loopback: an
// embedded etcd has neither TLS nor auth. A port of 0 picks a free port; the
// returned URL is the one clients should dial. Stop it with Close.
func Start(c config.Embedded, log *slog.Logger) (*embed.Etcd, string, error) {
	if log == nil {
		log = slog.Default()
	}
	// A port LoopbackURL picks is free when picked and closed again, so
	// another process can take it before etcd binds it (parallel tests
	// do): pick again.
	for try := 1; ; try++ {
		e, u, picked, err := start(c, log)
		if err == nil || try == pickTries || !errors.Is(err, syscall.EADDRINUSE) || !slices.ContainsFunc(picked, func(a string) bool {
			return strings.Contains(err.Error(), a) // a port given in the configuration is not ours to change
		}) {
			return e, u, err
		}
		log.Info("embedded etcd: a port picked for it was taken before it started; picking again", "err", err)
	}
}

// pickTries is how many times Start picks ports.
const pickTries = 5

// start is one try of Start; picked are the addresses it picked a port
// for.
func start(c config.Embedded, log *slog.Logger) (_ *embed.Etcd, _ string, picked []string, _ error) {
	var urls [2]*url.URL
	for i, u := range [2]struct{ key, raw string }{{"etcd.embedded.client-url", c.ClientURL}, {"etcd.embedded.peer-url", c.PeerURL}} {
		var err error
		if urls[i], err = LoopbackURL(u.key, u.raw); err != nil {
			return nil, "", nil, err
		}
		if p, err := url.Parse(u.raw); err == nil && p.Port() == "0" {
			picked = append(picked, urls[i].Host)
		}
	}
	client, peer := urls[0], urls[1]
	cfg := embed.NewConfig()
	cfg.Name = "etcdns"
	cfg.Dir = c.DataDir
	cfg.ListenClientUrls = []url.URL{*client}
	cfg.AdvertiseClientUrls = []url.URL{*client}
	cfg.ListenPeerUrls = []url.URL{*peer}
	cfg.AdvertisePeerUrls = []url.URL{*peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	cfg.InitialClusterToken = "etcdns-embedded"
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{"stderr"}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", picked, fmt.Errorf("embedded etcd in %s: %w", c.DataDir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, "", picked, errors.New("embedded etcd: not ready after 60s")
	case err := <-e.Err():
		e.Close()
		return nil, "", picked, fmt.Errorf("embedded etcd: %w", err)
	}
	u := "http://" + e.Clients[0].Addr().String()
	log.Info("embedded etcd started", "client_url", u, "data_dir", c.DataDir)
	return e, u, picked, nil
}

// LoopbackURL parses an http URL on a loopback address and replaces port 0
// with a free port, since etcd's peer URL goes into the member list and
// cannot stay 0.
func LoopbackURL(key, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("%s: %q is not an http URL", key, raw)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return nil, fmt.Errorf("%s: %q: %w", key, raw, err)
	}
	ip := net.ParseIP(host)
	if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("%s: %q is not a loopback address", key, raw)
	}
	if port == "0" {
		if u.Host, err = pickPort(host); err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
	}
	return u, nil
}

// pickPort returns host with a port free at the time; a variable so that a
// test can pick one that is not.
var pickPort = func(host string) (string, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

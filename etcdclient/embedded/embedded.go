package embedded

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
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
	client, err := LoopbackURL("etcd.embedded.client-url", c.ClientURL)
	if err != nil {
		return nil, "", err
	}
	peer, err := LoopbackURL("etcd.embedded.peer-url", c.PeerURL)
	if err != nil {
		return nil, "", err
	}
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
		return nil, "", fmt.Errorf("embedded etcd in %s: %w", c.DataDir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, "", errors.New("embedded etcd: not ready after 60s")
	case err := <-e.Err():
		e.Close()
		return nil, "", fmt.Errorf("embedded etcd: %w", err)
	}
	u := "http://" + e.Clients[0].Addr().String()
	log.Info("embedded etcd started", "client_url", u, "data_dir", c.DataDir)
	return e, u, nil
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
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		u.Host = l.Addr().String()
		l.Close()
	}
	return u, nil
}

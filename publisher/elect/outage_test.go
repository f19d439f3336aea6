package elect

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcdns/etcdns/config"
	"github.com/etcdns/etcdns/etcdclient"
	"github.com/etcdns/etcdns/etcdclient/embedded"
)

// etcd renews every lease for a full TTL when it restarts. A leader that
// lost its session while etcd was down must not wait out its own old key
// once etcd is back: it revokes the lease its failed Close left behind.
func TestLeadsAgainSoonAfterEtcdRestart(t *testing.T) {
	const ttl = 3 * time.Second
	cfg := config.Embedded{DataDir: filepath.Join(t.TempDir(), "etcd"), ClientURL: "http://127.0.0.1:0", PeerURL: "http://127.0.0.1:0"}
	e, url, err := embedded.Start(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The restart must come back on the same ports, so fix the ones picked.
	cfg.ClientURL, cfg.PeerURL = url, "http://"+e.Peers[0].Addr().String()
	defer func() { e.Close() }()
	cli, err := etcdclient.New(context.Background(), config.Etcd{Endpoints: []string{url}, DialTimeout: 5 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	states := make(chan bool, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- (&Elector{Client: cli, Cluster: "c1", ID: "one", TTL: ttl, OnState: func(l bool) { states <- l }}).
			Run(ctx, func(ctx context.Context, _ *Term) error { <-ctx.Done(); return nil })
	}()
	defer func() { cancel(); <-done }()
	want := func(leading bool, within time.Duration) {
		t.Helper()
		select {
		case got := <-states:
			if got != leading {
				t.Fatalf("leading = %v, want %v", got, leading)
			}
		case <-time.After(within):
			t.Fatalf("leading did not become %v within %v", leading, within)
		}
	}
	want(true, 10*time.Second)

	e.Close()
	want(false, 3*ttl)
	// Long enough for the session's Close to give up on the revoke.
	time.Sleep(ttl + time.Second)
	if e, _, err = embedded.Start(cfg, nil); err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	// Waiting out the old key would take the TTL plus etcd's election
	// timeout (4s); reconnecting and revoking takes about a second.
	want(true, ttl)
	t.Logf("leading again %v after etcd's restart", time.Since(up).Round(time.Millisecond))
}

// Package testetcd starts the publisher's own embedded etcd on loopback
// ports for a test, so unit tests run against a real etcd without a
// process to manage. Test code only.
package testetcd

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdns/etcdns/config"
	"github.com/etcdns/etcdns/etcdclient"
	"github.com/etcdns/etcdns/etcdclient/embedded"
)

// Start runs an embedded etcd in t.TempDir() until the test ends and
// returns a client of it. log may be nil.
func Start(t testing.TB, log *slog.Logger) *clientv3.Client {
	t.Helper()
	e, url, err := embedded.Start(config.Embedded{
		DataDir: filepath.Join(t.TempDir(), "etcd"), ClientURL: "http://127.0.0.1:0", PeerURL: "http://127.0.0.1:0",
	}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	cli, err := etcdclient.New(context.Background(), config.Etcd{Endpoints: []string{url}, DialTimeout: 5 * time.Second}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

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
	"google.golang.org/grpc"

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

// Intercepted is a client of cli's endpoints whose unary requests pass
// through f first, closed when the test ends: a test's way to slow or fail
// chosen requests to a real etcd.
func Intercepted(t testing.TB, cli *clientv3.Client, f grpc.UnaryClientInterceptor) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints: cli.Endpoints(), DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(f)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

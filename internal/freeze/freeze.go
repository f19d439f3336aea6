// Package freeze gives tests etcd clients that behave, on demand, as a
// client of a frozen or failing member sees it, for tests of what moves
// off such a member. It only wraps a real client's requests; it must not
// be imported outside tests.
package freeze

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// Member is a client of one real etcd endpoint. While Hung is set its
// requests, and the streams it opens (a lease's KeepAliveOnce is one),
// wait until their context ends: what a client sees of a frozen member,
// whose connection stays ready while nothing comes back. While
// Lost is set only its writes wait (a live member whose proposals went to
// a frozen leader) and reads are answered. While Fail is set, requests
// fail with it.
type Member struct {
	Client *clientv3.Client
	Hung   atomic.Bool
	Lost   atomic.Bool
	Fail   atomic.Pointer[error]
}

// New dials endpoint; the client is closed when the test ends.
func New(t testing.TB, endpoint string) *Member {
	t.Helper()
	m := &Member{}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(m.intercept), grpc.WithChainStreamInterceptor(m.interceptStream)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	m.Client = cli
	return m
}

func (m *Member) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if m.Hung.Load() || m.Lost.Load() && !strings.HasSuffix(method, "/Range") {
		<-ctx.Done()
		return ctx.Err()
	}
	if err := m.Fail.Load(); err != nil {
		return *err
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (m *Member) interceptStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if m.Hung.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if err := m.Fail.Load(); err != nil {
		return nil, *err
	}
	return streamer(ctx, desc, cc, method, opts...)
}

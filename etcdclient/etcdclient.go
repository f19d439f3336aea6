package etcdclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/etcdns/etcdns/config"
)

// New dials c.Endpoints, or c.Embedded.ClientURL when there are none (the
// embedded etcd some other process, usually the publisher, runs), and checks
// the connection with one Status call bounded by the dial timeout, so a
// wrong endpoint fails at start with a message rather than on first use.
func New(ctx context.Context, c config.Etcd, log *slog.Logger) (*clientv3.Client, error) {
	cli, endpoints, err := dial(ctx, c, tokensFor(c))
	if err != nil {
		return nil, err
	}
	// One member answering is enough: a cluster with one member down for
	// maintenance still has quorum, and the client balances across the rest.
	var errs []error
	for _, ep := range endpoints {
		sctx, cancel := context.WithTimeout(ctx, dialTimeout(c))
		_, err := cli.Status(sctx, ep)
		cancel()
		if err == nil {
			errs = nil
			break
		}
		errs = append(errs, fmt.Errorf("%s: %w", ep, err))
	}
	if len(errs) > 0 {
		cli.Close()
		return nil, fmt.Errorf("etcd: no endpoint answered: %w", errors.Join(errs...))
	}
	logger(log).Info("etcd connected", "endpoints", endpoints, "tls", tlsOf(endpoints), "user", User(c))
	return cli, nil
}

// Dial is New without the check: the client connects in the background and
// its requests wait for etcd. dnsd uses it, because a frontend must start,
// and keep retrying, while its store is away.
func Dial(ctx context.Context, c config.Etcd, log *slog.Logger) (*clientv3.Client, error) {
	cli, endpoints, err := dial(ctx, c, tokensFor(c))
	if err != nil {
		return nil, err
	}
	logger(log).Info("etcd client started", "endpoints", endpoints, "tls", tlsOf(endpoints), "user", User(c))
	return cli, nil
}

// DialEach is Dial once per endpoint: a client pinned to one member each.
// dnsd watches through these, and the publisher reads and writes through
// them with a Failover. A client of several endpoints keeps a watch
// stream on the one connection it opened it on, and a frozen member's
// connection still looks ready to gRPC until the keepalive gives up, so the
// watch can only be moved past a failed member by choosing another client.
// Each has the same TLS, auth, keepalive and reconnect settings as Dial's,
// and opts besides (dnsd's WatchReads).
func DialEach(ctx context.Context, c config.Etcd, opts ...grpc.DialOption) ([]*clientv3.Client, []string, error) {
	endpoints := endpointsOf(c)
	var out []*clientv3.Client
	t := tokensFor(c) // one login for all of them
	for _, ep := range endpoints {
		one := c
		one.Endpoints = []string{ep}
		cli, _, err := dial(ctx, one, t, opts...)
		if err != nil {
			for _, o := range out {
				o.Close()
			}
			return nil, nil, err
		}
		out = append(out, cli)
	}
	return out, endpoints, nil
}

func endpointsOf(c config.Etcd) []string {
	if len(c.Endpoints) == 0 {
		return []string{c.Embedded.ClientURL}
	}
	return c.Endpoints
}

// tlsOf is what the log says of TLS: the endpoints' schemes decide it, not
// the TLS files, which clientv3 ignores for an http:// endpoint (config
// refuses them together; a caller need not have validated). A list of both
// kinds is "mixed".
func tlsOf(endpoints []string) any {
	n := 0
	for _, ep := range endpoints {
		if u, err := url.Parse(ep); err == nil && u.Scheme == "https" { // Parse lowercases it, as clientv3 reads it
			n++
		}
	}
	switch n {
	case 0:
		return false
	case len(endpoints):
		return true
	}
	return "mixed"
}

func dial(ctx context.Context, c config.Etcd, t *tokens, opts ...grpc.DialOption) (*clientv3.Client, []string, error) {
	endpoints := endpointsOf(c)
	var tlsCfg *tls.Config
	if c.CAFile != "" || c.CertFile != "" {
		info := transport.TLSInfo{TrustedCAFile: c.CAFile, CertFile: c.CertFile, KeyFile: c.KeyFile}
		var err error
		if tlsCfg, err = info.ClientConfig(); err != nil {
			return nil, nil, fmt.Errorf("etcd TLS: %w", err)
		}
		tlsCfg.MinVersion = tls.VersionTLS12
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: dialTimeout(c),
		// Without a keepalive a silently dead endpoint (a partition, not a
		// reset) is noticed only when a request times out.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: dialTimeout(c),
		TLS:                  tlsCfg,
		Context:              ctx,
		// The client's own zap logs duplicate the errors we return; keep
		// only ours so the programs' slog output stays readable.
		Logger:      zap.NewNop(),
		DialOptions: append(dialOptions(c, t), opts...),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("etcd %v: %w", endpoints, err)
	}
	return cli, endpoints, nil
}

// dialOptions are every client's: the reconnect backoff, the fixed
// windows, and with a password, the token t that its configuration's
// clients share (auth.go) in place of clientv3's login for every stream.
func dialOptions(c config.Etcd, t *tokens) []grpc.DialOption {
	opts := []grpc.DialOption{reconnect(c), grpc.WithInitialWindowSize(window), grpc.WithInitialConnWindowSize(window)}
	if t != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(t), grpc.WithChainUnaryInterceptor(t.unary), grpc.WithChainStreamInterceptor(t.stream))
	}
	return opts
}

// window is the HTTP/2 flow-control window of every stream and of the
// connection, fixed. Left to gRPC, the window is sized by its bandwidth
// estimator, which sends a ping with the first data frame after each ping
// answered: on a watch that gets a change now and then, that is a ping
// written and its answer read (and etcd woken twice) for every change, and
// a dnsd's CPU a changed record was mostly that (bench/changecpu). A fixed
// window stops the pings. 4 MiB is large enough that a load's 15 MiB pages
// are not slowed by the window across a link of a few milliseconds, and it
// costs nothing while responses are read as they come: it only bounds
// what etcd may send ahead of the reader.
const window = 4 << 20

// CallOptions are what clientv3 passes to gRPC with each of its own calls
// (its defaults; the clients made here keep them). A call made on a
// client's connection directly, with a codec of its own, passes them
// itself: without them a Range of more than 4 MiB, a load's page, is
// refused by gRPC's default receive limit.
var CallOptions = []grpc.CallOption{
	grpc.WaitForReady(true), grpc.MaxCallSendMsgSize(2 << 20), grpc.MaxCallRecvMsgSize(math.MaxInt32),
}

// reconnect caps the wait between connection attempts at a second. gRPC's
// default grows to two minutes, so after a minute's etcd outage dnsd's
// watch and the publisher's writes resumed up to a minute after etcd did
// (issue 9 item 1 measured 12s); a refused connect to a down etcd costs
// nothing worth saving.
func reconnect(c config.Etcd) grpc.DialOption {
	return grpc.WithConnectParams(grpc.ConnectParams{
		Backoff: backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
		// A connection attempt itself still gets the dial timeout, not the
		// backoff's second: a TLS handshake to a remote etcd may need it.
		MinConnectTimeout: dialTimeout(c),
	})
}

func dialTimeout(c config.Etcd) time.Duration {
	if c.DialTimeout <= 0 {
		return 5 * time.Second
	}
	return c.DialTimeout
}

func logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.Default()
	}
	return l
}

package harness

import (
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// GRPCProxy is etcd's gRPC proxy (`etcd grpc-proxy start`, the same
// binary as etcd) in front of one or more etcd members: it serves the KV
// and Watch APIs on one port and shares one upstream watch among the
// clients that watch the same range from a revision it can serve.
// Stop, Start, Kill, Pause and Resume come from Process; Start brings it
// back on the same port.
type GRPCProxy struct {
	*Process
	Endpoint string // client URL, http://127.0.0.1:port; dial this instead of etcd
}

// StartGRPCProxy starts a gRPC proxy on a free loopback port, forwarding to
// the given etcd client URLs, and waits until it serves: its /proxy/health
// answers 200 once a Get and the creation of a Watch, both through the
// proxy itself, have succeeded.
func StartGRPCProxy(t testing.TB, endpoints ...string) *GRPCProxy {
	t.Helper()
	if len(endpoints) == 0 {
		t.Fatal("StartGRPCProxy: no etcd endpoints")
	}
	hosts := make([]string, len(endpoints))
	for i, e := range endpoints {
		hosts[i] = strings.TrimPrefix(e, "http://")
	}
	addr := fmt.Sprintf("127.0.0.1:%d", FreePort(t))
	p := &GRPCProxy{Endpoint: "http://" + addr}
	args := []string{
		"grpc-proxy", "start",
		"--endpoints=" + strings.Join(hosts, ","),
		"--listen-addr=" + addr,
		"--advertise-client-url=" + addr,
		// Its default is a directory "default.proxy" in the working
		// directory, used only for auto-TLS certificates.
		"--data-dir=" + t.TempDir(),
	}
	p.Process = StartProcess(t, Tool(t, "etcd"), args, nil, func() error {
		return HTTPOK(p.Endpoint + "/proxy/health")
	})
	p.Process.Name = "etcd-grpc-proxy"
	return p
}

// Client returns an etcd client that talks to the proxy, closed when the
// test ends.
func (p *GRPCProxy) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{p.Endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

package harness

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Etcd is a single-member etcd server. Stop, Restart, Pause and Resume come
// from Process; Restart keeps the data directory and ports.
type Etcd struct {
	*Process
	Endpoint string // client URL, http://127.0.0.1:port
	PeerURL  string
	DataDir  string
}

// EtcdOption changes how StartEtcd runs etcd.
type EtcdOption func(*etcdConfig)

type etcdConfig struct {
	args []string
	tool string
}

// WithEtcdTool runs the etcd binary installed by hack/tools.sh under name,
// for example "etcd-3.6", instead of the pinned "etcd".
func WithEtcdTool(name string) EtcdOption {
	return func(c *etcdConfig) { c.tool = name }
}

func (c *etcdConfig) bin(t testing.TB) string {
	t.Helper()
	if c.tool == "" {
		return Tool(t, "etcd")
	}
	return Tool(t, c.tool)
}

// WithEtcdArgs passes extra flags to etcd, for example
// "--quota-backend-bytes=..." or "--auto-compaction-retention=...".
func WithEtcdArgs(args ...string) EtcdOption {
	return func(c *etcdConfig) { c.args = append(c.args, args...) }
}

// StartEtcd starts etcd on free loopback ports and waits until /health
// reports healthy.
func StartEtcd(t testing.TB, opts ...EtcdOption) *Etcd {
	t.Helper()
	var cfg etcdConfig
	for _, o := range opts {
		o(&cfg)
	}
	bin := cfg.bin(t)
	e := &Etcd{
		Endpoint: fmt.Sprintf("http://127.0.0.1:%d", FreePort(t)),
		PeerURL:  fmt.Sprintf("http://127.0.0.1:%d", FreePort(t)),
		DataDir:  t.TempDir(),
	}
	args := append([]string{
		"--name=harness",
		"--data-dir=" + e.DataDir,
		"--listen-client-urls=" + e.Endpoint,
		"--advertise-client-urls=" + e.Endpoint,
		"--listen-peer-urls=" + e.PeerURL,
		"--initial-advertise-peer-urls=" + e.PeerURL,
		"--initial-cluster=harness=" + e.PeerURL,
	}, cfg.args...)
	e.Process = StartProcess(t, bin, args, nil, func() error {
		return HTTPOK(e.Endpoint + "/health")
	})
	return e
}

// Etcdctl runs the real etcdctl against e and returns its standard output
// with surrounding whitespace removed. A non-zero exit fails the test.
func (e *Etcd) Etcdctl(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, Tool(t, "etcdctl"), append([]string{"--endpoints=" + e.Endpoint}, args...)...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("etcdctl %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// Client returns an etcd client for e, closed when the test ends.
func (e *Etcd) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Upgrade stops e and starts the etcd binary installed under tool (for
// example "etcd-3.6") in its place, on the same data directory, ports and
// flags, as one step of a rolling upgrade (or downgrade), and waits until it
// is healthy. Later Start and Restart calls run the new binary.
func (e *Etcd) Upgrade(t testing.TB, tool string) {
	t.Helper()
	bin := Tool(t, tool)
	e.Stop()
	e.Path = bin
	e.Start()
}

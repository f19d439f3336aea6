package harness

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// EtcdCluster is a cluster of real etcd members on loopback. Each member is
// an Etcd, so Stop, Kill, Pause, Resume, Start and Etcdctl work on one
// member at a time.
type EtcdCluster struct {
	Members []*Etcd
}

// StartEtcdCluster starts n etcd members that form one new cluster, and
// waits until every one of them reports healthy. Their processes start
// together: a member of a new cluster is healthy only once a quorum of its
// peers is up, so none can be waited for alone.
func StartEtcdCluster(t testing.TB, n int, opts ...EtcdOption) *EtcdCluster {
	t.Helper()
	var cfg etcdConfig
	for _, o := range opts {
		o(&cfg)
	}
	bin := cfg.bin(t)
	c := &EtcdCluster{}
	var initial []string
	for i := range n {
		e := &Etcd{
			Endpoint: fmt.Sprintf("http://127.0.0.1:%d", FreePort(t)),
			PeerURL:  fmt.Sprintf("http://127.0.0.1:%d", FreePort(t)),
			DataDir:  t.TempDir(),
		}
		c.Members = append(c.Members, e)
		initial = append(initial, fmt.Sprintf("m%d=%s", i, e.PeerURL))
	}
	for i, e := range c.Members {
		args := append([]string{
			fmt.Sprintf("--name=m%d", i),
			"--data-dir=" + e.DataDir,
			"--listen-client-urls=" + e.Endpoint,
			"--advertise-client-urls=" + e.Endpoint,
			"--listen-peer-urls=" + e.PeerURL,
			"--initial-advertise-peer-urls=" + e.PeerURL,
			"--initial-cluster=" + strings.Join(initial, ","),
			"--initial-cluster-state=new",
			"--initial-cluster-token=harness",
		}, cfg.args...)
		e.Process = StartProcess(t, bin, args, nil, nil)
	}
	deadline := time.Now().Add(StartupTimeout)
	for _, e := range c.Members {
		for {
			err := HTTPOK(e.Endpoint + "/health")
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("etcd member %s not healthy after %v: %v (log: %s)", e.Endpoint, StartupTimeout, err, e.LogPath)
			}
			time.Sleep(100 * time.Millisecond)
		}
		// From now on Start and Restart wait for the member's health, which
		// a single member coming back to a cluster with quorum reaches.
		e.ready = func() error { return HTTPOK(e.Endpoint + "/health") }
	}
	return c
}

// Endpoints are the members' client URLs, in member order.
func (c *EtcdCluster) Endpoints() []string {
	out := make([]string, len(c.Members))
	for i, e := range c.Members {
		out[i] = e.Endpoint
	}
	return out
}

// Leader returns the index of the member that leads, asking every member
// that answers within a second (a paused or stopped one does not) and
// retrying until they agree on one, for up to StartupTimeout.
func (c *EtcdCluster) Leader(t testing.TB) int {
	t.Helper()
	deadline := time.Now().Add(StartupTimeout)
	for {
		if i, ok := c.leader(); ok {
			return i
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd cluster: no leader after %v", StartupTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *EtcdCluster) leader() (int, bool) {
	ids := map[uint64]int{}
	var leader uint64
	for i, e := range c.Members {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint}, DialTimeout: time.Second})
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := cli.Status(ctx, e.Endpoint)
		cancel()
		cli.Close()
		if err != nil {
			continue
		}
		ids[st.Header.MemberId] = i
		if st.Leader == 0 || (leader != 0 && st.Leader != leader) {
			return 0, false
		}
		leader = st.Leader
	}
	i, ok := ids[leader]
	return i, ok
}

// Client returns a client of every member, closed when the test ends.
func (c *EtcdCluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

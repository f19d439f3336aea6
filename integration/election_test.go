//go:build integration

package integration

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdns/etcdns/integration/harness"
	"github.com/etcdns/etcdns/publisher/elect"
)

// TestPublisherLeaseOutlivesAFrozenMember freezes the member the leading
// publisher renews its election lease through, a follower, for three
// lease TTLs: the renewals move to another member, and the publisher
// keeps its term (the same election key, its lease alive) with no
// "leadership lost". A session's own keep-alive stream, which stays on the
// member it was opened on, lost the lease 14 s into such a freeze.
func TestPublisherLeaseOutlivesAFrozenMember(t *testing.T) {
	c := harness.StartEtcdCluster(t, 3)
	l := c.Leader(t)
	eps := []string{c.Members[(l+1)%3].Endpoint, c.Members[l].Endpoint, c.Members[(l+2)%3].Endpoint}
	const ttl = 5 * time.Second
	metrics := fmt.Sprintf("http://127.0.0.1:%d", harness.FreePort(t))
	p := harness.StartProcess(t, harness.BuildBinary(t, "./cmd/publisher"), []string{
		"--etcd.endpoints=" + strings.Join(eps, ","),
		"--publisher.source=files:" + filepath.Join(harness.RepoRoot(t), "examples"),
		"--cluster.id=it", "--publisher.lease-ttl=" + ttl.String(),
		"--publisher.metrics-listen=" + strings.TrimPrefix(metrics, "http://"),
	}, nil, func() error { return harness.HTTPOK(metrics + "/readyz") })
	cli := c.Members[l].Client(t)
	// /readyz answers once the source has synced, which may be before
	// the campaign has put its key: a standby is ready too.
	waitFor(t, 10*time.Second, func() error {
		resp, err := cli.Get(context.Background(), elect.Key("it"), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil && resp.Count == 0 {
			err = fmt.Errorf("no election key under %s yet", elect.Key("it"))
		}
		return err
	})
	term := func() (string, int64, clientv3.LeaseID) {
		resp, err := cli.Get(context.Background(), elect.Key("it"), clientv3.WithPrefix())
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("election keys: %v, %v; want the leader's alone", resp, err)
		}
		kv := resp.Kvs[0]
		return string(kv.Key), kv.CreateRevision, clientv3.LeaseID(kv.Lease)
	}
	key, rev, lease := term()

	// The member that receives the renewals: its count of keep-alive
	// messages grows over a third of the TTL, when one is due.
	before := make([]float64, 3)
	for i, m := range c.Members {
		before[i] = keepAlives(t, m.Endpoint)
	}
	carrier := -1
	for deadline := time.Now().Add(3 * ttl); carrier < 0 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for i, m := range c.Members {
			if keepAlives(t, m.Endpoint) > before[i] {
				carrier = i
			}
		}
	}
	if carrier < 0 {
		t.Fatal("no member received the lease's renewals")
	}
	t.Logf("freezing member %d, which receives the renewals (the leader is %d); endpoints %v", carrier, l, eps)
	c.Members[carrier].Pause()
	time.Sleep(3 * ttl)
	c.Members[carrier].Resume()

	if k, r, le := term(); k != key || r != rev || le != lease {
		t.Fatalf("the term changed during the freeze: %s@%d lease %x, was %s@%d lease %x", k, r, le, key, rev, lease)
	}
	if resp, err := cli.TimeToLive(context.Background(), lease); err != nil || resp.TTL <= 0 {
		t.Fatalf("the leader's lease after the freeze: %v, %v", resp, err)
	}
	if log := faultLog(t, p); strings.Contains(log, "leadership lost") {
		t.Fatalf("the publisher lost its term:\n%s", log)
	}
}

// keepAlives is how many lease keep-alive messages member ep received.
func keepAlives(t *testing.T, ep string) float64 {
	t.Helper()
	return faultMetric(t, ep, `grpc_server_msg_received_total{grpc_method="LeaseKeepAlive",grpc_service="etcdserverpb.Lease",grpc_type="bidi_stream"}`)
}

// TestPublisherWithoutElection: with publisher.leader-election false two
// replicas both write, each fenced by an election key of its own under
// the cluster's election prefix; `publisher withdraw` refuses while they
// run, and their keys go when they stop.
func TestPublisherWithoutElection(t *testing.T) {
	etcd := harness.StartEtcd(t)
	cli := etcd.Client(t)
	bin := harness.BuildBinary(t, "./cmd/publisher")
	start := func() (*harness.Process, string) {
		metrics := fmt.Sprintf("http://127.0.0.1:%d", harness.FreePort(t))
		p := harness.StartProcess(t, bin, []string{
			"--etcd.endpoints=" + etcd.Endpoint,
			"--publisher.source=files:" + filepath.Join(harness.RepoRoot(t), "examples"),
			"--cluster.id=it", "--publisher.leader-election=false",
			"--publisher.metrics-listen=" + strings.TrimPrefix(metrics, "http://"),
		}, nil, func() error { return harness.HTTPOK(metrics + "/readyz") })
		return p, metrics
	}
	p1, m1 := start()
	p2, m2 := start()
	for _, m := range []string{m1, m2} {
		publisherWritten(t, m)
		if v := faultMetric(t, m, "etcdns_publisher_leader"); v != 1 {
			t.Errorf("etcdns_publisher_leader of the replica at %s is %v, want 1: every replica writes", m, v)
		}
	}
	writers := func() map[string]string { return etcdPrefix(t, cli, elect.Key("it")+"/") }
	got := writers()
	pids := map[string]bool{}
	for k, v := range got {
		host, pid, _ := strings.Cut(v, "/")
		if !strings.HasPrefix(k, elect.Key("it")+"/writers/"+v+"/") || host == "" {
			t.Errorf("election key %s = %s, want one under %s/writers/<its id>/", k, v, elect.Key("it"))
		}
		pids[pid] = true
	}
	if len(got) != 2 || !pids[fmt.Sprint(p1.Pid())] || !pids[fmt.Sprint(p2.Pid())] {
		t.Errorf("election keys %v, want one of each replica (pids %d and %d)", got, p1.Pid(), p2.Pid())
	}

	out, err := exec.Command(bin, "withdraw", "--etcd.endpoints", etcd.Endpoint, "--cluster.id", "it").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "a publisher of this cluster is running") {
		t.Errorf("withdraw while two writers run: %v\n%s\nwant it refused", err, out)
	}

	p1.Stop()
	p2.Stop()
	if got := writers(); len(got) != 0 {
		t.Errorf("election keys after both stopped: %v", got)
	}
}

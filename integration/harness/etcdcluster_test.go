//go:build integration

package harness

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestEtcdCluster(t *testing.T) {
	t.Parallel()
	c := StartEtcdCluster(t, 3)
	if got := len(c.Endpoints()); got != 3 {
		t.Fatalf("%d endpoints, want 3", got)
	}
	if got := c.Members[0].Etcdctl(t, "member", "list"); len(splitLines(got)) != 3 {
		t.Fatalf("member list:\n%s\nwant 3 members", got)
	}
	c.Members[0].Etcdctl(t, "put", "/harness/cluster", "v1")
	for i, m := range c.Members {
		if got := m.Etcdctl(t, "get", "--print-value-only", "/harness/cluster"); got != "v1" {
			t.Fatalf("member %d: get = %q, want v1", i, got)
		}
	}

	// The leader killed: the other two elect a new one and keep serving
	// writes; the old one comes back as a follower on its data.
	old := c.Leader(t)
	c.Members[old].Kill()
	next := c.Leader(t)
	if next == old {
		t.Fatalf("leader is still member %d after it was killed", old)
	}
	c.Members[next].Etcdctl(t, "put", "/harness/cluster", "v2")
	c.Members[old].Start()
	if got := c.Members[old].Etcdctl(t, "get", "--print-value-only", "/harness/cluster"); got != "v2" {
		t.Fatalf("restarted member: get = %q, want v2", got)
	}
}

// Isolate, DelayPeers and ReplaceMember, each seen in what the members
// report and apply.
func TestEtcdClusterPeerFaults(t *testing.T) {
	t.Parallel()
	c := StartEtcdCluster(t, 3)
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	put := func(k string) int64 {
		t.Helper()
		r, err := cli.Put(ctx, k, "v")
		if err != nil {
			t.Fatal(err)
		}
		return r.Header.Revision
	}
	// revOf is what member i has applied, read from it alone.
	revOf := func(i int) (int64, error) {
		m := c.Members[i].Client(t)
		defer m.Close()
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		r, err := m.Get(rctx, "k", clientv3.WithSerializable())
		if err != nil {
			return 0, err
		}
		return r.Header.Revision, nil
	}
	put("k")
	leader := c.Leader(t)
	f := (leader + 1) % 3

	// Isolated, a follower loses its leader but still answers clients.
	c.Isolate(f)
	deadline := time.Now().Add(30 * time.Second)
	for {
		m := c.Members[f].Client(t)
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := m.Status(sctx, c.Members[f].Endpoint)
		cancel()
		m.Close()
		if err != nil {
			t.Fatalf("isolated member does not answer clients: %v", err)
		}
		if st.Leader == 0 || st.Leader == st.Header.MemberId {
			break // no leader, or a candidate that elected itself in its head
		}
		if time.Now().After(deadline) {
			t.Fatalf("isolated member still follows leader %x", st.Leader)
		}
		time.Sleep(100 * time.Millisecond)
	}
	rev := put("k")
	if got, err := revOf(f); err != nil || got >= rev {
		t.Fatalf("isolated member at revision %d (err %v), want behind %d", got, err, rev)
	}
	c.Heal(f)
	waitRev := func(i int, rev int64, within time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			if got, err := revOf(i); err == nil && got >= rev {
				return time.Since(start)
			}
			if time.Since(start) > within {
				t.Fatalf("member %d not at revision %d after %v", i, rev, within)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitRev(f, rev, 30*time.Second)

	// Delayed, a member applies late: a write made through the others
	// reaches it no sooner than the delay.
	// The write goes through the leader: one sent to the delayed member
	// would be answered only once that member applied it.
	lc := c.Members[c.Leader(t)].Client(t)
	f = (c.Leader(t) + 1) % 3
	c.DelayPeers(f, time.Second)
	time.Sleep(2 * time.Second) // what was in flight before arrives
	r, err := lc.Put(ctx, "k", "v")
	if err != nil {
		t.Fatal(err)
	}
	if took := waitRev(f, r.Header.Revision, 30*time.Second); took < 500*time.Millisecond {
		t.Fatalf("delayed member applied a write after %v", took)
	}
	c.DelayPeers(f, 0)

	// A replaced member comes back empty on the same URLs and catches up.
	c.ReplaceMember(t, f)
	waitRev(f, put("k"), 30*time.Second)
	if c.Members[f].Name == fmt.Sprintf("m%d", f) {
		t.Fatalf("member %d keeps its old name", f)
	}
	c.Members[c.Leader(t)].Kill()
	// The two left elect a leader and take writes again.
	for deadline := time.Now().Add(30 * time.Second); ; {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := cli.Put(pctx, "k", "v")
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write after the leader was killed: %v", err)
		}
	}
}

func splitLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

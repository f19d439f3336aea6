//go:build integration

package harness

import (
	"strings"
	"testing"
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

func splitLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

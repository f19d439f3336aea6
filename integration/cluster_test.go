//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdns/etcdns/integration/harness"
)

// Issue 23: with a real 3-member etcd cluster and two dnsd frontends given
// every member, no single-member fault and no quorum loss leaves a frontend
// blind: after each, a new change is answered by every frontend within
// clusterBound of its put, no query goes unanswered or wrong, and the watch
// restarts say why. The blind time of each fault is logged, not asserted.
func TestClusterFaultsNeverBlind(t *testing.T) {
	const clusterBound = 5 * time.Second
	c := harness.StartEtcdCluster(t, 3)
	clients := make([]*clientv3.Client, 3)
	for i, m := range c.Members {
		clients[i] = m.Client(t)
	}
	steady := clusterCheck("steady", "10.1.0.1")
	clusterPut(t, clients[0], "steady", "10.1.0.1")
	fronts := []*dnsdInstance{
		faultDnsd(t, strings.Join(c.Endpoints(), ",")),
		faultDnsd(t, strings.Join(c.Endpoints(), ",")),
	}
	var loads []*faultLoad
	for _, d := range fronts {
		waitFor(t, 10*time.Second, func() error { return faultAnswers(d.Addr, []check{steady}) })
		loads = append(loads, startFaultLoad(d.Addr, 100, []check{steady}))
	}
	restarts := func(reasons ...string) []float64 {
		out := make([]float64, len(fronts))
		for i, d := range fronts {
			for _, r := range reasons {
				out[i] += faultMetric(t, d.Metrics, fmt.Sprintf("etcdns_dnsd_watch_restarts_total{reason=%q}", r))
			}
		}
		return out
	}
	watched := func(d *dnsdInstance) int {
		for i, ep := range c.Endpoints() {
			if faultMetric(t, d.Metrics, fmt.Sprintf("etcdns_dnsd_watch_endpoint{endpoint=%q}", ep)) == 1 {
				return i
			}
		}
		t.Fatalf("dnsd at %s reports no watch endpoint", d.Addr)
		return -1
	}
	changes := 0
	// change writes a new record through member via and returns how long
	// the slowest frontend took to answer it after the put succeeded.
	change := func(via int) time.Duration {
		t.Helper()
		changes++
		name, ip := fmt.Sprintf("change%d", changes), fmt.Sprintf("10.2.0.%d", changes)
		put := clusterPut(t, clients[via], name, ip)
		ch := clusterCheck(name, ip)
		var slowest time.Duration
		for _, d := range fronts {
			waitFor(t, clusterBound+time.Since(put), func() error { return faultAnswers(d.Addr, []check{ch}) })
			slowest = max(slowest, time.Since(put))
		}
		if slowest > clusterBound {
			t.Errorf("change %s answered by every frontend %v after its put, want within %v", name, slowest, clusterBound)
		}
		return slowest
	}
	other := func(not ...int) int {
		for i := range c.Members {
			if !containsInt(not, i) {
				return i
			}
		}
		return -1
	}
	blind := map[string]time.Duration{}
	change(0) // all current before the faults

	// The detection's cost: what the frontends send etcd on their watch
	// streams while nothing changes (progress requests, one a second each
	// by default), counted by the members themselves.
	watchMsgs := func() float64 {
		n := 0.0
		for _, m := range c.Members {
			n += faultMetric(t, m.Endpoint, `grpc_server_msg_received_total{grpc_method="Watch",grpc_service="etcdserverpb.Watch",grpc_type="bidi_stream"}`)
		}
		return n
	}
	const idle = 5 * time.Second
	n0 := watchMsgs()
	time.Sleep(idle)
	t.Logf("detection cost while idle: %.2f watch-stream requests/s per frontend", (watchMsgs()-n0)/idle.Seconds()/float64(len(fronts)))

	// 1. The member holding the first frontend's watch frozen, then resumed.
	m := watched(fronts[0])
	before := restarts("progress_timeout")
	t.Logf("freezing member %d, which frontend 0 watches", m)
	c.Members[m].Pause()
	blind["member holding the watch frozen"] = change(other(m))
	after := restarts("progress_timeout")
	for i, d := range fronts {
		if watched(d) == m {
			t.Errorf("frontend %d still watches the frozen member %d", i, m)
		}
	}
	if after[0] <= before[0] {
		t.Errorf("frontend 0: restarts{progress_timeout} %v, before the freeze %v", after[0], before[0])
	}
	c.Members[m].Resume()
	waitFor(t, 20*time.Second, func() error { return harness.HTTPOK(c.Members[m].Endpoint + "/health") })

	// 2. The leader killed (and started again); leadership is moved first
	// to the member the first frontend watches, so that its watch is lost.
	l := c.Leader(t)
	if w := watched(fronts[0]); w != l {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := clients[w].Status(ctx, c.Members[w].Endpoint)
		if err == nil {
			_, err = clients[l].MoveLeader(ctx, st.Header.MemberId)
		}
		cancel()
		if err != nil {
			t.Fatalf("moving the leader from member %d to %d: %v", l, w, err)
		}
		if l = c.Leader(t); l != w {
			t.Fatalf("leader is member %d after moving it to %d", l, w)
		}
	}
	onLeader := make([]bool, len(fronts))
	for i, d := range fronts {
		onLeader[i] = watched(d) == l
	}
	before = restarts("progress_timeout", "no_leader", "closed", "error")
	t.Logf("killing the leader, member %d; frontends watching it: %v", l, onLeader)
	c.Members[l].Kill()
	blind["leader killed"] = change(other(l))
	after = restarts("progress_timeout", "no_leader", "closed", "error")
	for i := range fronts {
		if onLeader[i] && after[i] <= before[i] {
			t.Errorf("frontend %d watched the killed leader, but its watch restarts did not move (%v)", i, after[i])
		}
	}
	c.Members[l].Start()

	// 3. Quorum lost: two members stopped, one of them the first frontend's,
	// so that it cannot stay where it is; then both started again.
	m = watched(fronts[0])
	keep := other(m)
	before = restarts("no_leader", "progress_timeout", "closed", "error")
	var stopped []int
	for i := range c.Members {
		if i != keep {
			stopped = append(stopped, i)
			c.Members[i].Stop()
		}
	}
	// Long enough for the lone member to cancel leader-requiring watches.
	time.Sleep(6 * time.Second)
	for _, i := range stopped {
		go c.Members[i].Start() // each waits for health, which needs the other
	}
	waitFor(t, 30*time.Second, func() error {
		for _, i := range stopped {
			if err := harness.HTTPOK(c.Members[i].Endpoint + "/health"); err != nil {
				return err
			}
		}
		return nil
	})
	blind["quorum lost and restored"] = change(keep)
	after = restarts("no_leader", "progress_timeout", "closed", "error")
	lost := restarts("no_leader")
	for i := range fronts {
		if after[i] <= before[i] {
			t.Errorf("frontend %d: watch restarts %v across the quorum loss, %v before it", i, after[i], before[i])
		}
	}
	t.Logf("restarts{no_leader} by frontend after the quorum loss: %v", lost)

	for i, ld := range loads {
		st := ld.Stop()
		t.Logf("frontend %d: %d queries in %v, %d failed", i, st.sent, st.took.Round(time.Millisecond), st.failed)
		if st.failed > 0 || st.sent == 0 {
			t.Errorf("frontend %d: %d of %d queries failed: %v", i, st.failed, st.sent, st.failures)
		}
	}
	for _, f := range []string{"member holding the watch frozen", "leader killed", "quorum lost and restored"} {
		t.Logf("blind time, %s: %v (put to answered on every frontend; shared 2-vCPU VM)", f, blind[f].Round(time.Millisecond))
	}
}

func clusterCheck(name, ip string) check {
	q := name + ".default.svc.cluster.local."
	return check{qname: q, qtype: dns.TypeA, answer: []string{q + " 5 IN A " + ip}}
}

// clusterPut writes one record, retrying while the cluster elects a leader,
// and returns when the put succeeded.
func clusterPut(t *testing.T, cli *clientv3.Client, name, ip string) time.Time {
	t.Helper()
	key := "/skydns/local/cluster/svc/default/" + name + "/x"
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := cli.Put(ctx, key, fmt.Sprintf(`{"host":%q}`, ip))
		cancel()
		if err == nil {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("put %s: %v", key, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

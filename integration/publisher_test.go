//go:build integration

package integration

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/etcdns/etcdns/integration/harness"
	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/keys/kube"
)

// publisherProc runs the built publisher against the harness's etcd and
// kube-apiserver and waits for /readyz.
func publisherProc(t *testing.T, bin string, etcd *harness.Etcd, api *harness.KubeAPIServer, extra ...string) (*harness.Process, string) {
	t.Helper()
	metrics := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	args := append([]string{
		"--etcd.endpoints=" + etcd.Endpoint,
		"--publisher.kubeconfig=" + api.Kubeconfig,
		"--publisher.metrics-listen=" + metrics,
		"--publisher.lease-ttl=3s",
		"--cluster.id=it",
	}, extra...)
	p := harness.StartProcess(t, bin, args, nil, func() error { return harness.HTTPOK("http://" + metrics + "/readyz") })
	return p, metrics
}

func etcdRecords(t *testing.T, cli *clientv3.Client) map[string]string {
	t.Helper()
	return etcdPrefix(t, cli, "/skydns/")
}

// etcdPrefix is every key under prefix with its value.
func etcdPrefix(t *testing.T, cli *clientv3.Client, prefix string) map[string]string {
	t.Helper()
	r, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range r.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

// expected is what keys/kube computes from the objects as the API server
// stored them (with its defaults filled in).
func expected(t *testing.T, b kube.Builder, kc kubernetes.Interface) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{b.Version().Key: string(b.Version().Value.Encode())}
	svcs, err := kc.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sls, err := kc.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var slices []*discoveryv1.EndpointSlice
	for i := range sls.Items {
		slices = append(slices, &sls.Items[i])
	}
	for i := range svcs.Items {
		recs, _ := b.Service(&svcs.Items[i], slices)
		for _, r := range recs {
			out[r.Key] = string(r.Value.Encode())
		}
	}
	return out
}

func waitRecords(t *testing.T, cli *clientv3.Client, want func() map[string]string) map[string]string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		w := want()
		got := etcdRecords(t, cli)
		if reflect.DeepEqual(got, w) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd records:\n%s\nwant:\n%s", lines(got), lines(w))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func lines(m map[string]string) string {
	var out []string
	for k, v := range m {
		out = append(out, k+" "+v)
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// publisherWorld starts an etcd and a kube-apiserver storing in it, and
// returns clients of both and the builder of the records a publisher of
// cluster "it" writes there.
func publisherWorld(t *testing.T) (*harness.Etcd, *harness.KubeAPIServer, *clientv3.Client, kubernetes.Interface, kube.Builder) {
	t.Helper()
	etcd := harness.StartEtcd(t)
	api := harness.StartKubeAPIServer(t, etcd)
	kc, err := kubernetes.NewForConfig(api.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	b, err := kube.NewBuilder(keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: "it", TTL: 5}, "cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	return etcd, api, etcd.Client(t), kc, b
}

func TestPublisherKubernetes(t *testing.T) {
	etcd, api, cli, kc, b := publisherWorld(t)
	bin := harness.BuildBinary(t, "./cmd/publisher")
	ctx := context.Background()
	want := func() map[string]string { return expected(t, b, kc) }

	// Two replicas: the first leads (it has written before the second
	// starts), the other waits.
	p1, m1 := publisherProc(t, bin, etcd, api)
	publisherWritten(t, "http://"+m1)
	p2, _ := publisherProc(t, bin, etcd, api)
	// The API server's own "kubernetes" service is published.
	got := waitRecords(t, cli, want)
	if _, ok := got["/skydns/arpa/in-addr/10/96/0/1"]; !ok {
		t.Fatalf("no PTR for the kubernetes service:\n%s", lines(got))
	}

	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.96.7.7", Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
	if _, err := kc.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hl := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "db"},
		Spec: corev1.ServiceSpec{ClusterIP: "None", Ports: []corev1.ServicePort{
			{Name: "pg", Port: 5432, Protocol: corev1.ProtocolTCP}}},
	}
	if _, err := kc.CoreV1().Services("default").Create(ctx, hl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pname, pport, proto, host := "pg", int32(5432), corev1.ProtocolTCP, "db-0"
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "db-a", Labels: map[string]string{discoveryv1.LabelServiceName: "db"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.244.0.10"}, Hostname: &host},
			{Addresses: []string{"10.244.0.11"}},
		},
		Ports: []discoveryv1.EndpointPort{{Name: &pname, Port: &pport, Protocol: &proto}},
	}
	if _, err := kc.DiscoveryV1().EndpointSlices("default").Create(ctx, sl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got = waitRecords(t, cli, want)
	// Exact keys and values, spelled out for the records that matter most.
	mustValue := func(key, value string) {
		t.Helper()
		if got[key] != value {
			t.Errorf("%s = %q, want %q", key, got[key], value)
		}
	}
	mustValue("/skydns/arpa/in-addr/10/96/7/7", `{"host":"web.default.svc.cluster.local","ttl":5,"group":"7.7.96.10.in-addr.arpa","cluster":"it","source":"service/default/web"}`)
	mustValue("/skydns/arpa/in-addr/10/244/0/10", `{"host":"db-0.db.default.svc.cluster.local","ttl":5,"group":"10.0.244.10.in-addr.arpa","cluster":"it","source":"service/default/db"}`)
	mustValue("/skydns/arpa/in-addr/10/244/0/11", `{"host":"10-244-0-11.db.default.svc.cluster.local","ttl":5,"group":"11.0.244.10.in-addr.arpa","cluster":"it","source":"service/default/db"}`)
	a, _ := b.Address("web.default.svc.cluster.local", "service/default/web", mustAddr("10.96.7.7"))
	mustValue(a.Key, `{"host":"10.96.7.7","ttl":5,"group":"web.default.svc.cluster.local","cluster":"it","source":"service/default/web"}`)
	// The real etcdctl sees the same.
	if out := etcd.Etcdctl(t, "get", "--print-value-only", "/skydns/arpa/in-addr/10/96/7/7"); !strings.Contains(out, `"source":"service/default/web"`) {
		t.Errorf("etcdctl: %s", out)
	}

	// Update: an endpoint leaves, another joins.
	sl.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"10.244.0.10"}, Hostname: &host}, {Addresses: []string{"10.244.0.12"}}}
	if _, err := kc.DiscoveryV1().EndpointSlices("default").Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got = waitRecords(t, cli, want)
	if _, ok := got["/skydns/arpa/in-addr/10/244/0/11"]; ok {
		t.Error("PTR of a removed endpoint is still there")
	}

	// Failover: the leader is stopped (SIGTERM resigns); the other replica
	// takes over and keeps publishing.
	p1.Stop()
	if err := kc.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	got = waitRecords(t, cli, want)
	if _, ok := got["/skydns/arpa/in-addr/10/96/7/7"]; ok {
		t.Error("deleted service's PTR is still there")
	}

	// Restart over an unchanged world: no write under /skydns.
	p2.Stop()
	rev := etcdRevision(t, cli)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watch := cli.Watch(wctx, "/skydns/", clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	p3, m3 := publisherProc(t, bin, etcd, api)
	publisherWritten(t, "http://"+m3)
	// A key put now comes after anything the restart wrote: it must be
	// the first event.
	const sentinel = "/skydns/zz-test-sentinel"
	if _, err := cli.Put(ctx, sentinel, "x"); err != nil {
		t.Fatal(err)
	}
	select {
	case wr := <-watch:
		if len(wr.Events) == 0 || string(wr.Events[0].Kv.Key) != sentinel {
			t.Fatalf("restart wrote: %v", wr.Events)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch saw nothing, not even the test's own put")
	}
	if _, err := cli.Delete(ctx, sentinel); err != nil {
		t.Fatal(err)
	}

	// Orphans: a service deleted while no publisher runs is cleaned up by
	// the next one.
	p3.Stop()
	if err := kc.CoreV1().Services("default").Delete(ctx, "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	publisherProc(t, bin, etcd, api)
	waitRecords(t, cli, want)
}

func etcdRevision(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	r, err := cli.Get(context.Background(), "/none")
	if err != nil {
		t.Fatal(err)
	}
	return r.Header.Revision
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// With cluster.pods verified, a pod's address record comes from the real
// API server's Pod (through the publisher's lean cache, which keeps only
// its name, phase and addresses), follows its status, and goes when the
// pod finishes.
func TestPublisherPodRecords(t *testing.T) {
	etcd, api, cli, kc, b := publisherWorld(t)
	ctx := context.Background()
	publisherProc(t, harness.BuildBinary(t, "./cmd/publisher"), etcd, api, "--cluster.pods=verified")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-0", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			Containers:                   []corev1.Container{{Name: "web", Image: "registry.example/web:1", Env: []corev1.EnvVar{{Name: "PORT", Value: "8080"}}}},
			AutomountServiceAccountToken: new(bool),
		},
	}
	// No controller manager runs to make the namespace's service account,
	// which admitting a pod needs.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "default"}}
	if _, err := kc.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := kc.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	key := func(ip string) string {
		r, _ := b.Address(keys.DashedIP(mustAddr(ip))+".default.pod.cluster.local", "pod/default/web-0", mustAddr(ip))
		return r.Key
	}
	status := func(phase corev1.PodPhase, ips ...string) {
		t.Helper()
		pod.Status = corev1.PodStatus{Phase: phase}
		for _, ip := range ips {
			pod.Status.PodIPs = append(pod.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		if len(ips) > 0 {
			pod.Status.PodIP = ips[0]
		}
		if pod, err = kc.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	podRecords := func(want map[string]string) {
		t.Helper()
		var got map[string]string
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			got = map[string]string{}
			for k, v := range etcdRecords(t, cli) {
				if strings.Contains(k, "/pod/") {
					got[k] = v
				}
			}
			if maps.Equal(got, want) || time.Now().After(deadline) {
				break
			}
		}
		if !maps.Equal(got, want) {
			t.Fatalf("pod records:\n%s\nwant:\n%s", lines(got), lines(want))
		}
	}
	podRecords(map[string]string{}) // pending, no address yet
	status(corev1.PodRunning, "10.244.1.5")
	podRecords(map[string]string{
		key("10.244.1.5"): `{"host":"10.244.1.5","ttl":5,"group":"10-244-1-5.default.pod.cluster.local","cluster":"it","source":"pod/default/web-0"}`,
	})
	status(corev1.PodRunning, "10.244.1.5", "fd00::5")
	podRecords(map[string]string{
		key("10.244.1.5"): `{"host":"10.244.1.5","ttl":5,"group":"10-244-1-5.default.pod.cluster.local","cluster":"it","source":"pod/default/web-0"}`,
		key("fd00::5"):    `{"host":"fd00::5","ttl":5,"group":"fd00--5.default.pod.cluster.local","cluster":"it","source":"pod/default/web-0"}`,
	})
	// A finished pod's addresses are handed out again: its records go.
	status(corev1.PodSucceeded, "10.244.1.5", "fd00::5")
	podRecords(map[string]string{})
}

// A member of the record store frozen (SIGSTOP) while the publisher writes
// to it: every Service created meanwhile is in etcd within one
// publisher.write-timeout of its creation plus a margin, not two or more.
// Several Services are created at once, so that the writes of several
// units wait together and are retried together.
//
//   - follower: the frozen member is the publisher's first endpoint. A
//     client that round-robins its members sent one of any three retries
//     to the frozen member again.
//   - leader: the publisher's first endpoint is a live follower, and the
//     frozen leader comes next. The writes the follower forwarded to the
//     leader are lost with it; the retry must skip the frozen leader, not
//     go to it as the next in line.
func TestPublisherFrozenMember(t *testing.T) {
	for _, frozenRole := range []string{"follower", "leader"} {
		t.Run(frozenRole, func(t *testing.T) { publisherFrozenMember(t, frozenRole) })
	}
}

// failoverProbe is how often etcdclient.Failover probes the endpoint of a
// request that has not come back.
const failoverProbe = 250 * time.Millisecond

func publisherFrozenMember(t *testing.T, frozenRole string) {
	c := harness.StartEtcdCluster(t, 3)
	api := harness.StartKubeAPIServer(t, harness.StartEtcd(t))
	kc, b := faultKube(t, api), faultBuilder(t)
	l := c.Leader(t)
	// The publisher's endpoints: a follower, the leader, the other
	// follower. A frozen first endpoint leaves reads unanswered, and the
	// writes move to the next. With the leader frozen, the first endpoint
	// holds the writes it forwarded until the others have elected a
	// leader; the writes end when its term moves and are retried there.
	eps := []string{c.Members[(l+1)%3].Endpoint, c.Members[l].Endpoint, c.Members[(l+2)%3].Endpoint}
	frozen := (l + 1) % 3
	if frozenRole == "leader" {
		frozen = l
	}
	cli := c.Members[(l+2)%3].Client(t) // never the frozen member
	const writeTimeout = 2 * time.Second
	p, metrics := faultPublisher(t, strings.Join(eps, ","), api, true, "--publisher.write-timeout="+writeTimeout.String())
	waitRecords(t, cli, func() map[string]string { return expected(t, b, kc) })

	t.Logf("freezing member %d (the %s); the publisher's endpoints are %v", frozen, frozenRole, eps)
	c.Members[frozen].Pause()
	defer c.Members[frozen].Resume()
	// How long the others took to elect a leader: etcd's election timeout
	// is a second, randomized up to two, and a loaded machine can take
	// longer still, past the write timeout.
	frozeAt := time.Now()
	elected := make(chan time.Duration, 1)
	if frozenRole == "leader" {
		go func() {
			for time.Since(frozeAt) < 30*time.Second {
				for i, m := range c.Members {
					if i != frozen && harness.Metric(m.Endpoint, "etcd_server_is_leader") == 1 {
						elected <- time.Since(frozeAt)
						return
					}
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	const n = 9
	created := make([]time.Time, n)
	want := make([]map[string]string, n)
	for i := range n {
		svc := faultClusterIP(fmt.Sprintf("frozen%d", i), fmt.Sprintf("10.96.4.%d", i+1), corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP})
		svc, err := kc.CoreV1().Services("default").Create(context.Background(), svc, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created[i] = time.Now()
		recs, _ := b.Service(svc, nil)
		want[i] = map[string]string{}
		for _, r := range recs {
			want[i][r.Key] = string(r.Value.Encode())
		}
	}
	took := make([]time.Duration, n)
	for left, deadline := n, time.Now().Add(30*time.Second); left > 0; time.Sleep(20 * time.Millisecond) {
		got := etcdRecords(t, cli)
		for i := range n {
			if took[i] != 0 {
				continue
			}
			in := true
			for k, v := range want[i] {
				in = in && got[k] == v
			}
			if in {
				took[i] = time.Since(created[i])
				left--
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("services not in etcd 30 s after their creation (0: not yet): %v", took)
		}
	}
	slowest := slices.Max(took)
	t.Logf("with member %d frozen, each service in etcd after %v; slowest %v", frozen, took, slowest.Round(time.Millisecond))
	if slowest >= 2*writeTimeout {
		t.Errorf("a service was in etcd %v after its creation with the %s frozen, want less than two write timeouts (%v)", slowest, frozenRole, 2*writeTimeout)
	}
	waitRecords(t, cli, func() map[string]string { return expected(t, b, kc) })
	// With the leader frozen, the writes end when the term moves and need
	// no move. One CI run saw the first of the nine wait out its timeout
	// and move as before: its endpoint's term was not known when it was
	// sent, and its first probe came after the election. Such a write now
	// asks for the term before it is sent (TestFailoverFirstWriteKnowsItsTerm);
	// at most one move stays allowed, for a read that waits on the frozen
	// leader's read index across its own timeout.
	maxMoves := 1.0
	line := fmt.Sprintf(`msg="etcd requests moved to the next endpoint" from=%s to=%s reason="not answering"`, eps[0], eps[1])
	if frozenRole == "leader" {
		line = "etcd elected a new leader while the request waited"
		// A term that moves only after the writes' timeout cannot end
		// them: they time out and move, as before the probes (one CI
		// run, the election slower than the 2 s write timeout).
		select {
		case d := <-elected:
			t.Logf("a new leader after %v", d.Round(time.Millisecond))
			if d >= writeTimeout-failoverProbe {
				t.Logf("the election took longer than the writes waited: they timed out")
				line = `reason=timeout`
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no new leader elected 30 s after the freeze")
		}
	}
	moves := faultMetric(t, metrics, "etcdns_publisher_etcd_endpoint_moves_total")
	if frozenRole == "follower" && moves != 1 || moves > maxMoves {
		t.Errorf("etcdns_publisher_etcd_endpoint_moves_total = %v, want 1 with a follower frozen, at most 1 with the leader", moves)
	}
	if log := faultLog(t, p); strings.Count(log, "etcd requests moved") != int(moves) || !strings.Contains(log, line) {
		t.Errorf("want %v moves and the line %s in the publisher's log:\n%s", moves, line, log)
	}
}

//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/etcdns/etcdns/integration/harness"
	"github.com/etcdns/etcdns/server/store"
)

// etcdLogins is the Authenticate calls etcd has answered: each is a bcrypt
// hash of the password and a raft proposal.
func etcdLogins(t *testing.T, etcd *harness.Etcd) float64 {
	return faultMetric(t, etcd.Endpoint, `grpc_server_handled_total{grpc_code="OK",grpc_method="Authenticate",grpc_service="etcdserverpb.Auth",grpc_type="unary"}`)
}

// TestPasswordLogins: a dnsd that logs in with a password, through an etcd
// grpc-proxy as the node-local-proxied layout's does (dnsd-etcd-auth),
// asks etcd for a token once, not for each of its clients and each watch it
// opens; it keeps that token when its watch moves, and logs in again only
// when etcd has dropped it, following changes throughout.
func TestPasswordLogins(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	etcd := harness.StartEtcd(t)
	// A proxy's health check reads without a user, which etcd refuses once
	// auth is on: they start before.
	proxy, other := harness.StartGRPCProxy(t, etcd.Endpoint), harness.StartGRPCProxy(t, etcd.Endpoint)
	root := etcd.EnableAuth(t, "rootpw", "dnsd", "dnsdpw", "/skydns/")
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	b := faultBuilder(t)
	svc := httpService(b)
	dnsdPut(t, root, append(svc("kubernetes", "10.96.0.1"), b.Version()))
	before := etcdLogins(t, etcd)
	d := loginDnsd(t, proxy.Endpoint+","+other.Endpoint, "dnsdpw", true)
	waitFor(t, 10*time.Second, func() error { return faultAnswers(d.Addr, serviceA("kubernetes", "10.96.0.1")) })
	dnsdPut(t, root, svc("first", "10.96.1.1"))
	waitFor(t, 10*time.Second, func() error { return faultAnswers(d.Addr, serviceA("first", "10.96.1.1")) })
	if n := etcdLogins(t, etcd) - before; n != 1 {
		t.Fatalf("dnsd's start, load and watch logged in %v times, want once", n)
	}

	// The proxy the watch is on stops: the watch moves to the other, with
	// the same token.
	on, _ := watchedProxy(t, d, proxy, other)
	on.Process.Kill()
	waitFor(t, 10*time.Second, func() error {
		if n := watchRestarts(t, d.Metrics); n == 0 {
			return fmt.Errorf("no watch restart yet")
		}
		return nil
	})
	dnsdPut(t, root, svc("second", "10.96.1.2"))
	waitFor(t, 10*time.Second, func() error { return faultAnswers(d.Addr, serviceA("second", "10.96.1.2")) })
	if n := etcdLogins(t, etcd) - before; n != 1 {
		t.Fatalf("after the watch moved, dnsd had logged in %v times, want once", n)
	}

	// etcd drops a user's tokens when the user is deleted: dnsd's next
	// request is refused, and it logs in again.
	must(root.UserDelete(ctx, "dnsd"))
	must(root.UserAdd(ctx, "dnsd", "dnsdpw"))
	must(root.UserGrantRole(ctx, "dnsd", "dnsd"))
	waitFor(t, 10*time.Second, func() error {
		if n := etcdLogins(t, etcd) - before; n != 2 {
			return fmt.Errorf("dnsd logged in %v times since its start, want twice", n)
		}
		return nil
	})
	dnsdPut(t, root, svc("third", "10.96.1.3"))
	waitFor(t, 10*time.Second, func() error { return faultAnswers(d.Addr, serviceA("third", "10.96.1.3")) })
	if n := etcdLogins(t, etcd) - before; n != 2 {
		t.Fatalf("dnsd logged in %v times since its start, want twice", n)
	}

	// A wrong password: dnsd stays up and not ready, and sends it again
	// only after a wait that doubles from a second.
	refused := func() float64 { // etcd answers a wrong password InvalidArgument
		return faultMetric(t, etcd.Endpoint, `grpc_server_handled_total{grpc_code="InvalidArgument",grpc_method="Authenticate",grpc_service="etcdserverpb.Auth",grpc_type="unary"}`)
	}
	before = refused()
	wrong := loginDnsd(t, etcd.Endpoint, "nope", false)
	time.Sleep(3500 * time.Millisecond) // a wait: it must send nothing more meanwhile
	if err := harness.HTTPOK(wrong.Metrics + "/readyz"); err == nil {
		t.Fatal("dnsd with a wrong password is ready")
	}
	// Sent at its start, after 1 s and after 2 s more: three at most.
	if n := refused() - before; n < 1 || n > 3 {
		t.Fatalf("dnsd sent a wrong password %v times in 3.5 s, want 1 to 3", n)
	}
	log, err := os.ReadFile(wrong.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), `etcd refused user \"dnsd\"'s password`) {
		t.Fatalf("dnsd's log does not name the refused password:\n%s", log)
	}
}

// watchRestarts is dnsd's watch restarts, every reason.
func watchRestarts(t *testing.T, metrics string) float64 {
	var n float64
	for _, reason := range []string{store.ReasonUnreachable, store.ReasonClosed, store.ReasonError, store.ReasonNoLeader, store.ReasonLagging, store.ReasonProgressTimeout, store.ReasonCompacted} {
		n += faultMetric(t, metrics, `etcdns_dnsd_watch_restarts_total{reason="`+reason+`"}`)
	}
	return n
}

// TestPasswordTokenLapses: etcd drops a token nobody used for
// --auth-token-ttl. A dnsd whose watch then moves opens it with that token;
// the refused watch asks the same endpoint again at once, logged in anew,
// rather than moving on to the next endpoint after a wait.
func TestPasswordTokenLapses(t *testing.T) {
	etcd := harness.StartEtcd(t, harness.WithEtcdArgs("--auth-token-ttl=2"))
	proxy, other := harness.StartGRPCProxy(t, etcd.Endpoint), harness.StartGRPCProxy(t, etcd.Endpoint)
	root := etcd.EnableAuth(t, "rootpw", "dnsd", "dnsdpw", "/skydns/")
	b := faultBuilder(t)
	svc := httpService(b)
	dnsdPut(t, root, append(svc("kubernetes", "10.96.0.1"), b.Version()))
	// Liveness reads (the only requests through a proxy once loaded) far
	// apart, so that nothing uses the token while it lapses.
	d := loginDnsd(t, proxy.Endpoint+","+other.Endpoint, "dnsdpw", true,
		"--dnsd.watch-progress-interval=20s", "--dnsd.watch-progress-timeout=40s")
	waitFor(t, 10*time.Second, func() error { return faultAnswers(d.Addr, serviceA("kubernetes", "10.96.0.1")) })
	time.Sleep(4 * time.Second) // a wait: the token lapses unused
	// root's token lapsed too: its client logs in again here, not below.
	dnsdPut(t, root, svc("before", "10.96.1.0"))
	before := etcdLogins(t, etcd)
	on, next := watchedProxy(t, d, proxy, other)
	on.Process.Kill()
	dnsdPut(t, root, svc("after", "10.96.1.1"))
	waitFor(t, 10*time.Second, func() error { return faultAnswers(d.Addr, serviceA("after", "10.96.1.1")) })
	log, err := os.ReadFile(d.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "etcd refused the watch's login token; resuming on the same endpoint") {
		t.Fatalf("the watch that moved was not refused for its lapsed token and asked again:\n%s", log)
	}
	if got := faultMetric(t, d.Metrics, `etcdns_dnsd_watch_endpoint{endpoint="`+next.Endpoint+`"}`); got != 1 {
		t.Errorf("the watch is not on the proxy left (%v)", got)
	}
	if n := etcdLogins(t, etcd) - before; n != 1 {
		t.Errorf("dnsd logged in %v times after its token lapsed, want once", n)
	}
}

// loginDnsd starts the built dnsd on endpoints, logging in as user dnsd
// with password, and waits for ready (its /readyz, or only /healthz).
func loginDnsd(t *testing.T, endpoints, password string, ready bool, extra ...string) *dnsdInstance {
	t.Helper()
	d := &dnsdInstance{
		Addr:    fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t)),
		Metrics: fmt.Sprintf("http://127.0.0.1:%d", harness.FreePort(t)),
	}
	check := "/healthz"
	if ready {
		check = "/readyz"
	}
	d.Process = harness.StartProcess(t, harness.BuildBinary(t, "./cmd/dnsd"), append([]string{
		"--etcd.endpoints=" + endpoints,
		"--dnsd.listen=" + d.Addr,
		"--dnsd.metrics-listen=" + strings.TrimPrefix(d.Metrics, "http://"),
	}, extra...), []string{"ETCDNS_ETCD_USERNAME=dnsd", "ETCDNS_ETCD_PASSWORD=" + password}, func() error {
		return harness.HTTPOK(d.Metrics + check)
	})
	return d
}

// serviceA is the answer to a default-namespace service's A question.
func serviceA(name, ip string) []check {
	q := name + ".default.svc.cluster.local."
	return []check{{qname: q, qtype: dns.TypeA, answer: []string{q + " 5 IN A " + ip}}}
}

// watchedProxy returns the one of two proxies d's watch is on, and the
// other.
func watchedProxy(t *testing.T, d *dnsdInstance, a, b *harness.GRPCProxy) (on, next *harness.GRPCProxy) {
	t.Helper()
	switch {
	case faultMetric(t, d.Metrics, `etcdns_dnsd_watch_endpoint{endpoint="`+a.Endpoint+`"}`) == 1:
		return a, b
	case faultMetric(t, d.Metrics, `etcdns_dnsd_watch_endpoint{endpoint="`+b.Endpoint+`"}`) == 1:
		return b, a
	}
	t.Fatal("dnsd reports its watch on neither proxy")
	return nil, nil
}

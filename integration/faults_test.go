//go:build integration

package integration

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/etcdns/etcdns/integration/harness"
	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/keys/kube"
	"github.com/etcdns/etcdns/publisher/elect"
)

// Issue 9: reliability under faults. Each test below is one item of it,
// run against real processes; each states what a user would see (exact
// answers, exact etcd keys) and the figures it measured.

// TestFaultEtcdOutage is issue 9 item 1: etcd is stopped for a minute
// under steady query load while Kubernetes keeps changing. dnsd must answer
// every query from its last snapshot, and once etcd is back on the same data
// directory and ports, the publisher and dnsd must converge within 5s with
// no record lost and none duplicated.
func TestFaultEtcdOutage(t *testing.T) {
	const outage = 60 * time.Second
	const convergeBound = 5 * time.Second
	// Kubernetes keeps its own etcd, as a cluster whose DNS etcd fails while
	// its API server stays up.
	api := harness.StartKubeAPIServer(t, harness.StartEtcd(t))
	etcd := harness.StartEtcd(t)
	cli := etcd.Client(t)
	kc := faultKube(t, api)
	ctx := context.Background()

	tcp := corev1.ProtocolTCP
	httpPort := corev1.ServicePort{Name: "http", Port: 80, Protocol: tcp}
	faultCreate(t, kc,
		faultClusterIP("web", "10.96.1.10", httpPort),
		faultClusterIP("gone", "10.96.1.20", httpPort),
		headless("db", corev1.ServicePort{Name: "pg", Port: 5432, Protocol: tcp}),
		headless("hl", httpPort))
	faultSlice(t, kc, "db", "pg", 5432, "10.4.1.1=db-0", "10.4.1.2=db-1")
	hl := faultSlice(t, kc, "hl", "http", 80, "10.4.2.1", "10.4.2.2")

	// The default lease (15s) on purpose: etcd renews it on restart, and
	// convergence within 5s must not wait the old one out.
	faultPublisher(t, etcd.Endpoint, api, true)
	d := startDnsd(t, etcd)
	b := faultBuilder(t)
	want := func() map[string]string { return expected(t, b, kc) }
	waitRecords(t, cli, want)

	steady := []check{
		{qname: "kubernetes.default.svc.cluster.local.", qtype: dns.TypeA,
			answer: []string{"kubernetes.default.svc.cluster.local. 5 IN A 10.96.0.1"}},
		{qname: "web.default.svc.cluster.local.", qtype: dns.TypeA,
			answer: []string{"web.default.svc.cluster.local. 5 IN A 10.96.1.10"}},
		{qname: "_http._tcp.web.default.svc.cluster.local.", qtype: dns.TypeSRV,
			answer: []string{"_http._tcp.web.default.svc.cluster.local. 5 IN SRV 10 100 80 web.default.svc.cluster.local."}},
		{qname: "_pg._tcp.db.default.svc.cluster.local.", qtype: dns.TypeSRV, answer: []string{
			"_pg._tcp.db.default.svc.cluster.local. 5 IN SRV 10 50 5432 db-0.db.default.svc.cluster.local.",
			"_pg._tcp.db.default.svc.cluster.local. 5 IN SRV 10 50 5432 db-1.db.default.svc.cluster.local.",
		}},
		{qname: "db-1.db.default.svc.cluster.local.", qtype: dns.TypeA,
			answer: []string{"db-1.db.default.svc.cluster.local. 5 IN A 10.4.1.2"}},
		{qname: "10.1.96.10.in-addr.arpa.", qtype: dns.TypePTR,
			answer: []string{"10.1.96.10.in-addr.arpa. 5 IN PTR web.default.svc.cluster.local."}},
		{qname: "missing.default.svc.cluster.local.", qtype: dns.TypeA, rcode: dns.RcodeNameError},
	}
	before := []check{
		{qname: "gone.default.svc.cluster.local.", qtype: dns.TypeA,
			answer: []string{"gone.default.svc.cluster.local. 5 IN A 10.96.1.20"}},
		{qname: "fresh.default.svc.cluster.local.", qtype: dns.TypeA, rcode: dns.RcodeNameError},
		{qname: "hl.default.svc.cluster.local.", qtype: dns.TypeA, answer: []string{
			"hl.default.svc.cluster.local. 5 IN A 10.4.2.1", "hl.default.svc.cluster.local. 5 IN A 10.4.2.2"}},
	}
	after := []check{
		{qname: "gone.default.svc.cluster.local.", qtype: dns.TypeA, rcode: dns.RcodeNameError},
		{qname: "20.1.96.10.in-addr.arpa.", qtype: dns.TypePTR, rcode: dns.RcodeNameError},
		{qname: "fresh.default.svc.cluster.local.", qtype: dns.TypeA,
			answer: []string{"fresh.default.svc.cluster.local. 5 IN A 10.96.1.30"}},
		{qname: "hl.default.svc.cluster.local.", qtype: dns.TypeA, answer: []string{
			"hl.default.svc.cluster.local. 5 IN A 10.4.2.2", "hl.default.svc.cluster.local. 5 IN A 10.4.2.3"}},
		{qname: "10-4-2-1.hl.default.svc.cluster.local.", qtype: dns.TypeA, rcode: dns.RcodeNameError},
	}
	waitFor(t, 10*time.Second, func() error { return faultAnswers(d.Addr, append(steady, before...)) })

	load := startFaultLoad(d.Addr, 300, steady)
	time.Sleep(2 * time.Second)
	etcd.Stop()
	down := time.Now()

	faultCreate(t, kc, faultClusterIP("fresh", "10.96.1.30", httpPort))
	if err := kc.CoreV1().Services("default").Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	hl.Endpoints = []discoveryv1.Endpoint{endpoint("10.4.2.2", "", nil), endpoint("10.4.2.3", "", nil)}
	if _, err := kc.DiscoveryV1().EndpointSlices("default").Update(ctx, hl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The publisher has seen the changes by now and cannot write them:
	// dnsd keeps the last snapshot, changed names included.
	time.Sleep(5 * time.Second)
	if err := faultAnswers(d.Addr, before); err != nil {
		t.Errorf("while etcd is down: %v", err)
	}

	time.Sleep(time.Until(down.Add(outage)))
	launched := time.Now()
	etcd.Start()
	up := time.Now()
	t.Logf("etcd was down %v; back on its data directory and ports, healthy %v after its start",
		up.Sub(down).Round(time.Millisecond), up.Sub(launched).Round(time.Millisecond))
	// A client of its own: the first one may be in gRPC's reconnect
	// backoff and would measure itself, not the programs.
	cli = etcd.Client(t)

	var inEtcd, inDNS time.Duration
	var lastErr error
	for deadline := up.Add(30 * time.Second); inEtcd == 0 || inDNS == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no convergence 30s after etcd returned (etcd after %v, DNS after %v): %v", inEtcd, inDNS, lastErr)
		}
		if inEtcd == 0 {
			if got, w := etcdRecords(t, cli), want(); reflect.DeepEqual(got, w) {
				inEtcd = time.Since(up)
			} else {
				lastErr = fmt.Errorf("etcd records differ:\n%s", faultDiff(got, w))
			}
		}
		if inDNS == 0 {
			if lastErr = faultAnswers(d.Addr, after); lastErr == nil {
				inDNS = time.Since(up)
			}
		}
	}
	// Measured from etcd's first healthy answer, polled every 100ms: the
	// programs may reconnect a little before it.
	t.Logf("after etcd returned: etcd holds the desired records after %v, dnsd answers them after %v",
		inEtcd.Round(time.Millisecond), inDNS.Round(time.Millisecond))
	if inEtcd > convergeBound || inDNS > convergeBound {
		t.Errorf("convergence took longer than %v", convergeBound)
	}

	// Nothing late: a leftover write of the outage would show up here.
	time.Sleep(2 * time.Second)
	st := load.Stop()
	t.Logf("query load: %d queries in %v (%.0f/s), %d failed", st.sent, st.took.Round(time.Millisecond), float64(st.sent)/st.took.Seconds(), st.failed)
	if st.failed > 0 {
		t.Errorf("%d of %d queries failed or were answered wrongly; the first:\n%s", st.failed, st.sent, strings.Join(st.failures, "\n"))
	}
	if got, w := etcdRecords(t, cli), want(); !reflect.DeepEqual(got, w) {
		t.Errorf("etcd records at the end differ:\n%s", faultDiff(got, w))
	}
	if err := faultAnswers(d.Addr, append(steady, after...)); err != nil {
		t.Errorf("at the end: %v", err)
	}
}

// TestFaultCompactedWhileDisconnected is issue 9 item 2: dnsd is cut from
// etcd, records change, and etcd compacts its history past dnsd's revision.
// When dnsd reaches etcd again its watch cannot resume: it must relist and
// converge while answering every untouched name exactly throughout, the
// relist included (no SERVFAIL, no NXDOMAIN, no timeout).
func TestFaultCompactedWhileDisconnected(t *testing.T) {
	// Enough records that the relist takes a while for queries to land in.
	const bulk = 20000
	etcd := harness.StartEtcd(t)
	cli := etcd.Client(t)
	b := faultBuilder(t)
	svc := httpService(b)
	hlRecords := func(ips ...string) []keys.Record {
		s := epSlice("default", "hl", discoveryv1.AddressTypeIPv4, nil)
		for _, ip := range ips {
			s.Endpoints = append(s.Endpoints, endpoint(ip, "", nil))
		}
		return dnsdRecords(b.Service(dnsdService("default", "hl", corev1.ClusterIPNone), []*discoveryv1.EndpointSlice{s}))
	}
	recs := []keys.Record{b.Version()}
	recs = append(recs, svc("kubernetes", "10.96.0.1")...)
	recs = append(recs, svc("web", "10.96.1.10")...)
	recs = append(recs, svc("gone", "10.96.1.20")...)
	recs = append(recs, hlRecords("10.4.2.1", "10.4.2.2")...)
	for i := range bulk {
		recs = append(recs, svc(fmt.Sprintf("bulk-%05d", i), fmt.Sprintf("10.97.%d.%d", i/250, i%250+1))...)
	}
	dnsdPut(t, cli, recs)

	proxy := harness.StartProxy(t, strings.TrimPrefix(etcd.Endpoint, "http://"))
	d := faultDnsd(t, "http://"+proxy.Addr)

	steady := []check{
		{qname: "kubernetes.default.svc.cluster.local.", qtype: dns.TypeA,
			answer: []string{"kubernetes.default.svc.cluster.local. 5 IN A 10.96.0.1"}},
		{qname: "_http._tcp.web.default.svc.cluster.local.", qtype: dns.TypeSRV,
			answer: []string{"_http._tcp.web.default.svc.cluster.local. 5 IN SRV 10 100 80 web.default.svc.cluster.local."}},
		{qname: "bulk-00000.default.svc.cluster.local.", qtype: dns.TypeA,
			answer: []string{"bulk-00000.default.svc.cluster.local. 5 IN A 10.97.0.1"}},
		{qname: "bulk-19999.default.svc.cluster.local.", qtype: dns.TypeA,
			answer: []string{"bulk-19999.default.svc.cluster.local. 5 IN A 10.97.79.250"}},
		{qname: "250.79.97.10.in-addr.arpa.", qtype: dns.TypePTR,
			answer: []string{"250.79.97.10.in-addr.arpa. 5 IN PTR bulk-19999.default.svc.cluster.local."}},
		{qname: "missing.default.svc.cluster.local.", qtype: dns.TypeA, rcode: dns.RcodeNameError},
	}
	before := []check{
		{qname: "gone.default.svc.cluster.local.", qtype: dns.TypeA,
			answer: []string{"gone.default.svc.cluster.local. 5 IN A 10.96.1.20"}},
		{qname: "fresh.default.svc.cluster.local.", qtype: dns.TypeA, rcode: dns.RcodeNameError},
		{qname: "hl.default.svc.cluster.local.", qtype: dns.TypeA, answer: []string{
			"hl.default.svc.cluster.local. 5 IN A 10.4.2.1", "hl.default.svc.cluster.local. 5 IN A 10.4.2.2"}},
	}
	after := []check{
		{qname: "gone.default.svc.cluster.local.", qtype: dns.TypeA, rcode: dns.RcodeNameError},
		{qname: "fresh.default.svc.cluster.local.", qtype: dns.TypeA,
			answer: []string{"fresh.default.svc.cluster.local. 5 IN A 10.96.1.30"}},
		{qname: "hl.default.svc.cluster.local.", qtype: dns.TypeA, answer: []string{
			"hl.default.svc.cluster.local. 5 IN A 10.4.2.2", "hl.default.svc.cluster.local. 5 IN A 10.4.2.3"}},
	}
	if err := faultAnswers(d.Addr, append(steady, before...)); err != nil {
		t.Fatal(err)
	}
	restarts := faultMetric(t, d.Metrics, `etcdns_dnsd_watch_restarts_total{reason="compacted"}`)

	load := startFaultLoad(d.Addr, 300, steady)
	time.Sleep(time.Second)
	proxy.Cut()
	// dnsd keeps serving what it has while the changes land in etcd.
	time.Sleep(time.Second)
	// One transaction per service, as the publisher writes them, so that
	// compacting at the last one removes revisions dnsd has not seen (etcd
	// still serves a watch from the compaction revision itself).
	faultChange(t, cli, svc("gone", "10.96.1.20"), nil)
	faultChange(t, cli, nil, svc("fresh", "10.96.1.30"))
	faultChange(t, cli, hlRecords("10.4.2.1", "10.4.2.2"), hlRecords("10.4.2.2", "10.4.2.3"))
	rev := etcd.Compact(t)
	if err := faultAnswers(d.Addr, before); err != nil {
		t.Errorf("cut from etcd: %v", err)
	}

	proxy.Restore()
	back := time.Now()
	waitFor(t, 30*time.Second, func() error { return faultAnswers(d.Addr, after) })
	took := time.Since(back)
	t.Logf("etcd compacted at revision %d; dnsd answers the changes %v after it reaches etcd again", rev, took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Errorf("convergence took %v, more than 5s", took)
	}
	// The relist must have been forced by the compaction, not by anything
	// else: otherwise this test would not test what it says.
	if n := faultMetric(t, d.Metrics, `etcdns_dnsd_watch_restarts_total{reason="compacted"}`); n <= restarts {
		t.Errorf("watch restarts %v, before the cut %v: dnsd did not relist", n, restarts)
	}
	// The new answers are served before the relist's line is written.
	waitFor(t, 5*time.Second, func() error {
		if !strings.Contains(faultLog(t, d.Process), "relisted all zones") {
			return fmt.Errorf("no %q in dnsd's log", "relisted all zones")
		}
		return nil
	})
	log := faultLog(t, d.Process)
	lost, relisted := faultLogTime(t, log, "watch lost; relisting"), faultLogTime(t, log, "relisted all zones")
	if !strings.Contains(log, "required revision has been compacted") {
		t.Errorf("dnsd's log does not show the watch failing on the compaction:\n%s", log)
	}

	time.Sleep(time.Second)
	st := load.Stop()
	t.Logf("query load: %d queries in %v (%.0f/s), %d failed", st.sent, st.took.Round(time.Millisecond), float64(st.sent)/st.took.Seconds(), st.failed)
	if st.failed > 0 {
		t.Errorf("%d of %d queries failed or were answered wrongly; the first:\n%s", st.failed, st.sent, strings.Join(st.failures, "\n"))
	}
	// The relist must have had queries in it, or "no gap" says nothing.
	during := 0
	for _, at := range st.answered {
		if at.After(lost) && at.Before(relisted) {
			during++
		}
	}
	t.Logf("the relist of %d records took %v (from the lost watch to the new snapshot); %d queries were answered exactly during it",
		len(recs), relisted.Sub(lost).Round(time.Millisecond), during)
	if during < 10 {
		t.Errorf("only %d queries during the relist", during)
	}
	if err := faultAnswers(d.Addr, append(steady, after...)); err != nil {
		t.Errorf("at the end: %v", err)
	}
}

// TestFaultResumeAfterWritesItDoesNotServe: a writer's resync (every
// record written again as it is, as kube2sky's did) and another cluster's
// zone under the same prefix change nothing dnsd serves: the zone's SOA
// serial stays where the last real change put it. They still move its
// watch on, and so do writes outside the prefix (another program's keys
// in the same etcd), through the answers to its progress requests: cut
// from etcd after etcd has compacted past them all (its auto-compaction,
// or an operator's), dnsd resumes the watch where it left off. It resumed
// from the last revision that had changed a served record, and later from
// the last one under the prefix, compacted away, and relisted every zone.
func TestFaultResumeAfterWritesItDoesNotServe(t *testing.T) {
	etcd := harness.StartEtcd(t)
	cli := etcd.Client(t)
	b := faultBuilder(t)
	svc := httpService(b)
	recs := append([]keys.Record{b.Version()}, svc("web", "10.96.1.10")...)
	dnsdPut(t, cli, recs)
	proxy := harness.StartProxy(t, strings.TrimPrefix(etcd.Endpoint, "http://"))
	d := faultDnsd(t, "http://"+proxy.Addr)
	web := []check{{qname: "web.default.svc.cluster.local.", qtype: dns.TypeA,
		answer: []string{"web.default.svc.cluster.local. 5 IN A 10.96.1.10"}}}
	if err := faultAnswers(d.Addr, web); err != nil {
		t.Fatal(err)
	}
	serial := func() uint32 {
		t.Helper()
		m := dnsdAsk(t, "udp", d.Addr, "cluster.local.", dns.TypeSOA, 0)
		if len(m.Answer) != 1 {
			t.Fatalf("SOA of cluster.local: %v", m)
		}
		return m.Answer[0].(*dns.SOA).Serial
	}
	before := serial()

	var last int64
	for range 3 {
		last = dnsdPut(t, cli, recs)
	}
	for i := range 5 {
		r, err := cli.Put(context.Background(), fmt.Sprintf("/skydns/local/east/svc/default/s%d/x", i), `{"host":"10.0.0.1"}`)
		if err != nil {
			t.Fatal(err)
		}
		last = r.Header.Revision
	}
	// Outside the prefix nothing comes on the stream: the answers to
	// dnsd's progress requests carry it past these.
	for i := range 5 {
		r, err := cli.Put(context.Background(), fmt.Sprintf("/registry/configmaps/default/c%d", i), "data")
		if err != nil {
			t.Fatal(err)
		}
		last = r.Header.Revision
	}
	waitFor(t, 10*time.Second, func() error {
		if got := faultMetric(t, d.Metrics, "etcdns_dnsd_etcd_revision"); got < float64(last) {
			return fmt.Errorf("dnsd at revision %v, want %d", got, last)
		}
		return nil
	})
	if got := serial(); got != before {
		t.Errorf("SOA serial %d after writes that changed nothing served, want %d as before", got, before)
	}

	etcd.Compact(t)
	proxy.Cut()
	time.Sleep(500 * time.Millisecond)
	proxy.Restore()
	faultChange(t, cli, svc("web", "10.96.1.10"), svc("web", "10.96.1.11"))
	waitFor(t, 10*time.Second, func() error {
		return faultAnswers(d.Addr, []check{{qname: "web.default.svc.cluster.local.", qtype: dns.TypeA,
			answer: []string{"web.default.svc.cluster.local. 5 IN A 10.96.1.11"}}})
	})
	log := faultLog(t, d.Process)
	if !strings.Contains(log, "watch lost; resuming") {
		t.Errorf("dnsd's watch did not restart when cut, so this tests nothing:\n%s", log)
	}
	if n := faultMetric(t, d.Metrics, `etcdns_dnsd_watch_restarts_total{reason="compacted"}`); n != 0 || strings.Contains(log, "relisted all zones") {
		t.Errorf("dnsd relisted (%v compacted watches) after a cut; want its watch resumed:\n%s", n, log)
	}
	if got := serial(); got == before {
		t.Errorf("SOA serial %d after a change, want it moved", got)
	}
}

// TestFaultFrozenFrontendKeepsItsWatch: a dnsd frozen (SIGSTOP) for twice
// its liveness timeout, on a member that answers its progress requests,
// keeps its watch when it runs again: the silence was its own, not the
// stream's. It used to drop the watch as progress_timeout at once (every
// time, in a hand run of three freezes): a node that starves its frontend
// of CPU made it re-create a healthy watch, which through a grpc-proxy
// costs the member a count of the whole prefix (docs/fleet.md).
func TestFaultFrozenFrontendKeepsItsWatch(t *testing.T) {
	etcd := harness.StartEtcd(t)
	cli := etcd.Client(t)
	b := faultBuilder(t)
	svc := httpService(b)
	dnsdPut(t, cli, append([]keys.Record{b.Version()}, svc("kubernetes", "10.96.0.1")...))
	d := faultDnsd(t, etcd.Endpoint)

	for i := range 2 {
		// A change after the load: the member is past the watch's start,
		// so it answers progress requests, and silence means it stopped.
		name, ip := fmt.Sprintf("before-%d", i), fmt.Sprintf("10.96.2.%d", i+1)
		faultChange(t, cli, nil, svc(name, ip))
		want := check{qname: name + ".default.svc.cluster.local.", qtype: dns.TypeA,
			answer: []string{name + ".default.svc.cluster.local. 5 IN A " + ip}}
		waitFor(t, 5*time.Second, func() error { return faultAnswers(d.Addr, []check{want}) })
		time.Sleep(time.Second) // a progress request and its answer
		d.Pause()
		time.Sleep(3 * time.Second) // twice dnsd.watch-progress-timeout
		d.Resume()
		time.Sleep(2 * time.Second)
	}
	for _, reason := range []string{"progress_timeout", "lagging"} {
		if n := faultMetric(t, d.Metrics, fmt.Sprintf("etcdns_dnsd_watch_restarts_total{reason=%q}", reason)); n != 0 {
			t.Errorf("%v watch restarts as %s after the freezes; want none:\n%s", n, reason, faultLog(t, d.Process))
		}
	}
	faultChange(t, cli, nil, svc("after", "10.96.3.1"))
	waitFor(t, 5*time.Second, func() error {
		return faultAnswers(d.Addr, []check{{qname: "after.default.svc.cluster.local.", qtype: dns.TypeA,
			answer: []string{"after.default.svc.cluster.local. 5 IN A 10.96.3.1"}}})
	})
}

// TestFaultPublisherKilledMidSync is issue 9 item 3: the publisher is
// killed (SIGKILL) halfway through the initial sync of 10,000 services and
// started again. etcd must end holding exactly the records keys/kube
// computes from the objects, and the second run must write only what the
// first did not.
func TestFaultPublisherKilledMidSync(t *testing.T) {
	const services = 10000
	api := harness.StartKubeAPIServer(t, harness.StartEtcd(t))
	etcd := harness.StartEtcd(t)
	cli := etcd.Client(t)
	kc := faultKube(t, api)

	start := time.Now()
	faultParallel(t, services, func(i int) error {
		name := fmt.Sprintf("svc-%05d", i)
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}
		if i%5 == 0 {
			// Every fifth is headless with two endpoints: names, SRV
			// targets and PTRs that come from a slice, not the service.
			svc.Spec.ClusterIP = corev1.ClusterIPNone
		}
		if _, err := kc.CoreV1().Services("default").Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
			return err
		}
		if i%5 != 0 {
			return nil
		}
		port, n, tcp := "http", int32(80), corev1.ProtocolTCP
		s := epSlice("default", name, discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{{Name: &port, Port: &n, Protocol: &tcp}},
			endpoint(fmt.Sprintf("10.5.%d.%d", i/250, i%250+1), "", nil),
			endpoint(fmt.Sprintf("10.6.%d.%d", i/250, i%250+1), "web-0", nil))
		_, err := kc.DiscoveryV1().EndpointSlices("default").Create(context.Background(), s, metav1.CreateOptions{})
		return err
	})
	want := expected(t, faultBuilder(t), kc)
	t.Logf("created %d services and %d endpoint slices in %v: %d records to publish",
		services, services/5, time.Since(start).Round(time.Millisecond), len(want))

	p, metrics := faultPublisher(t, etcd.Endpoint, api, false, "--publisher.lease-ttl=3s")
	count := func() int {
		r, err := cli.Get(context.Background(), "/skydns/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return int(r.Count)
	}
	start = time.Now()
	for count() < len(want)/2 {
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("the publisher wrote %d of %d records in 2 minutes", count(), len(want))
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.Kill()
	// A transaction sent just before the kill may still commit: the count
	// is taken once it holds still for half a second.
	atKill := count()
	for settled := time.Now(); time.Since(settled) < 500*time.Millisecond; time.Sleep(50 * time.Millisecond) {
		if n := count(); n != atKill {
			atKill, settled = n, time.Now()
		}
	}
	t.Logf("killed the publisher %v after its start, with %d of %d records in etcd", time.Since(start).Round(time.Millisecond), atKill, len(want))
	if atKill < len(want)/10 || atKill > len(want)*9/10 {
		t.Fatalf("killed with %d of %d records: not mid-sync, the test proves nothing", atKill, len(want))
	}

	p.Start()
	restart := time.Now()
	for {
		got := etcdRecords(t, cli)
		if reflect.DeepEqual(got, want) {
			break
		}
		if time.Since(restart) > 2*time.Minute {
			t.Fatalf("2 minutes after the restart etcd differs from the desired records:\n%s", faultDiff(got, want))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("after the restart etcd holds exactly the %d desired records after %v", len(want), time.Since(restart).Round(time.Millisecond))
	// The restart resumes: it writes the missing records and nothing the
	// killed run had written, and deletes nothing.
	written := faultMetric(t, metrics, "etcdns_publisher_records_written_total")
	deleted := faultMetric(t, metrics, "etcdns_publisher_records_deleted_total")
	if int(written) != len(want)-atKill || deleted != 0 {
		t.Errorf("the restarted publisher wrote %v records and deleted %v; want %d written (the missing ones), 0 deleted",
			written, deleted, len(want)-atKill)
	}
}

// TestFaultPausedLeaderFenced is issue 9 item 4: of two publisher replicas
// the leader is frozen (SIGSTOP) past its lease with a write in flight,
// and the other takes over. While the old leader is frozen, Kubernetes
// changes so that its write is stale: the service it publishes is deleted
// again, so its keys are free and the key guards alone would let the
// write through. When the write reaches etcd and the old leader is
// continued, none of its writes may land: nothing under /skydns changes
// from then on, and etcd keeps exactly the desired records.
//
// A frozen Go process finds its lease expired the moment it runs again (its
// timers fire at once), so it rarely gets to send anything new. The write
// in flight is what the fence is for, and a proxy makes it deterministic:
// the old leader reaches etcd through it, and the proxy holds the write
// (and the lease's keepalives) from before the freeze until after the
// takeover.
func TestFaultPausedLeaderFenced(t *testing.T) {
	api := harness.StartKubeAPIServer(t, harness.StartEtcd(t))
	etcd := harness.StartEtcd(t)
	cli := etcd.Client(t)
	kc := faultKube(t, api)
	ctx := context.Background()
	b := faultBuilder(t)
	want := func() map[string]string { return expected(t, b, kc) }
	httpPort := corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}
	faultCreate(t, kc, faultClusterIP("web", "10.96.1.10", httpPort))

	proxy := harness.StartProxy(t, strings.TrimPrefix(etcd.Endpoint, "http://"))
	// A 2s lease (the least the publisher takes) keeps the freeze short.
	p1, m1 := faultPublisher(t, "http://"+proxy.Addr, api, true, "--publisher.lease-ttl=2s")
	// Ready is not leading: the first replica leads before the second starts.
	publisherWritten(t, m1)
	p2, m2 := faultPublisher(t, etcd.Endpoint, api, true, "--publisher.lease-ttl=2s")
	if l := faultLeader(t, cli); !strings.HasSuffix(l, fmt.Sprintf("/%d", p1.Pid())) {
		t.Fatalf("leader %q, want the first replica (pid %d)", l, p1.Pid())
	}
	waitRecords(t, cli, want)

	seen := `etcdns_publisher_object_events_total{kind="service"}`
	events := faultMetric(t, m1, seen)
	txnsBefore := faultTxns(t, m1)
	proxy.Hold()
	faultCreate(t, kc, faultClusterIP("stale", "10.96.1.40", httpPort))
	waitFor(t, 5*time.Second, func() error {
		if faultMetric(t, m1, seen) == events {
			return fmt.Errorf("the leader has not seen the new service")
		}
		return nil
	})
	// Reconciling one service takes a millisecond or two; then its
	// transaction waits in the proxy.
	time.Sleep(200 * time.Millisecond)
	p1.Pause()
	paused := time.Now()

	waitFor(t, 20*time.Second, func() error {
		if l := faultLeader(t, cli); !strings.HasSuffix(l, fmt.Sprintf("/%d", p2.Pid())) {
			return fmt.Errorf("leader %q, want the second replica (pid %d)", l, p2.Pid())
		}
		if v := faultMetric(t, m2, "etcdns_publisher_leader"); v != 1 {
			return fmt.Errorf("the second replica's etcdns_publisher_leader is %v", v)
		}
		return nil
	})
	t.Logf("the second replica leads %v after the leader froze", time.Since(paused).Round(time.Millisecond))
	withStale := waitRecords(t, cli, want)
	if err := kc.CoreV1().Services("default").Delete(ctx, "stale", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	web, err := kc.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	web.Spec.Ports[0].Port = 8080
	if _, err := kc.CoreV1().Services("default").Update(ctx, web, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	final := waitRecords(t, cli, want)
	var gone int
	for k := range withStale {
		if _, ok := final[k]; !ok {
			gone++
		}
	}
	if gone < 3 {
		t.Fatalf("only %d keys went with the stale service and the old port; the old leader's write would not be stale", gone)
	}

	// Every write under /skydns from here on would be the old leader's:
	// the new one has nothing left to do.
	rev := etcdRevision(t, cli)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watch := cli.Watch(wctx, "/skydns/", clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	proxy.Release()
	// etcd gets the held write while the old leader is still frozen, so it
	// cannot be cancelled before etcd has judged it.
	time.Sleep(time.Second)
	p1.Resume()
	t.Logf("the old leader resumed after %v frozen", time.Since(paused).Round(time.Millisecond))
	waitFor(t, 20*time.Second, func() error {
		if v := faultMetric(t, m1, "etcdns_publisher_leader"); v != 0 {
			return fmt.Errorf("the old leader's etcdns_publisher_leader is %v", v)
		}
		return nil
	})
	// Whatever else it had queued has run by now.
	time.Sleep(2 * time.Second)
	txns := faultTxns(t, m1)
	var attempts float64
	for r, n := range txns {
		txns[r] = n - txnsBefore[r]
		attempts += txns[r]
	}
	t.Logf("the old leader's transactions since the freeze, by result: %v", txns)
	if attempts == 0 {
		t.Errorf("the old leader had no write in flight: the test did not exercise the fence")
	}
	if txns["ok"] != 0 {
		t.Errorf("%v of the old leader's transactions succeeded after it lost the lease", txns["ok"])
	}
	select {
	case resp := <-watch:
		var evs []string
		for _, ev := range resp.Events {
			evs = append(evs, fmt.Sprintf("%s %s = %s (revision %d)", ev.Type, ev.Kv.Key, ev.Kv.Value, ev.Kv.ModRevision))
		}
		t.Errorf("writes under /skydns after the takeover had converged: %v\n%s", resp.Err(), strings.Join(evs, "\n"))
	default:
	}
	if got := etcdRecords(t, cli); !reflect.DeepEqual(got, final) {
		t.Errorf("etcd records changed:\n%s", faultDiff(got, final))
	}
	if l := faultLeader(t, cli); !strings.HasSuffix(l, fmt.Sprintf("/%d", p2.Pid())) {
		t.Errorf("leader %q after the old one resumed, want the second replica (pid %d)", l, p2.Pid())
	}
}

// faultKube is a Kubernetes client without client-go's default rate limit
// (5/s), which would turn creating thousands of objects into minutes.
func faultKube(t *testing.T, api *harness.KubeAPIServer) kubernetes.Interface {
	t.Helper()
	rc := api.RESTConfig()
	rc.QPS, rc.Burst = -1, 0
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

// httpService makes the records of a ClusterIP service in default with one
// port, http 80, as the publisher writes them.
func httpService(b kube.Builder) func(name, ip string) []keys.Record {
	http := corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}
	return func(name, ip string) []keys.Record {
		return dnsdRecords(b.Service(dnsdService("default", name, ip, http), nil))
	}
}

func faultBuilder(t *testing.T) kube.Builder {
	t.Helper()
	b, err := kube.NewBuilder(keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: "it", TTL: 5}, "cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// faultPublisher starts the built publisher of cluster "it". With ready it
// waits for /readyz (its source synced: a replica that campaigns is ready
// too; publisherWritten waits for a leader's first reconcile), else only
// for the metrics endpoint. It returns the metrics URL.
func faultPublisher(t *testing.T, endpoint string, api *harness.KubeAPIServer, ready bool, extra ...string) (*harness.Process, string) {
	t.Helper()
	metrics := fmt.Sprintf("http://127.0.0.1:%d", harness.FreePort(t))
	args := append([]string{
		"--etcd.endpoints=" + endpoint,
		"--publisher.kubeconfig=" + api.Kubeconfig,
		"--publisher.metrics-listen=" + strings.TrimPrefix(metrics, "http://"),
		"--cluster.id=it",
	}, extra...)
	check := func() error { return harness.HTTPOK(metrics + "/healthz") }
	if ready {
		check = func() error { return harness.HTTPOK(metrics + "/readyz") }
	}
	return harness.StartProcess(t, harness.BuildBinary(t, "./cmd/publisher"), args, nil, check), metrics
}

func faultClusterIP(name, ip string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.ServiceSpec{ClusterIP: ip, Ports: ports}}
}

func faultCreate(t *testing.T, kc kubernetes.Interface, svcs ...*corev1.Service) {
	t.Helper()
	for _, s := range svcs {
		if _, err := kc.CoreV1().Services(s.Namespace).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating service %s/%s: %v", s.Namespace, s.Name, err)
		}
	}
}

// faultSlice creates the IPv4 slice of a service in default with one TCP
// port; an endpoint is "ip" or "ip=hostname", and ready.
func faultSlice(t *testing.T, kc kubernetes.Interface, svc, port string, n int32, eps ...string) *discoveryv1.EndpointSlice {
	t.Helper()
	tcp := corev1.ProtocolTCP
	var endpoints []discoveryv1.Endpoint
	for _, e := range eps {
		ip, host, _ := strings.Cut(e, "=")
		endpoints = append(endpoints, endpoint(ip, host, nil))
	}
	s := epSlice("default", svc, discoveryv1.AddressTypeIPv4,
		[]discoveryv1.EndpointPort{{Name: &port, Port: &n, Protocol: &tcp}}, endpoints...)
	s, err := kc.DiscoveryV1().EndpointSlices("default").Create(context.Background(), s, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// faultAnswers asks each check once over UDP and reports the first
// difference from its exact answer.
func faultAnswers(addr string, cs []check) error {
	c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
	for _, ch := range cs {
		if err := faultAsk(c, addr, ch); err != nil {
			return err
		}
	}
	return nil
}

func faultAsk(c *dns.Client, addr string, ch check) error {
	m := new(dns.Msg).SetQuestion(ch.qname, ch.qtype)
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		return fmt.Errorf("%s %s: %v", ch.qname, dns.TypeToString[ch.qtype], err)
	}
	if got, err := expect(r, ch); err != nil {
		return fmt.Errorf("%s %s: %v (got %s)", ch.qname, dns.TypeToString[ch.qtype], err, strings.ReplaceAll(got, "\n", "; "))
	}
	return nil
}

// faultDiff lists the keys only one side has and the values that differ.
func faultDiff(got, want map[string]string) string {
	var out []string
	for _, k := range faultKeys(got, want) {
		g, inGot := got[k]
		w, inWant := want[k]
		switch {
		case !inWant:
			out = append(out, "unexpected "+k+" "+g)
		case !inGot:
			out = append(out, "missing    "+k+" "+w)
		case g != w:
			out = append(out, "value of   "+k+": "+g+", want "+w)
		}
		if len(out) == 20 {
			out = append(out, "...")
			break
		}
	}
	return strings.Join(out, "\n")
}

func faultKeys(ms ...map[string]string) []string {
	all := map[string]string{}
	for _, m := range ms {
		maps.Copy(all, m)
	}
	return slices.Sorted(maps.Keys(all))
}

// faultLoad sends a fixed mix of questions at a steady rate and checks
// every answer exactly.
type faultLoad struct {
	stop  chan struct{}
	wg    sync.WaitGroup
	start time.Time

	sent, failed atomic.Int64
	mu           sync.Mutex
	failures     []string    // the first few, with when they happened
	answered     []time.Time // when each right answer came
}

type faultLoadStats struct {
	sent, failed int64
	took         time.Duration
	failures     []string
	answered     []time.Time
}

// startFaultLoad asks the checks in turn at about qps queries a second over
// UDP, from a few goroutines so that one slow answer does not stall the
// rest. A timeout (1s, far above a loopback answer) counts as a failure.
func startFaultLoad(addr string, qps int, cs []check) *faultLoad {
	const workers = 4
	l := &faultLoad{stop: make(chan struct{}), start: time.Now()}
	every := time.Duration(workers) * time.Second / time.Duration(qps)
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			c := &dns.Client{Net: "udp", Timeout: time.Second}
			tick := time.NewTicker(every)
			defer tick.Stop()
			for i := w; ; i += workers {
				select {
				case <-l.stop:
					return
				case <-tick.C:
				}
				l.sent.Add(1)
				err := faultAsk(c, addr, cs[i%len(cs)])
				l.mu.Lock()
				switch {
				case err == nil:
					l.answered = append(l.answered, time.Now())
				case len(l.failures) < 10:
					l.failures = append(l.failures, fmt.Sprintf("%s after start: %v", time.Since(l.start).Round(time.Millisecond), err))
				}
				l.mu.Unlock()
				if err != nil {
					l.failed.Add(1)
				}
			}
		}()
	}
	return l
}

func (l *faultLoad) Stop() faultLoadStats {
	close(l.stop)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return faultLoadStats{sent: l.sent.Load(), failed: l.failed.Load(), took: time.Since(l.start), failures: l.failures, answered: l.answered}
}

// faultChange replaces a service's records old by new in one transaction,
// as the publisher does: records in both are not touched.
func faultChange(t *testing.T, cli *clientv3.Client, old, new []keys.Record) {
	t.Helper()
	if err := faultTxn(context.Background(), cli, old, new); err != nil {
		t.Fatal(err)
	}
}

// faultTxn is faultChange returning its error, for a writer that goes on
// when one write fails.
func faultTxn(ctx context.Context, cli *clientv3.Client, old, new []keys.Record) error {
	puts := map[string]string{}
	for _, r := range new {
		puts[r.Key] = string(r.Value.Encode())
	}
	var ops []clientv3.Op
	for _, r := range old {
		if _, ok := puts[r.Key]; !ok {
			ops = append(ops, clientv3.OpDelete(r.Key))
		}
	}
	for k, v := range puts {
		ops = append(ops, clientv3.OpPut(k, v))
	}
	_, err := cli.Txn(ctx).Then(ops...).Commit()
	return err
}

// faultDnsd is startDnsd with the etcd endpoint given (a proxy's) and
// extra flags.
func faultDnsd(t *testing.T, endpoint string, extra ...string) *dnsdInstance {
	t.Helper()
	d := &dnsdInstance{
		Addr:    fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t)),
		Metrics: fmt.Sprintf("http://127.0.0.1:%d", harness.FreePort(t)),
	}
	args := []string{
		"--etcd.endpoints=" + endpoint,
		"--dnsd.listen=" + d.Addr,
		"--dnsd.metrics-listen=" + strings.TrimPrefix(d.Metrics, "http://"),
	}
	args = append(args, extra...)
	d.Process = harness.StartProcess(t, harness.BuildBinary(t, "./cmd/dnsd"), args, nil, func() error {
		return harness.HTTPOK(d.Metrics + "/readyz")
	})
	return d
}

// faultMetric reads one value from a /metrics page, name with its labels
// as the page spells them. A missing line reads 0: a labelled counter
// appears only once counted.
func faultMetric(t *testing.T, base, name string) float64 {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	page, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(page), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", l, err)
			}
			return f
		}
	}
	return 0
}

// faultLogTime is the time of the first line of a program's log that
// contains msg.
func faultLogTime(t *testing.T, log, msg string) time.Time {
	t.Helper()
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(l, msg) {
			continue
		}
		ts, _, _ := strings.Cut(strings.TrimPrefix(l, "time="), " ")
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		return at
	}
	t.Fatalf("no %q in the log:\n%s", msg, log)
	return time.Time{}
}

func faultLog(t *testing.T, p *harness.Process) string {
	t.Helper()
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// faultParallel runs f(0..n-1) on 32 goroutines and fails the test on the
// first error.
func faultParallel(t *testing.T, n int, f func(i int) error) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if err := f(i); err != nil {
					select {
					case errs <- fmt.Errorf("item %d: %w", i, err):
					default:
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}

// faultTxns reads a publisher's etcdns_publisher_txns_total by result.
func faultTxns(t *testing.T, metrics string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, r := range []string{"ok", "conflict", "fenced", "error"} {
		out[r] = faultMetric(t, metrics, fmt.Sprintf("etcdns_publisher_txns_total{result=%q}", r))
	}
	return out
}

// faultLeader returns the value (host/pid) of the election key that leads
// cluster "it": the oldest candidate.
func faultLeader(t *testing.T, cli *clientv3.Client) string {
	t.Helper()
	r, err := cli.Get(context.Background(), elect.Key("it")+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) == 0 {
		return ""
	}
	return string(r.Kvs[0].Value)
}

//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdns/etcdns/integration/harness"
	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/server/store"
)

// TestGRPCProxy is issue 18 item 2: dnsd frontends behind etcd's gRPC proxy
// (etcd grpc-proxy start) in front of one etcd member. They load, follow
// changes, get progress notifications and relist after a compaction they
// missed, while etcd carries one watch per prefix for all of them. The
// proxy behaviours dnsd does not use today but a change of dnsd might
// (RequestProgress, serializable reads) are pinned too: docs/fleet.md
// explains each.
func TestGRPCProxy(t *testing.T) {
	// Progress notifications every 500ms instead of etcd's default of ten
	// minutes, so that the test can see one pass the proxy.
	etcd := harness.StartEtcd(t, harness.WithEtcdArgs("--experimental-watch-progress-notify-interval=500ms"))
	cli := etcd.Client(t)
	proxy := harness.StartGRPCProxy(t, etcd.Endpoint)
	pc := proxy.Client(t)
	b := faultBuilder(t)
	svc := httpService(b)
	recs := []keys.Record{b.Version()}
	recs = append(recs, svc("kubernetes", "10.96.0.1")...)
	recs = append(recs, svc("gone", "10.96.1.20")...)
	dnsdPut(t, cli, recs)
	a := func(name, ip string) check {
		q := name + ".default.svc.cluster.local."
		return check{qname: q, qtype: dns.TypeA, answer: []string{q + " 5 IN A " + ip}}
	}
	nx := func(name string) check {
		return check{qname: name + ".default.svc.cluster.local.", qtype: dns.TypeA, rcode: dns.RcodeNameError}
	}
	etcdWatchers := func() float64 { return faultMetric(t, etcd.Endpoint, "etcd_debugging_mvcc_watcher_total") }
	answerAll := func(ds []*dnsdInstance, d time.Duration, cs ...check) {
		t.Helper()
		for _, fe := range ds {
			waitFor(t, d, func() error { return faultAnswers(fe.Addr, cs) })
		}
	}

	// etcd's watchers before any frontend: the proxy's own leader watch.
	before := etcdWatchers()
	var ds []*dnsdInstance
	var after []float64
	for range 3 {
		ds = append(ds, faultDnsd(t, proxy.Endpoint))
		answerAll(ds[len(ds)-1:], 5*time.Second, a("kubernetes", "10.96.0.1"), a("gone", "10.96.1.20"), nx("fresh"))
		// dnsd is ready once loaded; its watch follows.
		if len(ds) == 1 {
			waitFor(t, 10*time.Second, func() error {
				if n := etcdWatchers(); n <= before {
					return fmt.Errorf("etcd's watchers %v, as before the first frontend", n)
				}
				return nil
			})
		}
		// A wait, not a poll: the first frontend's watchers (one a prefix)
		// are created in turn, and the second and third must add none,
		// which only a wait can show.
		time.Sleep(500 * time.Millisecond)
		after = append(after, etcdWatchers())
	}
	t.Logf("etcd's watchers: %v before the frontends, %v with 1, 2 and 3 behind the proxy", before, after)
	if after[0] <= before || after[1] != after[0] || after[2] != after[0] {
		t.Errorf("etcd's watchers %v before, %v with 1, 2, 3 frontends: want more with the first and no more with the others", before, after)
	}
	if n := faultMetric(t, proxy.Endpoint+"/proxy", "etcd_grpc_proxy_watchers_coalescing_total"); n < 2 {
		t.Errorf("the proxy coalesces %v watchers, want at least 2 (the second and third frontends')", n)
	}

	t.Run("follows a change", func(t *testing.T) {
		faultChange(t, cli, nil, svc("fresh", "10.96.1.30"))
		answerAll(ds, 5*time.Second, a("fresh", "10.96.1.30"))
	})

	t.Run("progress notifications pass the proxy", func(t *testing.T) {
		// A write outside dnsd's prefixes sends it no event; only a
		// progress notification can move its revision there.
		r, err := cli.Put(context.Background(), "/elsewhere/a", "1")
		if err != nil {
			t.Fatal(err)
		}
		for _, fe := range ds {
			waitFor(t, 5*time.Second, func() error {
				if got := faultMetric(t, fe.Metrics, "etcdns_dnsd_etcd_revision"); got < float64(r.Header.Revision) {
					return fmt.Errorf("dnsd at revision %v, etcd at %d", got, r.Header.Revision)
				}
				return nil
			})
		}
	})

	t.Run("RequestProgress is not answered through the proxy", func(t *testing.T) {
		got := func(c *clientv3.Client) bool {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			wch := c.Watch(ctx, "/elsewhere/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
			// Created before the put: a watch from no revision starts where
			// etcd is when it creates it, which may be after the put.
			if wr := <-wch; !wr.Created {
				t.Fatalf("watch: %v %v, want it created", wr.Err(), wr.Events)
			}
			// An event first, so that the watch stream is up before the
			// request (clientv3 drops a request without a stream).
			if _, err := cli.Put(ctx, "/elsewhere/b", "1"); err != nil {
				t.Fatal(err)
			}
			if wr := <-wch; len(wr.Events) != 1 {
				t.Fatalf("watch: %v %v", wr.Err(), wr.Events)
			}
			if err := c.RequestProgress(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case wr := <-wch:
				return wr.IsProgressNotify()
			case <-time.After(2 * time.Second):
				return false
			}
		}
		if !got(cli) {
			t.Fatal("etcd itself did not answer RequestProgress within 2s")
		}
		if got(pc) {
			t.Fatal("the proxy answered RequestProgress: docs/fleet.md says it does not")
		}
		if log := faultLog(t, proxy.Process); !strings.Contains(log, "not supported request type by gRPC proxy") {
			t.Errorf("the proxy's log does not show it dropping the request")
		}
	})

	t.Run("serializable reads come from the proxy's cache", func(t *testing.T) {
		ctx := context.Background()
		get := func(opts ...clientv3.OpOption) *clientv3.GetResponse {
			r, err := pc.Get(ctx, "/elsewhere/", append(opts, clientv3.WithPrefix())...)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		first := get(clientv3.WithSerializable())
		if _, err := cli.Put(ctx, "/elsewhere/c", "1"); err != nil {
			t.Fatal(err)
		}
		stale := get(clientv3.WithSerializable())
		fresh := get()
		t.Logf("through the proxy after a write straight to etcd: serializable %d keys at revision %d, linearizable %d keys at %d",
			stale.Count, stale.Header.Revision, fresh.Count, fresh.Header.Revision)
		if stale.Header.Revision != first.Header.Revision || stale.Count != first.Count || fresh.Count != first.Count+1 {
			t.Errorf("serializable %d keys at %d, before the write %d at %d, linearizable %d: want the serializable read served stale from the cache",
				stale.Count, stale.Header.Revision, first.Count, first.Header.Revision, fresh.Count)
		}
	})

	t.Run("a stream through the proxy is kept", func(t *testing.T) {
		// The proxy drops the progress requests dnsd's liveness check
		// sends (above), but passes etcd's own progress notifications:
		// neither may make a healthy stream look dead.
		time.Sleep(4 * time.Second)
		for i, fe := range ds {
			if n := faultMetric(t, fe.Metrics, `etcdns_dnsd_watch_restarts_total{reason="progress_timeout"}`); n != 0 {
				t.Errorf("frontend %d: %v watch restarts for a quiet stream through a healthy proxy", i, n)
			}
			if v := faultMetric(t, fe.Metrics, "etcdns_dnsd_snapshot_staleness_seconds"); v != 0 {
				t.Errorf("frontend %d: staleness %vs behind a healthy proxy", i, v)
			}
		}
	})

	t.Run("relists after a compaction it missed", func(t *testing.T) {
		restarts := make([]float64, len(ds))
		for i, fe := range ds {
			restarts[i] = faultMetric(t, fe.Metrics, `etcdns_dnsd_watch_restarts_total{reason="compacted"}`)
		}
		// The proxy down: the frontends keep answering from their
		// snapshot while etcd changes and compacts past them.
		proxy.Stop()
		faultChange(t, cli, svc("gone", "10.96.1.20"), nil)
		faultChange(t, cli, nil, svc("late", "10.96.1.40"))
		rev := etcd.Compact(t)
		answerAll(ds, time.Second, a("gone", "10.96.1.20"), nx("late"))
		proxy.Start()
		back := time.Now()
		answerAll(ds, 30*time.Second, nx("gone"), a("late", "10.96.1.40"), a("fresh", "10.96.1.30"), a("kubernetes", "10.96.0.1"))
		t.Logf("etcd compacted at %d; every frontend answers the changes %v after the proxy is back", rev, time.Since(back).Round(time.Millisecond))
		for i, fe := range ds {
			if n := faultMetric(t, fe.Metrics, `etcdns_dnsd_watch_restarts_total{reason="compacted"}`); n <= restarts[i] {
				t.Errorf("frontend %d: watch restarts %v, %v before: it did not relist", i, n, restarts[i])
			}
			if log := faultLog(t, fe.Process); !strings.Contains(log, "required revision has been compacted") {
				t.Errorf("frontend %d: its log does not show the compaction error coming through the proxy", i)
			}
		}
	})
}

// TestGRPCProxyRequireLeader shows what the proxy does to a client's
// WithRequireLeader (docs/fleet.md): a two-member etcd loses its quorum
// when one member is killed, and the survivor cancels the require-leader
// watch of a client connected straight to it with "no leader". The same
// watch through a grpc-proxy in front of the survivor is not cancelled:
// the proxy looks for the flag where a networked client does not put it.
func TestGRPCProxyRequireLeader(t *testing.T) {
	etcd := harness.Tool(t, "etcd")
	type member struct{ name, client, peer string }
	ms := make([]member, 2)
	var cluster []string
	for i := range ms {
		ms[i] = member{fmt.Sprintf("m%d", i), fmt.Sprintf("http://127.0.0.1:%d", harness.FreePort(t)), fmt.Sprintf("http://127.0.0.1:%d", harness.FreePort(t))}
		cluster = append(cluster, ms[i].name+"="+ms[i].peer)
	}
	procs := make([]*harness.Process, 2)
	for i, m := range ms {
		args := []string{
			"--name=" + m.name, "--data-dir=" + t.TempDir(),
			"--listen-client-urls=" + m.client, "--advertise-client-urls=" + m.client,
			"--listen-peer-urls=" + m.peer, "--initial-advertise-peer-urls=" + m.peer,
			"--initial-cluster=" + strings.Join(cluster, ","),
		}
		var ready func() error
		if i == 1 { // the first cannot be healthy before the second is up
			ready = func() error { return harness.HTTPOK(m.client + "/health") }
		}
		procs[i] = harness.StartProcess(t, etcd, args, nil, ready)
	}
	waitFor(t, 30*time.Second, func() error { return harness.HTTPOK(ms[0].client + "/health") })
	proxy := harness.StartGRPCProxy(t, ms[0].client)
	direct, err := clientv3.New(clientv3.Config{Endpoints: []string{ms[0].client}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	proxied := proxy.Client(t)

	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(context.Background()))
	defer cancel()
	wd := direct.Watch(ctx, "/k", clientv3.WithCreatedNotify())
	wp := proxied.Watch(ctx, "/k", clientv3.WithCreatedNotify())
	// Created before the put: a watch from no revision starts where etcd
	// is when it creates it, which may be after the put.
	for name, wch := range map[string]clientv3.WatchChan{"direct": wd, "through the proxy": wp} {
		select {
		case wr := <-wch:
			if !wr.Created {
				t.Fatalf("%s: %v %v, want it created", name, wr.Err(), wr.Events)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: not created", name)
		}
	}
	if _, err := direct.Put(context.Background(), "/k", "1"); err != nil {
		t.Fatal(err)
	}
	for name, wch := range map[string]clientv3.WatchChan{"direct": wd, "through the proxy": wp} {
		select {
		case wr := <-wch:
			if len(wr.Events) != 1 {
				t.Fatalf("%s: %v %v", name, wr.Err(), wr.Events)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no event", name)
		}
	}

	procs[1].Kill()
	lost := time.Now()
	select {
	case wr := <-wd:
		if !errors.Is(wr.Err(), rpctypes.ErrNoLeader) {
			t.Fatalf("direct: %v %v, want %v", wr.Err(), wr.Events, rpctypes.ErrNoLeader)
		}
		t.Logf("direct: %v after %v", wr.Err(), time.Since(lost).Round(time.Millisecond))
	case <-time.After(15 * time.Second):
		t.Fatal("direct: the watch was not cancelled 15s after the quorum was lost")
	}
	// The survivor has known it has no leader for a while now; give the
	// proxy as long again.
	select {
	case wr, ok := <-wp:
		t.Fatalf("through the proxy: the watch ended (%v, open %v) %v after the quorum was lost: docs/fleet.md says it does not", wr.Err(), ok, time.Since(lost).Round(time.Millisecond))
	case <-time.After(time.Since(lost) + 5*time.Second):
		t.Logf("through the proxy: the require-leader watch is still open %v after the quorum was lost", time.Since(lost).Round(time.Millisecond))
	}
}

// TestGRPCProxyFrozen is issue 23's proxy fault: frontends given two
// proxies, the one in use frozen (SIGSTOP). It answers nothing, not even
// the one-key read that stands in for progress requests through a proxy,
// so the frontends move to the other proxy and see a change within the
// bound, then go back to answering when it is resumed.
func TestGRPCProxyFrozen(t *testing.T) {
	etcd := harness.StartEtcd(t)
	cli := etcd.Client(t)
	proxies := []*harness.GRPCProxy{harness.StartGRPCProxy(t, etcd.Endpoint), harness.StartGRPCProxy(t, etcd.Endpoint)}
	steady := clusterCheck("steady", "10.96.2.100")
	clusterPut(t, cli, "steady", "10.96.2.100")
	clusterPut(t, cli, "probe", "10.96.2.1")
	var ds []*dnsdInstance
	for range 2 {
		ds = append(ds, faultDnsd(t, proxies[0].Endpoint+","+proxies[1].Endpoint))
	}
	for _, fe := range ds {
		waitFor(t, 5*time.Second, func() error { return faultAnswers(fe.Addr, []check{clusterCheck("probe", "10.96.2.1")}) })
	}
	// Each frontend starts its watch on an endpoint of its list at random
	// (so that a fleet spreads over them); the faults below hit the proxy
	// frontend 0 watches through, and then the other one.
	watching := func(fe *dnsdInstance) int {
		for i, p := range proxies {
			if faultMetric(t, fe.Metrics, `etcdns_dnsd_watch_endpoint{endpoint="`+p.Endpoint+`"}`) == 1 {
				return i
			}
		}
		return -1
	}
	first := watching(ds[0])
	if first < 0 {
		t.Fatal("frontend 0 watches through neither proxy")
	}
	second := 1 - first
	on := make([]bool, len(ds))
	for i, fe := range ds {
		on[i] = watching(fe) == first
	}
	var loads []*faultLoad
	for _, fe := range ds {
		loads = append(loads, startFaultLoad(fe.Addr, 100, []check{steady}))
	}
	// A write outside dnsd's prefixes, so that a member would answer
	// progress requests (etcd answers once its revision reaches the
	// watch's start), then quiet until the frontends have found that the
	// proxy drops them (a linearizable read sees the write, one progress
	// request goes unanswered for the timeout; etcd's own progress
	// notifications come every ten minutes here): the quiet stream is
	// kept all along, and the freeze must be noticed by the read that
	// stands in for them.
	if _, err := cli.Put(context.Background(), "/elsewhere", "x"); err != nil {
		t.Fatal(err)
	}
	for i, fe := range ds {
		waitFor(t, 10*time.Second, func() error {
			if log := faultLog(t, fe.Process); !strings.Contains(log, "answers reads but not watch progress requests") {
				return fmt.Errorf("frontend %d: its log does not say it found the proxy dropping progress requests", i)
			}
			return nil
		})
		// A proxy with an advertised address answers the member list
		// itself, naming itself: that is not taken for a member.
		if log := faultLog(t, fe.Process); !strings.Contains(log, `msg="etcd members among the watch endpoints" members=[]`) {
			t.Errorf("frontend %d took a proxy for a member:\n%s", i, log)
		}
		if n := faultMetric(t, fe.Metrics, `etcdns_dnsd_watch_restarts_total{reason="progress_timeout"}`); n != 0 {
			t.Errorf("frontend %d: %v watch restarts for a quiet stream through a healthy proxy", i, n)
		}
	}
	proxies[first].Pause()
	put := clusterPut(t, cli, "probe", "10.96.2.2")
	for i, fe := range ds {
		waitFor(t, 5*time.Second, func() error { return faultAnswers(fe.Addr, []check{clusterCheck("probe", "10.96.2.2")}) })
		if !on[i] {
			continue // it watched through the other proxy all along
		}
		t.Logf("frontend %d answers the change %v after its put, the proxy it watched through frozen", i, time.Since(put).Round(time.Millisecond))
		if n := faultMetric(t, fe.Metrics, `etcdns_dnsd_watch_restarts_total{reason="progress_timeout"}`); n < 1 {
			t.Errorf("frontend %d: no progress_timeout restart counted", i)
		}
		if w := watching(fe); w != second {
			t.Errorf("frontend %d watches through proxy %d, not the one left (%d)", i, w, second)
		}
	}
	proxies[first].Resume()
	waitFor(t, 10*time.Second, func() error { return harness.HTTPOK(proxies[first].Endpoint + "/proxy/health") })

	// The proxy every frontend now watches through killed: it refuses
	// connections at once, and dnsd resumes on the other one without
	// waiting out the liveness timeout (etcd's client would only keep
	// redialling it).
	proxies[second].Kill()
	put = clusterPut(t, cli, "probe", "10.96.2.3")
	for i, fe := range ds {
		waitFor(t, 5*time.Second, func() error { return faultAnswers(fe.Addr, []check{clusterCheck("probe", "10.96.2.3")}) })
		t.Logf("frontend %d answers the change %v after its put, the proxy it watched through killed", i, time.Since(put).Round(time.Millisecond))
		if w := watching(fe); w != first {
			t.Errorf("frontend %d watches through proxy %d, not the one left (%d)", i, w, first)
		}
		if n := faultMetric(t, fe.Metrics, `etcdns_dnsd_watch_restarts_total{reason="unreachable"}`); n < 1 {
			t.Errorf("frontend %d: no unreachable restart counted", i)
		}
	}
	for i, l := range loads {
		if st := l.Stop(); st.failed != 0 {
			t.Errorf("frontend %d: %d of %d queries failed while a proxy was frozen or killed: %v", i, st.failed, st.sent, st.failures)
		}
	}
}

// TestGRPCProxySharesLoads: frontends that start within a revision step of
// each other (store.RevisionStep) read the same pages at the same
// revision, so a grpc-proxy answers every page of the later ones from its
// cache and etcd serves the zones once for the lot. Each frontend's watch
// then replays what was written after that revision. So too in the small
// pages (dnsd.page-size) that deploy/overlays/node-local-proxied sets,
// since the proxy keeps 2,048 responses whatever their size.
func TestGRPCProxySharesLoads(t *testing.T) {
	// A page a zone: cluster.local, clusterset.local, in-addr.arpa and
	// ip6.arpa; in pages of 100, cluster.local's 600-odd records take
	// seven, in-addr.arpa's 300 four.
	t.Run("pages of the default size", func(t *testing.T) { proxySharesLoads(t, 4) })
	t.Run("pages of 100", func(t *testing.T) { proxySharesLoads(t, 13, "--dnsd.page-size=100") })
}

func proxySharesLoads(t *testing.T, pages float64, args ...string) {
	etcd := harness.StartEtcd(t)
	cli := etcd.Client(t)
	proxy := harness.StartGRPCProxy(t, etcd.Endpoint)
	b := faultBuilder(t)
	svc := httpService(b)
	var recs []keys.Record
	for i := range 300 {
		recs = append(recs, svc(fmt.Sprintf("s%d", i), fmt.Sprintf("10.96.%d.%d", 10+i/250, i%250+1))...)
	}
	dnsdPut(t, cli, recs)
	// Up to a multiple of the step, where the frontends' loads will be.
	ctx := context.Background()
	rev := dnsdPut(t, cli, []keys.Record{b.Version()})
	for rev < store.RevisionStep || rev%store.RevisionStep != 0 {
		r, err := cli.Put(ctx, "/elsewhere/tick", strconv.FormatInt(rev, 10))
		if err != nil {
			t.Fatal(err)
		}
		rev = r.Header.Revision
	}
	faultChange(t, cli, nil, svc("kubernetes", "10.96.0.1"))
	a := func(name, ip string) check {
		q := name + ".default.svc.cluster.local."
		return check{qname: q, qtype: dns.TypeA, answer: []string{q + " 5 IN A " + ip}}
	}
	cache := func() (hits, misses float64) {
		return faultMetric(t, proxy.Endpoint+"/proxy", "etcd_grpc_proxy_cache_hits_total"),
			faultMetric(t, proxy.Endpoint+"/proxy", "etcd_grpc_proxy_cache_misses_total")
	}

	h0, m0 := cache()
	first := faultDnsd(t, proxy.Endpoint, args...)
	waitFor(t, 5*time.Second, func() error {
		return faultAnswers(first.Addr, []check{a("kubernetes", "10.96.0.1"), a("s299", "10.96.11.50")})
	})
	// Its stream is quiet: its first liveness read (serializable, so
	// cached too) has been made before the second frontend starts. It
	// reads the same key each interval, so its first hit follows that
	// miss; the load's pages are each read once.
	waitFor(t, 10*time.Second, func() error {
		if h, _ := cache(); h <= h0 {
			return fmt.Errorf("no cache hit since the first frontend started: its liveness reads have not come round twice")
		}
		return nil
	})
	h1, m1 := cache()
	faultChange(t, cli, nil, svc("fresh", "10.96.1.30"))
	second := faultDnsd(t, proxy.Endpoint, args...)
	waitFor(t, 5*time.Second, func() error {
		return faultAnswers(second.Addr, []check{a("kubernetes", "10.96.0.1"), a("fresh", "10.96.1.30"), a("s0", "10.96.10.1")})
	})
	h2, m2 := cache()
	t.Logf("proxy cache hits / misses: %v / %v before, %v / %v after the first frontend, %v / %v after the second", h0, m0, h1, m1, h2, m2)
	if m1-m0 < pages {
		t.Errorf("the first frontend's load missed the proxy's cache %v times: want its pages (%v) at least", m1-m0, pages)
	}
	if m2 != m1 || h2-h1 < pages {
		t.Errorf("the second frontend's load: %v misses and %v hits, want none and its pages (%v) at least", m2-m1, h2-h1, pages)
	}
	if log := faultLog(t, second.Process); !strings.Contains(log, fmt.Sprintf(`msg="loaded all zones" revision=%d `, rev)) {
		t.Errorf("the second frontend's log does not show its load at revision %d", rev)
	}
}

// TestGRPCProxyMemberCutOff: a grpc-proxy keeps its upstream watch on the
// member it dialled, and a member cut off from its peers still serves it,
// with nothing new. Its frontends would answer from their last snapshot
// until the member rejoined. With dnsd.watch-proxy-max-lag, and etcd's
// progress notifications more often than that, a frontend holds its quiet
// stream to a revision read linearizably through its endpoints, and moves
// to the next proxy when the stream does not show it in time; it does not
// move while the stream is healthy and the cluster is written elsewhere.
func TestGRPCProxyMemberCutOff(t *testing.T) {
	c := harness.StartEtcdCluster(t, 3, harness.WithEtcdArgs("--experimental-watch-progress-notify-interval=1s"))
	// Each proxy on a member of its own, so the test knows which member a
	// proxy's upstream watch is on; writes go through the third.
	proxies := []*harness.GRPCProxy{harness.StartGRPCProxy(t, c.Members[0].Endpoint), harness.StartGRPCProxy(t, c.Members[1].Endpoint)}
	cli := c.Members[2].Client(t)
	clusterPut(t, cli, "probe", "10.96.4.1")
	fe := faultDnsd(t, proxies[0].Endpoint+","+proxies[1].Endpoint, "--dnsd.watch-proxy-max-lag=4s")
	waitFor(t, 5*time.Second, func() error { return faultAnswers(fe.Addr, []check{clusterCheck("probe", "10.96.4.1")}) })
	watching := func() int {
		for i, p := range proxies {
			if faultMetric(t, fe.Metrics, `etcdns_dnsd_watch_endpoint{endpoint="`+p.Endpoint+`"}`) == 1 {
				return i
			}
		}
		return -1
	}
	// Writes outside dnsd's prefixes move the cluster's revision on, which
	// the quiet stream shows only with the notifications.
	elsewhere := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(300 * time.Millisecond) {
			if _, err := cli.Put(context.Background(), "/elsewhere", time.Now().String()); err != nil {
				t.Fatal(err)
			}
		}
	}
	elsewhere(time.Second)
	waitFor(t, 10*time.Second, func() error {
		if !strings.Contains(faultLog(t, fe.Process), "answers reads but not watch progress requests") {
			return fmt.Errorf("the frontend has not found that its endpoint is a proxy")
		}
		return nil
	})
	on := watching()
	if on < 0 {
		t.Fatal("the frontend watches through neither proxy")
	}
	elsewhere(8 * time.Second)
	if n := faultMetric(t, fe.Metrics, `etcdns_dnsd_watch_restarts_total{reason="lagging"}`); n != 0 || watching() != on {
		t.Fatalf("%v lagging restarts, watching through proxy %d (was %d), while the stream was healthy and quiet:\n%s", n, watching(), on, faultLog(t, fe.Process))
	}

	c.Isolate(on) // proxy i is on member i
	defer c.Heal(on)
	put := clusterPut(t, cli, "probe", "10.96.4.2")
	waitFor(t, 15*time.Second, func() error { return faultAnswers(fe.Addr, []check{clusterCheck("probe", "10.96.4.2")}) })
	// bench/faults reads this line.
	t.Logf("frontend 0 answers the change %v after its put, the proxy it watched through on a member cut off from its peers (dnsd.watch-proxy-max-lag=4s, etcd notifying progress every second)", time.Since(put).Round(time.Millisecond))
	if n := faultMetric(t, fe.Metrics, `etcdns_dnsd_watch_restarts_total{reason="lagging"}`); n < 1 {
		t.Errorf("no lagging restart counted")
	}
	if w := watching(); w != 1-on {
		t.Errorf("the frontend watches through proxy %d, not the other one (%d)", w, 1-on)
	}
}

// TestGRPCProxyMemberCutOffBehindOneAddress is deploy/overlays/
// node-local-proxied's layout: dnsd given one address that spreads
// connections over the proxies, as a Service does. A stream dropped as
// behind would resume on the same connection, the same proxy and its
// same upstream watch; dnsd closes its watch connections instead, and the
// next one reaches another proxy.
func TestGRPCProxyMemberCutOffBehindOneAddress(t *testing.T) {
	c := harness.StartEtcdCluster(t, 3, harness.WithEtcdArgs("--experimental-watch-progress-notify-interval=1s"))
	proxies := []*harness.GRPCProxy{harness.StartGRPCProxy(t, c.Members[0].Endpoint), harness.StartGRPCProxy(t, c.Members[1].Endpoint)}
	service := startRoundRobin(t, proxies[0].Endpoint, proxies[1].Endpoint)
	cli := c.Members[2].Client(t)
	clusterPut(t, cli, "probe", "10.96.5.1")
	fe := faultDnsd(t, service, "--dnsd.watch-proxy-max-lag=4s")
	waitFor(t, 5*time.Second, func() error { return faultAnswers(fe.Addr, []check{clusterCheck("probe", "10.96.5.1")}) })
	// Each proxy holds a watch of its own on its member (for its leader
	// check); the one dnsd watches through holds one more.
	watchers := func(i int) float64 { return harness.Metric(c.Members[i].Endpoint, "etcd_debugging_mvcc_watcher_total") }
	on := 0
	if watchers(1) > watchers(0) {
		on = 1
	}
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(300 * time.Millisecond) {
		if _, err := cli.Put(context.Background(), "/elsewhere", time.Now().String()); err != nil {
			t.Fatal(err)
		}
	}
	if n := faultMetric(t, fe.Metrics, `etcdns_dnsd_watch_restarts_total{reason="lagging"}`); n != 0 {
		t.Fatalf("%v lagging restarts while the stream was healthy and quiet:\n%s", n, faultLog(t, fe.Process))
	}

	c.Isolate(on)
	defer c.Heal(on)
	put := clusterPut(t, cli, "probe", "10.96.5.2")
	waitFor(t, 30*time.Second, func() error { return faultAnswers(fe.Addr, []check{clusterCheck("probe", "10.96.5.2")}) })
	t.Logf("frontend 0 answers the change %v after its put, the proxy it watched through on a member cut off from its peers, behind one address (dnsd.watch-proxy-max-lag=4s, etcd notifying progress every second)", time.Since(put).Round(time.Millisecond))
	if log := faultLog(t, fe.Process); !strings.Contains(log, "resuming on a new connection to the same endpoint") {
		t.Errorf("the frontend did not resume on a new connection:\n%s", log)
	}
}

// startRoundRobin forwards each TCP connection to the next of targets
// (http://host:port) in turn, as a Service's proxying spreads them, until
// the test ends; it returns its own address as an endpoint.
func startRoundRobin(t *testing.T, targets ...string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for n := 0; ; n++ {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", strings.TrimPrefix(targets[n%len(targets)], "http://"))
			if err != nil {
				in.Close()
				continue
			}
			go func() { io.Copy(out, in); out.Close() }()
			go func() { io.Copy(in, out); in.Close() }()
		}
	}()
	return "http://" + ln.Addr().String()
}

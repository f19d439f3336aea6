package publisher

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsfake "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/fake"

	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/keys/kube"
	"github.com/etcdns/etcdns/publisher/elect"
	"github.com/etcdns/etcdns/publisher/etcdstore"
	"github.com/etcdns/etcdns/publisher/source"
)

// member is one cluster of a clusterset: its own /skydns-<id> trees and its
// share of the clusterset tree under /skydns.
type member struct {
	*pub
	mcs   *mcsfake.Clientset
	zones Zones
}

func newMember(t *testing.T, cli *clientv3.Client, id string) *member {
	t.Helper()
	own := "/skydns-" + id
	b, err := kube.NewBuilder(keys.Layout{Prefix: own, ReversePrefix: own, Cluster: id, TTL: 5}, "cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kube.NewBuilder(keys.Layout{Prefix: "/skydns", ReversePrefix: own, Cluster: id, TTL: 5}, kube.ClustersetZone)
	if err != nil {
		t.Fatal(err)
	}
	kc := fake.NewClientset(headless("test", "db"), slice("test", "db", "db-"+id, map[string]string{"east": "10.1.0.1", "west": "10.2.0.1"}[id]),
		clusterIP("test", "api", map[string]string{"east": "10.96.0.10", "west": "10.96.0.10"}[id]))
	// The fake API serves the MCS group, as one with the CRDs installed.
	kc.Resources = []*metav1.APIResourceList{{GroupVersion: mcsv1alpha1.SchemeGroupVersion.String(),
		APIResources: []metav1.APIResource{{Name: "serviceexports"}, {Name: "serviceimports"}}}}
	mc := mcsfake.NewSimpleClientset()
	src := source.NewKube(kc, nil, "", false).WithMulticluster(mc)
	z := Zones{Cluster: b, Clusterset: &cs}
	r1, _ := etcdstore.Ranges(own, own, "cluster.local")
	r2, _ := etcdstore.Ranges("/skydns", own, kube.ClustersetZone)
	o := Options{
		Zones: z, Source: src, Store: &etcdstore.Store{Client: cli, Timeout: 5 * time.Second},
		Ranges: append(r1, r2[0]), MaxTxnOps: 128, MaxTxnBytes: 1 << 20, Log: quiet(), Metrics: NewMetrics(),
	}
	return &member{pub: &pub{t: t, b: b, kc: kc, src: src, ctrl: NewController(o), m: o.Metrics}, mcs: mc, zones: z}
}

func (m *member) export(ns, name string, ips ...string) {
	m.t.Helper()
	ctx := context.Background()
	if _, err := m.mcs.MulticlusterV1alpha1().ServiceExports(ns).Create(ctx,
		&mcsv1alpha1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, metav1.CreateOptions{}); err != nil {
		m.t.Fatal(err)
	}
	if len(ips) > 0 {
		m.serviceImport(ns, name, ips...)
	}
}

// serviceImport makes the ServiceImport an MCS controller writes in a cluster
// that imports a service, whether or not it exports it too.
func (m *member) serviceImport(ns, name string, ips ...string) {
	m.t.Helper()
	imp := &mcsv1alpha1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: mcsv1alpha1.ServiceImportSpec{Type: mcsv1alpha1.ClusterSetIP, IPs: ips,
			Ports: []mcsv1alpha1.ServicePort{{Name: "http", Port: 80, Protocol: "TCP"}}}}
	if _, err := m.mcs.MulticlusterV1alpha1().ServiceImports(ns).Create(context.Background(), imp, metav1.CreateOptions{}); err != nil {
		m.t.Fatal(err)
	}
}

// names lists "owner type data cluster" for the records under prefix, the
// way a reader of the shared tree sees them.
func names(t *testing.T, cli *clientv3.Client, prefix string) []string {
	t.Helper()
	var out []string
	for k, v := range dumpPrefix(t, cli, prefix) {
		val, err := keys.Decode([]byte(v))
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		out = append(out, val.Group+" "+val.Host+val.Text+" "+val.Cluster)
	}
	slices.Sort(out)
	return out
}

func waitNames(t *testing.T, cli *clientv3.Client, prefix string, want []string) {
	t.Helper()
	want = slices.Sorted(slices.Values(want))
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := names(t, cli, prefix)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s:\n%s\nwant:\n%s", prefix, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestClustersetTwoMembers: two clusters with the same cluster domain and
// overlapping service CIDRs share one etcd. Each writes its cluster-local and
// reverse trees under its own prefix and its exports into the shared
// clusterset tree; the union is the clusterset view; withdrawing one
// cluster's export, then the whole cluster, leaves the other's intact.
func TestClustersetTwoMembers(t *testing.T) {
	cli := startEtcd(t)
	east, west := newMember(t, cli, "east"), newMember(t, cli, "west")
	east.export("test", "db")
	east.export("test", "api", "10.112.0.1")
	west.export("test", "db")
	west.export("test", "api", "10.112.0.1")
	// Imported by west alone, with clusterset IPs of west's own: one is
	// also west's api's cluster IP, whose PTR stays api's (spec 001 2.3.3's
	// Limitations), the other gets a PTR to the clusterset name.
	west.serviceImport("test", "cache", "10.96.0.10", "10.113.0.2")
	east.start(nil)
	west.start(nil)

	union := []string{
		"10-1-0-1.east.db.test.svc.clusterset.local 10.1.0.1 east",
		"10-2-0-1.west.db.test.svc.clusterset.local 10.2.0.1 west",
		"_http._tcp.api.test.svc.clusterset.local api.test.svc.clusterset.local east",
		"_http._tcp.api.test.svc.clusterset.local api.test.svc.clusterset.local west",
		"_http._tcp.cache.test.svc.clusterset.local cache.test.svc.clusterset.local west",
		"_http._tcp.db.test.svc.clusterset.local 10-1-0-1.east.db.test.svc.clusterset.local east",
		"_http._tcp.db.test.svc.clusterset.local 10-2-0-1.west.db.test.svc.clusterset.local west",
		"api.test.svc.clusterset.local 10.112.0.1 east",
		"api.test.svc.clusterset.local 10.112.0.1 west",
		"cache.test.svc.clusterset.local 10.113.0.2 west",
		"cache.test.svc.clusterset.local 10.96.0.10 west",
		"db.test.svc.clusterset.local 10.1.0.1 east",
		"db.test.svc.clusterset.local 10.2.0.1 west",
		"dns-version.clusterset.local 1.1.0 east",
		"dns-version.clusterset.local 1.1.0 west",
	}
	waitNames(t, cli, "/skydns/local/clusterset/", union)
	// The same ClusterIP 10.96.0.10 in both clusters: no collision, each
	// PTR in its cluster's own reverse tree, next to its ClusterSetIP PTR;
	// the endpoints' PTRs are their cluster-local ones (spec 001 2.4.3).
	for _, id := range []string{"east", "west"} {
		ip := map[string]string{"east": "1.0.1.10", "west": "1.0.2.10"}[id]
		dash := map[string]string{"east": "10-1-0-1", "west": "10-2-0-1"}[id]
		want := []string{
			"1.0.112.10.in-addr.arpa api.test.svc.clusterset.local " + id,
			"10.0.96.10.in-addr.arpa api.test.svc.cluster.local " + id,
			ip + ".in-addr.arpa " + dash + ".db.test.svc.cluster.local " + id,
		}
		if id == "west" {
			want = append(want, "2.0.113.10.in-addr.arpa cache.test.svc.clusterset.local west")
		}
		waitNames(t, cli, "/skydns-"+id+"/arpa/", want)
	}
	// Nothing at <clusterid>.<svc>.<ns>.svc.clusterset.local (spec 001
	// 2.3.4 / 2.4.4): no key has that owner.
	for k := range dumpPrefix(t, cli, "/skydns/local/clusterset/") {
		for _, id := range []string{"east", "west"} {
			if strings.HasSuffix(strings.TrimSuffix(k, k[strings.LastIndex(k, "/"):]), "/"+id) {
				t.Errorf("record at the must-not name: %s", k)
			}
		}
	}

	// East stops exporting db: only east's db records leave.
	if err := east.mcs.MulticlusterV1alpha1().ServiceExports("test").Delete(context.Background(), "db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNames(t, cli, "/skydns/local/clusterset/", slices.DeleteFunc(slices.Clone(union), func(s string) bool {
		return strings.Contains(s, "db.test") && strings.HasSuffix(s, " east")
	}))

	// West leaves the set: everything west owns goes, east's stays.
	west.stop()
	eastBefore := dumpPrefix(t, cli, "/skydns-east/")
	ranges, _ := etcdstore.Ranges("/skydns-west", "/skydns-west", "cluster.local")
	ranges = append(ranges, "/skydns/local/clusterset/")
	o := WithdrawOptions{Store: &etcdstore.Store{Client: cli, Timeout: 5 * time.Second}, Ranges: ranges, Cluster: "west", MaxTxnOps: 128, MaxTxnBytes: 1 << 20, DryRun: true}
	dry, err := Withdraw(context.Background(), o)
	if err != nil || len(dry.Keys) == 0 || len(dumpPrefix(t, cli, "/skydns-west/")) == 0 {
		t.Fatalf("dry run: %d keys, %v, and it must not delete", len(dry.Keys), err)
	}
	// A running east publisher does not stop west's withdrawal; a running
	// west publisher would.
	o.DryRun = false
	var w Withdrawal
	err = elect.Exclusive(context.Background(), cli, "west", "test", "", func(ctx context.Context, term *elect.Term) error {
		o.Term = term
		w, err = Withdraw(ctx, o)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(w.Keys, dry.Keys) {
		t.Errorf("removed %d keys, the dry run listed %d", len(w.Keys), len(dry.Keys))
	}
	if left := dumpPrefix(t, cli, "/skydns-west/"); len(left) != 0 {
		t.Errorf("west's trees not empty: %v", keysOf(left))
	}
	waitNames(t, cli, "/skydns/local/clusterset/", []string{
		"_http._tcp.api.test.svc.clusterset.local api.test.svc.clusterset.local east",
		"api.test.svc.clusterset.local 10.112.0.1 east",
		"dns-version.clusterset.local 1.1.0 east",
	})
	if after := dumpPrefix(t, cli, "/skydns-east/"); len(after) != len(eastBefore) {
		t.Errorf("east's trees changed: %d keys, were %d", len(after), len(eastBefore))
	}
}

// TestExclusiveRefusesWhileLeading: withdraw must not race the cluster's
// own running publisher, which would publish everything again.
func TestExclusiveRefusesWhileLeading(t *testing.T) {
	cli := startEtcd(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leading := make(chan struct{})
	el := &elect.Elector{Client: cli, Cluster: "west", ID: "publisher-0", TTL: 5 * time.Second, Log: quiet()}
	go el.Run(ctx, func(ctx context.Context, _ *elect.Term) error { close(leading); <-ctx.Done(); return nil })
	<-leading
	err := elect.Exclusive(ctx, cli, "west", "withdraw", "", func(context.Context, *elect.Term) error {
		t.Error("ran while a publisher leads")
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "publisher-0") {
		t.Errorf("err = %v, want it to name the running publisher", err)
	}
}

// TestClustersetUpgradeFromExportLayout: before, the export unit wrote a
// ClusterSetIP service's records (source serviceexport/...). A publisher
// of this version over that tree deletes them and writes the import's;
// the PTR, whose key both want, passes from the one to the other.
func TestClustersetUpgradeFromExportLayout(t *testing.T) {
	cli := startEtcd(t)
	east := newMember(t, cli, "east")
	east.export("test", "api", "10.112.0.1")
	old, err := kube.NewBuilder(keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns-east", Cluster: "east", TTL: 5}, kube.ClustersetZone)
	if err != nil {
		t.Fatal(err)
	}
	src, name, ip := "serviceexport/test/api", "api.test.svc.clusterset.local", netip.MustParseAddr("10.112.0.1")
	put := func(r keys.Record, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(context.Background(), r.Key, string(r.Value.Encode())); err != nil {
			t.Fatal(err)
		}
	}
	put(old.Address(name, src, ip))
	put(old.PTR(ip, src, name))
	put(old.SRV(name, "http", "tcp", src, 80, name))
	east.start(nil)
	sources := func(prefix string) []string {
		var out []string
		for _, v := range dumpPrefix(t, cli, prefix) {
			val, err := keys.Decode([]byte(v))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, val.Group+" "+val.Source)
		}
		slices.Sort(out)
		return out
	}
	want := []string{
		"1.0.112.10.in-addr.arpa serviceimport/test/api",
		"_http._tcp.api.test.svc.clusterset.local serviceimport/test/api",
		"api.test.svc.clusterset.local serviceimport/test/api",
	}
	var got []string
	waitFor(t, "the import's records in place of the export's", func() bool {
		got = append(sources("/skydns/local/clusterset/svc/"), sources("/skydns-east/arpa/in-addr/10/112/")...)
		slices.Sort(got)
		return slices.Equal(got, want)
	})
}

// A Service the publisher's selector leaves out publishes no PTR, so an
// import at its address has the PTR, as with no Service there.
func TestImportPTRBesideAFilteredService(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(`apiVersion: v1
kind: Service
metadata: {name: derived, namespace: apps, labels: {dns: "off"}}
spec: {clusterIP: 10.96.0.5, clusterIPs: [10.96.0.5], ports: [{name: http, port: 80}]}
---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceImport
metadata: {name: api, namespace: apps}
spec: {type: ClusterSetIP, ips: [10.96.0.5], ports: [{name: http, port: 80, protocol: TCP}]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	src := source.NewFiles(dir, false, quiet())
	if err := src.Start(context.Background(), func(string, time.Time) {}); err != nil {
		t.Fatal(err)
	}
	l := keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: "c", TTL: 5}
	b, _ := kube.NewBuilder(l, "cluster.local")
	cs, _ := kube.NewBuilder(l, kube.ClustersetZone)
	for _, c := range []struct {
		selector, ptr string
	}{
		{"", "derived.apps.svc.cluster.local"}, // spec 001 2.3.3's Limitations: the Service's PTR is the one
		{"dns!=off", "api.apps.svc.clusterset.local"},
	} {
		f, err := NewFilter(nil, c.selector, false)
		if err != nil {
			t.Fatal(err)
		}
		recs, _ := All(Zones{Cluster: b, Clusterset: &cs}, src, f)
		var ptrs []string
		for _, r := range recs {
			if r.Name == "5.0.96.10.in-addr.arpa" {
				ptrs = append(ptrs, r.Value.Host)
			}
		}
		if !slices.Equal(ptrs, []string{c.ptr}) {
			t.Errorf("selector %q: PTRs of 10.96.0.5 %v, want %s", c.selector, ptrs, c.ptr)
		}
	}
}

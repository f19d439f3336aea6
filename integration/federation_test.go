//go:build integration

package integration

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/etcdns/etcdns/integration/harness"
	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/keys/kube"
)

// fedMember is one cluster of the federation: its own kube-apiserver,
// its publisher with federation on, and its dnsd serving the federation
// zone from the shared tree.
type fedMember struct {
	id, prefix string
	kube       kubernetes.Interface
	pub        *harness.Process
	dnsd       string
	clusterIP  string // of shop/web
	external   string // its load balancer's address
}

const (
	fedName   = "web.shop.myfed.svc.federation."
	fedOption = 65002
)

// fedDnsd starts a dnsd of cluster id serving its own trees and the
// shared federation tree; extra flags follow.
func fedDnsd(t *testing.T, records *harness.Etcd, id, prefix string, extra ...string) string {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	metrics := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	harness.StartProcess(t, harness.BuildBinary(t, "./cmd/dnsd"), append([]string{
		"--etcd.endpoints", records.Endpoint, "--dnsd.listen", addr, "--dnsd.metrics-listen", metrics,
		"--cluster.id", id,
		"--dnsd.zones", fmt.Sprintf("cluster.local=%[1]s,federation=/skydns,in-addr.arpa=%[1]s,ip6.arpa=%[1]s", prefix),
	}, extra...), nil, func() error { return harness.HTTPOK("http://" + metrics + "/readyz") })
	return addr
}

// startFedMember starts a cluster whose shop/web is a LoadBalancer service
// marked federated, with the load balancer address a cloud controller
// would write into its status (no controller runs here).
func startFedMember(t *testing.T, records *harness.Etcd, id, clusterIP, external string) *fedMember {
	t.Helper()
	m := &fedMember{id: id, prefix: "/skydns-" + id, clusterIP: clusterIP, external: external}
	api := harness.StartKubeAPIServer(t, harness.StartEtcd(t))
	m.kube = kubernetes.NewForConfigOrDie(api.RESTConfig())
	ctx := context.Background()
	if _, err := m.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := m.kube.CoreV1().Services("shop").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Annotations: map[string]string{kube.FederatedAnnotation: "true"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: clusterIP, ClusterIPs: []string{clusterIP},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: external}}
	if _, err := m.kube.CoreV1().Services("shop").UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	metrics := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	m.pub = harness.StartProcess(t, harness.BuildBinary(t, "./cmd/publisher"), []string{
		"--etcd.endpoints", records.Endpoint, "--publisher.kubeconfig", api.Kubeconfig, "--cluster.id", id,
		"--publisher.prefix", m.prefix, "--publisher.reverse-prefix", m.prefix,
		"--publisher.federation", "myfed", "--publisher.metrics-listen", metrics,
	}, nil, func() error { return harness.HTTPOK("http://" + metrics + "/readyz") })
	// Loopback is inside by default (dnsd.internal-clients): this is the
	// dnsd the cluster's pods ask.
	m.dnsd = fedDnsd(t, records, id, m.prefix)
	return m
}

// askFed asks for name's A records, naming the asking cluster in the
// source-cluster option unless cluster is "", and returns the addresses in
// answer order.
func askFed(t *testing.T, proto, addr, name, cluster string) (int, []string) {
	t.Helper()
	m := new(dns.Msg).SetQuestion(name, dns.TypeA)
	m.SetEdns0(1232, false)
	if cluster != "" {
		opt := m.IsEdns0()
		opt.Option = append(opt.Option, &dns.EDNS0_LOCAL{Code: fedOption, Data: []byte(cluster)})
	}
	c := &dns.Client{Net: proto, Timeout: 2 * time.Second}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s %s to %s: %v", proto, name, addr, err)
	}
	var ips []string
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			ips = append(ips, a.A.String())
		}
	}
	return r.Rcode, ips
}

// TestFederation: two clusters (each its own kube-apiserver) publish their
// shards of shop/web into one shared federation tree (spec 003). Each
// cluster's dnsd answers its own cluster IP first, then the other cluster's
// load balancer; the source-cluster option names another asking cluster;
// a client outside every cluster gets the load balancers only, as does an
// unmodified CoreDNS reading the same keys.
func TestFederation(t *testing.T) {
	records := harness.StartEtcd(t)
	east := startFedMember(t, records, "east", "10.96.100.10", "192.0.2.10")
	west := startFedMember(t, records, "west", "10.96.100.20", "192.0.2.20")
	// A dnsd of east whose inside list leaves out loopback: the tests'
	// queries reach it as from outside every cluster.
	outside := fedDnsd(t, records, "east", east.prefix, "--dnsd.internal-clients", "10.244.0.0/16")

	// Each dnsd watches on its own: all three must have seen both
	// clusters' writes (a cluster's load balancer and shard are one
	// transaction) before their answers are compared.
	waitFor(t, 30*time.Second, func() error {
		for _, d := range []string{outside, east.dnsd, west.dnsd} {
			if _, got := askFed(t, "udp", d, fedName, ""); len(got) != 2 {
				return fmt.Errorf("%s answers %v, want an address of each cluster", d, got)
			}
		}
		return nil
	})

	// The records in the shared tree: each cluster's load balancer at the
	// federated name and its cluster IP at <clusterid>.<name>, each carrying
	// the cluster that wrote it.
	cli := records.Client(t)
	want := []string{
		"/skydns/federation/svc/myfed/shop/web/east/* 10.96.100.10 east",
		"/skydns/federation/svc/myfed/shop/web/west/* 10.96.100.20 west",
		"/skydns/federation/svc/myfed/shop/web/* 192.0.2.10 east",
		"/skydns/federation/svc/myfed/shop/web/* 192.0.2.20 west",
	}
	slices.Sort(want)
	if got := fedKeys(t, cli); !slices.Equal(got, want) {
		t.Errorf("federation tree:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	for _, c := range []struct {
		name     string
		dnsd     string
		cluster  string // in the option
		want     []string
		anyOrder bool // one group of several: rotated
	}{
		{"east's dnsd, pod of east", east.dnsd, "", []string{east.clusterIP, west.external}, false},
		{"west's dnsd, pod of west", west.dnsd, "", []string{west.clusterIP, east.external}, false},
		{"east's dnsd, option names west", east.dnsd, "west", []string{west.clusterIP, east.external}, false},
		{"west's dnsd, option names east", west.dnsd, "east", []string{east.clusterIP, west.external}, false},
		{"outside client, no option: load balancers only (own cluster's first)", outside, "", []string{east.external, west.external}, false},
		{"outside client, option names west", outside, "west", []string{west.clusterIP, east.external}, false},
		{"option names a cluster without a shard: load balancers only", west.dnsd, "north", []string{east.external, west.external}, true},
		// The option says another server forwarded the query: one naming
		// no cluster leaves the asking cluster unknown.
		{"malformed option: load balancers only", west.dnsd, "not a label", []string{west.external, east.external}, false},
	} {
		// Over and over, over both transports, and the same name asked with
		// and without the option in turn: an answer made for one asking
		// cluster never comes back from the response cache for another.
		for i := range 6 {
			proto := []string{"udp", "tcp"}[i%2]
			rcode, got := askFed(t, proto, c.dnsd, fedName, c.cluster)
			if c.anyOrder {
				got = sorted(got)
			}
			if rcode != dns.RcodeSuccess || !slices.Equal(got, c.want) {
				t.Errorf("%s, query %d over %s: %s %v, want %v", c.name, i, proto, dns.RcodeToString[rcode], got, c.want)
			}
		}
	}

	// A shard named explicitly (spec 003) is that cluster's cluster IP.
	if _, got := askFed(t, "udp", outside, "west."+fedName, ""); !slices.Equal(got, []string{west.clusterIP}) {
		t.Errorf("west's shard by name: %v", got)
	}
	// No search-path expansion into federated names (spec 003's caveat):
	// a short name with a pod's search domain appended stays in the
	// cluster domain.
	if rcode, _ := askFed(t, "udp", east.dnsd, fedName+"shop.svc.cluster.local.", ""); rcode != dns.RcodeNameError {
		t.Errorf("a federated name under a search domain: %s, want NXDOMAIN", dns.RcodeToString[rcode])
	}

	// An unmodified CoreDNS on the same tree: the external records only
	// (its subtree read keeps the group of the shortest keys), and the
	// shard's own name.
	coredns := harness.StartCoreDNS(t, `federation:{{.Port}} {
    bind 127.0.0.1
    etcd {
        path /skydns
        endpoint `+records.Endpoint+`
    }
}
`)
	if _, got := askFed(t, "udp", coredns.Addr, fedName, ""); !slices.Equal(sorted(got), []string{east.external, west.external}) {
		t.Errorf("CoreDNS, federated name: %v", got)
	}
	if _, got := askFed(t, "udp", coredns.Addr, "east."+fedName, ""); !slices.Equal(got, []string{east.clusterIP}) {
		t.Errorf("CoreDNS, east's shard: %v", got)
	}

	// West stops federating shop/web: its shard leaves the tree, east's
	// stays, and west's cluster-local records are untouched.
	ctx := context.Background()
	svc, err := west.kube.CoreV1().Services("shop").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(svc.Annotations, kube.FederatedAnnotation)
	if _, err := west.kube.CoreV1().Services("shop").Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() error {
		if _, got := askFed(t, "udp", west.dnsd, fedName, ""); !slices.Equal(got, []string{east.external}) {
			return fmt.Errorf("west's dnsd after west left: %v, want east's load balancer only", got)
		}
		return nil
	})
	// Each dnsd has its own watch: west's having seen the change says
	// nothing about when east's does.
	waitFor(t, 10*time.Second, func() error {
		if _, got := askFed(t, "udp", east.dnsd, fedName, ""); !slices.Equal(got, []string{east.clusterIP}) {
			return fmt.Errorf("east's dnsd after west left: %v, want east's cluster IP only", got)
		}
		return nil
	})
	if _, got := askFed(t, "udp", west.dnsd, "web.shop.svc.cluster.local.", ""); !slices.Equal(got, []string{west.clusterIP}) {
		t.Errorf("west's cluster-local record after it left the federation: %v", got)
	}

	// East leaves with `publisher withdraw`, run without
	// --publisher.federation: its shard goes all the same.
	east.pub.Stop()
	out, err := exec.Command(harness.BuildBinary(t, "./cmd/publisher"), "withdraw", "--etcd.endpoints", records.Endpoint,
		"--cluster.id", "east", "--publisher.prefix", east.prefix, "--publisher.reverse-prefix", east.prefix).CombinedOutput()
	if err != nil {
		t.Fatalf("withdraw: %v\n%s", err, out)
	}
	if got := fedKeys(t, cli); len(got) != 0 {
		t.Errorf("federation tree after east's withdrawal: %v", got)
	}
	waitFor(t, 10*time.Second, func() error {
		if rcode, _ := askFed(t, "udp", east.dnsd, fedName, ""); rcode != dns.RcodeNameError {
			return fmt.Errorf("east's dnsd after the withdrawal: %s, want NXDOMAIN", dns.RcodeToString[rcode])
		}
		return nil
	})
}

// fedKeys lists the federation tree as "key value-host cluster", with
// record ids as *, sorted.
func fedKeys(t *testing.T, cli *clientv3.Client) []string {
	t.Helper()
	r, err := cli.Get(context.Background(), "/skydns/federation/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range r.Kvs {
		v, err := keys.Decode(kv.Value)
		if err != nil {
			t.Fatalf("%s: %v", kv.Key, err)
		}
		k := string(kv.Key)
		out = append(out, k[:strings.LastIndexByte(k, '/')]+"/* "+v.Host+" "+v.Cluster)
	}
	slices.Sort(out)
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	mcscrd "sigs.k8s.io/mcs-api/config/crd"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/etcdns/etcdns/integration/harness"
	"github.com/etcdns/etcdns/keys"
)

// member is one cluster of the clusterset: its own kube-apiserver (on its
// own etcd), its publisher and its dnsd, all writing to and reading from
// the shared record etcd.
type member struct {
	name   string // also the suffix of its etcd prefix, /skydns-<name>
	id     string // the cluster id the publisher discovered
	api    *harness.KubeAPIServer
	kube   kubernetes.Interface
	mcs    mcsclient.Interface
	pub    *harness.Process
	dnsd   string
	prefix string
}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// installCRDs applies the MCS API's CRDs (as mcs-api ships them) and
// ClusterProperty's, and waits until the API serves them.
func installCRDs(t *testing.T, api *harness.KubeAPIServer) {
	t.Helper()
	dyn := dynamic.NewForConfigOrDie(api.RESTConfig())
	cp, err := os.ReadFile(filepath.Join("testdata", "clusterproperty-crd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var names []string
	for _, doc := range [][]byte{mcscrd.ServiceExportCRD, mcscrd.ServiceImportCRD, cp} {
		j, err := utilyaml.ToJSON(doc)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil {
			t.Fatal(err)
		}
		if _, err := dyn.Resource(crdResource).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("CRD %s: %v", u.GetName(), err)
		}
		names = append(names, u.GetName())
	}
	waitFor(t, 30*time.Second, func() error {
		for _, n := range names {
			u, err := dyn.Resource(crdResource).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return err
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			ok := false
			for _, c := range conds {
				m, _ := c.(map[string]any)
				ok = ok || m["type"] == "Established" && m["status"] == "True"
			}
			if !ok {
				return fmt.Errorf("CRD %s not established", n)
			}
		}
		return nil
	})
}

func startMember(t *testing.T, name string, records *harness.Etcd, property string) *member {
	t.Helper()
	m := &member{name: name, prefix: "/skydns-" + name}
	m.api = harness.StartKubeAPIServer(t, harness.StartEtcd(t))
	m.kube = kubernetes.NewForConfigOrDie(m.api.RESTConfig())
	m.mcs = mcsclient.NewForConfigOrDie(m.api.RESTConfig())
	installCRDs(t, m.api)
	ctx := context.Background()
	if property != "" {
		dyn := dynamic.NewForConfigOrDie(m.api.RESTConfig())
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
			"metadata": map[string]any{"name": "cluster.clusterset.k8s.io"},
			"spec":     map[string]any{"value": property},
		}}
		gvr := schema.GroupVersionResource{Group: "about.k8s.io", Version: "v1alpha1", Resource: "clusterproperties"}
		if _, err := dyn.Resource(gvr).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		m.id = property
	} else {
		// The seed's recommended id: the kube-system namespace UID.
		waitFor(t, 30*time.Second, func() error {
			ns, err := m.kube.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
			if err == nil {
				m.id = string(ns.UID)
			}
			return err
		})
	}

	metrics := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	m.pub = harness.StartProcess(t, harness.BuildBinary(t, "./cmd/publisher"), []string{
		"--etcd.endpoints", records.Endpoint, "--publisher.kubeconfig", m.api.Kubeconfig,
		"--publisher.clusterset", "--publisher.prefix", m.prefix, "--publisher.reverse-prefix", m.prefix,
		"--publisher.metrics-listen", metrics,
	}, nil, func() error { return harness.HTTPOK("http://" + metrics + "/readyz") })

	m.dnsd = fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	dm := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	harness.StartProcess(t, harness.BuildBinary(t, "./cmd/dnsd"), []string{
		"--etcd.endpoints", records.Endpoint, "--dnsd.listen", m.dnsd, "--dnsd.metrics-listen", dm,
		"--cluster.id", m.id,
		"--dnsd.zones", fmt.Sprintf("cluster.local=%[1]s,clusterset.local=/skydns,in-addr.arpa=%[1]s,ip6.arpa=%[1]s", m.prefix),
	}, nil, func() error { return harness.HTTPOK("http://" + dm + "/readyz") })
	return m
}

// createExported makes the same two exported services in a cluster, with
// this cluster's endpoints: headless (dual-stack endpoints, one without a
// hostname, one not ready) and ClusterSetIP (with the ServiceImport an MCS
// implementation would write), plus one service that is not exported.
func (m *member) createExported(t *testing.T, v4, v6 string) {
	t.Helper()
	ctx := context.Background()
	if _, err := m.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "test"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	https := corev1.ServicePort{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}
	for _, s := range []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "test", Name: "headless"},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{https}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "test", Name: "myservice"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{https}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "test", Name: "local-only"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{https}}},
	} {
		if _, err := m.kube.CoreV1().Services("test").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ready, notReady := true, false
	port := []discoveryv1.EndpointPort{{Name: ptr("https"), Port: ptr(int32(443)), Protocol: ptr(corev1.ProtocolTCP)}}
	for _, s := range []*discoveryv1.EndpointSlice{
		epSlice("test", "headless", discoveryv1.AddressTypeIPv4, port,
			endpoint(v4+".100", "my-pet", &ready), endpoint(v4+".101", "", &ready), endpoint(v4+".102", "", &notReady)),
		epSlice("test", "headless", discoveryv1.AddressTypeIPv6, port, endpoint(v6+"::64", "my-pet", &ready)),
	} {
		if _, err := m.kube.DiscoveryV1().EndpointSlices("test").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	imp := &mcsv1alpha1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: "test", Name: "myservice"},
		Spec: mcsv1alpha1.ServiceImportSpec{Type: mcsv1alpha1.ClusterSetIP, IPs: []string{"10.42.42.42", "2001:db8::1"},
			Ports: []mcsv1alpha1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}}}}
	if _, err := m.mcs.MulticlusterV1alpha1().ServiceImports("test").Create(ctx, imp, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"headless", "myservice"} {
		e := &mcsv1alpha1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "test", Name: n}}
		if _, err := m.mcs.MulticlusterV1alpha1().ServiceExports("test").Create(ctx, e, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// createImport makes the ServiceImport an MCS controller writes for name
// in this cluster, and with export the Service and ServiceExport it
// comes from; without, a Service of its own (derived) at the last of the
// IPs, backing the import.
func (m *member) createImport(t *testing.T, name string, export bool, ips ...string) {
	t.Helper()
	ctx := context.Background()
	https := corev1.ServicePort{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "test", Name: name}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{https}}}
	if !export {
		svc = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "test", Name: "derived"},
			Spec: corev1.ServiceSpec{ClusterIP: ips[len(ips)-1], Ports: []corev1.ServicePort{https}}}
	}
	if _, err := m.kube.CoreV1().Services("test").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	imp := &mcsv1alpha1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: "test", Name: name},
		Spec: mcsv1alpha1.ServiceImportSpec{Type: mcsv1alpha1.ClusterSetIP, IPs: ips,
			Ports: []mcsv1alpha1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}}}}
	if _, err := m.mcs.MulticlusterV1alpha1().ServiceImports("test").Create(ctx, imp, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if export {
		e := &mcsv1alpha1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Namespace: "test", Name: name}}
		if _, err := m.mcs.MulticlusterV1alpha1().ServiceExports("test").Create(ctx, e, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMulticluster: two clusters (each its own kube-apiserver on its own
// etcd, both calling their domain cluster.local, both with the kubernetes
// service at 10.96.0.1) share one record etcd. Every record of spec 001
// section 2, the records that must not exist, topology order, and each
// cluster's independent withdrawal, asked of each cluster's dnsd.
func TestMulticluster(t *testing.T) {
	records := harness.StartEtcd(t)
	east := startMember(t, "east", records, "east") // id from ClusterProperty cluster.clusterset.k8s.io
	west := startMember(t, "west", records, "")     // id from the kube-system namespace UID
	east.createExported(t, "10.3.0", "fd00:10:244:3")
	west.createExported(t, "10.4.0", "fd00:10:244:4")

	cs := ".test.svc.clusterset.local."
	hl := "headless" + cs
	srv := "_https._tcp." + hl
	host := func(m *member, h string) string { return h + "." + m.id + "." + hl }
	waitFor(t, 30*time.Second, func() error {
		for _, m := range []*member{east, west} {
			if r := ask(t, "udp", m.dnsd, srv, dns.TypeSRV); len(r.Answer) != 4 {
				return fmt.Errorf("%s: %d SRV records, want 4", m.name, len(r.Answer))
			}
		}
		return nil
	})

	both := func(c check) []check { return []check{c} }
	var all []check
	for _, c := range [][]check{
		both(check{spec: "001 2.2 dns-version (one TXT, written by each cluster)", qname: "dns-version.clusterset.local.", qtype: dns.TypeTXT,
			answer: []string{`dns-version.clusterset.local. 5 IN TXT "1.1.0"`}}),
		both(check{spec: "001 2.3.1 ClusterSetIP A", qname: "myservice" + cs, qtype: dns.TypeA,
			answer: []string{"myservice" + cs + " 5 IN A 10.42.42.42"}}),
		both(check{spec: "001 2.3.1 ClusterSetIP AAAA", qname: "myservice" + cs, qtype: dns.TypeAAAA,
			answer: []string{"myservice" + cs + " 5 IN AAAA 2001:db8::1"}}),
		both(check{spec: "001 2.3.2 ClusterSetIP SRV", qname: "_https._tcp.myservice" + cs, qtype: dns.TypeSRV,
			answer: []string{"_https._tcp.myservice" + cs + " 5 IN SRV 10 100 443 myservice" + cs}}),
		both(check{spec: "001 2.3.3 ClusterSetIP PTR (IPv4)", qname: "42.42.42.10.in-addr.arpa.", qtype: dns.TypePTR,
			answer: []string{"42.42.42.10.in-addr.arpa. 5 IN PTR myservice" + cs}}),
		both(check{spec: "001 2.3.3 ClusterSetIP PTR (IPv6 nibbles)", qname: "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa.", qtype: dns.TypePTR,
			answer: []string{"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa. 5 IN PTR myservice" + cs}}),
		both(check{spec: "001 2.3.4 must not exist: <clusterid>.<svc> (ClusterSetIP)", qname: east.id + ".myservice" + cs, qtype: dns.TypeA,
			rcode: dns.RcodeNameError}),
		both(check{spec: "001 2.4.1 headless A: ready endpoints of every cluster", qname: hl, qtype: dns.TypeA, answer: []string{
			hl + " 5 IN A 10.3.0.100", hl + " 5 IN A 10.3.0.101", hl + " 5 IN A 10.4.0.100", hl + " 5 IN A 10.4.0.101"}}),
		both(check{spec: "001 2.4.1 headless AAAA", qname: hl, qtype: dns.TypeAAAA, answer: []string{
			hl + " 5 IN AAAA fd00:10:244:3::64", hl + " 5 IN AAAA fd00:10:244:4::64"}}),
		both(check{spec: "001 2.4.1 <hostname>.<clusterid>.<svc> A", qname: host(east, "my-pet"), qtype: dns.TypeA,
			answer: []string{host(east, "my-pet") + " 5 IN A 10.3.0.100"}}),
		both(check{spec: "001 2.4.1 <hostname>.<clusterid>.<svc> AAAA", qname: host(west, "my-pet"), qtype: dns.TypeAAAA,
			answer: []string{host(west, "my-pet") + " 5 IN AAAA fd00:10:244:4::64"}}),
		both(check{spec: "001 2.4.1 system-assigned hostname", qname: host(west, "10-4-0-101"), qtype: dns.TypeA,
			answer: []string{host(west, "10-4-0-101") + " 5 IN A 10.4.0.101"}}),
		both(check{spec: "001 2.4.1 not-ready endpoint absent", qname: host(west, "10-4-0-102"), qtype: dns.TypeA,
			rcode: dns.RcodeNameError}),
		both(check{spec: "001 2.4.2 headless SRV (N x M x P)", qname: srv, qtype: dns.TypeSRV, answer: []string{
			srv + " 5 IN SRV 10 25 443 " + host(east, "my-pet"), srv + " 5 IN SRV 10 25 443 " + host(east, "10-3-0-101"),
			srv + " 5 IN SRV 10 25 443 " + host(west, "my-pet"), srv + " 5 IN SRV 10 25 443 " + host(west, "10-4-0-101")}}),
		both(check{spec: "001 2.4.4 must not exist: <clusterid>.<svc> (headless): empty non-terminal", qname: east.id + "." + hl, qtype: dns.TypeA}),
		both(check{spec: "001 2.4.4 must not exist: <clusterid>.<svc> (headless), other cluster", qname: west.id + "." + hl, qtype: dns.TypeSRV}),
		both(check{spec: "001 2.1 a service that is not exported", qname: "local-only" + cs, qtype: dns.TypeA, rcode: dns.RcodeNameError}),
	} {
		all = append(all, c...)
	}
	// Each unit (export, import, the cluster-local service) is its own
	// transaction, so the SRV above does not mean the rest has landed.
	waitFor(t, 30*time.Second, func() error {
		for _, m := range []*member{east, west} {
			for _, c := range all {
				for _, proto := range []string{"udp", "tcp"} {
					if got, err := expect(ask(t, proto, m.dnsd, c.qname, c.qtype), c); err != nil {
						return fmt.Errorf("%s dnsd over %s, %s (%s %s): %v\n%s", m.name, proto, c.spec, c.qname, dns.TypeToString[c.qtype], err, got)
					}
				}
			}
		}
		return nil
	})
	// The same clusterset.local questions to CoreDNS's etcd plugin reading
	// the same shared tree: where it differs, the check says why.
	// This is docs/multicluster.md's Corefile for cluster east: one server
	// block per prefix, as the plugin takes one path.
	coredns := harness.StartCoreDNS(t, `cluster.local:{{.Port}} in-addr.arpa:{{.Port}} ip6.arpa:{{.Port}} {
    bind 127.0.0.1
    etcd {
        path /skydns-east
        endpoint `+records.Endpoint+`
    }
}
clusterset.local:{{.Port}} {
    bind 127.0.0.1
    etcd {
        path /skydns
        endpoint `+records.Endpoint+`
    }
}
`)
	for _, c := range all {
		c.coredns = corednsClusterset[c.spec]
		askPeer(t, "CoreDNS's etcd plugin", coredns.Addr, c, c.coredns)
	}

	// 001 2.4.3 headless PTR: the endpoint already has its cluster-local
	// PTR (the spec's Limitations), each in its own cluster's reverse tree;
	// and the two clusters' kubernetes services share 10.96.0.1 without
	// colliding.
	for _, c := range []struct {
		m     *member
		check check
	}{
		{east, check{qname: "100.0.3.10.in-addr.arpa.", qtype: dns.TypePTR, answer: []string{"100.0.3.10.in-addr.arpa. 5 IN PTR my-pet.headless.test.svc.cluster.local."}}},
		{west, check{qname: "100.0.4.10.in-addr.arpa.", qtype: dns.TypePTR, answer: []string{"100.0.4.10.in-addr.arpa. 5 IN PTR my-pet.headless.test.svc.cluster.local."}}},
		{east, check{qname: "1.0.96.10.in-addr.arpa.", qtype: dns.TypePTR, answer: []string{"1.0.96.10.in-addr.arpa. 5 IN PTR kubernetes.default.svc.cluster.local."}}},
		{west, check{qname: "1.0.96.10.in-addr.arpa.", qtype: dns.TypePTR, answer: []string{"1.0.96.10.in-addr.arpa. 5 IN PTR kubernetes.default.svc.cluster.local."}}},
		{east, check{qname: "kubernetes.default.svc.cluster.local.", qtype: dns.TypeA, answer: []string{"kubernetes.default.svc.cluster.local. 5 IN A 10.96.0.1"}}},
		{west, check{qname: "my-pet.headless.test.svc.cluster.local.", qtype: dns.TypeA, answer: []string{"my-pet.headless.test.svc.cluster.local. 5 IN A 10.4.0.100"}}},
	} {
		waitFor(t, 10*time.Second, func() error {
			if got, err := expect(ask(t, "udp", c.m.dnsd, c.check.qname, c.check.qtype), c.check); err != nil {
				return fmt.Errorf("%s dnsd, 001 2.4.3 / per-cluster trees (%s): %v\n%s", c.m.name, c.check.qname, err, got)
			}
			return nil
		})
	}

	// Topology: each cluster's dnsd puts its own endpoints first, whatever
	// the rotation of this query.
	for _, m := range []*member{east, west} {
		own := map[*member]string{east: "10.3.0.", west: "10.4.0."}[m]
		for i := range 20 {
			r := ask(t, "udp", m.dnsd, hl, dns.TypeA)
			var order []string
			for _, rr := range r.Answer {
				order = append(order, rr.(*dns.A).A.String())
			}
			if len(order) != 4 || !strings.HasPrefix(order[0], own) || !strings.HasPrefix(order[1], own) {
				t.Fatalf("%s dnsd, query %d: answer order %v, want %s* first", m.name, i, order, own)
			}
			r = ask(t, "udp", m.dnsd, srv, dns.TypeSRV)
			if t0 := r.Answer[0].(*dns.SRV).Target; !strings.Contains(t0, "."+m.id+".") {
				t.Fatalf("%s dnsd, query %d: first SRV target %s is not this cluster's", m.name, i, t0)
			}
		}
	}

	// Spec 001 2.3: a clusterset IP may be each cluster's own. East exports
	// percluster at 10.43.0.3; west imports it without exporting, at
	// 10.43.0.4 and at 10.96.200.4, the cluster IP of a Service of west's
	// own (derived) that backs the import, as some MCS implementations do.
	// Each dnsd answers its own cluster's IPs and no other's; west's
	// reverse tree has a PTR for 10.43.0.4 and keeps derived's for
	// 10.96.200.4 (2.3.3's Limitations). CoreDNS answers every cluster's.
	east.createImport(t, "percluster", true, "10.43.0.3")
	west.createImport(t, "percluster", false, "10.43.0.4", "10.96.200.4")
	// Imported by east alone: west has no clusterset IP of it.
	east.createImport(t, "eastonly", true, "10.43.0.5")
	pc := "percluster" + cs
	perCluster := []struct {
		m     *member
		check check
	}{
		{east, check{qname: pc, qtype: dns.TypeA, answer: []string{pc + " 5 IN A 10.43.0.3"}}},
		{west, check{qname: pc, qtype: dns.TypeA, answer: []string{pc + " 5 IN A 10.43.0.4", pc + " 5 IN A 10.96.200.4"}}},
		{east, check{qname: "_https._tcp." + pc, qtype: dns.TypeSRV, answer: []string{"_https._tcp." + pc + " 5 IN SRV 10 100 443 " + pc}}},
		{west, check{qname: "_https._tcp." + pc, qtype: dns.TypeSRV, answer: []string{"_https._tcp." + pc + " 5 IN SRV 10 100 443 " + pc}}},
		{east, check{qname: "3.0.43.10.in-addr.arpa.", qtype: dns.TypePTR, answer: []string{"3.0.43.10.in-addr.arpa. 5 IN PTR " + pc}}},
		{west, check{qname: "4.0.43.10.in-addr.arpa.", qtype: dns.TypePTR, answer: []string{"4.0.43.10.in-addr.arpa. 5 IN PTR " + pc}}},
		{west, check{qname: "4.200.96.10.in-addr.arpa.", qtype: dns.TypePTR, answer: []string{"4.200.96.10.in-addr.arpa. 5 IN PTR derived.test.svc.cluster.local."}}},
		{east, check{qname: "4.0.43.10.in-addr.arpa.", qtype: dns.TypePTR, rcode: dns.RcodeNameError}},
		{east, check{qname: "eastonly" + cs, qtype: dns.TypeA, answer: []string{"eastonly" + cs + " 5 IN A 10.43.0.5"}}},
		{west, check{qname: "eastonly" + cs, qtype: dns.TypeA, rcode: dns.RcodeNameError}},
	}
	waitFor(t, 30*time.Second, func() error {
		for _, c := range perCluster {
			for _, proto := range []string{"udp", "tcp"} {
				if got, err := expect(ask(t, proto, c.m.dnsd, c.check.qname, c.check.qtype), c.check); err != nil {
					return fmt.Errorf("%s dnsd over %s, a clusterset IP of each cluster's own (%s %s): %v\n%s", c.m.name, proto, c.check.qname, dns.TypeToString[c.check.qtype], err, got)
				}
			}
		}
		return nil
	})
	askPeer(t, "CoreDNS's etcd plugin", coredns.Addr, check{spec: "001 2.3.1 a clusterset IP of each cluster's own", qname: pc, qtype: dns.TypeA,
		answer: []string{pc + " 5 IN A 10.43.0.3"}}, "it answers every cluster's clusterset IPs, 10.43.0.4 and 10.96.200.4 of west's too")

	// East stops exporting headless: its records leave the clusterset
	// view, west's stay, and nothing else changes.
	if err := east.mcs.MulticlusterV1alpha1().ServiceExports("test").Delete(context.Background(), "headless", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() error {
		for _, m := range []*member{east, west} {
			if _, err := expect(ask(t, "udp", m.dnsd, hl, dns.TypeA), check{answer: []string{hl + " 5 IN A 10.4.0.100", hl + " 5 IN A 10.4.0.101"}}); err != nil {
				return fmt.Errorf("%s dnsd, headless after east withdrew it: %v", m.name, err)
			}
			if _, err := expect(ask(t, "udp", m.dnsd, host(east, "my-pet"), dns.TypeA), check{rcode: dns.RcodeNameError}); err != nil {
				return fmt.Errorf("%s dnsd still answers east's withdrawn endpoint: %v", m.name, err)
			}
		}
		return nil
	})
	for _, m := range []*member{east, west} {
		if _, err := expect(ask(t, "udp", m.dnsd, "myservice"+cs, dns.TypeA), check{answer: []string{"myservice" + cs + " 5 IN A 10.42.42.42"}}); err != nil {
			t.Errorf("%s dnsd, myservice after east withdrew headless: %v", m.name, err)
		}
	}
	if _, err := expect(ask(t, "udp", east.dnsd, "my-pet.headless.test.svc.cluster.local.", dns.TypeA),
		check{answer: []string{"my-pet.headless.test.svc.cluster.local. 5 IN A 10.3.0.100"}}); err != nil {
		t.Errorf("withdrawing an export touched east's cluster-local records: %v", err)
	}

	// West leaves the set with `publisher withdraw`: refused while its
	// publisher runs, then everything west owns goes and east's stays.
	cli := records.Client(t)
	eastKeys := ownedBy(t, cli, east.id)
	withdraw := func(args ...string) (string, error) {
		cmd := exec.Command(harness.BuildBinary(t, "./cmd/publisher"), append([]string{"withdraw",
			"--etcd.endpoints", records.Endpoint, "--cluster.id", west.id,
			"--publisher.prefix", west.prefix, "--publisher.reverse-prefix", west.prefix}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := withdraw(); err == nil || !strings.Contains(out, "a publisher of this cluster is running") {
		t.Fatalf("withdraw while west's publisher runs: %v\n%s", err, out)
	}
	west.pub.Stop()
	before := ownedBy(t, cli, west.id)
	out, err := withdraw("--dry-run")
	if err != nil || len(strings.Fields(out)) < len(before) {
		t.Fatalf("withdraw --dry-run: %v\n%s", err, out)
	}
	if n := len(ownedBy(t, cli, west.id)); n != len(before) {
		t.Fatalf("--dry-run removed records: %d left of %d", n, len(before))
	}
	if out, err := withdraw(); err != nil {
		t.Fatalf("withdraw: %v\n%s", err, out)
	}
	if left := ownedBy(t, cli, west.id); len(left) != 0 {
		t.Errorf("west still owns %d records: %v", len(left), left)
	}
	if got := ownedBy(t, cli, east.id); !slices.Equal(got, eastKeys) {
		t.Errorf("west's withdrawal changed east's records: %d keys, were %d", len(got), len(eastKeys))
	}
	waitFor(t, 10*time.Second, func() error {
		if _, err := expect(ask(t, "udp", east.dnsd, hl, dns.TypeA), check{rcode: dns.RcodeNameError}); err != nil {
			return fmt.Errorf("east dnsd, headless after west left: %v", err)
		}
		if _, err := expect(ask(t, "udp", west.dnsd, "kubernetes.default.svc.cluster.local.", dns.TypeA), check{rcode: dns.RcodeNameError}); err != nil {
			return fmt.Errorf("west's cluster-local tree after its withdrawal: %v", err)
		}
		return nil
	})
	if _, err := expect(ask(t, "udp", east.dnsd, "myservice"+cs, dns.TypeA), check{answer: []string{"myservice" + cs + " 5 IN A 10.42.42.42"}}); err != nil {
		t.Errorf("east's export after west left: %v", err)
	}
}

// corednsClusterset says why CoreDNS's etcd plugin answers a clusterset
// check differently, by the check's spec line.
var corednsClusterset = map[string]string{
	"001 2.3.2 ClusterSetIP SRV": "one SRV per exporting cluster (it does not de-duplicate SRV), weights split among the copies",
	"001 2.4.4 must not exist: <clusterid>.<svc> (headless): empty non-terminal": "its subtree read answers with that cluster's endpoints: the record the spec forbids",
	"001 2.4.4 must not exist: <clusterid>.<svc> (headless), other cluster":      "its subtree read makes SRV records, port 0, targeting the endpoint keys themselves",
}

// ownedBy lists the keys whose value names cluster, anywhere in etcd.
func ownedBy(t *testing.T, cli *clientv3.Client, cluster string) []string {
	t.Helper()
	r, err := cli.Get(context.Background(), "/skydns", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range r.Kvs {
		if v, err := keys.Decode(kv.Value); err == nil && v.Cluster == cluster {
			out = append(out, string(kv.Key))
		}
	}
	return out
}

package kube

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdns/etcdns/keys"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

func builder(t *testing.T) Builder {
	t.Helper()
	b, err := NewBuilder(keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: "c1", TTL: 5}, "cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ptr[T any](v T) *T { return &v }

func service(ns, name string, ips []string, ports ...corev1.ServicePort) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	s.Spec.ClusterIPs = ips
	if len(ips) > 0 {
		s.Spec.ClusterIP = ips[0]
	}
	s.Spec.Ports = ports
	return s
}

type ep struct {
	ip, hostname string
	ready        *bool
}

func slice(ns, svc, name string, af discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...ep) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: af,
		Ports:       ports,
	}
	for _, e := range eps {
		x := discoveryv1.Endpoint{Addresses: []string{e.ip}, Conditions: discoveryv1.EndpointConditions{Ready: e.ready}}
		if e.hostname != "" {
			x.Hostname = ptr(e.hostname)
		}
		s.Endpoints = append(s.Endpoints, x)
	}
	return s
}

func port(name string, n int32) discoveryv1.EndpointPort {
	p := discoveryv1.EndpointPort{Port: ptr(n), Protocol: ptr(corev1.ProtocolTCP)}
	if name != "" {
		p.Name = ptr(name)
	}
	return p
}

// rr renders a record as DNS presentation, the way a user reads an answer.
func rr(r keys.Record) string {
	v := r.Value
	switch r.Type {
	case dns.TypeSRV:
		return fmt.Sprintf("%s SRV %d %s.", r.Name, v.Port, v.Host)
	case dns.TypeTXT:
		return fmt.Sprintf("%s TXT %q", r.Name, v.Text)
	case dns.TypeCNAME, dns.TypePTR:
		return fmt.Sprintf("%s %s %s.", r.Name, dns.TypeToString[r.Type], v.Host)
	}
	return fmt.Sprintf("%s %s %s", r.Name, dns.TypeToString[r.Type], v.Host)
}

func rrs(recs []keys.Record) []string {
	out := make([]string, 0, len(recs))
	for _, r := range recs {
		out = append(out, rr(r))
	}
	slices.Sort(out)
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// etcdctl renders records as `etcdctl get --prefix` prints them.
func etcdctl(recs []keys.Record) string {
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "%s\n%s\n", r.Key, r.Value.Encode())
	}
	return b.String()
}

func golden(t *testing.T, name string, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./keys/kube -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s: records differ from %s:\n--- got\n%s--- want\n%s", name, path, got, want)
	}
}

var httpsPort = corev1.ServicePort{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}

func TestService(t *testing.T) {
	b := builder(t)
	notReady := ptr(false)
	for _, tc := range []struct {
		name   string
		svc    *corev1.Service
		slices []*discoveryv1.EndpointSlice
		want   []string
	}{{
		name: "clusterip", // spec 000 2.3.1-2.3.3, and docs 002's pod-ip.<svc> names
		svc:  service("default", "kubernetes", []string{"10.96.0.1"}, httpsPort, corev1.ServicePort{Port: 8080}),
		slices: []*discoveryv1.EndpointSlice{slice("default", "kubernetes", "kubernetes", discoveryv1.AddressTypeIPv4,
			[]discoveryv1.EndpointPort{port("https", 6443)}, ep{ip: "172.18.0.2"})},
		want: []string{
			"1.0.96.10.in-addr.arpa PTR kubernetes.default.svc.cluster.local.",
			"172-18-0-2.kubernetes.default.svc.cluster.local A 172.18.0.2",
			"_https._tcp.kubernetes.default.svc.cluster.local SRV 443 kubernetes.default.svc.cluster.local.",
			"kubernetes.default.svc.cluster.local A 10.96.0.1",
		},
	}, {
		name: "dualstack", // docs 002: A and AAAA
		svc: service("prod", "web", []string{"10.96.0.20", "fd00:10:96::20"},
			corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}),
		want: []string{
			"0.2.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.6.9.0.0.0.1.0.0.0.0.d.f.ip6.arpa PTR web.prod.svc.cluster.local.",
			"20.0.96.10.in-addr.arpa PTR web.prod.svc.cluster.local.",
			"_dns._udp.web.prod.svc.cluster.local SRV 53 web.prod.svc.cluster.local.",
			"web.prod.svc.cluster.local A 10.96.0.20",
			"web.prod.svc.cluster.local AAAA fd00:10:96::20",
		},
	}, {
		name: "headless", // spec 000 2.4: N x M SRV, hostnames, dashed ids, not-ready left out, slices merged
		svc:  service("default", "headless", []string{"None"}, httpsPort),
		slices: []*discoveryv1.EndpointSlice{
			slice("default", "headless", "headless-a", discoveryv1.AddressTypeIPv4,
				[]discoveryv1.EndpointPort{port("https", 443), port("", 8080)},
				ep{ip: "10.3.0.100", hostname: "my-pet"}, ep{ip: "10.3.0.1"}, ep{ip: "10.3.0.3", ready: notReady}),
			slice("default", "headless", "headless-b", discoveryv1.AddressTypeIPv4,
				[]discoveryv1.EndpointPort{port("https", 443), port("", 8080)},
				ep{ip: "10.3.0.1", ready: ptr(true)}),
			slice("default", "other", "other-a", discoveryv1.AddressTypeIPv4, nil, ep{ip: "10.9.9.9"}),
		},
		want: []string{
			"1.0.3.10.in-addr.arpa PTR 10-3-0-1.headless.default.svc.cluster.local.",
			"10-3-0-1.headless.default.svc.cluster.local A 10.3.0.1",
			"100.0.3.10.in-addr.arpa PTR my-pet.headless.default.svc.cluster.local.",
			"_https._tcp.headless.default.svc.cluster.local SRV 443 10-3-0-1.headless.default.svc.cluster.local.",
			"_https._tcp.headless.default.svc.cluster.local SRV 443 my-pet.headless.default.svc.cluster.local.",
			"headless.default.svc.cluster.local A 10.3.0.1",
			"headless.default.svc.cluster.local A 10.3.0.100",
			"my-pet.headless.default.svc.cluster.local A 10.3.0.100",
		},
	}, {
		name: "headless-endpoint-in-two-slices", // one endpoint once, with the ports of every slice that has it (spec 000 2.4.2: each endpoint and port)
		svc:  service("default", "twice", []string{"None"}, httpsPort),
		slices: []*discoveryv1.EndpointSlice{
			slice("default", "twice", "twice-b", discoveryv1.AddressTypeIPv4,
				[]discoveryv1.EndpointPort{port("https", 443)}, ep{ip: "10.3.0.9"}, ep{ip: "10.3.0.1"}),
			slice("default", "twice", "twice-a", discoveryv1.AddressTypeIPv4,
				[]discoveryv1.EndpointPort{port("metrics", 9090)}, ep{ip: "10.3.0.1"}, ep{ip: "10.3.0.2"}),
		},
		want: []string{
			"1.0.3.10.in-addr.arpa PTR 10-3-0-1.twice.default.svc.cluster.local.",
			"10-3-0-1.twice.default.svc.cluster.local A 10.3.0.1",
			"10-3-0-2.twice.default.svc.cluster.local A 10.3.0.2",
			"10-3-0-9.twice.default.svc.cluster.local A 10.3.0.9",
			"2.0.3.10.in-addr.arpa PTR 10-3-0-2.twice.default.svc.cluster.local.",
			"9.0.3.10.in-addr.arpa PTR 10-3-0-9.twice.default.svc.cluster.local.",
			"_https._tcp.twice.default.svc.cluster.local SRV 443 10-3-0-1.twice.default.svc.cluster.local.",
			"_https._tcp.twice.default.svc.cluster.local SRV 443 10-3-0-9.twice.default.svc.cluster.local.",
			"_metrics._tcp.twice.default.svc.cluster.local SRV 9090 10-3-0-1.twice.default.svc.cluster.local.",
			"_metrics._tcp.twice.default.svc.cluster.local SRV 9090 10-3-0-2.twice.default.svc.cluster.local.",
			"twice.default.svc.cluster.local A 10.3.0.1",
			"twice.default.svc.cluster.local A 10.3.0.2",
			"twice.default.svc.cluster.local A 10.3.0.9",
		},
	}, {
		name: "headless-none-ready", // spec 000 2.4.1: no ready endpoints, so no records (NXDOMAIN)
		svc:  service("default", "empty", []string{"None"}, httpsPort),
		slices: []*discoveryv1.EndpointSlice{slice("default", "empty", "empty-a", discoveryv1.AddressTypeIPv4,
			[]discoveryv1.EndpointPort{port("https", 443)}, ep{ip: "10.3.0.7", ready: notReady})},
	}, {
		name: "tolerate-unready", // spec 000 2.1: the annotation makes unready endpoints ready
		svc: func() *corev1.Service {
			s := service("default", "db", []string{"None"})
			s.Annotations = map[string]string{TolerateUnreadyAnnotation: "true"}
			return s
		}(),
		slices: []*discoveryv1.EndpointSlice{slice("default", "db", "db-a", discoveryv1.AddressTypeIPv4, nil,
			ep{ip: "10.3.0.7", hostname: "db-0", ready: notReady})},
		want: []string{
			"7.0.3.10.in-addr.arpa PTR db-0.db.default.svc.cluster.local.",
			"db-0.db.default.svc.cluster.local A 10.3.0.7",
			"db.default.svc.cluster.local A 10.3.0.7",
		},
	}, {
		name: "publish-not-ready", // docs 002: publishNotReadyAddresses
		svc: func() *corev1.Service {
			s := service("default", "db", []string{"None"})
			s.Spec.PublishNotReadyAddresses = true
			return s
		}(),
		slices: []*discoveryv1.EndpointSlice{slice("default", "db", "db-a", discoveryv1.AddressTypeIPv6, nil,
			ep{ip: "fd00::7", ready: notReady})},
		want: []string{
			"7.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa PTR fd00--7.db.default.svc.cluster.local.",
			"db.default.svc.cluster.local AAAA fd00::7",
			"fd00--7.db.default.svc.cluster.local AAAA fd00::7",
		},
	}, {
		name: "externalname", // spec 000 2.5
		svc: &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "foo"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "WWW.Example.com."}},
		want: []string{"foo.default.svc.cluster.local CNAME www.example.com."},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			recs, problems := b.Service(tc.svc, tc.slices)
			if len(problems) > 0 {
				t.Errorf("problems: %v", problems)
			}
			if got, want := rrs(recs), sorted(tc.want); !slices.Equal(got, want) {
				t.Errorf("records:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			for _, r := range recs {
				if r.Value.Cluster != "c1" || r.Value.Source != "service/"+tc.svc.Namespace+"/"+tc.svc.Name || r.Value.TTL != 5 || r.Value.Group != r.Name {
					t.Errorf("%s: value %s does not carry cluster, source, ttl and group", r.Key, r.Value.Encode())
				}
			}
			golden(t, "service-"+tc.name, etcdctl(recs))
		})
	}
}

func TestServiceInvalid(t *testing.T) {
	b := builder(t)
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		want string // in the problem
		recs int
	}{
		{"bad cluster IP", service("default", "x", []string{"10.0.0.300"}), `address "10.0.0.300"`, 0},
		{"name too long", service("default", strings.Repeat("x", 64), []string{"10.0.0.1"}), "at most 63", 0},
		{"bad namespace", service("Default", "x", []string{"10.0.0.1"}), `namespace "Default"`, 0},
		{"externalName IP", &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "d", Name: "x"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "1.2.3.4"}}, "is an IP address", 0},
		{"bad port name kept the rest", service("default", "x", []string{"10.0.0.1"}, corev1.ServicePort{Name: "Bad_Port", Port: 80}), `port name "Bad_Port"`, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs, problems := b.Service(tc.svc, nil)
			if len(recs) != tc.recs {
				t.Errorf("got %d records %v; want %d", len(recs), rrs(recs), tc.recs)
			}
			if len(problems) != 1 || !strings.Contains(problems[0].Error(), tc.want) {
				t.Errorf("problems = %v; want one mentioning %q", problems, tc.want)
			}
		})
	}
	// A bad address in a slice costs that endpoint only.
	recs, problems := b.Service(service("default", "h", []string{"None"}), []*discoveryv1.EndpointSlice{
		slice("default", "h", "h-a", discoveryv1.AddressTypeIPv4, nil, ep{ip: "10.0.0.x"}, ep{ip: "10.0.0.2"}),
	})
	if len(problems) != 1 || len(rrs(recs)) != 3 {
		t.Errorf("bad endpoint: records %v, problems %v; want the good endpoint's 3 records and 1 problem", rrs(recs), problems)
	}
}

func TestPod(t *testing.T) {
	b := builder(t)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "busybox-1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "172.17.0.3"}, {IP: "fd00::3"}}}}
	recs, problems := b.Pod(pod)
	want := []string{"172-17-0-3.default.pod.cluster.local A 172.17.0.3", "fd00--3.default.pod.cluster.local AAAA fd00::3"}
	if got := rrs(recs); len(problems) > 0 || !slices.Equal(got, want) {
		t.Errorf("Pod = %v, %v; want %v", got, problems, want)
	}
	golden(t, "pod", etcdctl(recs))
	pod.Status.Phase = corev1.PodSucceeded
	if recs, _ := b.Pod(pod); len(recs) != 0 {
		t.Errorf("a finished pod kept records: %v", rrs(recs))
	}
}

func TestVersion(t *testing.T) {
	r := builder(t).Version()
	if got := rr(r); got != `dns-version.cluster.local TXT "1.0.1"` {
		t.Errorf("Version = %s", got)
	}
	golden(t, "version", etcdctl([]keys.Record{r}))
}

func TestTwoClustersNeverShareAKey(t *testing.T) {
	b1 := builder(t)
	b2 := b1
	b2.Cluster = "c2"
	svc := service("default", "kubernetes", []string{"10.96.0.1"}, httpsPort)
	r1, _ := b1.Service(svc, nil)
	r2, _ := b2.Service(svc, nil)
	for _, a := range r1 {
		for _, b := range r2 {
			if a.Key == b.Key && a.Type != dns.TypePTR {
				t.Errorf("clusters c1 and c2 both write %s", a.Key)
			}
		}
	}
	again, _ := b1.Service(svc, nil)
	if etcdctl(again) != etcdctl(r1) {
		t.Error("the same service gave different records twice")
	}
}

// An endpoint several slices carry is kept once, with the ports of every
// slice that has it, in the slices' order, however many endpoints there
// are (a sort that is not stable mixes them up past a dozen); the slices'
// own port arrays are left as they were.
func TestEndpointsInSeveralSlicesServeEveryPort(t *testing.T) {
	b := builder(t)
	svc := service("default", "many", []string{"None"}, httpsPort)
	var first, second []ep
	for i := range 40 {
		first = append(first, ep{ip: fmt.Sprintf("10.3.1.%d", 40-i)})
		second = append(second, ep{ip: fmt.Sprintf("10.3.1.%d", i+1)})
	}
	second = append(second, ep{ip: "10.3.2.1"})
	sls := []*discoveryv1.EndpointSlice{
		slice("default", "many", "many-a", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{port("https", 443)}, first...),
		slice("default", "many", "many-b", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{port("metrics", 9090), port("https", 443)}, second...),
	}
	var s set
	eps := b.endpoints(svc, sls, &s)
	if len(eps) != 41 {
		t.Fatalf("%d endpoints, want 41", len(eps))
	}
	for _, e := range eps {
		var got []string
		for _, p := range e.ports {
			got = append(got, *p.Name)
		}
		want := []string{"https", "metrics"}
		if e.ip.String() == "10.3.2.1" {
			want = []string{"metrics", "https"}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: ports %v, want %v", e.ip, got, want)
		}
	}
	if len(sls[0].Ports) != 1 || len(sls[1].Ports) != 2 {
		t.Errorf("the slices' ports changed: %v, %v", sls[0].Ports, sls[1].Ports)
	}
}

// The Service named as the cluster's DNS gives ns.dns.<zone> its cluster
// IPs, the address of the zone's NS record, keyed under the zone where
// CoreDNS's etcd plugin reads NS addresses; no other Service does.
func TestNameserverService(t *testing.T) {
	b := builder(t)
	b.Nameserver = "kube-system/kube-dns"
	dns := service("kube-system", "kube-dns", []string{"10.96.0.10", "fd00:10:96::a"}, corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP})
	recs, problems := b.Service(dns, nil)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	var ns []string
	for _, r := range rrs(recs) {
		if strings.HasPrefix(r, "ns.dns.") {
			ns = append(ns, r)
		}
	}
	if want := []string{"ns.dns.cluster.local A 10.96.0.10", "ns.dns.cluster.local AAAA fd00:10:96::a"}; !slices.Equal(ns, want) {
		t.Errorf("nameserver records %q, want %q", ns, want)
	}
	for _, r := range recs {
		if strings.HasPrefix(r.Name, "ns.dns.") && !strings.HasPrefix(r.Key, "/skydns/local/cluster/dns/ns/") {
			t.Errorf("%s: key %s, want it under /skydns/local/cluster/dns/ns/", r.Name, r.Key)
		}
	}
	for _, other := range []*corev1.Service{
		service("default", "kube-dns", []string{"10.96.0.11"}),
		service("kube-system", "kube-dns", []string{"None"}),
	} {
		recs, _ := b.Service(other, nil)
		for _, r := range rrs(recs) {
			if strings.HasPrefix(r, "ns.dns.") {
				t.Errorf("%s/%s %v: %s", other.Namespace, other.Name, other.Spec.ClusterIPs, r)
			}
		}
	}
}

package kube

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/etcdns/etcdns/keys"
)

func clusterset(t *testing.T, cluster string) Builder {
	t.Helper()
	b, err := NewBuilder(keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: cluster, TTL: 5}, ClustersetZone)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestExported(t *testing.T) {
	const c1 = "721ab723-13bc-11e5-aec2-42010af0021e"
	imp := &mcsv1alpha1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: "test", Name: "myservice"},
		Spec: mcsv1alpha1.ServiceImportSpec{Type: mcsv1alpha1.ClusterSetIP, IPs: []string{"10.42.42.42", "2001:db8::1"},
			Ports: []mcsv1alpha1.ServicePort{{Name: "https", Protocol: corev1.ProtocolTCP, Port: 443}, {Port: 80}}}}
	for _, tc := range []struct {
		name    string
		svc     *corev1.Service
		slices  []*discoveryv1.EndpointSlice
		imp     *mcsv1alpha1.ServiceImport
		want    []string
		problem string
	}{{
		name: "clustersetip", // the import's records (Imported), not the export's
		svc:  service("test", "myservice", []string{"10.96.0.10"}, httpsPort),
		imp:  imp,
	}, {
		name: "headless-import-clustersetip", // the export lost a type conflict: the export's Conflict condition says so
		svc:  service("test", "myservice", []string{"None"}),
		imp:  imp,
		slices: []*discoveryv1.EndpointSlice{
			slice("test", "myservice", "myservice-a", discoveryv1.AddressTypeIPv4, nil, ep{ip: "10.3.0.100"}),
		},
	}, {
		name: "headless", // spec 001 2.4: per-cluster hostnames, N x M SRV, PTR
		svc:  service("test", "headless", []string{"None"}),
		slices: []*discoveryv1.EndpointSlice{
			slice("test", "headless", "headless-a", discoveryv1.AddressTypeIPv4, []discoveryv1.EndpointPort{port("https", 443)},
				ep{ip: "10.3.0.100", hostname: "my-pet"}, ep{ip: "10.3.0.101"}),
			slice("test", "headless", "headless-b", discoveryv1.AddressTypeIPv6, []discoveryv1.EndpointPort{port("https", 443)},
				ep{ip: "2001:db8::2", hostname: "my-pet"}),
		},
		want: []string{
			"10-3-0-101." + c1 + ".headless.test.svc.clusterset.local A 10.3.0.101",
			"_https._tcp.headless.test.svc.clusterset.local SRV 443 10-3-0-101." + c1 + ".headless.test.svc.clusterset.local.",
			"_https._tcp.headless.test.svc.clusterset.local SRV 443 my-pet." + c1 + ".headless.test.svc.clusterset.local.",
			"headless.test.svc.clusterset.local A 10.3.0.100",
			"headless.test.svc.clusterset.local A 10.3.0.101",
			"headless.test.svc.clusterset.local AAAA 2001:db8::2",
			"my-pet." + c1 + ".headless.test.svc.clusterset.local A 10.3.0.100",
			"my-pet." + c1 + ".headless.test.svc.clusterset.local AAAA 2001:db8::2",
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			recs, problems := clusterset(t, c1).Exported(tc.svc, tc.slices, tc.imp)
			if got := fmt.Sprint(problems); tc.problem == "" && len(problems) > 0 || tc.problem != "" && got != "["+tc.problem+"]" {
				t.Errorf("problems: %v, want [%s]", problems, tc.problem)
			}
			if tc.want == nil {
				if len(recs) > 0 {
					t.Errorf("records: %v, want none", rrs(recs))
				}
				return
			}
			if got, want := rrs(recs), sorted(tc.want); !slices.Equal(got, want) {
				t.Errorf("records:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			for _, r := range recs {
				// spec 001 2.3.4 and 2.4.4: nothing singles out one cluster.
				if strings.HasPrefix(r.Name, c1+".") {
					t.Errorf("record at the must-not name %s", r.Name)
				}
			}
			golden(t, "export-"+tc.name, etcdctl(recs))
		})
	}
	if recs, problems := builder(t).Imported(imp, nil); len(recs) > 0 || len(problems) != 1 {
		t.Errorf("importing into cluster.local was not refused: %v %v", rrs(recs), problems)
	}
	if got := rr(clusterset(t, c1).Version()); got != `dns-version.clusterset.local TXT "1.1.0"` {
		t.Errorf("Version = %s", got)
	}
	golden(t, "version-clusterset", etcdctl([]keys.Record{clusterset(t, c1).Version()}))
	if _, problems := builder(t).Exported(service("test", "x", []string{"None"}), nil, nil); len(problems) != 1 {
		t.Errorf("exporting into cluster.local was not refused: %v", problems)
	}
}

func TestImported(t *testing.T) {
	const c1 = "721ab723-13bc-11e5-aec2-42010af0021e"
	ports := []mcsv1alpha1.ServicePort{{Name: "https", Protocol: corev1.ProtocolTCP, Port: 443}, {Port: 80}}
	imp := func(typ mcsv1alpha1.ServiceImportType, ips ...string) *mcsv1alpha1.ServiceImport {
		return &mcsv1alpha1.ServiceImport{ObjectMeta: metav1.ObjectMeta{Namespace: "test", Name: "myservice"},
			Spec: mcsv1alpha1.ServiceImportSpec{Type: typ, IPs: ips, Ports: ports}}
	}
	held := func(ip netip.Addr) bool { return ip == netip.MustParseAddr("10.42.42.42") }
	for _, tc := range []struct {
		name    string
		imp     *mcsv1alpha1.ServiceImport
		local   func(netip.Addr) bool
		want    []string
		problem string
	}{{
		name: "clustersetip", // spec 001 2.3: A, AAAA, SRV, PTR v4 and v6
		imp:  imp(mcsv1alpha1.ClusterSetIP, "10.42.42.42", "2001:db8::1"),
		want: []string{
			"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa PTR myservice.test.svc.clusterset.local.",
			"42.42.42.10.in-addr.arpa PTR myservice.test.svc.clusterset.local.",
			"_https._tcp.myservice.test.svc.clusterset.local SRV 443 myservice.test.svc.clusterset.local.",
			"myservice.test.svc.clusterset.local A 10.42.42.42",
			"myservice.test.svc.clusterset.local AAAA 2001:db8::1",
		},
	}, {
		name:  "clustersetip-local-ptr", // 2.3.3 Limitations: a Service here has 10.42.42.42 and its PTR
		imp:   imp(mcsv1alpha1.ClusterSetIP, "10.42.42.42", "2001:db8::1"),
		local: held,
		want: []string{
			"1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa PTR myservice.test.svc.clusterset.local.",
			"_https._tcp.myservice.test.svc.clusterset.local SRV 443 myservice.test.svc.clusterset.local.",
			"myservice.test.svc.clusterset.local A 10.42.42.42",
			"myservice.test.svc.clusterset.local AAAA 2001:db8::1",
		},
	}, {
		name: "no-ip-yet", // nothing to point an SRV at
		imp:  imp(mcsv1alpha1.ClusterSetIP),
	}, {
		name: "headless", // the exporters' endpoints are the records
		imp:  imp(mcsv1alpha1.Headless),
	}, {
		name:    "bad-ip",
		imp:     imp(mcsv1alpha1.ClusterSetIP, "10.42.42.256", "10.42.42.43"),
		problem: `serviceimport test/myservice: address "10.42.42.256" is not an IP address`,
		want: []string{
			"43.42.42.10.in-addr.arpa PTR myservice.test.svc.clusterset.local.",
			"_https._tcp.myservice.test.svc.clusterset.local SRV 443 myservice.test.svc.clusterset.local.",
			"myservice.test.svc.clusterset.local A 10.42.42.43",
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			recs, problems := clusterset(t, c1).Imported(tc.imp, tc.local)
			if got := fmt.Sprint(problems); tc.problem == "" && len(problems) > 0 || tc.problem != "" && got != "["+tc.problem+"]" {
				t.Errorf("problems: %v, want [%s]", problems, tc.problem)
			}
			if got, want := rrs(recs), sorted(tc.want); !slices.Equal(got, want) {
				t.Errorf("records:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			for _, r := range recs {
				if r.Value.Source != "serviceimport/test/myservice" || !r.Value.PerCluster() {
					t.Errorf("%s: source %q: dnsd would not answer it as this cluster's own", r.Key, r.Value.Source)
				}
			}
			if tc.name == "clustersetip" {
				golden(t, "import-clustersetip", etcdctl(recs))
			}
		})
	}
}

//go:build integration

package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdns/etcdns/integration/harness"
	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/keys/kube"
)

// dnsdInstance is a dnsd process serving records of a real etcd.
type dnsdInstance struct {
	*harness.Process
	Addr    string // DNS, UDP and TCP
	Metrics string // http://127.0.0.1:port
}

func startDnsd(t *testing.T, etcd *harness.Etcd, extra ...string) *dnsdInstance {
	t.Helper()
	d := &dnsdInstance{
		Addr:    fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t)),
		Metrics: fmt.Sprintf("http://127.0.0.1:%d", harness.FreePort(t)),
	}
	args := append([]string{
		"--etcd.endpoints=" + etcd.Endpoint,
		"--dnsd.listen=" + d.Addr,
		"--dnsd.metrics-listen=" + strings.TrimPrefix(d.Metrics, "http://"),
	}, extra...)
	d.Process = harness.StartProcess(t, harness.BuildBinary(t, "./cmd/dnsd"), args, nil, func() error {
		return harness.HTTPOK(d.Metrics + "/readyz")
	})
	return d
}

func dnsdBuilder(t *testing.T) kube.Builder {
	b, err := kube.NewBuilder(keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: "it"}, "cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// dnsdPut writes records as the publisher does: in transactions of at most
// etcd's default 128 operations.
func dnsdPut(t *testing.T, cli *clientv3.Client, recs []keys.Record) int64 {
	t.Helper()
	var rev int64
	for len(recs) > 0 {
		n := min(len(recs), 128)
		ops := make([]clientv3.Op, n)
		for i, r := range recs[:n] {
			ops[i] = clientv3.OpPut(r.Key, string(r.Value.Encode()))
		}
		resp, err := cli.Txn(context.Background()).Then(ops...).Commit()
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
		recs = recs[n:]
	}
	return rev
}

// dnsdRecords takes a builder's result; a problem there is a broken fixture.
func dnsdRecords(recs []keys.Record, errs []error) []keys.Record {
	if len(errs) > 0 {
		panic(fmt.Sprint(errs))
	}
	return recs
}

func dnsdService(ns, name string, clusterIP string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{ClusterIP: clusterIP, ClusterIPs: []string{clusterIP}, Ports: ports},
	}
}

func dnsdAsk(t *testing.T, network, addr, name string, qtype uint16, edns uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg).SetQuestion(name, qtype)
	if edns > 0 {
		m.SetEdns0(edns, false)
	}
	c := &dns.Client{Net: network, Timeout: 2 * time.Second}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s %s %s: %v", network, name, dns.TypeToString[qtype], err)
	}
	return r
}

func dnsdStrings(rrs []dns.RR) []string {
	out := make([]string, len(rrs))
	for i, r := range rrs {
		out[i] = strings.Join(strings.Fields(r.String()), " ")
	}
	return out
}

func TestDnsd(t *testing.T) {
	etcd := harness.StartEtcd(t)
	cli := etcd.Client(t)
	b := dnsdBuilder(t)
	https := corev1.ServicePort{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP}

	recs := []keys.Record{b.Version()}
	recs = append(recs, dnsdRecords(b.Service(dnsdService("default", "kubernetes", "10.96.0.1", https), nil))...)
	big := dnsdService("default", "big", corev1.ClusterIPNone, https)
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "big-1", Labels: map[string]string{discoveryv1.LabelServiceName: "big"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &https.Name, Port: &https.Port, Protocol: &https.Protocol}},
	}
	for i := range 300 {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.4.%d.%d", i/250, i%250+1)}})
	}
	recs = append(recs, dnsdRecords(b.Service(big, []*discoveryv1.EndpointSlice{sl}))...)
	dnsdPut(t, cli, recs)

	d := startDnsd(t, etcd)

	for _, network := range []string{"udp", "tcp"} {
		t.Run("answers over "+network, func(t *testing.T) {
			for _, c := range []struct {
				name   string
				qtype  uint16
				rcode  int
				answer []string
			}{
				{"dns-version.cluster.local.", dns.TypeTXT, dns.RcodeSuccess, []string{`dns-version.cluster.local. 5 IN TXT "1.0.1"`}},
				{"kubernetes.default.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, []string{"kubernetes.default.svc.cluster.local. 5 IN A 10.96.0.1"}},
				{"_https._tcp.kubernetes.default.svc.cluster.local.", dns.TypeSRV, dns.RcodeSuccess, []string{"_https._tcp.kubernetes.default.svc.cluster.local. 5 IN SRV 10 100 443 kubernetes.default.svc.cluster.local."}},
				{"1.0.96.10.in-addr.arpa.", dns.TypePTR, dns.RcodeSuccess, []string{"1.0.96.10.in-addr.arpa. 5 IN PTR kubernetes.default.svc.cluster.local."}},
				{"10-4-0-7.big.default.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, []string{"10-4-0-7.big.default.svc.cluster.local. 5 IN A 10.4.0.7"}},
				{"1-2-3-4.default.pod.cluster.local.", dns.TypeA, dns.RcodeSuccess, []string{"1-2-3-4.default.pod.cluster.local. 5 IN A 1.2.3.4"}},
				{"default.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess, nil},
				{"nope.default.svc.cluster.local.", dns.TypeA, dns.RcodeNameError, nil},
				{"example.com.", dns.TypeA, dns.RcodeRefused, nil},
			} {
				r := dnsdAsk(t, network, d.Addr, c.name, c.qtype, 0)
				if got := dnsdStrings(r.Answer); r.Rcode != c.rcode || strings.Join(got, "\n") != strings.Join(c.answer, "\n") {
					t.Errorf("%s %s: %s %q, want %s %q", c.name, dns.TypeToString[c.qtype], dns.RcodeToString[r.Rcode], got, dns.RcodeToString[c.rcode], c.answer)
				}
				if negative := len(c.answer) == 0 && c.rcode != dns.RcodeRefused; negative && (len(r.Ns) != 1 || r.Ns[0].Header().Rrtype != dns.TypeSOA) {
					t.Errorf("%s: negative answer without the zone's SOA: %v", c.name, r.Ns)
				}
			}
		})
	}

	t.Run("300 endpoints truncate over UDP and come whole over TCP", func(t *testing.T) {
		udp := dnsdAsk(t, "udp", d.Addr, "big.default.svc.cluster.local.", dns.TypeA, 1232)
		// The header, question and OPT record, and 73 A records of 16 octets.
		if !udp.Truncated || len(udp.Answer) != 73 {
			t.Fatalf("UDP: TC=%v with %d records, want TC and the 73 that fit", udp.Truncated, len(udp.Answer))
		}
		r := dnsdAsk(t, "tcp", d.Addr, "big.default.svc.cluster.local.", dns.TypeA, 1232)
		if r.Truncated || len(r.Answer) != 300 {
			t.Fatalf("TCP: TC=%v with %d records, want all 300", r.Truncated, len(r.Answer))
		}
		all := dnsdStrings(r.Answer)
		for _, rr := range dnsdStrings(udp.Answer) {
			if !slices.Contains(all, rr) {
				t.Errorf("UDP's %s is none of the 300", rr)
			}
		}
		r = dnsdAsk(t, "tcp", d.Addr, "_https._tcp.big.default.svc.cluster.local.", dns.TypeSRV, 0)
		if len(r.Answer) != 300 || len(r.Extra) != 300 {
			t.Fatalf("TCP SRV: %d records, %d glue; want 300 and 300", len(r.Answer), len(r.Extra))
		}
	})

	// How soon is for bench/e2e to measure (API to answer); the bound here
	// is only what a loaded CI machine needs.
	t.Run("a change is answered from the watch", func(t *testing.T) {
		name := "fresh.default.svc.cluster.local."
		if r := dnsdAsk(t, "udp", d.Addr, name, dns.TypeA, 0); r.Rcode != dns.RcodeNameError {
			t.Fatalf("before: %v", r)
		}
		fresh := dnsdRecords(b.Service(dnsdService("default", "fresh", "10.96.7.7"), nil))
		dnsdPut(t, cli, fresh)
		dnsdWithin(t, 5*time.Second, "the new service", func() bool {
			r := dnsdAsk(t, "udp", d.Addr, name, dns.TypeA, 0)
			return len(r.Answer) == 1 && r.Answer[0].(*dns.A).A.String() == "10.96.7.7"
		})
		var ops []clientv3.Op
		for _, r := range fresh {
			ops = append(ops, clientv3.OpDelete(r.Key))
		}
		if _, err := cli.Txn(context.Background()).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
		dnsdWithin(t, 5*time.Second, "the deletion", func() bool {
			return dnsdAsk(t, "tcp", d.Addr, name, dns.TypeA, 0).Rcode == dns.RcodeNameError
		})
	})

	t.Run("operations endpoints", func(t *testing.T) {
		body := dnsdGet(t, d.Metrics+"/metrics")
		for _, want := range []string{`etcdns_dnsd_records{zone="cluster.local"}`, "etcdns_dnsd_etcd_revision", `etcdns_dnsd_queries_total{qtype="A",rcode="NOERROR"}`} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
		if body := dnsdGet(t, d.Metrics+"/debug/records?name=kubernetes.default.svc.cluster.local"); !strings.Contains(body, `{"host":"10.96.0.1"`) {
			t.Errorf("/debug/records:\n%s", body)
		}
	})

	d.Stop()
	if err := d.Wait(); err != nil {
		t.Fatalf("dnsd did not exit cleanly on SIGTERM: %v", err)
	}
}

// dnsdWithin polls until ok, failing if it takes longer than d. The poll
// itself is a DNS round trip on loopback, well under a millisecond.
func dnsdWithin(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	start := time.Now()
	for !ok() {
		if time.Since(start) > d {
			t.Fatalf("%s not answered after %v", what, d)
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("%s answered after %v", what, time.Since(start).Round(time.Microsecond))
}

func dnsdGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// etcdns_dnsd_watch_received_bytes_total counts what the watch brings, as
// on the wire: a change's keys and values at least, and not many times
// more (docs/fleet.md's bandwidth a frontend costs its member or proxy).
func TestDnsdCountsWatchBytes(t *testing.T) {
	etcd := harness.StartEtcd(t)
	d := startDnsd(t, etcd)
	const metric = "etcdns_dnsd_watch_received_bytes_total"
	before := faultMetric(t, d.Metrics, metric)

	ops := make([]clientv3.Op, 50)
	carried := 0 // the keys' and values' bytes: what the watch must bring
	for i := range ops {
		k, v := fmt.Sprintf("/skydns/local/cluster/svc/default/big/r%02d", i), fmt.Sprintf(`{"host":"10.1.0.%d"}`, i)
		ops[i] = clientv3.OpPut(k, v)
		carried += len(k) + len(v)
	}
	if _, err := etcd.Client(t).Txn(context.Background()).Then(ops...).Commit(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() error {
		if n := len(dnsdAsk(t, "tcp", d.Addr, "big.default.svc.cluster.local.", dns.TypeA, 0).Answer); n != len(ops) {
			return fmt.Errorf("%d addresses of %d", n, len(ops))
		}
		return nil
	})
	got := faultMetric(t, d.Metrics, metric) - before
	t.Logf("%s grew by %.0f bytes for %d bytes of keys and values", metric, got, carried)
	if got < float64(carried) || got > 3*float64(carried) {
		t.Errorf("%s grew by %.0f bytes for a change of %d bytes of keys and values; want between 1 and 3 times that", metric, got, carried)
	}
}

// dnsd.query-log writes a line for each answer of its classes, as
// CoreDNS's log plugin would, and none for the others.
func TestDnsdQueryLog(t *testing.T) {
	etcd := harness.StartEtcd(t)
	dnsdPut(t, etcd.Client(t), dnsdRecords(dnsdBuilder(t).Service(dnsdService("default", "web", "10.96.7.7"), nil)))
	d := startDnsd(t, etcd, "--dnsd.query-log=denial")
	if r := dnsdAsk(t, "udp", d.Addr, "web.default.svc.cluster.local.", dns.TypeA, 0); len(r.Answer) != 1 {
		t.Fatalf("web: %v", r)
	}
	if r := dnsdAsk(t, "udp", d.Addr, "nosuch.default.svc.cluster.local.", dns.TypeA, 0); r.Rcode != dns.RcodeNameError {
		t.Fatalf("nosuch: %v", r)
	}
	waitFor(t, 5*time.Second, func() error {
		b, err := os.ReadFile(d.LogPath)
		if err != nil {
			return err
		}
		var queries []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "msg=query ") {
				queries = append(queries, l)
			}
		}
		if len(queries) != 1 || !strings.Contains(queries[0], " proto=udp ") || !strings.Contains(queries[0], " type=A class=IN name=nosuch.default.svc.cluster.local. ") ||
			!strings.Contains(queries[0], " rcode=NXDOMAIN flags=qr,aa,rd ") {
			return fmt.Errorf("query lines %q; want nosuch's NXDOMAIN alone", queries)
		}
		return nil
	})
}

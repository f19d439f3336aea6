//go:build integration

package integration

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdns/etcdns/integration/harness"
	"github.com/etcdns/etcdns/keys"
)

// The pods of namespace test have loopback addresses, so a client socket
// bound to one of them is, to dnsd, that pod.
const (
	autopathPod    = "127.0.0.2"
	autopathNotPod = "127.0.0.1"
	autopathList   = "test.svc.cluster.local,svc.cluster.local,cluster.local"
	autopathCode   = 65001
)

// autopathAsk asks name from the loopback address from, with the search
// list option when list is not empty.
func autopathAsk(t *testing.T, network, addr, from, name, list string) *dns.Msg {
	t.Helper()
	m := new(dns.Msg).SetQuestion(name, dns.TypeA)
	if list != "" {
		m.SetEdns0(1232, false).IsEdns0().Option = []dns.EDNS0{&dns.EDNS0_LOCAL{Code: autopathCode, Data: []byte(list)}}
	}
	local := net.Addr(&net.UDPAddr{IP: net.ParseIP(from)})
	if network == "tcp" {
		local = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	c := &dns.Client{Net: network, Timeout: 2 * time.Second, Dialer: &net.Dialer{LocalAddr: local}}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s %s from %s: %v", network, name, from, err)
	}
	return r
}

// TestAutopath runs the built dnsd with the three forms of search-path
// expansion on, over records written as the publisher writes them: a pod
// of namespace test finds data.prod (service data of namespace prod) and
// web (a service of its own namespace) with one query each, in each form.
func TestAutopath(t *testing.T) {
	etcd := harness.StartEtcd(t)
	b := dnsdBuilder(t)
	recs := []keys.Record{b.Version()}
	recs = append(recs, dnsdRecords(b.Service(dnsdService("prod", "data", "10.96.1.1"), nil))...)
	recs = append(recs, dnsdRecords(b.Service(dnsdService("test", "web", "10.96.2.2"), nil))...)
	recs = append(recs, dnsdRecords(b.Service(dnsdService("prod", "web", "10.96.2.3"), nil))...)
	for i, ip := range []string{autopathPod, "127.0.0.3"} {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "test", Name: fmt.Sprintf("client-%d", i)},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: ip}}},
		}
		recs = append(recs, dnsdRecords(b.Pod(p))...)
	}
	dnsdPut(t, etcd.Client(t), recs)
	d := startDnsd(t, etcd, "--cluster.pods=verified",
		"--dnsd.autopath-suffix", "--dnsd.autopath-option", "--dnsd.autopath-client")

	const (
		data = "data.prod.svc.cluster.local. 5 IN A 10.96.1.1"
		web  = "web.test.svc.cluster.local. 5 IN A 10.96.2.2"
	)
	for _, network := range []string{"udp", "tcp"} {
		t.Run(network, func(t *testing.T) {
			for _, c := range []struct {
				form, name, from, list string
				rcode                  int
				answer                 []string
			}{
				{"suffix", "data.prod.search.test.cluster.local.ap.k8s.io.", autopathNotPod, "", dns.RcodeSuccess,
					[]string{"data.prod.search.test.cluster.local.ap.k8s.io. 5 IN CNAME data.prod.svc.cluster.local.", data}},
				{"suffix", "web.search.test.cluster.local.ap.k8s.io.", autopathNotPod, "", dns.RcodeSuccess,
					[]string{"web.search.test.cluster.local.ap.k8s.io. 5 IN CNAME web.test.svc.cluster.local.", web}},
				{"suffix", "nope.search.test.cluster.local.ap.k8s.io.", autopathNotPod, "", dns.RcodeNameError, nil},
				{"option", "data.prod.", autopathNotPod, autopathList, dns.RcodeSuccess,
					[]string{"data.prod. 5 IN CNAME data.prod.svc.cluster.local.", data}},
				{"option", "web.", autopathNotPod, autopathList, dns.RcodeSuccess,
					[]string{"web. 5 IN CNAME web.test.svc.cluster.local.", web}},
				{"option", "web.", autopathNotPod, "test.svc.cluster.local,,", dns.RcodeFormatError, nil},
				{"client", "data.prod.test.svc.cluster.local.", autopathPod, "", dns.RcodeSuccess,
					[]string{"data.prod.test.svc.cluster.local. 5 IN CNAME data.prod.svc.cluster.local.", data}},
				{"client", "web.test.svc.cluster.local.", autopathPod, "", dns.RcodeSuccess, []string{web}},
				// Not a pod: the same question is today's NXDOMAIN, and
				// neither answer is served to the other client.
				{"client", "data.prod.test.svc.cluster.local.", autopathNotPod, "", dns.RcodeNameError, nil},
				{"client", "data.prod.test.svc.cluster.local.", autopathPod, "", dns.RcodeSuccess,
					[]string{"data.prod.test.svc.cluster.local. 5 IN CNAME data.prod.svc.cluster.local.", data}},
			} {
				r := autopathAsk(t, network, d.Addr, c.from, c.name, c.list)
				if got := dnsdStrings(r.Answer); r.Rcode != c.rcode || !slices.Equal(got, c.answer) {
					t.Errorf("%s: %s from %s: %s %q, want %s %q", c.form, c.name, c.from,
						dns.RcodeToString[r.Rcode], got, dns.RcodeToString[c.rcode], c.answer)
				}
				if r.Rcode == dns.RcodeNameError && (len(r.Ns) != 1 || r.Ns[0].Header().Rrtype != dns.TypeSOA) {
					t.Errorf("%s: %s: NXDOMAIN without the zone's SOA: %v", c.form, c.name, r.Ns)
				}
			}
		})
	}

	t.Run("metrics", func(t *testing.T) {
		body := dnsdGet(t, d.Metrics+"/metrics")
		for _, want := range []string{
			`etcdns_dnsd_autopath_searches_total{form="suffix"} 6`, `etcdns_dnsd_autopath_hits_total{form="suffix"} 4`,
			`etcdns_dnsd_autopath_searches_total{form="option"} 4`, `etcdns_dnsd_autopath_hits_total{form="option"} 4`,
			`etcdns_dnsd_autopath_searches_total{form="client"} 4`, `etcdns_dnsd_autopath_hits_total{form="client"} 4`,
		} {
			if !strings.Contains(body, want+"\n") {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	})

	t.Run("forms off", func(t *testing.T) {
		off := startDnsd(t, etcd, "--cluster.pods=verified")
		for _, c := range []struct{ name, from, list string }{
			{"web.search.test.cluster.local.ap.k8s.io.", autopathNotPod, ""},
			{"web.", autopathNotPod, autopathList},
		} {
			if r := autopathAsk(t, "udp", off.Addr, c.from, c.name, c.list); r.Rcode != dns.RcodeRefused {
				t.Errorf("%s: %s, want REFUSED", c.name, dns.RcodeToString[r.Rcode])
			}
		}
		if r := autopathAsk(t, "udp", off.Addr, autopathPod, "data.prod.test.svc.cluster.local.", ""); r.Rcode != dns.RcodeNameError {
			t.Errorf("client form off: %s, want NXDOMAIN", dns.RcodeToString[r.Rcode])
		}
	})
}

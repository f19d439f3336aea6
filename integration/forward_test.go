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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcdns/etcdns/integration/harness"
	"github.com/etcdns/etcdns/keys"
)

// bigTXT is more than a 1232-octet UDP answer holds, so Knot truncates it.
const bigTXT = 40

// startKnot serves example.test. from a real Knot on a loopback port and
// returns its address.
func startKnot(t *testing.T) string {
	zone := "$TTL 300\n@ SOA ns hostmaster 1 3600 900 604800 60\n@ NS ns\nns A 127.0.0.1\nwww A 192.0.2.10\n"
	for i := range bigTXT {
		zone += fmt.Sprintf("big TXT \"record %02d %s\"\n", i, strings.Repeat("x", 60))
	}
	return harness.StartKnot(t, "example.test", zone).Addr
}

func forwardAsk(t *testing.T, network, addr, name string, qtype uint16, rd bool, edns uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg).SetQuestion(name, qtype)
	m.RecursionDesired = rd
	if edns > 0 {
		m.SetEdns0(edns, false)
	}
	r, _, err := (&dns.Client{Net: network, Timeout: 5 * time.Second}).Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s %s %s: %v", network, name, dns.TypeToString[qtype], err)
	}
	return r
}

// TestForwardClusterFirst runs the built dnsd with forwarding on, a real
// etcd behind it and a real Knot as its only upstream: names outside the
// zones get Knot's answers, names inside stay dnsd's own.
func TestForwardClusterFirst(t *testing.T) {
	knot := startKnot(t)
	etcd := harness.StartEtcd(t)
	b := dnsdBuilder(t)
	ext := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "ext"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "www.example.test"}}
	dnsdPut(t, etcd.Client(t), append(append([]keys.Record{b.Version()}, dnsdRecords(b.Service(dnsdService("default", "kubernetes", "10.96.0.1"), nil))...),
		dnsdRecords(b.Service(ext, nil))...))
	// No forwarding cache: every answer below is Knot's own, TTLs as
	// Knot gives them, and every big one takes the TCP retry.
	d := startDnsd(t, etcd, "--dnsd.forward", "--dnsd.upstreams="+knot, "--dnsd.forward-cache=0")

	for _, network := range []string{"udp", "tcp"} {
		t.Run("outside the zones over "+network, func(t *testing.T) {
			r := forwardAsk(t, network, d.Addr, "WwW.Example.TEST.", dns.TypeA, true, 1232)
			if got := dnsdStrings(r.Answer); r.Rcode != dns.RcodeSuccess || r.Question[0].Name != "WwW.Example.TEST." ||
				!slices.Equal(got, []string{"WwW.Example.TEST. 300 IN A 192.0.2.10"}) {
				t.Errorf("www: %s %v %q", dns.RcodeToString[r.Rcode], r.Question, got)
			}
			r = forwardAsk(t, network, d.Addr, "nope.example.test.", dns.TypeA, true, 0)
			if got := dnsdStrings(r.Ns); r.Rcode != dns.RcodeNameError ||
				!slices.Equal(got, []string{"example.test. 60 IN SOA ns.example.test. hostmaster.example.test. 1 3600 900 604800 60"}) {
				t.Errorf("nope: %s %q", dns.RcodeToString[r.Rcode], got)
			}
		})

		// Spec 000 2.5: the ExternalName's CNAME, then the target's
		// records, which a pod's stub resolver would not ask for itself.
		t.Run("an ExternalName over "+network, func(t *testing.T) {
			r := forwardAsk(t, network, d.Addr, "ext.default.svc.cluster.local.", dns.TypeA, true, 1232)
			if got, want := dnsdStrings(r.Answer), []string{"ext.default.svc.cluster.local. 5 IN CNAME www.example.test.", "www.example.test. 300 IN A 192.0.2.10"}; r.Rcode != dns.RcodeSuccess || !slices.Equal(got, want) {
				t.Errorf("ext: %s %q, want %q", dns.RcodeToString[r.Rcode], got, want)
			}
		})

		t.Run("inside the zones over "+network, func(t *testing.T) {
			r := forwardAsk(t, network, d.Addr, "kubernetes.default.svc.cluster.local.", dns.TypeA, true, 0)
			if got := dnsdStrings(r.Answer); !r.Authoritative || !slices.Equal(got, []string{"kubernetes.default.svc.cluster.local. 5 IN A 10.96.0.1"}) {
				t.Errorf("kubernetes: AA=%v %q", r.Authoritative, got)
			}
			r = forwardAsk(t, network, d.Addr, "nope.default.svc.cluster.local.", dns.TypeA, true, 0)
			if r.Rcode != dns.RcodeNameError || !r.Authoritative || len(r.Ns) != 1 || r.Ns[0].Header().Name != "cluster.local." {
				t.Errorf("an NXDOMAIN of ours went elsewhere: %v", r)
			}
		})

		t.Run("RD=0 outside the zones is refused over "+network, func(t *testing.T) {
			if r := forwardAsk(t, network, d.Addr, "www.example.test.", dns.TypeA, false, 0); r.Rcode != dns.RcodeRefused || len(r.Answer) != 0 {
				t.Errorf("%v", r)
			}
		})
	}

	t.Run("a truncated upstream answer is asked again over TCP", func(t *testing.T) {
		if r := forwardAsk(t, "udp", knot, "big.example.test.", dns.TypeTXT, true, 1232); !r.Truncated {
			t.Fatalf("Knot does not truncate %d TXT records over UDP; the test proves nothing", bigTXT)
		}
		direct := forwardAsk(t, "tcp", knot, "big.example.test.", dns.TypeTXT, true, 1232)
		// dnsd asks Knot over UDP first, so the whole RRset can only
		// have come from its retry over TCP.
		r := forwardAsk(t, "tcp", d.Addr, "big.example.test.", dns.TypeTXT, true, 1232)
		if got, want := dnsdStrings(r.Answer), dnsdStrings(direct.Answer); r.Truncated || len(got) != bigTXT || !slices.Equal(got, want) {
			t.Fatalf("over TCP: TC=%v, %d records, want Knot's %d", r.Truncated, len(got), len(want))
		}
		// A UDP client still gets no more than it takes: the first records,
		// and TC.
		r = forwardAsk(t, "udp", d.Addr, "big.example.test.", dns.TypeTXT, true, 1232)
		if got, want := dnsdStrings(r.Answer), dnsdStrings(direct.Answer); !r.Truncated || len(got) == 0 || len(got) >= bigTXT || !slices.Equal(got, want[:len(got)]) {
			t.Fatalf("over UDP: TC=%v with %d records, want TC and the first of Knot's %d", r.Truncated, len(got), len(want))
		}
		if body := dnsdGet(t, d.Metrics+"/metrics"); !strings.Contains(body, `etcdns_dnsd_forward_queries_total{result="ok"}`) ||
			strings.Contains(body, `etcdns_dnsd_forward_queries_total{result="ok"} 0`) {
			t.Errorf("/metrics counts no forwarded query")
		}
	})

	t.Run("clients outside forward-allow are refused", func(t *testing.T) {
		closed := startDnsd(t, etcd, "--dnsd.forward", "--dnsd.upstreams="+knot, "--dnsd.forward-allow=192.0.2.0/24")
		if r := forwardAsk(t, "udp", closed.Addr, "www.example.test.", dns.TypeA, true, 0); r.Rcode != dns.RcodeRefused || len(r.Answer) != 0 {
			t.Errorf("%v", r)
		}
	})

	t.Run("an upstream that is dnsd itself stops it at start", func(t *testing.T) {
		self := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, harness.BuildBinary(t, "./cmd/dnsd"), "--etcd.endpoints="+etcd.Endpoint,
			"--dnsd.listen="+self, "--dnsd.metrics-listen=", "--dnsd.forward", "--dnsd.upstreams="+self).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "dnsd.upstreams") || !strings.Contains(string(out), "loop") {
			t.Errorf("dnsd forwarding to itself: %v\n%s", err, out)
		}
	})
}

//go:build integration

package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdns/etcdns/integration/harness"
	"github.com/etcdns/etcdns/internal/testpki"
)

// stubClient is an HTTPS client trusting roots that presents the
// certificate in certFile, if any, whichever CAs the server asks for.
func stubClient(t *testing.T, roots *x509.CertPool, certFile, keyFile string) *http.Client {
	t.Helper()
	tc := &tls.Config{RootCAs: roots}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
}

func stubCall(c *http.Client, method, url, body string) (int, string, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// startStubKnot serves the federation's zone myfederation.svc.federation.
// from a real Knot, as the federation's DNS server the stub domain points to.
func startStubKnot(t *testing.T) string {
	return harness.StartKnot(t, "myfederation.svc.federation", "$TTL 30\n"+
		"@ SOA ns hostmaster 7 3600 900 604800 20\n@ NS ns\nns A 127.0.0.1\n"+
		"myservice.myns A 10.0.3.64\nmyservice.myns A 104.32.64.130\nmyservice.myns A 108.120.45.12\n").Addr
}

// optionProbe is a nameserver in the test process that answers every
// question with NXDOMAIN and remembers what it was asked: Knot cannot
// show the EDNS(0) options it received.
type optionProbe struct {
	addr string
	mu   sync.Mutex
	got  []*dns.Msg
}

func (p *optionProbe) asked() []*dns.Msg {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.got)
}

func startOptionProbe(t *testing.T) *optionProbe {
	t.Helper()
	p := &optionProbe{}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = pc.LocalAddr().String()
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		p.mu.Lock()
		p.got = append(p.got, req.Copy())
		p.mu.Unlock()
		w.WriteMsg(new(dns.Msg).SetRcode(req, dns.RcodeNameError))
	})}
	go srv.ActivateAndServe()
	t.Cleanup(func() { srv.Shutdown() })
	return p
}

// stubWithin polls ok every 50ms until it holds, failing after d: its
// polls are HTTPS handshakes and etcd reads, not just DNS round trips.
func stubWithin(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	start := time.Now()
	for !ok() {
		if time.Since(start) > d {
			t.Fatalf("%s: not after %v", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%s after %v", what, time.Since(start).Round(time.Millisecond))
}

func stubAsk(t *testing.T, network, addr, name string, rd bool, opts ...dns.EDNS0) *dns.Msg {
	t.Helper()
	m := new(dns.Msg).SetQuestion(name, dns.TypeA)
	m.RecursionDesired = rd
	m.SetEdns0(1232, false)
	m.IsEdns0().Option = opts
	r, _, err := (&dns.Client{Net: network, Timeout: 5 * time.Second}).Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s %s: %v", network, name, err)
	}
	return r
}

// TestStubZones programs stub domains through the publisher's federation
// endpoint over mutual TLS and resolves through them: the built publisher
// writes the keys into a real etcd, the built dnsd picks them up with its
// watch and forwards the federation's names to a real Knot, adding the
// source-cluster option, and never loops back to itself.
func TestStubZones(t *testing.T) {
	knot := startStubKnot(t)
	probe := startOptionProbe(t)
	etcd := harness.StartEtcd(t)

	dir := t.TempDir()
	trusted, other := testpki.NewCA(t, "federation control plane"), testpki.NewCA(t, "someone else")
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, trusted.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	serverCert, serverKey := trusted.IssueFiles(t, dir, "publisher", true)
	goodCert, goodKey := trusted.IssueFiles(t, dir, "cluster-controller", false)
	badCert, badKey := other.IssueFiles(t, dir, "intruder", false)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(trusted.PEM)
	good := stubClient(t, roots, goodCert, goodKey)

	manifests := t.TempDir() // the files source with no object: only stubs are written
	api := fmt.Sprintf("https://127.0.0.1:%d", harness.FreePort(t))
	metrics := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	pub := harness.StartProcess(t, harness.BuildBinary(t, "./cmd/publisher"), []string{
		"--etcd.endpoints=" + etcd.Endpoint,
		"--publisher.source=files:" + manifests,
		"--publisher.metrics-listen=" + metrics,
		"--publisher.lease-ttl=3s",
		"--cluster.id=it",
		"--publisher.stub-api-listen=" + strings.TrimPrefix(api, "https://"),
		"--publisher.stub-api-cert-file=" + serverCert,
		"--publisher.stub-api-key-file=" + serverKey,
		"--publisher.stub-api-client-ca-file=" + caFile,
	}, nil, func() error { return harness.HTTPOK("http://" + metrics + "/readyz") })
	d := startDnsd(t, etcd, "--cluster.id=it")

	// program POSTs with the good certificate until the publisher leads
	// (503 before).
	program := func(name string, nameservers ...string) {
		t.Helper()
		body := `{"nameservers": ["` + strings.Join(nameservers, `", "`) + `"]}`
		var code int
		var resp string
		stubWithin(t, 30*time.Second, "the publisher to take "+name, func() bool {
			var err error
			code, resp, err = stubCall(good, "POST", api+"/federations/"+name, body)
			return err == nil && code != http.StatusServiceUnavailable
		})
		if code != http.StatusOK {
			t.Fatalf("POST %s: %d %s", name, code, resp)
		}
	}
	program("myfederation", knot)

	t.Run("clients without a certificate of the CA are refused in the handshake", func(t *testing.T) {
		for _, c := range []struct {
			name   string
			client *http.Client
			alert  string
		}{
			{"a certificate of another CA", stubClient(t, roots, badCert, badKey), "unknown certificate authority"},
			{"no certificate", stubClient(t, roots, "", ""), "certificate required"},
		} {
			code, _, err := stubCall(c.client, "POST", api+"/federations/myfederation", `{"nameservers":["192.0.2.66"]}`)
			if err == nil || !strings.Contains(err.Error(), c.alert) {
				t.Errorf("%s: status %d, error %v; want the handshake refused (%s)", c.name, code, err, c.alert)
			}
		}
		if code, body, err := stubCall(good, "GET", api+"/federations/myfederation", ""); err != nil || code != http.StatusOK ||
			!strings.Contains(body, `"nameservers":["`+knot+`"]`) {
			t.Errorf("GET: %d %s %v", code, body, err)
		}
	})

	t.Run("the keys are SkyDNS stub keys", func(t *testing.T) {
		out := etcd.Etcdctl(t, "get", "--prefix", "/skydns/local/cluster/dns/stub/")
		lines := strings.Split(out, "\n")
		port := strings.TrimPrefix(knot, "127.0.0.1:")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "/skydns/local/cluster/dns/stub/federation/svc/myfederation/") ||
			lines[1] != `{"host":"127.0.0.1","port":`+port+`,"cluster":"it","source":"federation/myfederation"}` {
			t.Errorf("etcdctl get --prefix /skydns/local/cluster/dns/stub/:\n%s", out)
		}
	})

	direct := stubAsk(t, "udp", knot, "myservice.myns.myfederation.svc.federation.", false)
	want := dnsdStrings(direct.Answer)
	slices.Sort(want)
	stubWithin(t, 10*time.Second, "dnsd to forward to the stub domain", func() bool {
		return len(stubAsk(t, "udp", d.Addr, "myservice.myns.myfederation.svc.federation.", false).Answer) > 0
	})
	for _, network := range []string{"udp", "tcp"} {
		for _, rd := range []bool{false, true} {
			r := stubAsk(t, network, d.Addr, "MyService.myns.myfederation.svc.federation.", rd)
			got := dnsdStrings(r.Answer)
			for i := range got {
				got[i] = strings.Replace(got[i], "MyService", "myservice", 1)
			}
			slices.Sort(got)
			if r.Rcode != dns.RcodeSuccess || !r.Authoritative || !slices.Equal(got, want) || r.Question[0].Name != "MyService.myns.myfederation.svc.federation." {
				t.Errorf("%s RD=%v: %s AA=%v %q, want Knot's %q", network, rd, dns.RcodeToString[r.Rcode], r.Authoritative, got, want)
			}
		}
	}
	if r := stubAsk(t, "udp", d.Addr, "nope.myns.myfederation.svc.federation.", false); r.Rcode != dns.RcodeNameError ||
		len(r.Ns) != 1 || r.Ns[0].Header().Name != "myfederation.svc.federation." {
		t.Errorf("a name Knot does not have: %v", r)
	}
	if r := stubAsk(t, "udp", d.Addr, "myservice.myns.other.svc.federation.", true); r.Rcode != dns.RcodeRefused {
		t.Errorf("a federation with no stub domain: %s", dns.RcodeToString[r.Rcode])
	}

	t.Run("the stub's server gets the source cluster, once", func(t *testing.T) {
		program("probe", probe.addr)
		stubWithin(t, 10*time.Second, "dnsd to forward to the probe", func() bool {
			return stubAsk(t, "udp", d.Addr, "web.shop.probe.svc.federation.", false).Rcode == dns.RcodeNameError
		})
		got := probe.asked()
		opt := got[len(got)-1].IsEdns0()
		var sources []string
		for _, o := range opt.Option {
			if l, ok := o.(*dns.EDNS0_LOCAL); ok && l.Code == 65002 {
				sources = append(sources, string(l.Data))
			}
		}
		if len(opt.Option) != 1 || !slices.Equal(sources, []string{"it"}) {
			t.Errorf("the stub's server got options %v, want only source cluster %q", opt.Option, "it")
		}

		// A question that already carries the option was stub-forwarded
		// once: it is answered here, and never goes out again.
		n := len(probe.asked())
		r := stubAsk(t, "udp", d.Addr, "web.shop.probe.svc.federation.", false, &dns.EDNS0_LOCAL{Code: 65002, Data: []byte("elsewhere")})
		if r.Rcode != dns.RcodeRefused || len(probe.asked()) != n {
			t.Errorf("a looped question: %s, the probe asked %d more times", dns.RcodeToString[r.Rcode], len(probe.asked())-n)
		}
	})

	t.Run("a stub domain in the clusterset tree, which every cluster writes, is none", func(t *testing.T) {
		// The same nameserver as the subtest above, for another domain, at
		// the key of the clusterset zone's stub tree: no cluster's
		// credential may send every cluster's questions elsewhere.
		host, port, _ := net.SplitHostPort(probe.addr)
		etcd.Etcdctl(t, "put", "/skydns/local/clusterset/dns/stub/federation/svc/shared/x", `{"host":"`+host+`","port":`+port+`}`)
		stubWithin(t, 10*time.Second, "dnsd to skip the shared tree's stub key", func() bool {
			return strings.Contains(dnsdGet(t, d.Metrics+"/metrics"), `etcdns_dnsd_malformed_values_total{zone="clusterset.local"} 1`)
		})
		n := len(probe.asked())
		if r := stubAsk(t, "udp", d.Addr, "web.shop.shared.svc.federation.", false); r.Rcode != dns.RcodeRefused || len(probe.asked()) != n {
			t.Errorf("a name below the shared tree's stub domain: %s, the probe asked %d more times; want REFUSED, none", dns.RcodeToString[r.Rcode], len(probe.asked())-n)
		}
	})

	t.Run("a stub nameserver that is dnsd itself is skipped", func(t *testing.T) {
		program("self", d.Addr)
		stubWithin(t, 10*time.Second, "the skip to be counted", func() bool {
			r := stubAsk(t, "udp", d.Addr, "web.shop.self.svc.federation.", false)
			body := dnsdGet(t, d.Metrics+"/metrics")
			return r.Rcode == dns.RcodeRefused && strings.Contains(body, "etcdns_dnsd_stub_self_skips_total") &&
				!strings.Contains(body, "etcdns_dnsd_stub_self_skips_total 0")
		})
	})

	t.Run("a restarted publisher keeps the stubs", func(t *testing.T) {
		// Revisions, not values: a reconcile that deleted the keys and a
		// POST that wrote them again would leave the same values.
		cli := etcd.Client(t)
		revs := func() map[string]int64 {
			r, err := cli.Get(context.Background(), "/skydns/local/cluster/dns/stub/", clientv3.WithPrefix())
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]int64{}
			for _, kv := range r.Kvs {
				out[string(kv.Key)] = kv.ModRevision
			}
			return out
		}
		before := revs()
		pub.Restart()
		// The endpoint writes only once the new term's full reconcile is
		// done: a repeated POST that succeeds comes after it, and must
		// change nothing.
		program("myfederation", knot)
		if after := revs(); !maps.Equal(after, before) {
			t.Errorf("stub keys changed over a restart: %v, want %v", after, before)
		}
	})

	t.Run("DELETE withdraws the stub domain", func(t *testing.T) {
		if code, body, err := stubCall(good, "DELETE", api+"/federations/myfederation", ""); err != nil || code != http.StatusNoContent {
			t.Fatalf("DELETE: %d %s %v", code, body, err)
		}
		stubWithin(t, 10*time.Second, "dnsd to stop forwarding", func() bool {
			return stubAsk(t, "udp", d.Addr, "myservice.myns.myfederation.svc.federation.", true).Rcode == dns.RcodeRefused
		})
		if code, _, _ := stubCall(good, "GET", api+"/federations/myfederation", ""); code != http.StatusNotFound {
			t.Errorf("GET after DELETE: %d", code)
		}
	})
}

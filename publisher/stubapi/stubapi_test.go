package stubapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/etcdns/etcdns/internal/testetcd"
	"github.com/etcdns/etcdns/internal/testpki"
	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/publisher"
	"github.com/etcdns/etcdns/publisher/elect"
	"github.com/etcdns/etcdns/publisher/etcdstore"
)

// issue returns a key pair signed by c, for a server on 127.0.0.1 or a client.
func issue(t *testing.T, c *testpki.CA, name string, server bool) tls.Certificate {
	t.Helper()
	pair, err := tls.X509KeyPair(c.Issue(t, name, server))
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

func write(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func startEtcd(t *testing.T) *clientv3.Client { return testetcd.Start(t, nil) }

// endpoint is the handler behind real TLS, as the publisher serves it.
type endpoint struct {
	url            string
	cli            *clientv3.Client
	good, bad, raw *http.Client // raw: trusts the server, presents no certificate
	leading        atomic.Bool
	term           atomic.Pointer[elect.Term]
}

// lead makes the endpoint's publisher the leader of cluster c1's election
// and returns its term.
func (ep *endpoint) lead(t *testing.T) *elect.Term {
	t.Helper()
	sess, err := concurrency.NewSession(ep.cli, concurrency.WithTTL(60))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	e := concurrency.NewElection(sess, elect.Key("c1"))
	if err := e.Campaign(context.Background(), "publisher-0"); err != nil {
		t.Fatal(err)
	}
	term := elect.NewTerm(e.Key(), e.Rev(), sess.Lease(), "publisher-0")
	ep.term.Store(term)
	return term
}

// start serves the endpoint; its writes go through icpt when given.
func start(t *testing.T, icpt ...grpc.UnaryClientInterceptor) *endpoint {
	t.Helper()
	dir := t.TempDir()
	trusted, other := testpki.NewCA(t, "federation control plane"), testpki.NewCA(t, "someone else")
	serverCert, serverKey := trusted.Issue(t, "publisher", true)
	tc, err := TLSConfig(write(t, dir, "server.pem", serverCert), write(t, dir, "server.key", serverKey), write(t, dir, "ca.pem", trusted.PEM))
	if err != nil {
		t.Fatal(err)
	}
	ep := &endpoint{cli: startEtcd(t)}
	ep.leading.Store(true)
	store := &etcdstore.Store{Client: ep.cli, Timeout: 5 * time.Second}
	if len(icpt) > 0 {
		store.Client = testetcd.Intercepted(t, ep.cli, icpt[0])
	}
	h, err := New(Config{
		Store:  store,
		Layout: keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: "c1"},
		Zone:   "cluster.local", Domain: "federation",
		Leader: func() (*elect.Term, bool) { return ep.term.Load(), ep.leading.Load() },
		Log:    slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = tc
	srv.Config = NewServer(h, tc, slog.New(slog.NewTextHandler(io.Discard, nil)))
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ep.url = srv.URL

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(trusted.PEM)
	client := func(certs ...tls.Certificate) *http.Client {
		tc := &tls.Config{RootCAs: roots}
		if len(certs) > 0 {
			// Presented whatever CAs the server names: Go's client would
			// otherwise keep a certificate of another CA to itself, and
			// the test would only show what "no certificate" does.
			tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &certs[0], nil }
		}
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
	}
	ep.good = client(issue(t, trusted, "federation-controller", false))
	ep.bad = client(issue(t, other, "federation-controller", false))
	ep.raw = client()
	return ep
}

func (ep *endpoint) do(t *testing.T, c *http.Client, method, path, body string) (int, string, error) {
	t.Helper()
	req, err := http.NewRequest(method, ep.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// call is do with the good client, which must get an answer.
func (ep *endpoint) call(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	code, b, err := ep.do(t, ep.good, method, path, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return code, b
}

// stored returns every key under the stub tree with its value.
func (ep *endpoint) stored(t *testing.T) map[string]string {
	t.Helper()
	r, err := ep.cli.Get(context.Background(), "/skydns/local/cluster/dns/stub/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range r.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

func stub(t *testing.T, name, ns string) keys.Record {
	t.Helper()
	l := keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: "c1"}
	r, err := l.Stub("cluster.local", name+".svc.federation", "federation/"+name, netip.MustParseAddrPort(ns))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestMutualTLS(t *testing.T) {
	ep := start(t)
	if code, body, err := ep.do(t, ep.good, "POST", "/federations/myfederation", `{"nameservers":["108.45.90.180"]}`); err != nil || code != http.StatusOK {
		t.Fatalf("a client with a certificate of the CA: %d %s %v", code, body, err)
	}
	for _, c := range []struct {
		name   string
		client *http.Client
		alert  string
	}{
		{"a certificate of another CA", ep.bad, "tls: unknown certificate authority"},
		{"no certificate", ep.raw, "tls: certificate required"},
	} {
		code, _, err := ep.do(t, c.client, "POST", "/federations/evil", `{"nameservers":["192.0.2.66"]}`)
		if err == nil || !strings.Contains(err.Error(), c.alert) {
			t.Errorf("a client with %s: status %d, error %v; want the handshake refused with %q", c.name, code, err, c.alert)
		}
		if _, _, err := ep.do(t, c.client, "GET", "/federations/myfederation", ""); err == nil {
			t.Errorf("a client with %s could read", c.name)
		}
	}
	old := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS11}}}
	if _, _, err := ep.do(t, old, "GET", "/federations/myfederation", ""); err == nil {
		t.Error("TLS 1.1 accepted")
	}
	if got := ep.stored(t); len(got) != 1 {
		t.Errorf("stored %v, want only the good client's nameserver", got)
	}
}

func TestProgramStubDomain(t *testing.T) {
	ep := start(t)
	// Another writer's nameserver of the same domain (SkyDNS's own shape,
	// by hand): never touched by the endpoint.
	const hand = "/skydns/local/cluster/dns/stub/federation/svc/myfederation/ns1"
	if _, err := ep.cli.Put(context.Background(), hand, `{"host":"10.0.0.53","port":53}`); err != nil {
		t.Fatal(err)
	}

	code, body := ep.call(t, "POST", "/federations/myfederation", `{"nameservers": ["108.45.90.180", "108.180.64.128:5353", "108.45.90.180:53"]}`)
	var f Federation
	if err := json.Unmarshal([]byte(body), &f); code != http.StatusOK || err != nil ||
		f.Domain != "myfederation.svc.federation." || strings.Join(f.Nameservers, ",") != "108.180.64.128:5353,108.45.90.180:53" {
		t.Fatalf("POST: %d %s", code, body)
	}
	want := map[string]string{hand: `{"host":"10.0.0.53","port":53}`}
	for _, ns := range []string{"108.45.90.180:53", "108.180.64.128:5353"} {
		r := stub(t, "myfederation", ns)
		want[r.Key] = string(r.Value.Encode())
	}
	if got := ep.stored(t); !equal(got, want) {
		t.Fatalf("stored:\n%v\nwant:\n%v", got, want)
	}

	// The same POST again writes nothing.
	rev := revision(t, ep.cli)
	if code, _ := ep.call(t, "POST", "/federations/myfederation", `{"nameservers":["108.180.64.128:5353","108.45.90.180"]}`); code != http.StatusOK || revision(t, ep.cli) != rev {
		t.Fatalf("repeated POST: %d, revision %d -> %d", code, rev, revision(t, ep.cli))
	}
	if code, body := ep.call(t, "GET", "/federations/myfederation", ""); code != http.StatusOK || !strings.Contains(body, `"nameservers":["108.180.64.128:5353","108.45.90.180:53"]`) {
		t.Fatalf("GET: %d %s", code, body)
	}

	// A POST replaces the set, in one transaction.
	if code, body := ep.call(t, "POST", "/federations/myfederation", `{"nameservers":["[2001:db8::53]:53"]}`); code != http.StatusOK {
		t.Fatalf("replacing POST: %d %s", code, body)
	}
	r := stub(t, "myfederation", "[2001:db8::53]:53")
	want = map[string]string{hand: want[hand], r.Key: string(r.Value.Encode())}
	if got := ep.stored(t); !equal(got, want) {
		t.Fatalf("after the replacing POST:\n%v\nwant:\n%v", got, want)
	}
	if rev2 := revision(t, ep.cli); rev2 != rev+1 {
		t.Errorf("the replacement took %d revisions, want one transaction", rev2-rev)
	}

	// Federations are independent.
	ep.call(t, "POST", "/federations/other", `{"nameservers":["10.1.0.1"]}`)
	if code, _ := ep.call(t, "DELETE", "/federations/myfederation", ""); code != http.StatusNoContent {
		t.Fatalf("DELETE: %d", code)
	}
	o := stub(t, "other", "10.1.0.1:53")
	if got := ep.stored(t); !equal(got, map[string]string{hand: want[hand], o.Key: string(o.Value.Encode())}) {
		t.Fatalf("after DELETE: %v", got)
	}
	if code, _ := ep.call(t, "GET", "/federations/myfederation", ""); code != http.StatusNotFound {
		t.Errorf("GET after DELETE: %d", code)
	}
	if code, _ := ep.call(t, "DELETE", "/federations/myfederation", ""); code != http.StatusNoContent {
		t.Errorf("DELETE again: %d", code)
	}
}

func TestOnlyTheLeaderWrites(t *testing.T) {
	ep := start(t)
	ep.call(t, "POST", "/federations/myfederation", `{"nameservers":["10.0.0.1"]}`)
	ep.leading.Store(false)
	for _, m := range []string{"POST", "DELETE"} {
		if code, body := ep.call(t, m, "/federations/myfederation", `{"nameservers":["10.0.0.2"]}`); code != http.StatusServiceUnavailable {
			t.Errorf("%s by a replica that does not lead: %d %s", m, code, body)
		}
	}
	if code, _ := ep.call(t, "GET", "/federations/myfederation", ""); code != http.StatusOK {
		t.Errorf("GET by a replica that does not lead: %d", code)
	}

	// A fence that no longer holds (a newer leader won) writes nothing.
	ep.leading.Store(true)
	ep.term.Store(elect.NewTerm("/etcdns-election/c1/gone", 42, 0, "publisher-0"))
	before := ep.stored(t)
	if code, body := ep.call(t, "POST", "/federations/myfederation", `{"nameservers":["10.0.0.2"]}`); code != http.StatusServiceUnavailable {
		t.Errorf("POST with a stale fence: %d %s", code, body)
	}
	if got := ep.stored(t); !equal(got, before) {
		t.Errorf("a stale fence wrote: %v", got)
	}
}

// TestUnansweredWriteMovesTheFence: a write the endpoint got no answer for
// may be held by a member and commit later, over what the client sets
// next. The endpoint moves the fence on before it answers, so that write
// never commits, and says so.
func TestUnansweredWriteMovesTheFence(t *testing.T) {
	// A fenced write: a transaction around the guarded one.
	h := testetcd.NewHeld(func(txn *pb.TxnRequest) bool {
		return len(txn.Success) > 0 && txn.Success[0].GetRequestTxn() != nil
	})
	ep := start(t, h.Intercept)
	term := ep.lead(t)
	ep.leading.Store(true)

	before := term.Epoch()
	h.Arm()
	code, body := ep.call(t, "POST", "/federations/myfederation", `{"nameservers":["10.0.0.2"]}`)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "applied in full or not at all") {
		t.Errorf("POST whose write got no answer: %d %s", code, body)
	}
	if term.Epoch() <= before {
		t.Errorf("the fence stayed at %d", before)
	}
	if h.Release() {
		t.Error("the held write committed after the endpoint answered")
	}
	if got := ep.stored(t); len(got) != 0 {
		t.Errorf("stored %v", got)
	}
	// The next POST writes with the new fence.
	if code, body := ep.call(t, "POST", "/federations/myfederation", `{"nameservers":["10.0.0.3"]}`); code != http.StatusOK {
		t.Errorf("POST after the move: %d %s", code, body)
	}
	if got := ep.stored(t); len(got) != 1 {
		t.Errorf("stored %v, want the one nameserver", got)
	}
}

func TestValidation(t *testing.T) {
	ep := start(t)
	for _, c := range []struct{ method, path, body, want string }{
		{"POST", "/federations/MyFed", `{"nameservers":["10.0.0.1"]}`, "federation name"},
		{"POST", "/federations/my_fed", `{"nameservers":["10.0.0.1"]}`, "federation name"},
		{"POST", "/federations/-fed", `{"nameservers":["10.0.0.1"]}`, "federation name"},
		{"POST", "/federations/" + strings.Repeat("a", 64), `{"nameservers":["10.0.0.1"]}`, "federation name"},
		{"GET", "/federations/a.b", ``, "federation name"},
		{"POST", "/federations/fed", `{"nameservers":`, "body"},
		{"POST", "/federations/fed", `nameservers`, "body"},
		{"POST", "/federations/fed", `{"nameserver":["10.0.0.1"]}`, "unknown field"},
		{"POST", "/federations/fed", `{"nameservers":"10.0.0.1"}`, "body"},
		{"POST", "/federations/fed", `{"nameservers":["10.0.0.1"]} {}`, "one JSON object"},
		{"POST", "/federations/fed", `{"nameservers":[]}`, "DELETE"},
		{"POST", "/federations/fed", `{}`, "DELETE"},
		{"POST", "/federations/fed", `{"nameservers":["ns1.example.com"]}`, "host names"},
		{"POST", "/federations/fed", `{"nameservers":["ns1.example.com:53"]}`, "host names"},
		{"POST", "/federations/fed", `{"nameservers":["10.0.0.1:0"]}`, "port 0"},
		{"POST", "/federations/fed", `{"nameservers":["10.0.0.1:99999"]}`, "host names"},
		{"POST", "/federations/fed", `{"nameservers":["0.0.0.0"]}`, "unicast"},
		{"POST", "/federations/fed", `{"nameservers":["[fe80::1%eth0]:53"]}`, "unicast"},
		{"POST", "/federations/fed", `{"nameservers":["` + strings.Repeat(`10.0.0.1","`, 40) + `10.0.0.2"]}`, "at most"},
	} {
		code, body := ep.call(t, c.method, c.path, c.body)
		var e struct{ Error string }
		if code != http.StatusBadRequest || json.Unmarshal([]byte(body), &e) != nil || !strings.Contains(e.Error, c.want) {
			t.Errorf("%s %s %s: %d %s; want 400 saying %q", c.method, c.path, c.body, code, body, c.want)
		}
	}
	if code, _ := ep.call(t, "POST", "/federations/fed", `{"nameservers":["`+strings.Repeat("x", maxBody)+`"]}`); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a huge body: %d", code)
	}
	if code, _ := ep.call(t, "PUT", "/federations/fed", `{"nameservers":["10.0.0.1"]}`); code != http.StatusMethodNotAllowed {
		t.Errorf("PUT: %d", code)
	}
	if code, _ := ep.call(t, "GET", "/federations", ""); code != http.StatusNotFound {
		t.Errorf("GET /federations: %d", code)
	}
	if got := ep.stored(t); len(got) != 0 {
		t.Errorf("a refused request wrote: %v", got)
	}
}

func TestTLSConfigNeedsItsFiles(t *testing.T) {
	dir := t.TempDir()
	c := testpki.NewCA(t, "ca")
	cert, key := c.Issue(t, "publisher", true)
	cf, kf, caf := write(t, dir, "s.pem", cert), write(t, dir, "s.key", key), write(t, dir, "ca.pem", c.PEM)
	if _, err := TLSConfig(cf, kf, caf); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][3]string{
		{filepath.Join(dir, "missing.pem"), kf, caf},
		{cf, caf, caf}, // a certificate is no key
		{cf, kf, filepath.Join(dir, "missing.pem")},
		{cf, kf, write(t, dir, "empty.pem", []byte("not PEM"))},
	} {
		if _, err := TLSConfig(args[0], args[1], args[2]); err == nil {
			t.Errorf("TLSConfig%v accepted", args)
		}
	}
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func revision(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	r, err := cli.Get(context.Background(), "/")
	if err != nil {
		t.Fatal(err)
	}
	return r.Header.Revision
}

// The endpoint's keys are in the cluster domain's range, which the
// publisher's reconcile reads: their source must be one it never manages,
// or its next full sync would take them for orphans and delete them.
func TestReconcileLeavesStubsAlone(t *testing.T) {
	if src := source("myfederation"); publisher.Manages(publisher.Zones{}, src) {
		t.Errorf("the publisher manages %s", src)
	}
}

// A federation's change is one transaction: an etcd that takes fewer
// operations than its largest (32 nameservers replaced, and the fence)
// would refuse it on the day it came, so the endpoint refuses to start.
func TestNeedsRoomForAFederationsChange(t *testing.T) {
	c := Config{
		Layout: keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: "c1"},
		Zone:   "cluster.local", Domain: "federation",
		Leader: func() (*elect.Term, bool) { return nil, false },
	}
	for ops, ok := range map[int]bool{0: true, 128: true, 65: true, 64: false, 2: false} {
		c.Store = &etcdstore.Store{MaxTxnOps: ops}
		_, err := New(c)
		if (err == nil) != ok || err != nil && !strings.Contains(err.Error(), "publisher.max-txn-ops is") {
			t.Errorf("max-txn-ops %d: %v; want it taken: %v", ops, err, ok)
		}
	}
}

// An Advance whose answer was lost (the controller's settle, on a frozen
// member) moved the fence while the term still holds the old epoch: the
// endpoint's write fails the fence, finds the move, and writes again. It
// answered 503 "leadership lost" while the term went on.
func TestLostAdvanceIsNoLostLeadership(t *testing.T) {
	ep := start(t)
	term := ep.lead(t)
	lost := testetcd.Intercepted(t, ep.cli, func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if err := invoke(ctx, method, req, reply, cc, opts...); err != nil {
			return err
		}
		return status.Error(codes.Unavailable, "the answer was lost")
	})
	before := term.Epoch()
	if err := term.Advance(context.Background(), lost, before); err == nil || term.Epoch() != before {
		t.Fatalf("advance: %v, epoch %d -> %d; want its answer lost, the epoch as it was", err, before, term.Epoch())
	}
	if code, body := ep.call(t, "POST", "/federations/myfederation", `{"nameservers":["10.0.0.2"]}`); code != http.StatusOK {
		t.Errorf("POST after a lost Advance: %d %s", code, body)
	}
	if got := ep.stored(t); len(got) != 1 {
		t.Errorf("stored %v, want the one nameserver", got)
	}
}

//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdns/etcdns/config"
	"github.com/etcdns/etcdns/etcdclient"
	"github.com/etcdns/etcdns/integration/harness"
	"github.com/etcdns/etcdns/keys"
)

// securityGrants are the roles of docs/security.md, which must show each
// as an etcdctl line: a publisher role per cluster with readwrite on its
// own tree, the shared clusterset tree and its election; a read-only dnsd
// role with its cluster's tree and the shared prefix (dnsd watches the
// whole of a zone's prefix, so /skydns/local/clusterset/ alone is not
// enough for it).
var securityGrants = []struct{ role, perm, prefix string }{
	{"a-publisher", "readwrite", "/skydns-a/"},
	{"a-publisher", "readwrite", "/skydns/local/clusterset/"},
	{"a-publisher", "readwrite", "/etcdns-election/a/"},
	{"b-publisher", "readwrite", "/skydns-b/"},
	{"b-publisher", "readwrite", "/skydns/local/clusterset/"},
	{"b-publisher", "readwrite", "/etcdns-election/b/"},
	{"a-dnsd", "read", "/skydns-a/"},
	{"a-dnsd", "read", "/skydns/"},
}

const securityManifests = `apiVersion: v1
kind: Service
metadata: {name: web, namespace: prod}
spec:
  type: ClusterIP
  clusterIP: 10.96.0.20
  clusterIPs: [10.96.0.20]
  ports: [{name: https, port: 443, protocol: TCP}]
`

const securityExports = `apiVersion: v1
kind: Service
metadata: {name: api, namespace: prod}
spec:
  type: ClusterIP
  clusterIP: 10.96.0.30
  clusterIPs: [10.96.0.30]
  ports: [{name: http, port: 80, protocol: TCP}]
---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {name: api, namespace: prod}
---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceImport
metadata: {name: api, namespace: prod}
spec:
  type: ClusterSetIP
  ips: [10.112.0.20]
  ports: [{name: http, port: 80, protocol: TCP}]
`

// TestEtcdSecurity is issue 9 item 6: etcd with TLS and client
// certificates only, etcd auth on, a role per cluster and a read-only
// role for dnsd, each user being its certificate's common name.
//   - cluster A's publisher publishes and A's dnsd (read-only) answers, as
//     does CoreDNS's etcd plugin with the same read-only certificate;
//   - a publisher of cluster A pointed at B's tree, and a publisher run
//     with dnsd's credentials, each exit with one line naming the key or
//     prefix, the user and the permission etcd refused;
//   - in the clusterset tree, which both clusters may write (etcd grants
//     are key ranges, and both clusters' records of a name sit under the
//     same name), A's publisher never changes a record carrying B's id,
//     not even one at a key A wants; B's keys end as they began.
func TestEtcdSecurity(t *testing.T) {
	etcd := harness.StartEtcdTLS(t)
	ctx := context.Background()
	root := etcd.Client(t, "root", "")
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	doc, err := os.ReadFile(filepath.Join(harness.RepoRoot(t), "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, g := range securityGrants {
		if !slices.Contains(roles, g.role) {
			roles = append(roles, g.role)
			must(root.RoleAdd(ctx, g.role))
			// No password: the certificate is the credential.
			must(root.UserAddWithOptions(ctx, g.role, "", &clientv3.UserAddOptions{NoPassword: true}))
			must(root.UserGrantRole(ctx, g.role, g.role))
		}
		perm := clientv3.PermissionType(clientv3.PermRead)
		if g.perm == "readwrite" {
			perm = clientv3.PermissionType(clientv3.PermReadWrite)
		}
		must(root.RoleGrantPermission(ctx, g.role, g.prefix, clientv3.GetPrefixRangeEnd(g.prefix), perm))
		line := fmt.Sprintf("etcdctl role grant-permission %s --prefix=true %s %s", g.role, g.perm, g.prefix)
		if !strings.Contains(string(doc), line) {
			t.Errorf("docs/security.md does not show the grant the test makes: %s", line)
		}
	}
	must(root.UserAdd(ctx, "root", "rootpw"))
	must(root.UserGrantRole(ctx, "root", "root"))
	must(root.AuthEnable(ctx))
	// A client without a certificate does not get past the handshake.
	if c, err := etcdclient.New(ctx, config.Etcd{Endpoints: []string{etcd.Endpoint}, CAFile: etcd.PKI.CAFile, DialTimeout: 2 * time.Second}, nil); err == nil {
		c.Close()
		t.Fatal("a client without a certificate connected")
	}
	// The root certificate is root now; the roles are what they say.
	if _, err := etcd.Client(t, "a-publisher", "").Put(ctx, "/skydns-b/x", "v"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("a-publisher writing into B's tree: %v, want permission denied", err)
	}
	if _, err := etcd.Client(t, "a-dnsd", "").Put(ctx, "/skydns-a/x", "v"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Fatalf("a-dnsd writing: %v, want permission denied", err)
	}

	pubBin := harness.BuildBinary(t, "./cmd/publisher")
	tlsFlags := func(user string) []string {
		cert, key := etcd.PKI.Client(t, user)
		return []string{"--etcd.endpoints=" + etcd.Endpoint, "--etcd.ca-file=" + etcd.PKI.CAFile,
			"--etcd.cert-file=" + cert, "--etcd.key-file=" + key}
	}
	manifests := func() string {
		dir := t.TempDir()
		for name, body := range map[string]string{"web.yaml": securityManifests, "exports.yaml": securityExports} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	clusterFlags := func(id, dir string) []string {
		return []string{"--cluster.id=" + id, "--publisher.source=files:" + dir,
			"--publisher.prefix=/skydns-" + id, "--publisher.reverse-prefix=/skydns-" + id, "--publisher.clusterset"}
	}
	publish := func(user, id, dir string, extra ...string) (*harness.Process, string) {
		metrics := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
		args := append(append(append(tlsFlags(user), clusterFlags(id, dir)...), "--publisher.metrics-listen="+metrics), extra...)
		return harness.StartProcess(t, pubBin, args, nil, func() error { return harness.HTTPOK("http://" + metrics + "/readyz") }), metrics
	}
	// dryRun is what the publisher of a cluster would write: "key value"
	// lines, the keys the test expects in etcd.
	dryRun := func(id, dir string) map[string]string {
		out, err := exec.Command(pubBin, append(clusterFlags(id, dir), "--publisher.dry-run")...).Output()
		if err != nil {
			t.Fatalf("dry run of %s: %v", id, err)
		}
		recs := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			k, v, _ := strings.Cut(l, " ")
			recs[k] = v
		}
		return recs
	}
	// owned lists every key carrying cluster's id, or under its own tree,
	// with its value and revision: what "untouched" compares.
	owned := func(cluster string) map[string]string {
		r, err := root.Get(ctx, "/skydns", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, kv := range r.Kvs {
			v, err := keys.Decode(kv.Value)
			if strings.HasPrefix(string(kv.Key), "/skydns-"+cluster+"/") || err == nil && v.Cluster == cluster {
				m[string(kv.Key)] = fmt.Sprintf("%s @%d", kv.Value, kv.ModRevision)
			}
		}
		return m
	}

	// Cluster B publishes the same service and export, then stops: its
	// records stay, and nothing of B runs to repair what A might change.
	dirB, dirA := manifests(), manifests()
	pubB, _ := publish("b-publisher", "b", dirB)
	wantB := dryRun("b", dirB)
	waitFor(t, 20*time.Second, func() error {
		if got := owned("b"); len(got) != len(wantB) {
			return fmt.Errorf("%d records of B in etcd, want %d", len(got), len(wantB))
		}
		return nil
	})
	pubB.Stop()

	// A record carrying B's id at a key A's publisher wants: the shared
	// tree lets A write there, only A's ownership rule stops it.
	wantA := dryRun("a", dirA)
	var forged string
	for k := range wantA {
		if strings.HasPrefix(k, "/skydns/local/clusterset/svc/prod/api/_tcp/_http/") {
			forged = k
		}
	}
	if forged == "" {
		t.Fatalf("no clusterset SRV record of api among A's records: %v", wantA)
	}
	forgedValue := `{"host":"api.prod.svc.clusterset.local","port":80,"ttl":5,"group":"_http._tcp.api.prod.svc.clusterset.local","cluster":"b","source":"serviceimport/prod/api"}`
	must(etcd.Client(t, "b-publisher", "").Put(ctx, forged, forgedValue))
	before := owned("b")

	// The one line, and the exit: a missing grant is not retried.
	refused := func(p *harness.Process) string {
		t.Helper()
		select {
		case <-p.Done():
		case <-time.After(30 * time.Second):
			t.Fatalf("%s still runs after etcd refused it", p.Name)
		}
		var ee *exec.ExitError
		if err := p.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Errorf("%s exit: %v, want status 1", p.Name, err)
		}
		b, err := os.ReadFile(p.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "refused") || strings.Contains(l, "permission") {
				lines = append(lines, l)
			}
		}
		if len(lines) != 1 {
			t.Fatalf("%d lines about the refusal, want 1:\n%s", len(lines), b)
		}
		t.Logf("%s exited: %s", p.Name, lines[0])
		return lines[0]
	}
	start := func(args ...string) *harness.Process {
		return harness.StartProcess(t, pubBin, args, nil, nil)
	}

	// Cluster A's credentials, B's prefixes: the load of what it owns is
	// the first request, and A may not even read B's tree.
	wrong := start(append(tlsFlags("a-publisher"), "--cluster.id=a", "--publisher.source=files:"+dirA,
		"--publisher.prefix=/skydns-b", "--publisher.reverse-prefix=/skydns-b", "--publisher.metrics-listen=")...)
	if got, want := refused(wrong), `publisher: etcd refused the read of /skydns-b/local/cluster/: user "a-publisher" has no read permission there (etcd auth)`; got != want {
		t.Errorf("publisher of A on B's tree:\n got %s\nwant %s", got, want)
	}

	// dnsd's read-only credentials in a publisher: it may read its
	// cluster's tree, so the first write is what etcd refuses. Without
	// leader election too, that is the replica's own election key (the
	// key its writes are fenced by), and the line names the grant it
	// needs: the cluster's election prefix.
	reader := start(append(append(tlsFlags("a-dnsd"), clusterFlags("a", dirA)...),
		"--publisher.metrics-listen=", "--publisher.leader-election=false")...)
	if got, want := refused(reader), `publisher: etcd refused the write to /etcdns-election/a/: user "a-dnsd" has no write permission there (etcd auth)`; got != want {
		t.Errorf("publisher with dnsd's credentials:\n got %s\nwant %s", got, want)
	}
	// A user that may hold the election but only read the records (no
	// role of docs/security.md): the first record write is refused, and
	// the line names its key.
	must(root.RoleAdd(ctx, "a-elector"))
	for _, g := range []struct {
		prefix string
		perm   clientv3.PermissionType
	}{{"/etcdns-election/a/", clientv3.PermissionType(clientv3.PermReadWrite)}, {"/skydns-a/", clientv3.PermissionType(clientv3.PermRead)}, {"/skydns/", clientv3.PermissionType(clientv3.PermRead)}} {
		must(root.RoleGrantPermission(ctx, "a-elector", g.prefix, clientv3.GetPrefixRangeEnd(g.prefix), g.perm))
	}
	must(root.UserAddWithOptions(ctx, "a-elector", "", &clientv3.UserAddOptions{NoPassword: true}))
	must(root.UserGrantRole(ctx, "a-elector", "a-elector"))
	line := refused(start(append(append(tlsFlags("a-elector"), clusterFlags("a", dirA)...), "--publisher.metrics-listen=")...))
	m := regexp.MustCompile(`^publisher: etcd refused the write to (\S+): user "a-elector" has no write permission there \(etcd auth\)$`).FindStringSubmatch(line)
	if m == nil {
		t.Errorf("publisher that may only read records:\n got %s\nwant publisher: etcd refused the write to <a key of A>: user \"a-elector\" has no write permission there (etcd auth)", line)
	} else if _, ok := wantA[m[1]]; !ok {
		t.Errorf("the refused write names %s, which is not a record of A: %v", m[1], wantA)
	}
	if got := owned("a"); len(got) != 0 {
		t.Errorf("refused publishers wrote records of A: %v", got)
	}

	// Cluster A as it should be.
	pubA, _ := publish("a-publisher", "a", dirA)
	waitFor(t, 20*time.Second, func() error {
		got := owned("a")
		var diff []string
		for k, v := range wantA {
			if k == forged {
				continue // held by B
			}
			if g, ok := got[k]; !ok || !strings.HasPrefix(g, v+" @") {
				diff = append(diff, fmt.Sprintf("%s: %q, want %s", k, g, v))
			}
		}
		for k := range got {
			if _, ok := wantA[k]; !ok || k == forged {
				diff = append(diff, "unexpected "+k)
			}
		}
		if len(diff) > 0 {
			return errors.New(strings.Join(diff, "\n"))
		}
		return nil
	})
	if got := owned("b"); !maps.Equal(got, before) {
		t.Errorf("B's records changed while A published:\n got %v\nwant %v", got, before)
	}
	waitFor(t, 10*time.Second, func() error {
		b, _ := os.ReadFile(pubA.LogPath)
		if !strings.Contains(string(b), `msg="record key held by another owner; not overwriting it" unit=serviceimport/prod/api key=`+forged+` holder=`) {
			return fmt.Errorf("A's publisher did not say it left %s to its holder", forged)
		}
		return nil
	})

	// A's dnsd and CoreDNS, both with the read-only certificate.
	dnsdAddr := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	dm := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	dnsd := harness.StartProcess(t, harness.BuildBinary(t, "./cmd/dnsd"), append(tlsFlags("a-dnsd"),
		"--cluster.id=a", "--dnsd.listen="+dnsdAddr, "--dnsd.metrics-listen="+dm,
		"--dnsd.zones=cluster.local=/skydns-a,clusterset.local=/skydns,in-addr.arpa=/skydns-a,ip6.arpa=/skydns-a"),
		nil, func() error { return harness.HTTPOK("http://" + dm + "/readyz") })
	cert, key := etcd.PKI.Client(t, "a-dnsd")
	coredns := harness.StartCoreDNS(t, fmt.Sprintf(`cluster.local:{{.Port}} in-addr.arpa:{{.Port}} {
    bind 127.0.0.1
    etcd {
        path /skydns-a
        endpoint %[1]s
        tls %[2]s %[3]s %[4]s
    }
}
clusterset.local:{{.Port}} {
    bind 127.0.0.1
    etcd {
        path /skydns
        endpoint %[1]s
        tls %[2]s %[3]s %[4]s
    }
}
`, etcd.Endpoint, cert, key, etcd.PKI.CAFile))
	cs := "api.prod.svc.clusterset.local."
	checks := []check{
		{qname: "web.prod.svc.cluster.local.", qtype: dns.TypeA, answer: []string{"web.prod.svc.cluster.local. 5 IN A 10.96.0.20"}},
		{qname: "_https._tcp.web.prod.svc.cluster.local.", qtype: dns.TypeSRV,
			answer: []string{"_https._tcp.web.prod.svc.cluster.local. 5 IN SRV 10 100 443 web.prod.svc.cluster.local."}},
		{qname: "20.0.96.10.in-addr.arpa.", qtype: dns.TypePTR, answer: []string{"20.0.96.10.in-addr.arpa. 5 IN PTR web.prod.svc.cluster.local."}},
		{qname: "20.0.112.10.in-addr.arpa.", qtype: dns.TypePTR, answer: []string{"20.0.112.10.in-addr.arpa. 5 IN PTR " + cs}},
		{qname: cs, qtype: dns.TypeA, answer: []string{cs + " 5 IN A 10.112.0.20"}},
		{qname: "dns-version.clusterset.local.", qtype: dns.TypeTXT, answer: []string{`dns-version.clusterset.local. 5 IN TXT "1.1.0"`}},
	}
	for _, srv := range []struct{ name, addr string }{{"dnsd", dnsdAddr}, {"CoreDNS", coredns.Addr}} {
		waitFor(t, 10*time.Second, func() error {
			for _, c := range checks {
				if got, err := expect(ask(t, "udp", srv.addr, c.qname, c.qtype), c); err != nil {
					return fmt.Errorf("%s with the read-only user, %s %s: %v\n%s", srv.name, c.qname, dns.TypeToString[c.qtype], err, got)
				}
			}
			return nil
		})
	}
	// Read-only is enough to follow changes too: a watch on a range the
	// grants do not cover entirely is refused, and dnsd would be left
	// relisting instead.
	if b, _ := os.ReadFile(dnsd.LogPath); strings.Contains(string(b), "permission denied") {
		t.Errorf("dnsd was refused a request:\n%s", b)
	}

	// A stops exporting and importing api: A's clusterset records of it
	// go, and the ones carrying B's id stay, the forged one at A's key
	// included. B's are B's own clusterset IP, which A's dnsd does not
	// answer: api is not imported in A now.
	if err := os.Remove(filepath.Join(dirA, "exports.yaml")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() error {
		for k := range owned("a") {
			if strings.Contains(k, "/api/") || strings.Contains(k, "/10/112/0/20") {
				return fmt.Errorf("A's record %s of the withdrawn export is still there", k)
			}
		}
		return nil
	})
	if _, err := expect(ask(t, "udp", dnsdAddr, cs, dns.TypeA), check{rcode: dns.RcodeNameError}); err != nil {
		t.Errorf("dnsd, api after A stopped importing it: %v", err)
	}
	if got := owned("b"); !maps.Equal(got, before) {
		t.Errorf("B's records changed:\n got %v\nwant %v", got, before)
	}

	// B leaves with `publisher withdraw`, as docs/security.md says, with
	// B's publisher role alone: no permission in the federation tree B
	// never joined, which the withdrawal looks at for a federation B
	// might have joined before.
	out, err := exec.Command(pubBin, append(append([]string{"withdraw"}, tlsFlags("b-publisher")...), "--cluster.id=b",
		"--publisher.prefix=/skydns-b", "--publisher.reverse-prefix=/skydns-b")...).CombinedOutput()
	if err != nil {
		t.Fatalf("publisher withdraw as b-publisher: %v\n%s", err, out)
	}
	if got := owned("b"); len(got) != 0 {
		t.Errorf("B's records after its withdrawal: %v", got)
	}
}

//go:build integration

package integration

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcdns/etcdns/integration/harness"
)

// TestShadow runs dnsd shadow against a real CoreDNS serving the same keys
// with its etcd plugin, as an operator would before switching: on names
// both answer alike it reports nothing that matters and exits 0; on an
// empty non-terminal, which CoreDNS answers with every address below it
// and dnsd with NODATA, it reports the missing records and exits 1.
func TestShadow(t *testing.T) {
	root := harness.RepoRoot(t)
	etcd := harness.StartEtcd(t)
	pubMetrics := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	harness.StartProcess(t, harness.BuildBinary(t, "./cmd/publisher"), []string{
		"--etcd.endpoints=" + etcd.Endpoint, "--publisher.source=files:" + filepath.Join(root, "examples"),
		"--cluster.id=local", "--publisher.metrics-listen=" + pubMetrics,
	}, nil, func() error { return harness.HTTPOK("http://" + pubMetrics + "/readyz") })
	d := startDnsd(t, etcd, "--dnsd.rotate=false")
	coredns := harness.StartCoreDNS(t, `.:{{.Port}} {
    bind 127.0.0.1
    etcd cluster.local in-addr.arpa ip6.arpa {
        path /skydns
        endpoint `+etcd.Endpoint+`
    }
}
`)
	// Every record written, and seen by dnsd: each name shadow asks is
	// then settled on both sides.
	publisherWritten(t, "http://"+pubMetrics)
	dnsdCaughtUp(t, etcd.Client(t), d.Metrics)

	bin := harness.BuildBinary(t, "./cmd/dnsd")
	shadow := func(args ...string) (stdout, stderr string, code int) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"shadow", "--a", coredns.Addr, "--b", d.Addr}, args...)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &exit):
			code = exit.ExitCode()
		default:
			t.Fatal(err)
		}
		return out.String(), errb.String(), code
	}

	same := filepath.Join(t.TempDir(), "same")
	os.WriteFile(same, []byte("api.apps.svc.cluster.local A\napi.apps.svc.cluster.local AAAA\n_http._tcp.api.apps.svc.cluster.local SRV\n20.10.96.10.in-addr.arpa PTR\nnothing.apps.svc.cluster.local A\n"), 0o644)
	out, errOut, code := shadow("--questions", same)
	if code != 0 || out != "" || !strings.Contains(errOut, "5 questions, 0 differences, 0 that matter") {
		t.Errorf("names both answer alike: exit %d, report:\n%s%s", code, out, errOut)
	}

	ent := filepath.Join(t.TempDir(), "ent")
	os.WriteFile(ent, []byte("apps.svc.cluster.local A\n"), 0o644)
	out, errOut, code = shadow("--questions", ent)
	for _, want := range []string{
		"missing\tapps.svc.cluster.local. A\tapps.svc.cluster.local. 0 IN A 10.96.10.20\n",
		"missing\tapps.svc.cluster.local. A\tapps.svc.cluster.local. 0 IN A 10.244.1.10\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("shadow did not report %q; report:\n%s%s", want, out, errOut)
		}
	}
	if code != 1 || strings.Contains(out, "extra\t") {
		t.Errorf("an empty non-terminal: exit %d; want 1 and only missing records:\n%s%s", code, out, errOut)
	}

	// Every name with records in etcd (37 questions from examples/): the
	// two agree on all of them.
	out, errOut, code = shadow("--from-etcd", "--etcd.endpoints="+etcd.Endpoint)
	if code != 0 || strings.Contains(errOut, " 0 questions") || !strings.Contains(errOut, " 0 differences") {
		t.Errorf("--from-etcd: exit %d, report:\n%s%s", code, out, errOut)
	}
	t.Logf("dnsd shadow --from-etcd against CoreDNS:\n%s%s", out, errOut)
}

//go:build integration

package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/etcdns/etcdns/integration/harness"
)

// monitoringRules writes the spec of deploy/monitoring/prometheusrule.yaml,
// a plain Prometheus rule file, to dir/rules.yaml and returns its text.
func monitoringRules(t *testing.T, dir string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(harness.RepoRoot(t), "deploy", "monitoring", "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Kind string    `yaml:"kind"`
		Spec yaml.Node `yaml:"spec"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil || doc.Kind != "PrometheusRule" {
		t.Fatalf("prometheusrule.yaml: kind %q, %v", doc.Kind, err)
	}
	spec, err := yaml.Marshal(&doc.Spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), spec, 0o644); err != nil {
		t.Fatal(err)
	}
	return string(spec)
}

// The alerts are valid rules to a real Prometheus (promtool check rules),
// and the ones unit-tested in rules_test.yaml fire as written there, with
// their runbook links.
func TestMonitoringRules(t *testing.T) {
	promtool := harness.SystemTool(t, "promtool")
	dir := t.TempDir()
	rules := monitoringRules(t, dir)
	test, err := os.ReadFile(filepath.Join(harness.RepoRoot(t), "deploy", "monitoring", "rules_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "rules_test.yaml"), test, 0o644)
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "rules_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// Every alert has a runbook paragraph its link points at.
	runbook, err := os.ReadFile(filepath.Join(harness.RepoRoot(t), "docs", "runbook.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^\s*- alert: (\S+)`).FindAllStringSubmatch(rules, -1) {
		if !strings.Contains(string(runbook), "\n## "+m[1]+"\n") {
			t.Errorf("docs/runbook.md has no section ## %s", m[1])
		}
		if !strings.Contains(rules, "runbook.md#"+strings.ToLower(m[1])+"\n") {
			t.Errorf("alert %s has no runbook_url to its section", m[1])
		}
	}
}

// Every metric an alert or a dashboard panel names exists on a running
// dnsd or publisher: a renamed metric would otherwise leave an alert that
// never fires and a panel that shows nothing.
func TestMonitoringMetricsExist(t *testing.T) {
	root := harness.RepoRoot(t)
	dir := t.TempDir()
	named := map[string]bool{}
	re := regexp.MustCompile(`\b(etcdns|coredns)_[a-z0-9_]+`)
	for _, n := range re.FindAllString(monitoringRules(t, dir), -1) {
		named[n] = true
	}
	raw, err := os.ReadFile(filepath.Join(root, "deploy", "monitoring", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, n := range re.FindAllString(tg.Expr, -1) {
				named[n] = true
			}
		}
	}

	etcd := harness.StartEtcd(t)
	pubMetrics := fmt.Sprintf("http://127.0.0.1:%d", harness.FreePort(t))
	harness.StartProcess(t, harness.BuildBinary(t, "./cmd/publisher"), []string{
		"--etcd.endpoints=" + etcd.Endpoint, "--publisher.source=files:" + filepath.Join(root, "examples"),
		"--cluster.id=it", "--publisher.metrics-listen=" + strings.TrimPrefix(pubMetrics, "http://"),
	}, nil, func() error { return harness.HTTPOK(pubMetrics + "/readyz") })
	// Its transaction counters appear with its first write.
	publisherWritten(t, pubMetrics)
	// A value that is no record, so the malformed counter has its zone.
	cli := etcd.Client(t)
	if _, err := cli.Put(context.Background(), "/skydns/local/cluster/svc/default/broken/x", "{not json"); err != nil {
		t.Fatal(err)
	}
	d := startDnsd(t, etcd, "--dnsd.forward", fmt.Sprintf("--dnsd.upstreams=127.0.0.1:%d", harness.FreePort(t)))
	m := new(dns.Msg)
	m.SetQuestion("kubernetes.default.svc.cluster.local.", dns.TypeA)
	if _, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(m, d.Addr); err != nil {
		t.Fatal(err)
	}
	// What the runbook sends an operator alerted by the counter to.
	if body, want := dnsdGet(t, d.Metrics+"/debug/records"), "skipped /skydns/local/cluster/svc/default/broken/x {not json: "; !strings.Contains(body, "1 keys skipped") || !strings.Contains(body, want) {
		t.Errorf("/debug/records without a name:\n%s\nwant it to list %q", body, want)
	}

	exposed := map[string]string{} // name: type
	for _, base := range []string{pubMetrics, d.Metrics} {
		for n, typ := range metricTypes(t, base+"/metrics") {
			exposed[n] = typ
		}
	}
	var missing []string
	for n := range named {
		if exposed[n] != "" {
			continue
		}
		base := n
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			base = strings.TrimSuffix(base, suf)
		}
		if base != n && exposed[base] == "histogram" {
			continue
		}
		missing = append(missing, n)
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("alerts or panels name metrics neither dnsd nor the publisher exports: %v", missing)
	}
	// CoreDNS's names, for the dashboards and alerts operators already
	// have (server/metrics.go).
	for n, typ := range map[string]string{
		"coredns_dns_requests_total":           "counter",
		"coredns_dns_responses_total":          "counter",
		"coredns_dns_request_duration_seconds": "histogram",
	} {
		if exposed[n] != typ {
			t.Errorf("dnsd exports %s as %q; want a %s", n, exposed[n], typ)
		}
	}
	if len(named) < 15 {
		t.Errorf("only %d metrics named; the pattern is off", len(named))
	}
}

// metricTypes reads the # TYPE lines of a Prometheus text exposition.
func metricTypes(t *testing.T, url string) map[string]string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			out[f[2]] = f[3]
		}
	}
	return out
}

// Every pod that serves metrics (the dnsd Deployment, the node-local
// DaemonSet, the publisher) is scraped through deploy/monitoring's
// PodMonitors, on the port its container names: without them the alerts
// had no series to fire on.
func TestMonitoringScrapesEveryWorkload(t *testing.T) {
	kubectl := harness.Tool(t, "kubectl")
	root := harness.RepoRoot(t)
	render := func(dir string) []*unstructured.Unstructured {
		out, stderr, err := deployKubectl(kubectl, "", nil, "kustomize", filepath.Join(root, "deploy", dir))
		if err != nil {
			t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, stderr)
		}
		return deployDecode(t, out)
	}
	type monitor struct {
		labels map[string]string
		port   string
	}
	var monitors []monitor
	for _, o := range render("monitoring") {
		if o.GetKind() != "PodMonitor" {
			continue
		}
		labels, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector", "matchLabels")
		eps, _, _ := unstructured.NestedSlice(o.Object, "spec", "podMetricsEndpoints")
		for _, e := range eps {
			if port, ok := e.(map[string]any)["port"].(string); ok {
				monitors = append(monitors, monitor{labels, port})
			}
		}
	}
	scraped := 0
	for _, o := range render("overlays/node-local") {
		switch o.GetKind() {
		case "Deployment", "DaemonSet":
		default:
			continue
		}
		labels, _, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "labels")
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			ports, _ := c.(map[string]any)["ports"].([]any)
			for _, p := range ports {
				if p.(map[string]any)["name"] != "metrics" {
					continue
				}
				found := false
				for _, m := range monitors {
					match := m.port == "metrics"
					for k, v := range m.labels {
						match = match && labels[k] == v
					}
					found = found || match
				}
				if !found {
					t.Errorf("%s %s serves metrics that no PodMonitor scrapes", o.GetKind(), o.GetName())
				}
				scraped++
			}
		}
	}
	if scraped < 3 {
		t.Errorf("%d workloads with a metrics port; want the dnsd Deployment, the node-local DaemonSet and the publisher", scraped)
	}
}

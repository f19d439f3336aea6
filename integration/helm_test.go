//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/etcdns/etcdns/integration/harness"
)

// helmChecksum is the pod-template annotation by which the chart rolls the
// pods when their configuration changes. kustomize rolls them by renaming
// the generated ConfigMap (a hash suffix) instead.
const helmChecksum = "checksum/config"

// helmGenerated are the ConfigMaps the overlays make with a
// configMapGenerator (etcdns-config-<hash>) and the chart under the bare
// name.
var helmGenerated = []string{"etcdns-config", "etcdns-config-proxied"}

// TestHelmChart (issue 21 item 3) renders deploy/helm/etcdns with every
// documented values set (ci/<overlay>-values.yaml) by the real helm and
// compares the objects with kubectl kustomize of the overlay of that name:
// the same kinds, names and namespaces and the same specs, field by field.
// The only differences allowed are the three below, each for a reason:
//
//  1. Names of generated ConfigMaps: kustomize appends a hash of the content
//     (etcdns-config-9682926f8d) and rewrites the references; the chart
//     keeps the name and puts the hash into the pod template's
//     checksum/config annotation. Both roll the pods on a new config. The
//     test strips kustomize's suffix and the chart's annotation (after
//     checking it is there).
//  2. The ConfigMaps' config.yaml: kustomize copies the overlay's file,
//     comments and all; the chart renders the config value. They are
//     compared as parsed YAML.
//  3. The Namespace: helm install keeps its release in the namespace, so
//     the chart renders it only with namespace.create. Each set is rendered
//     as documented (no Namespace) and with namespace.create=true (then the
//     Namespace must match kustomize's too).
func TestHelmChart(t *testing.T) {
	helm := harness.Tool(t, "helm")
	kubectl := harness.Tool(t, "kubectl")
	root := harness.RepoRoot(t)
	chart := filepath.Join(root, "deploy", "helm", "etcdns")

	// Every overlay has a values set and every values set an overlay, so a
	// new one without its counterpart fails here.
	sets, err := filepath.Glob(filepath.Join(chart, "ci", "*-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range sets {
		names = append(names, strings.TrimSuffix(filepath.Base(s), "-values.yaml"))
	}
	want := slices.Clone(deployOverlays)
	slices.Sort(want)
	slices.Sort(names)
	if !slices.Equal(names, want) {
		t.Fatalf("values sets %v, want one per overlay %v", names, want)
	}

	for _, o := range deployOverlays {
		t.Run(o, func(t *testing.T) {
			values := filepath.Join(chart, "ci", o+"-values.yaml")
			// --strict: a lint warning (an unknown template value, say)
			// fails too.
			if out, stderr, err := deployKubectl(helm, "", nil, "lint", "--strict", chart, "-f", values); err != nil {
				t.Fatalf("helm lint -f %s: %v\n%s%s", values, err, out, stderr)
			}
			out, stderr, err := deployKubectl(kubectl, "", nil, "kustomize", filepath.Join(root, "deploy", "overlays", o))
			if err != nil {
				t.Fatalf("kubectl kustomize %s: %v\n%s", o, err, stderr)
			}
			kust := helmNormalizeKustomize(t, deployDecode(t, out))

			render := func(extra ...string) []*unstructured.Unstructured {
				args := append([]string{"template", "etcdns", chart, "--namespace", "etcdns", "-f", values}, extra...)
				out, stderr, err := deployKubectl(helm, "", nil, args...)
				if err != nil {
					t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr)
				}
				return helmNormalizeChart(t, deployDecode(t, out))
			}
			// With the Namespace against kustomize; as documented, the same
			// but the Namespace.
			withNS := render("--set", "namespace.create=true")
			helmCompare(t, "kustomize", kust, "chart", withNS)
			var noNS []*unstructured.Unstructured
			for _, o := range withNS {
				if o.GetKind() != "Namespace" {
					noNS = append(noNS, o)
				}
			}
			helmCompare(t, "namespace.create=true", noNS, "as documented", render())
		})
	}
}

// helmNormalizeKustomize takes the hash off generated ConfigMaps' names,
// wherever the name occurs (difference 1), and parses their config.yaml
// (difference 2).
func helmNormalizeKustomize(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	t.Helper()
	hashed := map[string]string{}
	for _, o := range objs {
		if o.GetKind() != "ConfigMap" {
			continue
		}
		for _, g := range helmGenerated {
			if regexp.MustCompile(`^` + regexp.QuoteMeta(g) + `-[a-z0-9]{10}$`).MatchString(o.GetName()) {
				hashed[o.GetName()] = g
			}
		}
	}
	for _, o := range objs {
		o.Object = helmRename(o.Object, hashed).(map[string]any)
		helmParseConfig(t, o)
	}
	return objs
}

// helmRename replaces every string equal to a key of names by its value.
func helmRename(v any, names map[string]string) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = helmRename(e, names)
		}
	case []any:
		for i, e := range v {
			v[i] = helmRename(e, names)
		}
	case string:
		if n, ok := names[v]; ok {
			return n
		}
	}
	return v
}

// helmNormalizeChart checks and drops the checksum annotation of every pod
// template that mounts a ConfigMap (difference 1), and parses the
// ConfigMaps' config.yaml (difference 2).
func helmNormalizeChart(t *testing.T, objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		helmParseConfig(t, o)
		tmpl, ok, _ := unstructured.NestedMap(o.Object, "spec", "template")
		if !ok {
			continue
		}
		vols, _, _ := unstructured.NestedSlice(tmpl, "spec", "volumes")
		mountsConfig := false
		for _, v := range vols {
			if _, ok := v.(map[string]any)["configMap"]; ok {
				mountsConfig = true
			}
		}
		ann, _, _ := unstructured.NestedStringMap(tmpl, "metadata", "annotations")
		if mountsConfig && len(ann[helmChecksum]) != 64 {
			t.Errorf("%s %s: pod template annotation %s = %q, want the config's sha256", o.GetKind(), o.GetName(), helmChecksum, ann[helmChecksum])
		}
		if _, ok := ann[helmChecksum]; !ok {
			continue
		}
		delete(ann, helmChecksum)
		if len(ann) == 0 {
			unstructured.RemoveNestedField(o.Object, "spec", "template", "metadata", "annotations")
		} else if err := unstructured.SetNestedStringMap(o.Object, ann, "spec", "template", "metadata", "annotations"); err != nil {
			t.Fatal(err)
		}
	}
	return objs
}

// helmParseConfig replaces a ConfigMap's config.yaml by its parsed value.
func helmParseConfig(t *testing.T, o *unstructured.Unstructured) {
	t.Helper()
	if o.GetKind() != "ConfigMap" {
		return
	}
	data, _, _ := unstructured.NestedMap(o.Object, "data")
	for k, v := range data {
		s, ok := v.(string)
		if !ok || !strings.HasSuffix(k, ".yaml") {
			continue
		}
		j, err := utilyaml.ToJSON([]byte(s))
		if err != nil {
			t.Fatalf("ConfigMap %s %s: %v", o.GetName(), k, err)
		}
		var parsed any
		if err := json.Unmarshal(j, &parsed); err != nil {
			t.Fatalf("ConfigMap %s %s: %v", o.GetName(), k, err)
		}
		data[k] = parsed
	}
	if data != nil {
		o.Object["data"] = data
	}
}

func helmKey(o *unstructured.Unstructured) string {
	return fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
}

// helmCompare reports objects only one side renders, and for every object
// both render differently, the first field that differs.
func helmCompare(t *testing.T, aName string, a []*unstructured.Unstructured, bName string, b []*unstructured.Unstructured) {
	t.Helper()
	index := func(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
		m := map[string]*unstructured.Unstructured{}
		for _, o := range objs {
			if _, dup := m[helmKey(o)]; dup {
				t.Errorf("%s rendered twice", helmKey(o))
			}
			m[helmKey(o)] = o
		}
		return m
	}
	k, c := index(a), index(b)
	var keys []string
	for key := range k {
		keys = append(keys, key)
	}
	for key := range c {
		if _, ok := k[key]; !ok {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	for _, key := range keys {
		ko, kok := k[key]
		co, cok := c[key]
		switch {
		case !cok:
			t.Errorf("%s: rendered by %s, not by %s", key, aName, bName)
		case !kok:
			t.Errorf("%s: rendered by %s, not by %s", key, bName, aName)
		default:
			if path, kv, cv, differ := helmFirstDiff("", ko.Object, co.Object); differ {
				t.Errorf("%s differs at %s:\n  %s: %s\n  %s: %s", key, path, aName, helmShow(kv), bName, helmShow(cv))
			}
		}
	}
}

// helmFirstDiff walks a and b in key order and returns the first path
// where they differ, with the two values there (nil where absent).
func helmFirstDiff(path string, a, b any) (string, any, any, bool) {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		keys := map[string]bool{}
		for k := range am {
			keys[k] = true
		}
		for k := range bm {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			av, ain := am[k]
			bv, bin := bm[k]
			if ain != bin {
				return path + "." + k, av, bv, true
			}
			if p, x, y, d := helmFirstDiff(path+"."+k, av, bv); d {
				return p, x, y, true
			}
		}
		return "", nil, nil, false
	}
	as, aok := a.([]any)
	bs, bok := b.([]any)
	if aok && bok {
		for i := 0; i < len(as) && i < len(bs); i++ {
			if p, x, y, d := helmFirstDiff(fmt.Sprintf("%s[%d]", path, i), as[i], bs[i]); d {
				return p, x, y, true
			}
		}
		if len(as) != len(bs) {
			return path, a, b, true
		}
		return "", nil, nil, false
	}
	if !reflect.DeepEqual(a, b) {
		return path, a, b, true
	}
	return "", nil, nil, false
}

func helmShow(v any) string {
	if v == nil {
		return "(absent)"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// TestHelmToolVersion keeps the helm the test runs the one hack/tools.sh
// pins, so a stale binary in .cache is noticed.
func TestHelmToolVersion(t *testing.T) {
	helm := harness.Tool(t, "helm")
	script, err := os.ReadFile(filepath.Join(harness.RepoRoot(t), "hack", "tools.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^HELM_VERSION=(v3\.\S+)$`).FindSubmatch(script)
	if m == nil {
		t.Fatal("no HELM_VERSION=v3.x in hack/tools.sh")
	}
	out, stderr, err := deployKubectl(helm, "", nil, "version", "--short")
	if err != nil {
		t.Fatalf("helm version: %v\n%s", err, stderr)
	}
	if got := strings.TrimSpace(string(out)); !strings.HasPrefix(got, string(m[1])) {
		t.Errorf("helm version --short = %q, want %s (run hack/tools.sh)", got, m[1])
	}
}

// TestHelmChartValues sets the values no documented set uses (those named
// after the CoreDNS chart's above all) and checks each lands where its
// comment says: TestHelmChart alone would not notice a broken branch of a
// template that only a non-default value reaches.
func TestHelmChartValues(t *testing.T) {
	helm := harness.Tool(t, "helm")
	chart := filepath.Join(harness.RepoRoot(t), "deploy", "helm", "etcdns")
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(`
rbac: {create: false}
networkPolicy: {enabled: false}
publisher:
  replicaCount: 1
  serviceAccount: {create: false, name: my-publisher}
  podDisruptionBudget: null
  tolerations: [{key: dedicated, operator: Equal, value: dns, effect: NoSchedule}]
dnsd:
  replicaCount: 5
  image: {repository: registry.example/etcdns/dnsd, tag: v1, pullPolicy: IfNotPresent, pullSecrets: [regcred]}
  podAnnotations: {prometheus.io/scrape: "true"}
  nodeSelector: {kubernetes.io/os: linux}
  affinity: null
  priorityClassName: ""
  service: {clusterIP: 10.96.0.10, annotations: {a: b}}
  extraEnv: [{name: ETCDNS_DNSD_FORWARD, value: "true"}]
nodeLocal:
  enabled: true
  service: {clusterIP: 10.96.0.11}
etcd:
  persistence: {size: 20Gi, storageClassName: fast}
  podDisruptionBudget: null
config:
  etcd: {endpoints: [https://etcd-0.etcd.dns.svc:2379, https://etcd-1.etcd.dns.svc:2379, https://etcd-2.etcd.dns.svc:2379]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	// The defaults dial the members in the namespace etcdns: a release
	// elsewhere that keeps them is refused, not rendered to never connect.
	if _, stderr, err := deployKubectl(helm, "", nil, "template", "etcdns", chart, "--namespace", "dns"); err == nil || !strings.Contains(string(stderr), "etcd endpoints name https://etcd-0.etcd.etcdns.svc:2379, but the release's etcd (and proxy) are in the namespace dns") {
		t.Errorf("helm template --namespace dns with the default endpoints: %v\n%s", err, stderr)
	}
	if out, stderr, err := deployKubectl(helm, "", nil, "lint", "--strict", chart, "-f", values); err != nil {
		t.Fatalf("helm lint: %v\n%s%s", err, out, stderr)
	}
	out, stderr, err := deployKubectl(helm, "", nil, "template", "etcdns", chart, "--namespace", "dns", "-f", values)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr)
	}
	objs := map[string]*unstructured.Unstructured{}
	for _, o := range deployDecode(t, out) {
		objs[helmKey(o)] = o
	}
	for _, absent := range []string{
		"ClusterRole /etcdns-publisher", "ClusterRoleBinding /etcdns-publisher",
		"ServiceAccount dns/publisher", "PodDisruptionBudget dns/publisher",
		"PodDisruptionBudget dns/etcd", "NetworkPolicy dns/dnsd", "Namespace /dns",
	} {
		if _, ok := objs[absent]; ok {
			t.Errorf("%s rendered", absent)
		}
	}
	for _, present := range []string{"ServiceAccount dns/dnsd", "PodDisruptionBudget dns/dnsd", "DaemonSet dns/dnsd-node-local"} {
		if _, ok := objs[present]; !ok {
			t.Errorf("%s not rendered", present)
		}
	}
	want := func(key string, v any, path ...string) {
		t.Helper()
		o, ok := objs[key]
		if !ok {
			t.Errorf("%s not rendered", key)
			return
		}
		got, _, _ := unstructured.NestedFieldNoCopy(o.Object, path...)
		if gb, wb := helmShow(got), helmShow(v); gb != wb {
			t.Errorf("%s .%s = %s, want %s", key, strings.Join(path, "."), gb, wb)
		}
	}
	pod := []string{"spec", "template", "spec"}
	at := func(p ...string) []string { return append(slices.Clone(pod), p...) }
	want("Deployment dns/publisher", float64(1), "spec", "replicas")
	want("Deployment dns/publisher", "my-publisher", at("serviceAccountName")...)
	want("Deployment dns/publisher", []any{map[string]any{"key": "dedicated", "operator": "Equal", "value": "dns", "effect": "NoSchedule"}}, at("tolerations")...)
	want("Deployment dns/dnsd", float64(5), "spec", "replicas")
	want("Deployment dns/dnsd", []any{map[string]any{"name": "regcred"}}, at("imagePullSecrets")...)
	want("Deployment dns/dnsd", map[string]any{"kubernetes.io/os": "linux"}, at("nodeSelector")...)
	want("Deployment dns/dnsd", nil, at("affinity")...)
	want("Deployment dns/dnsd", nil, at("priorityClassName")...)
	want("Deployment dns/dnsd", "true", "spec", "template", "metadata", "annotations", "prometheus.io/scrape")
	want("Service dns/dnsd", "10.96.0.10", "spec", "clusterIP")
	want("Service dns/dnsd", map[string]any{"a": "b"}, "metadata", "annotations")
	want("Service dns/dnsd-node-local", "10.96.0.11", "spec", "clusterIP")
	// dnsd's image on both dnsd workloads; extraEnv after the chart's own.
	for _, key := range []string{"Deployment dns/dnsd", "DaemonSet dns/dnsd-node-local"} {
		o, ok := objs[key]
		if !ok {
			continue
		}
		c, _, _ := unstructured.NestedSlice(o.Object, at("containers")...)
		if len(c) == 0 {
			t.Errorf("%s: no containers", key)
			continue
		}
		ct := c[0].(map[string]any)
		if ct["image"] != "registry.example/etcdns/dnsd:v1" || ct["imagePullPolicy"] != "IfNotPresent" {
			t.Errorf("%s: image %v, pull policy %v", key, ct["image"], ct["imagePullPolicy"])
		}
		if key == "Deployment dns/dnsd" {
			env, _ := ct["env"].([]any)
			if len(env) == 0 || helmShow(env[len(env)-1]) != `{"name":"ETCDNS_DNSD_FORWARD","value":"true"}` {
				t.Errorf("%s: env %s, want extraEnv last", key, helmShow(env))
			}
		}
	}
	// The persistence values, and the release's namespace in the member names.
	if o, ok := objs["StatefulSet dns/etcd"]; ok {
		c, _, _ := unstructured.NestedSlice(o.Object, at("containers")...)
		args, _ := c[0].(map[string]any)["args"].([]any)
		vct, _, _ := unstructured.NestedSlice(o.Object, "spec", "volumeClaimTemplates")
		if got := helmShow(vct); !strings.Contains(got, `"storageClassName":"fast"`) || !strings.Contains(got, `"storage":"20Gi"`) {
			t.Errorf("etcd volumeClaimTemplates %s: want storage class fast, 20Gi", got)
		}
		if !slices.Contains(args, any("--initial-cluster=etcd-0=https://etcd-0.etcd.dns.svc:2380,etcd-1=https://etcd-1.etcd.dns.svc:2380,etcd-2=https://etcd-2.etcd.dns.svc:2380")) {
			t.Errorf("etcd args %v: want the members in namespace dns", args)
		}
	}
}

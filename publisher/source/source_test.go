package source

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	mcsfake "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned/fake"

	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/keys/kube"
)

type recorder struct {
	mu    sync.Mutex
	units map[string]int
}

func (r *recorder) notify(u string, _ time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.units == nil {
		r.units = map[string]int{}
	}
	r.units[u]++
}

func (r *recorder) has(u string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.units[u] > 0
}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.units)
}

func wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestParseUnit(t *testing.T) {
	for _, c := range []struct{ unit, kind, ns, name string }{
		{"service/default/kubernetes", "service", "default", "kubernetes"},
		{"pod/apps/web-0", "pod", "apps", "web-0"},
		{"zone/cluster.local", "zone", "", "cluster.local"},
	} {
		k, ns, n := ParseUnit(c.unit)
		if k != c.kind || ns != c.ns || n != c.name {
			t.Errorf("%s: %s %s %s", c.unit, k, ns, n)
		}
	}
}

func TestKubeSource(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", Labels: map[string]string{"dns": "yes"}}}
	other := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hidden"}}
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-1",
		Labels: map[string]string{discoveryv1.LabelServiceName: "web"}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p"}}
	kc := fake.NewClientset(svc, other, sl, pod)
	k := NewKube(kc, nil, "dns=yes", true)
	var r recorder
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := k.Start(ctx, r.notify); err != nil {
		t.Fatal(err)
	}
	units := k.Units()
	sort.Strings(units)
	if want := []string{"pod/default/p", "service/default/web"}; !reflect.DeepEqual(units, want) {
		t.Fatalf("units %v, want %v (label selector applies to services)", units, want)
	}
	if _, ok := k.Service("default", "web"); !ok {
		t.Fatal("service missing")
	}
	if got := k.Slices("default", "web"); len(got) != 1 {
		t.Fatalf("slices %d", len(got))
	}
	if _, ok := k.Pod("default", "p"); !ok {
		t.Fatal("pod missing")
	}
	// A slice event is an event of its service.
	sl2 := sl.DeepCopy()
	sl2.Name = "web-2"
	kc.DiscoveryV1().EndpointSlices("default").Create(ctx, sl2, metav1.CreateOptions{})
	wait(t, "slice event", func() bool { return len(k.Slices("default", "web")) == 2 && r.has("service/default/web") })
}

// The caches hold what the records are built from: a Pod's name, phase and
// addresses, and Services and EndpointSlices without their managed fields
// or kubectl's last-applied copy, but with the annotations records read.
func TestKubeSourceCachesLeanObjects(t *testing.T) {
	managed := []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", ManagedFields: managed,
		Annotations: map[string]string{lastApplied: `{"kind":"Service"}`, "service.alpha.kubernetes.io/tolerate-unready-endpoints": "true"}},
		Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.10"}}
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-1", ManagedFields: managed,
		Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, Hostname: ptr("web-0"),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "web-0", UID: "u0"},
			NodeName:   ptr("node-1"), Zone: ptr("zone-a"), Hints: &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-a"}}}}}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p", UID: "u1", ManagedFields: managed, Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/web:1"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}, {IP: "fd00::1"}}},
	}
	k := NewKube(fake.NewClientset(svc, sl, pod), nil, "", true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := k.Start(ctx, func(string, time.Time) {}); err != nil {
		t.Fatal(err)
	}
	got, ok := k.Pod("default", "p")
	want := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p", UID: "u1"}, Status: pod.Status}
	if !ok || !reflect.DeepEqual(got, want) {
		t.Errorf("cached pod %+v, want %+v", got, want)
	}
	s, ok := k.Service("default", "web")
	if !ok || s.ManagedFields != nil || s.Spec.ClusterIP != "10.96.0.10" ||
		!reflect.DeepEqual(s.Annotations, map[string]string{"service.alpha.kubernetes.io/tolerate-unready-endpoints": "true"}) {
		t.Errorf("cached service: managed fields %v, cluster IP %q, annotations %v", s.ManagedFields, s.Spec.ClusterIP, s.Annotations)
	}
	wantEp := discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, Hostname: ptr("web-0"),
		Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true)}}
	if sls := k.Slices("default", "web"); len(sls) != 1 || sls[0].ManagedFields != nil || len(sls[0].Endpoints) != 1 ||
		!reflect.DeepEqual(sls[0].Endpoints[0], wantEp) {
		t.Errorf("cached slices %+v, want one, without managed fields, with its endpoint cut to %+v", sls, wantEp)
	}
}

// The records of a service are the same built from the slices lean keeps
// as from the slices the API server sent: hostnames, dual-stack
// addresses, a not-ready endpoint left out and kept by a service that
// publishes them, ports for SRV records.
func TestLeanKeepsWhatRecordsAreBuiltFrom(t *testing.T) {
	b, err := kube.NewBuilder(keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: "east"}, "cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	slices := func() []*discoveryv1.EndpointSlice {
		var out []*discoveryv1.EndpointSlice
		for i, family := range []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6} {
			sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: fmt.Sprintf("db-%d", i),
				Labels: map[string]string{discoveryv1.LabelServiceName: "db"}},
				AddressType: family,
				Ports:       []discoveryv1.EndpointPort{{Name: ptr("sql"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(int32(5432))}}}
			for j := range 3 {
				addr := fmt.Sprintf("10.1.0.%d", j+1)
				if family == discoveryv1.AddressTypeIPv6 {
					addr = fmt.Sprintf("fd00::%d", j+1)
				}
				sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{addr}, Hostname: ptr(fmt.Sprintf("db-%d", j)),
					Conditions: discoveryv1.EndpointConditions{Ready: ptr(j != 2), Serving: ptr(true), Terminating: ptr(false)},
					TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: fmt.Sprintf("db-%d", j), UID: types.UID(fmt.Sprint(j))},
					NodeName:   ptr(fmt.Sprintf("node-%d", j)), Zone: ptr("zone-a")})
			}
			out = append(out, sl)
		}
		return out
	}
	for _, publish := range []bool{false, true} {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db"},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, PublishNotReadyAddresses: publish,
				Ports: []corev1.ServicePort{{Name: "sql", Protocol: corev1.ProtocolTCP, Port: 5432}}}}
		whole, errs := b.Service(svc, slices())
		if len(errs) > 0 || len(whole) == 0 {
			t.Fatalf("records of the whole slices: %v, errors %v", whole, errs)
		}
		var cut []*discoveryv1.EndpointSlice
		for _, sl := range slices() {
			o, err := Lean(sl)
			if err != nil {
				t.Fatal(err)
			}
			cut = append(cut, o.(*discoveryv1.EndpointSlice))
		}
		if got, errs := b.Service(svc, cut); len(errs) > 0 || !reflect.DeepEqual(got, whole) {
			t.Errorf("publishNotReadyAddresses %v: records of the lean slices %v (errors %v), want %v", publish, got, errs, whole)
		}
	}
}

func TestKubeSourceNamespaces(t *testing.T) {
	a := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "s"}}
	b := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "s"}}
	c := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "c", Name: "s"}}
	k := NewKube(fake.NewClientset(a, b, c), []string{"a", "c"}, "", false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := k.Start(ctx, func(string, time.Time) {}); err != nil {
		t.Fatal(err)
	}
	units := k.Units()
	sort.Strings(units)
	if want := []string{"service/a/s", "service/c/s"}; !reflect.DeepEqual(units, want) {
		t.Fatalf("units %v, want %v", units, want)
	}
}

const manifests = `# comment only document
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: apps}
spec: {clusterIP: 10.96.0.10, ports: [{name: http, port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: apps
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
endpoints: [{addresses: [10.244.0.5]}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: ignored}
---
apiVersion: v1
kind: Pod
metadata: {name: p}
status: {podIP: 10.244.0.6}
`

const list = `{"apiVersion":"v1","kind":"List","items":[
 {"apiVersion":"v1","kind":"Service","metadata":{"name":"db","namespace":"apps"},"spec":{"clusterIP":"None"}}
]}`

func TestFilesSource(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(manifests), 0o644)
	os.WriteFile(filepath.Join(dir, "b.json"), []byte(list), 0o644)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not a manifest"), 0o644)
	f := NewFiles(dir, true, nil)
	f.Interval = 20 * time.Millisecond
	var r recorder
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := f.Start(ctx, r.notify); err != nil {
		t.Fatal(err)
	}
	want := []string{"pod/default/p", "service/apps/db", "service/apps/web"}
	if got := f.Units(); !reflect.DeepEqual(got, want) {
		t.Fatalf("units %v, want %v", got, want)
	}
	if len(f.Slices("apps", "web")) != 1 {
		t.Fatal("slice missing")
	}
	if _, ok := f.Pod("default", "p"); !ok {
		t.Fatal("pod missing (default namespace)")
	}

	// Change one slice, delete the list file: exactly those units change.
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(
		strings.Replace(manifests, "10.244.0.5", "10.244.0.7", 1)), 0o644)
	os.Remove(filepath.Join(dir, "b.json"))
	wait(t, "file change", func() bool { return r.has("service/apps/web") && r.has("service/apps/db") })
	if r.has("pod/default/p") {
		t.Error("an unchanged pod was reported")
	}
	if _, ok := f.Service("apps", "db"); ok {
		t.Error("deleted file's service still present")
	}
	if ep := f.Slices("apps", "web")[0].Endpoints[0].Addresses[0]; ep != "10.244.0.7" {
		t.Errorf("slice not re-read: %s", ep)
	}
}

func TestFilesSourceKeepsLastGoodState(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(manifests), 0o644)
	f := NewFiles(dir, false, nil)
	f.Interval = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := f.Start(ctx, func(string, time.Time) {}); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("apiVersion: v1\nkind: Service\nmetadata: [broken"), 0o644)
	time.Sleep(100 * time.Millisecond)
	if _, ok := f.Service("apps", "web"); !ok {
		t.Fatal("a broken file dropped the last good state")
	}
}

func TestKubeIdentity(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system", UID: "721ab723-13bc-11e5-aec2-42010af0021e"}}
	prop := func(name, value string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
			"metadata": map[string]any{"name": name}, "spec": map[string]any{"value": value}}}
	}
	scheme := runtime.NewScheme()
	gvrs := map[schema.GroupVersionResource]string{ClusterPropertyResource: "ClusterPropertyList"}
	for _, c := range []struct {
		name  string
		props []runtime.Object
		want  string
		from  string
	}{
		{"no properties", nil, "721ab723-13bc-11e5-aec2-42010af0021e", "kube-system namespace uid"},
		{"seed name", []runtime.Object{prop("id.k8s.io", "west")}, "west", "ClusterProperty id.k8s.io"},
		{"KEP-2149 name wins", []runtime.Object{prop("id.k8s.io", "west"), prop("cluster.clusterset.k8s.io", "east")}, "east", "ClusterProperty cluster.clusterset.k8s.io"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme, gvrs, c.props...)
			k := NewKube(fake.NewClientset(ns), nil, "", false).WithProperties(dyn)
			id, err := k.Identity(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got, from, err := ClusterID("", id)
			if err != nil || got != c.want || from != c.from {
				t.Errorf("ClusterID = %q from %q, %v; want %q from %q", got, from, err, c.want, c.from)
			}
		})
	}
}

func TestFilesExports(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", `apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceExport
metadata: {name: api, namespace: apps}
---
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ServiceImport
metadata: {name: api, namespace: apps}
spec: {type: ClusterSetIP, ips: [10.112.0.1], ports: [{port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: apps}
spec: {clusterIP: 10.96.0.5, ports: [{port: 80}]}
`)
	f := NewFiles(dir, false, nil)
	f.Interval = 10 * time.Millisecond
	var r recorder
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := f.Start(ctx, r.notify); err != nil {
		t.Fatal(err)
	}
	if want := []string{"service/apps/api", "serviceexport/apps/api", "serviceimport/apps/api"}; !reflect.DeepEqual(f.Units(), want) {
		t.Errorf("units = %v, want %v", f.Units(), want)
	}
	if imp, ok := f.Import("apps", "api"); !ok || !f.Exported("apps", "api") || imp.Spec.IPs[0] != "10.112.0.1" {
		t.Errorf("export/import not read: %v %v", ok, imp)
	}
	if len(f.ServicesAt(netip.MustParseAddr("10.112.0.1"))) != 0 || len(f.ServicesAt(netip.MustParseAddr("10.96.0.5"))) != 1 {
		t.Error("ServicesAt does not tell the Service's address from the import's")
	}
	// A new ClusterSetIP touches the import unit.
	write("a.yaml", strings.Replace(mustRead(t, filepath.Join(dir, "a.yaml")), "10.112.0.1", "10.112.0.2", 1))
	wait(t, "import unit notified", func() bool { return r.has("serviceimport/apps/api") })
	// So does a Service taking one of its addresses: its PTR is the Service's now.
	r.reset()
	write("a.yaml", strings.Replace(mustRead(t, filepath.Join(dir, "a.yaml")), "10.96.0.5", "10.112.0.2", 1))
	wait(t, "import unit notified of the Service", func() bool { return r.has("serviceimport/apps/api") })
	// And a change of its labels: the publisher's selector may publish
	// it, or stop publishing it, and its PTR with it.
	r.reset()
	write("a.yaml", strings.Replace(mustRead(t, filepath.Join(dir, "a.yaml")), "kind: Service\nmetadata: {name: api, namespace: apps}", "kind: Service\nmetadata: {name: api, namespace: apps, labels: {dns: \"no\"}}", 1))
	wait(t, "import unit notified of the Service's labels", func() bool { return r.has("serviceimport/apps/api") })
	// An export the MCS controller marked invalid publishes nothing.
	write("a.yaml", strings.Replace(mustRead(t, filepath.Join(dir, "a.yaml")), "metadata: {name: api, namespace: apps}\n---", "metadata: {name: api, namespace: apps}\nstatus: {conditions: [{type: Valid, status: \"False\", reason: ServiceNotFound, lastTransitionTime: \"2026-01-01T00:00:00Z\", message: x}]}\n---", 1))
	wait(t, "export invalid", func() bool { return !f.Exported("apps", "api") })
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestKubeMulticlusterWithoutCRDs(t *testing.T) {
	k := NewKube(fake.NewClientset(), nil, "", false).WithMulticluster(mcsfake.NewSimpleClientset())
	err := k.Start(context.Background(), func(string, time.Time) {})
	if err == nil || !strings.Contains(err.Error(), "install the MCS API CRDs") {
		t.Errorf("Start without the MCS CRDs: %v", err)
	}
}

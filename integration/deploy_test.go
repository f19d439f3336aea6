//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/etcdns/etcdns/integration/harness"
)

// deployOverlays are the directories under deploy/overlays.
var deployOverlays = []string{"single-cluster", "external-etcd", "node-local", "multicluster", "node-local-proxied"}

// deployUID is the user of the images (deploy/docker) and of every pod.
const deployUID = 65532

// TestDeploy (issue 9 item 8) renders every overlay of deploy/ with
// kubectl's kustomize and checks the result three ways: statically (least privilege), against a
// real kube-apiserver (server-side dry-run apply under the restricted pod
// security profile, and the publisher's RBAC evaluated by the API server),
// and by running what the manifests run: the publisher as its service
// account, dnsd and CoreDNS with the rendered configuration, mounts and
// args, against an etcd that uses deploy/etcd/certs.sh's certificates.
func TestDeploy(t *testing.T) {
	kubectl := harness.Tool(t, "kubectl")
	harness.SystemTool(t, "openssl") // deploy/etcd/certs.sh
	root := harness.RepoRoot(t)
	renders := map[string][]byte{}
	objects := map[string][]*unstructured.Unstructured{}
	for _, o := range deployOverlays {
		out, stderr, err := deployKubectl(kubectl, "", nil, "kustomize", filepath.Join(root, "deploy", "overlays", o))
		if err != nil {
			t.Fatalf("kubectl kustomize %s: %v\n%s", o, err, stderr)
		}
		renders[o] = out
		objects[o] = deployDecode(t, out)
		t.Run("static/"+o, func(t *testing.T) { deployCheckStatic(t, objects[o]) })
	}
	t.Run("proxy/node-local-proxied", func(t *testing.T) { deployCheckProxy(t, objects["node-local-proxied"]) })
	for _, o := range []string{"single-cluster", "node-local"} {
		if slices.ContainsFunc(deployWorkloads(t, objects[o]), deployIsProxy) {
			t.Errorf("%s: runs a grpc-proxy", o)
		}
	}
	if t.Failed() {
		return
	}

	api := harness.StartKubeAPIServer(t, harness.StartEtcd(t))
	installCRDs(t, api) // serviceexports, serviceimports, clusterproperties
	kube := kubernetes.NewForConfigOrDie(api.RESTConfig())
	ctx := context.Background()

	// A namespaced object's dry run needs its namespace to exist.
	var namespaces []*unstructured.Unstructured
	for _, obj := range objects["single-cluster"] {
		if obj.GetKind() == "Namespace" {
			namespaces = append(namespaces, obj)
		}
	}
	deployApply(t, kubectl, api, deployList(t, namespaces))

	for _, o := range deployOverlays {
		t.Run("dry-run/"+o, func(t *testing.T) {
			out, stderr, err := deployKubectl(kubectl, api.Kubeconfig, renders[o], "apply", "--server-side", "--dry-run=server", "-f", "-")
			if err != nil {
				t.Fatalf("server-side dry-run apply: %v\n%s", err, stderr)
			}
			// Pod security admission warns (namespace label warn:
			// restricted) about every pod template it would refuse.
			if strings.Contains(string(stderr), "Warning") {
				t.Errorf("the API server warned:\n%s", stderr)
			}
			if n := strings.Count(string(out), "(server dry run)"); n != len(objects[o]) {
				t.Errorf("%d objects dry-run applied, want %d:\n%s", n, len(objects[o]), out)
			}
		})
	}

	// The certificates the manifests mount, made and stored as Secrets by
	// the script the README tells to run.
	pki := t.TempDir()
	cmd := exec.Command("bash", filepath.Join(root, "deploy", "etcd", "certs.sh"), pki)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+api.Kubeconfig, "PATH="+filepath.Dir(kubectl)+":"+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("certs.sh: %v\n%s", err, out)
	}
	t.Run("certificates", func(t *testing.T) { deployCheckCertificates(t, pki) })
	t.Run("references", func(t *testing.T) {
		for _, o := range deployOverlays {
			deployCheckReferences(t, kube, o, objects[o])
		}
	})

	// The RBAC for real: the API server evaluates it here, and each
	// overlay's publisher runs with its own below.
	deployApplyRBAC(t, kubectl, api, objects["single-cluster"])
	t.Run("rbac", func(t *testing.T) { deployCheckRBAC(t, kube) })

	// The id the publishers read when cluster.id is empty.
	dyn := dynamic.NewForConfigOrDie(api.RESTConfig())
	prop := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
		"metadata": map[string]any{"name": "cluster.clusterset.k8s.io"},
		"spec":     map[string]any{"value": "east"},
	}}
	gvr := schema.GroupVersionResource{Group: "about.k8s.io", Version: "v1alpha1", Resource: "clusterproperties"}
	if _, err := dyn.Resource(gvr).Create(ctx, prop, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token, err := kube.CoreV1().ServiceAccounts("etcdns").CreateToken(ctx, "publisher",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	saKubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(saKubeconfig, []byte(fmt.Sprintf(deployKubeconfig, api.URL, token.Status.Token)), 0o600); err != nil {
		t.Fatal(err)
	}

	// Each publisher below runs with cluster.pods verified, as with
	// components/pod-reader, which no overlay adds: its rules, applied.
	podReader, err := os.ReadFile(filepath.Join(root, "deploy", "components", "pod-reader", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range deployOverlays {
		t.Run("run/"+o, func(t *testing.T) {
			deployApplyRBAC(t, kubectl, api, append(slices.Clone(objects[o]), deployDecode(t, podReader)...))
			deployRunOverlay(t, root, kube, pki, saKubeconfig, o, objects[o])
		})
	}
}

// TestDeployDockerfiles checks what the images promise the manifests: a
// static binary, a final stage without a shell, a numeric non-root user.
func TestDeployDockerfiles(t *testing.T) {
	root := harness.RepoRoot(t)
	for _, p := range []string{"publisher", "dnsd"} {
		b, err := os.ReadFile(filepath.Join(root, "deploy", "docker", p+".Dockerfile"))
		if err != nil {
			t.Fatal(err)
		}
		var stages [][]string
		for _, line := range strings.Split(strings.ReplaceAll(string(b), "\\\n", " "), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			if strings.HasPrefix(line, "FROM ") {
				stages = append(stages, nil)
			}
			if len(stages) > 0 {
				stages[len(stages)-1] = append(stages[len(stages)-1], line)
			}
		}
		if len(stages) < 2 {
			t.Errorf("%s: %d stages, want a build stage and a final one", p, len(stages))
			continue
		}
		build, final := strings.Join(slices.Concat(stages[:len(stages)-1]...), "\n"), stages[len(stages)-1]
		for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "./cmd/" + p} {
			if !strings.Contains(build, want) {
				t.Errorf("%s: the build stage lacks %s", p, want)
			}
		}
		from := strings.Fields(final[0])[1]
		if from != "scratch" && !regexp.MustCompile(`^gcr\.io/distroless/static[-a-z0-9]*:nonroot$`).MatchString(from) {
			t.Errorf("%s: final stage from %s, want scratch or distroless static nonroot", p, from)
		}
		var user, entry string
		for _, line := range final {
			switch strings.Fields(line)[0] {
			case "RUN", "SHELL":
				t.Errorf("%s: %q in the final stage, which has no shell", p, line)
			case "USER":
				user = strings.Fields(line)[1]
			case "ENTRYPOINT":
				entry = strings.TrimSpace(strings.TrimPrefix(line, "ENTRYPOINT"))
			}
		}
		if want := fmt.Sprintf("%d:%d", deployUID, deployUID); user != want {
			t.Errorf("%s: USER %q, want %s (numeric, so runAsNonRoot can check it)", p, user, want)
		}
		var argv []string
		if err := json.Unmarshal([]byte(entry), &argv); err != nil || len(argv) == 0 || argv[0] != "/"+p {
			t.Errorf("%s: ENTRYPOINT %s, want the exec form [\"/%s\"] (no shell to run the other)", p, entry, p)
		}
	}
}

func deployKubectl(kubectl, kubeconfig string, stdin []byte, args ...string) (stdout, stderr []byte, err error) {
	if kubeconfig != "" {
		args = append(args, "--kubeconfig", kubeconfig)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kubectl, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.Bytes(), errOut.Bytes(), err
}

// deployApply applies objects for real, with server-side apply.
func deployApply(t *testing.T, kubectl string, api *harness.KubeAPIServer, doc []byte) {
	t.Helper()
	if _, stderr, err := deployKubectl(kubectl, api.Kubeconfig, doc, "apply", "--server-side", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, stderr)
	}
}

// deployApplyRBAC applies an overlay's ServiceAccounts and RBAC for real.
func deployApplyRBAC(t *testing.T, kubectl string, api *harness.KubeAPIServer, objs []*unstructured.Unstructured) {
	t.Helper()
	var rbac []*unstructured.Unstructured
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
			rbac = append(rbac, o)
		}
	}
	deployApply(t, kubectl, api, deployList(t, rbac))
}

func deployDecode(t *testing.T, b []byte) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var m map[string]any
		if err := d.Decode(&m); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatal(err)
		}
		if m != nil {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
}

func deployList(t *testing.T, objs []*unstructured.Unstructured) []byte {
	t.Helper()
	items := make([]any, len(objs))
	for i, o := range objs {
		items[i] = o.Object
	}
	b, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// deployWorkload is a rendered object that runs pods.
type deployWorkload struct {
	kind, name string
	spec       corev1.PodSpec
	labels     map[string]string
}

func deployWorkloads(t *testing.T, objs []*unstructured.Unstructured) []deployWorkload {
	t.Helper()
	var out []deployWorkload
	for _, o := range objs {
		switch o.GetKind() {
		case "Deployment", "DaemonSet", "StatefulSet", "Job", "CronJob", "Pod", "ReplicaSet":
		default:
			continue
		}
		path := []string{"spec", "template"}
		switch o.GetKind() {
		case "Pod":
			path = nil
		case "CronJob":
			path = []string{"spec", "jobTemplate", "spec", "template"}
		}
		tmpl, _, _ := unstructured.NestedMap(o.Object, path...)
		var pod corev1.Pod
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl, &pod); err != nil {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
		out = append(out, deployWorkload{kind: o.GetKind(), name: o.GetName(), spec: pod.Spec, labels: pod.Labels})
	}
	return out
}

// deployCheckStatic asserts least privilege on what an overlay renders.
func deployCheckStatic(t *testing.T, objs []*unstructured.Unstructured) {
	reads := []string{"get", "list", "watch"}
	for _, o := range objs {
		id := o.GetKind() + " " + o.GetName()
		switch o.GetKind() {
		case "ClusterRole", "Role":
			rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
			for _, r := range rules {
				rule, _ := r.(map[string]any)
				for _, field := range []string{"verbs", "resources", "apiGroups"} {
					vals, _, _ := unstructured.NestedStringSlice(rule, field)
					for _, v := range vals {
						if v == "*" {
							t.Errorf("%s: wildcard in %s", id, field)
						}
						if field == "verbs" && !slices.Contains(reads, v) {
							t.Errorf("%s: verb %q; only get, list and watch are granted", id, v)
						}
						if field == "resources" && (v == "secrets" || strings.Contains(v, "/")) {
							t.Errorf("%s: grants %s", id, v)
						}
					}
				}
				if _, ok := rule["nonResourceURLs"]; ok {
					t.Errorf("%s: grants non-resource URLs", id)
				}
			}
		case "ClusterRoleBinding", "RoleBinding":
			subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
			for _, s := range subjects {
				sub, _ := s.(map[string]any)
				if sub["kind"] != "ServiceAccount" || sub["name"] != "publisher" || sub["namespace"] != "etcdns" {
					t.Errorf("%s: binds %v; only the publisher reads the API", id, sub)
				}
			}
		case "ServiceAccount":
			if o.GetName() != "publisher" {
				if v, ok, _ := unstructured.NestedBool(o.Object, "automountServiceAccountToken"); !ok || v {
					t.Errorf("%s: automountServiceAccountToken is not false", id)
				}
			}
		}
	}

	workloads := deployWorkloads(t, objs)
	if len(workloads) == 0 {
		t.Fatal("no workloads rendered")
	}
	var names []string
	for _, w := range workloads {
		id := w.kind + " " + w.name
		names = append(names, w.name)
		s := w.spec
		if s.HostNetwork || s.HostPID || s.HostIPC {
			t.Errorf("%s: shares a host namespace", id)
		}
		for _, v := range s.Volumes {
			if v.HostPath != nil {
				t.Errorf("%s: hostPath volume %s", id, v.Name)
			}
		}
		// Only the publisher talks to the Kubernetes API.
		token := s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken
		if token != (w.labels["app.kubernetes.io/name"] == "publisher") {
			t.Errorf("%s: mounts a service account token: %v; only the publisher should", id, token)
		}
		pod := s.SecurityContext
		if pod == nil {
			pod = &corev1.PodSecurityContext{}
		}
		if pod.SeccompProfile == nil || pod.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: seccomp profile is not RuntimeDefault", id)
		}
		for _, c := range slices.Concat(s.InitContainers, s.Containers) {
			cid := id + " container " + c.Name
			sc := c.SecurityContext
			if sc == nil {
				t.Errorf("%s: no securityContext", cid)
				continue
			}
			nonRoot := sc.RunAsNonRoot
			if nonRoot == nil {
				nonRoot = pod.RunAsNonRoot
			}
			uid := sc.RunAsUser
			if uid == nil {
				uid = pod.RunAsUser
			}
			if nonRoot == nil || !*nonRoot || uid == nil || *uid != deployUID {
				t.Errorf("%s: not runAsNonRoot as %d", cid, deployUID)
			}
			if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("%s: root filesystem is writable", cid)
			}
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("%s: allows privilege escalation", cid)
			}
			if sc.Privileged != nil && *sc.Privileged {
				t.Errorf("%s: privileged", cid)
			}
			if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
				t.Errorf("%s: capabilities %+v, want all dropped and none added", cid, sc.Capabilities)
			}
			for _, p := range c.Ports {
				if p.ContainerPort < 1024 || p.HostPort != 0 {
					t.Errorf("%s: port %d (host port %d): a non-root process cannot bind it", cid, p.ContainerPort, p.HostPort)
				}
			}
			if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("%s: no memory request and limit", cid)
			}
			// dnsd and the publisher read their memory limit once, at start
			// (internal/heaplimit): a resize in place must restart them.
			if strings.HasPrefix(c.Image, "etcdns/") && !slices.Contains(c.ResizePolicy, corev1.ContainerResizePolicy{
				ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.RestartContainer,
			}) {
				t.Errorf("%s: resizePolicy %v; a memory resize must restart it", cid, c.ResizePolicy)
			}
		}
	}
	for _, want := range []string{"publisher", "dnsd"} {
		if !slices.Contains(names, want) {
			t.Errorf("no %s workload among %v", want, names)
		}
	}
}

// deployCheckCertificates verifies certs.sh's certificates as etcd and its
// clients will: names of every member, server and client usages.
func deployCheckCertificates(t *testing.T, pki string) {
	load := func(name string) *x509.Certificate {
		b, err := os.ReadFile(filepath.Join(pki, name+".crt"))
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(b)
		if block == nil {
			t.Fatalf("%s.crt: no PEM", name)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	roots := x509.NewCertPool()
	roots.AddCert(load("ca"))
	verify := func(name, host string, usage x509.ExtKeyUsage) *x509.Certificate {
		c := load(name)
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("%s for %q: %v", name, host, err)
		}
		return c
	}
	for _, m := range []string{"etcd-0", "etcd-1", "etcd-2"} {
		verify("member", m+".etcd.etcdns.svc", x509.ExtKeyUsageServerAuth)
		verify("member", m+".etcd.etcdns.svc.cluster.local", x509.ExtKeyUsageServerAuth)
	}
	verify("member", "", x509.ExtKeyUsageClientAuth) // peers dial each other
	// dnsd dials the proxy by its Service name.
	verify("etcd-proxy", "etcd-proxy.etcdns.svc", x509.ExtKeyUsageServerAuth)
	verify("etcd-proxy", "etcd-proxy.etcdns.svc.cluster.local", x509.ExtKeyUsageServerAuth)
	verify("etcd-proxy", "127.0.0.1", x509.ExtKeyUsageClientAuth) // it checks itself at start
	// grpc-proxy refuses an upstream client certificate with a CN.
	if c := verify("etcd-proxy-client", "", x509.ExtKeyUsageClientAuth); c.Subject.CommonName != "" {
		t.Errorf("etcd-proxy-client: CN %q; grpc-proxy wants none", c.Subject.CommonName)
	}
	for _, p := range []string{"publisher", "dnsd"} {
		if c := verify(p, "", x509.ExtKeyUsageClientAuth); c.Subject.CommonName != "etcdns-"+p {
			t.Errorf("%s: CN %q, want etcdns-%s (its etcd user)", p, c.Subject.CommonName, p)
		}
	}
}

// deployCheckReferences: every Secret and ConfigMap a pod needs exists once
// certs.sh has run (Secrets) and the overlay is applied (ConfigMaps).
func deployCheckReferences(t *testing.T, kube kubernetes.Interface, overlay string, objs []*unstructured.Unstructured) {
	configMaps := map[string]bool{}
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" {
			configMaps[o.GetName()] = true
		}
	}
	ctx := context.Background()
	for _, w := range deployWorkloads(t, objs) {
		external := overlay == "external-etcd" || overlay == "multicluster"
		if external && w.labels["app.kubernetes.io/name"] == "etcd" {
			t.Errorf("%s: runs etcd, but uses an external one", overlay)
		}
		for _, v := range w.spec.Volumes {
			switch {
			case v.Secret != nil && (v.Secret.Optional == nil || !*v.Secret.Optional):
				if _, err := kube.CoreV1().Secrets("etcdns").Get(ctx, v.Secret.SecretName, metav1.GetOptions{}); err != nil {
					t.Errorf("%s %s %s: %v", overlay, w.kind, w.name, err)
				}
			case v.ConfigMap != nil && !configMaps[v.ConfigMap.Name]:
				t.Errorf("%s %s %s: ConfigMap %s is not rendered", overlay, w.kind, w.name, v.ConfigMap.Name)
			}
		}
		for _, c := range w.spec.Containers {
			for _, e := range c.Env {
				if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil && (r.SecretKeyRef.Optional == nil || !*r.SecretKeyRef.Optional) {
					t.Errorf("%s %s %s: env %s needs Secret %s", overlay, w.kind, w.name, e.Name, r.SecretKeyRef.Name)
				}
			}
		}
	}
}

// deployCheckRBAC asks the API server what the publisher may do beyond its
// needs (which running it below shows are met).
func deployCheckRBAC(t *testing.T, kube kubernetes.Interface) {
	for _, c := range []struct {
		verb, group, resource, name string
		allowed                     bool
	}{
		{"get", "", "namespaces", "kube-system", true},
		{"get", "", "namespaces", "default", false},
		{"list", "", "namespaces", "", false},
		{"get", "about.k8s.io", "clusterproperties", "cluster.clusterset.k8s.io", true},
		{"get", "about.k8s.io", "clusterproperties", "other", false},
		{"list", "about.k8s.io", "clusterproperties", "", false},
		{"watch", "discovery.k8s.io", "endpointslices", "", true},
		{"create", "", "services", "", false},
		{"update", "discovery.k8s.io", "endpointslices", "", false},
		{"delete", "multicluster.x-k8s.io", "serviceexports", "", false},
		// Read only where config reads them: components/pod-reader and
		// components/mcs-reader, which single-cluster leaves out.
		{"list", "", "pods", "", false},
		{"list", "multicluster.x-k8s.io", "serviceexports", "", false},
		{"get", "", "secrets", "", false},
		{"get", "", "configmaps", "", false},
		{"create", "coordination.k8s.io", "leases", "", false},
	} {
		allowed := func() bool {
			r, err := kube.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{
					User:   "system:serviceaccount:etcdns:publisher",
					Groups: []string{"system:serviceaccounts", "system:serviceaccounts:etcdns", "system:authenticated"},
					ResourceAttributes: &authorizationv1.ResourceAttributes{
						Namespace: "default", Verb: c.verb, Group: c.group, Resource: c.resource, Name: c.name,
					},
				},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return r.Status.Allowed
		}
		if !c.allowed {
			if allowed() {
				t.Errorf("publisher %s %s.%s %q: allowed, want denied", c.verb, c.resource, c.group, c.name)
			}
			continue
		}
		// The authorizer reads the roles just applied from its own
		// informers: a grant shows a moment later, a denial never turns.
		waitFor(t, 10*time.Second, func() error {
			if !allowed() {
				return fmt.Errorf("publisher %s %s.%s %q: denied, want allowed", c.verb, c.resource, c.group, c.name)
			}
			return nil
		})
	}
}

// deployRunOverlay runs an overlay's publisher and dnsd workloads as the
// kubelet would (args, env, the ConfigMap and Secrets mounted) against an
// etcd serving TLS with certs.sh's member certificate and requiring client
// certificates. Only the addresses (loopback) and the publisher's
// kubeconfig (in a pod: the same service account's token) are overridden.
func deployRunOverlay(t *testing.T, root string, kube kubernetes.Interface, pki, kubeconfig, overlay string, objs []*unstructured.Unstructured) {
	etcdURL := deployEtcd(t, pki)
	workloads := deployWorkloads(t, objs)
	// The grpc-proxies first, from their rendered args, in front of that
	// etcd: a dnsd whose config names the proxy Service dials them.
	proxyURL := ""
	for _, w := range workloads {
		if deployIsProxy(w) {
			proxyURL = deployRunProxy(t, kube, objs, w, etcdURL)
		}
	}
	var dnsds []string
	for _, w := range workloads {
		c := w.spec.Containers[0]
		image, _, _ := strings.Cut(c.Image, ":")
		program := strings.TrimPrefix(image, "etcdns/")
		if program == image {
			continue // etcd: deployEtcd stands in for it; proxies run above
		}
		bin := harness.BuildBinary(t, "./cmd/"+program)
		args, env, config, mounted := deployMount(t, kube, objs, w, c)
		deployCheckListen(t, w, c, config)
		endpoint := etcdURL
		if strings.Contains(string(config), deployProxyEndpoint) {
			if proxyURL == "" {
				t.Fatalf("%s: etcd.endpoints is the proxy Service, but no proxy is rendered", w.name)
			}
			endpoint = proxyURL
		}
		args = append(args, "--etcd.endpoints="+endpoint)
		if !regexp.MustCompile(`(?m)^\s*cert-file:\s*\S`).Match(config) {
			// What the overlay's comment says client-certificate auth adds.
			tls := mounted("etcd-tls")
			args = append(args, "--etcd.cert-file="+filepath.Join(tls, "tls.crt"), "--etcd.key-file="+filepath.Join(tls, "tls.key"))
		}
		metrics := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
		switch program {
		case "publisher":
			// cluster.pods verified: components/pod-reader's rule is needed too.
			args = append(args, "--publisher.kubeconfig="+kubeconfig, "--publisher.metrics-listen="+metrics, "--cluster.pods=verified")
		case "dnsd":
			addr := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
			args = append(args, "--dnsd.listen="+addr, "--dnsd.metrics-listen="+metrics)
			dnsds = append(dnsds, addr)
		}
		harness.StartProcess(t, bin, args, env, func() error { return harness.HTTPOK("http://" + metrics + "/readyz") })
	}
	if len(dnsds) == 0 {
		t.Fatal("no dnsd ran")
	}

	// The kubernetes service, published by the publisher as cluster
	// "east" (the ClusterProperty) and answered by every dnsd.
	for _, addr := range dnsds {
		waitFor(t, 20*time.Second, func() error {
			return deployAnswer(addr, "kubernetes.default.svc.cluster.local.", dns.TypeA, "10.96.0.1")
		})
	}
	cli := deployEtcdClient(t, etcdURL, pki)
	prefix, other := "/skydns/", "/skydns-east/"
	if overlay == "multicluster" {
		prefix, other = other, prefix
		for _, addr := range dnsds {
			waitFor(t, 20*time.Second, func() error {
				return deployAnswer(addr, "dns-version.clusterset.local.", dns.TypeTXT, "1.1.0")
			})
		}
	}
	r, err := cli.Get(context.Background(), prefix+"local/cluster/svc/default/kubernetes/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) == 0 || !strings.Contains(string(r.Kvs[0].Value), `"cluster":"east"`) {
		t.Errorf("under %s: %v, want the kubernetes service of cluster east", prefix, r.Kvs)
	}
	if r, err := cli.Get(context.Background(), other+"local/cluster/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || r.Count != 0 {
		t.Errorf("records under %s: %v %v; the overlay's prefix is %s", other, r, err, prefix)
	}
	if overlay == "single-cluster" {
		deployCoreDNS(t, root, kube, etcdURL)
	}
}

// deployProxyEndpoint is components/etcd-proxy's Service as dnsd dials it.
const deployProxyEndpoint = "https://etcd-proxy.etcdns.svc:2379"

// deployIsProxy: a workload running etcd's grpc-proxy.
func deployIsProxy(w deployWorkload) bool {
	c := w.spec.Containers[0]
	return slices.Contains(c.Args, "grpc-proxy") || slices.Contains(c.Command, "grpc-proxy")
}

// deployArg is the value of --name in args, and whether it is there.
func deployArg(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// deployCheckProxy checks what components/etcd-proxy adds: the node-local
// dnsd's etcd is the proxy Service and only that; the proxy speaks TLS on
// both sides with certs.sh's Secrets; only dnsd may reach it and it may
// reach only etcd (and the DNS that resolves the members); a budget.
func deployCheckProxy(t *testing.T, objs []*unstructured.Unstructured) {
	find := func(kind, name string) *unstructured.Unstructured {
		i := slices.IndexFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() == kind && o.GetName() == name })
		if i < 0 {
			t.Fatalf("no %s %s rendered", kind, name)
		}
		return objs[i]
	}
	configOf := func(w deployWorkload) map[string]map[string]any {
		for _, v := range w.spec.Volumes {
			if v.ConfigMap == nil {
				continue
			}
			cm := find("ConfigMap", v.ConfigMap.Name)
			data, _, _ := unstructured.NestedString(cm.Object, "data", "config.yaml")
			var cfg map[string]map[string]any
			if err := utilyaml.Unmarshal([]byte(data), &cfg); err != nil {
				t.Fatalf("%s: %v", cm.GetName(), err)
			}
			return cfg
		}
		t.Fatalf("%s: no config volume", w.name)
		return nil
	}

	// The Service dnsd names, on the port it dials, selecting the proxies.
	svc := find("Service", "etcd-proxy")
	sel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
	ports, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	if len(ports) != 1 || fmt.Sprint(ports[0].(map[string]any)["port"]) != "2379" {
		t.Errorf("Service etcd-proxy ports %v, want 2379 only", ports)
	}
	var proxies []deployWorkload
	for _, w := range deployWorkloads(t, objs) {
		if deployIsProxy(w) {
			proxies = append(proxies, w)
			for k, v := range sel {
				if w.labels[k] != v {
					t.Errorf("Service etcd-proxy selector %v does not select %s %s", sel, w.kind, w.name)
				}
			}
			continue
		}
		if w.labels["app.kubernetes.io/name"] != "dnsd" {
			continue
		}
		eps, _ := configOf(w)["etcd"]["endpoints"].([]any)
		got := fmt.Sprint(eps)
		switch w.kind {
		case "DaemonSet":
			if got != "["+deployProxyEndpoint+"]" {
				t.Errorf("%s %s: etcd.endpoints %s, want only the proxy Service %s", w.kind, w.name, got, deployProxyEndpoint)
			}
			// The proxy caches 2,048 responses whatever their size.
			v := fmt.Sprint(configOf(w)["dnsd"]["page-size"])
			if page, err := strconv.Atoi(v); err != nil || page < 1 || page > 1000 {
				t.Errorf("%s %s: dnsd.page-size %s, want at most 1000 through the proxy", w.kind, w.name, v)
			}
		default:
			// The few Deployment replicas stay on the members.
			if strings.Contains(got, "etcd-proxy") || len(eps) != 3 {
				t.Errorf("%s %s: etcd.endpoints %s, want the three members", w.kind, w.name, got)
			}
		}
	}
	if len(proxies) != 1 || proxies[0].kind != "Deployment" {
		t.Fatalf("grpc-proxy workloads %v, want one Deployment", proxies)
	}
	p := proxies[0]
	c := p.spec.Containers[0]
	if c.Image != "gcr.io/etcd-development/etcd:v3.5.35" {
		t.Errorf("proxy image %s, want deploy/etcd's etcd", c.Image)
	}
	// TLS both ways: each flag names a file of a mounted Secret.
	secretOf := map[string]string{}
	for _, v := range p.spec.Volumes {
		if v.Secret != nil {
			for _, m := range c.VolumeMounts {
				if m.Name == v.Name {
					secretOf[m.MountPath] = v.Secret.SecretName
				}
			}
		}
	}
	for flag, want := range map[string]string{
		"cacert": "etcd-proxy-client-tls/ca.crt", "cert": "etcd-proxy-client-tls/tls.crt", "key": "etcd-proxy-client-tls/tls.key",
		"trusted-ca-file": "etcd-proxy-tls/ca.crt", "cert-file": "etcd-proxy-tls/tls.crt", "key-file": "etcd-proxy-tls/tls.key",
	} {
		v, ok := deployArg(c.Args, flag)
		if got := secretOf[filepath.Dir(v)] + "/" + filepath.Base(v); !ok || got != want {
			t.Errorf("proxy --%s=%q is %s, want %s", flag, v, got, want)
		}
	}
	eps, _ := deployArg(c.Args, "endpoints")
	for _, m := range []string{"etcd-0", "etcd-1", "etcd-2"} {
		if !strings.Contains(eps, "https://"+m+".etcd.etcdns.svc:2379") {
			t.Errorf("proxy --endpoints=%s lacks %s over https", eps, m)
		}
	}
	if strings.Contains(eps, "http://") || slices.Contains(c.Args, "--insecure-skip-tls-verify") || slices.Contains(c.Args, "--auto-tls") {
		t.Errorf("proxy args %v: plain or unverified TLS", c.Args)
	}
	if c.Resources.Requests.Cpu().IsZero() {
		t.Errorf("proxy: no CPU request (the sizing rule is in cores)")
	}

	// Network: policies add up, so every one selecting the proxy counts.
	var in, out []map[string]any
	for _, o := range objs {
		if o.GetKind() != "NetworkPolicy" {
			continue
		}
		ps, _, _ := unstructured.NestedStringMap(o.Object, "spec", "podSelector", "matchLabels")
		exprs, _, _ := unstructured.NestedSlice(o.Object, "spec", "podSelector", "matchExpressions")
		selects := true
		for k, v := range ps {
			selects = selects && p.labels[k] == v
		}
		for _, e := range exprs {
			e := e.(map[string]any)
			vals, _, _ := unstructured.NestedStringSlice(e, "values")
			if e["operator"] != "In" {
				t.Fatalf("NetworkPolicy %s: operator %v; this check reads In only", o.GetName(), e["operator"])
			}
			selects = selects && slices.Contains(vals, p.labels[fmt.Sprint(e["key"])])
		}
		if !selects {
			continue
		}
		types, _, _ := unstructured.NestedStringSlice(o.Object, "spec", "policyTypes")
		for _, typ := range types {
			field := map[string]string{"Ingress": "ingress", "Egress": "egress"}[typ]
			rules, _, _ := unstructured.NestedSlice(o.Object, "spec", field)
			for _, r := range rules {
				if typ == "Ingress" {
					in = append(in, r.(map[string]any))
				} else {
					out = append(out, r.(map[string]any))
				}
			}
		}
	}
	if len(in) == 0 || len(out) == 0 {
		t.Fatalf("proxy: ingress rules %v, egress rules %v; want both restricted", in, out)
	}
	onlyPort := func(r map[string]any, port string) bool {
		ps, _ := r["ports"].([]any)
		return len(ps) == 1 && fmt.Sprint(ps[0].(map[string]any)["port"]) == port
	}
	peers := func(r map[string]any, key string) string {
		b, _ := json.Marshal(r[key])
		return string(b)
	}
	for _, r := range in {
		switch from := peers(r, "from"); {
		case from == `[{"podSelector":{"matchLabels":{"app.kubernetes.io/name":"dnsd"}}}]` && onlyPort(r, "client"):
		case from == `[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]` && onlyPort(r, "metrics"):
		default:
			t.Errorf("proxy admits %s on %v; only dnsd (client port) and monitoring (metrics)", from, r["ports"])
		}
	}
	for _, r := range out {
		switch to := peers(r, "to"); {
		case to == `[{"podSelector":{"matchLabels":{"app.kubernetes.io/name":"etcd"}}}]` && onlyPort(r, "2379"):
		case strings.Contains(to, `"k8s-app":"kube-dns"`) && strings.Contains(to, `"kube-system"`):
		default:
			t.Errorf("proxy may reach %s on %v; only the etcd members and the cluster's DNS", to, r["ports"])
		}
	}
	// The members admit the proxy, and dnsd may leave for it.
	for name, want := range map[string]string{"etcd-from-proxy": "etcd-proxy", "etcd-proxy-clients": "etcd-proxy"} {
		b, _ := json.Marshal(find("NetworkPolicy", name).Object["spec"])
		if !strings.Contains(string(b), `"app.kubernetes.io/name":"`+want+`"`) {
			t.Errorf("NetworkPolicy %s: %s", name, b)
		}
	}
	if pdb := find("PodDisruptionBudget", "etcd-proxy"); pdb != nil {
		if l, _, _ := unstructured.NestedStringMap(pdb.Object, "spec", "selector", "matchLabels"); l["app.kubernetes.io/name"] != "etcd-proxy" {
			t.Errorf("PodDisruptionBudget etcd-proxy selects %v", l)
		}
	}
}

// deployRunProxy runs a rendered grpc-proxy (its args, its Secrets
// mounted) in front of etcdURL on loopback and returns the URL dnsd dials:
// localhost, which certs.sh's proxy certificate names beside the Service.
func deployRunProxy(t *testing.T, kube kubernetes.Interface, objs []*unstructured.Unstructured, w deployWorkload, etcdURL string) string {
	t.Helper()
	args, env, _, _ := deployMount(t, kube, objs, w, w.spec.Containers[0])
	listen := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	metrics := fmt.Sprintf("http://127.0.0.1:%d", harness.FreePort(t))
	// Only the addresses change: the members become the test's etcd.
	var run []string
	for _, a := range args {
		if _, ok := deployArg([]string{a}, "listen-addr"); ok {
			a = "--listen-addr=" + listen
		}
		if _, ok := deployArg([]string{a}, "advertise-client-url"); ok {
			a = "--advertise-client-url=" + listen
		}
		if _, ok := deployArg([]string{a}, "endpoints"); ok {
			a = "--endpoints=" + etcdURL
		}
		if _, ok := deployArg([]string{a}, "metrics-addr"); ok {
			a = "--metrics-addr=" + metrics
		}
		run = append(run, a)
	}
	// /health reads through to etcd: the readiness probe's condition.
	harness.StartProcess(t, harness.Tool(t, "etcd"), run, env, func() error { return harness.HTTPOK(metrics + "/health") })
	url := "https://" + strings.Replace(listen, "127.0.0.1", "localhost", 1)

	// --trusted-ca-file makes the proxy require a client certificate: a
	// client that verifies the proxy but shows none gets nothing.
	ca, _ := deployArg(args, "trusted-ca-file")
	tlsCfg, err := (transport.TLSInfo{TrustedCAFile: ca}).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	anon, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, TLS: tlsCfg, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := anon.Get(ctx, "/skydns/"); err == nil {
		t.Errorf("the proxy answered a client without a certificate")
	}
	return url
}

// deployEtcd starts a one-member etcd as deploy/etcd configures its
// members: TLS with the member certificate, client certificates required,
// /health on a plain-HTTP metrics listener. It returns the client URL.
func deployEtcd(t *testing.T, pki string) string {
	t.Helper()
	client := fmt.Sprintf("localhost:%d", harness.FreePort(t))
	peer := fmt.Sprintf("http://127.0.0.1:%d", harness.FreePort(t))
	metrics := fmt.Sprintf("http://127.0.0.1:%d", harness.FreePort(t))
	harness.StartProcess(t, harness.Tool(t, "etcd"), []string{
		"--name=deploy", "--data-dir=" + t.TempDir(),
		"--listen-client-urls=https://" + strings.Replace(client, "localhost", "127.0.0.1", 1),
		"--advertise-client-urls=https://" + client,
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer, "--initial-cluster=deploy=" + peer,
		"--listen-metrics-urls=" + metrics,
		"--client-cert-auth",
		"--trusted-ca-file=" + filepath.Join(pki, "ca.crt"),
		"--cert-file=" + filepath.Join(pki, "member.crt"),
		"--key-file=" + filepath.Join(pki, "member.key"),
	}, nil, func() error { return harness.HTTPOK(metrics + "/health") })
	return "https://" + client
}

func deployEtcdClient(t *testing.T, url, pki string) *clientv3.Client {
	t.Helper()
	info := transport.TLSInfo{
		TrustedCAFile: filepath.Join(pki, "ca.crt"),
		CertFile:      filepath.Join(pki, "publisher.crt"),
		KeyFile:       filepath.Join(pki, "publisher.key"),
	}
	tlsCfg, err := info.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, TLS: tlsCfg, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// deployMount writes the ConfigMaps and Secrets container c mounts under
// a directory standing for the pod's root, and returns its args and env
// with the mount paths moved there, its config file, and where each
// volume is mounted now.
func deployMount(t *testing.T, kube kubernetes.Interface, objs []*unstructured.Unstructured, w deployWorkload, c corev1.Container) (args, env []string, config []byte, mounted func(volume string) string) {
	t.Helper()
	root := t.TempDir()
	var mounts []string
	at := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts = append(mounts, m.MountPath)
		at[m.Name] = filepath.Join(root, m.MountPath)
	}
	move := func(s string) string {
		for _, m := range mounts {
			s = strings.ReplaceAll(s, m, filepath.Join(root, m))
		}
		return s
	}
	for _, m := range c.VolumeMounts {
		i := slices.IndexFunc(w.spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 {
			t.Fatalf("%s: mount of unknown volume %s", w.name, m.Name)
		}
		files := map[string][]byte{}
		switch v := w.spec.Volumes[i]; {
		case v.ConfigMap != nil:
			j := slices.IndexFunc(objs, func(o *unstructured.Unstructured) bool {
				return o.GetKind() == "ConfigMap" && o.GetName() == v.ConfigMap.Name
			})
			if j < 0 {
				t.Fatalf("%s: ConfigMap %s not rendered", w.name, v.ConfigMap.Name)
			}
			data, _, _ := unstructured.NestedStringMap(objs[j].Object, "data")
			for k, d := range data {
				files[k] = []byte(move(d))
			}
			config = []byte(data["config.yaml"])
		case v.EmptyDir != nil:
			// An empty directory, made below.
		case v.Secret != nil:
			s, err := kube.CoreV1().Secrets("etcdns").Get(context.Background(), v.Secret.SecretName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			files = s.Data
		default:
			t.Fatalf("%s: volume %s of a kind this test does not mount", w.name, v.Name)
		}
		dir := filepath.Join(root, m.MountPath)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for k, b := range files {
			if err := os.WriteFile(filepath.Join(dir, k), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, a := range slices.Concat(c.Command[min(1, len(c.Command)):], c.Args) {
		args = append(args, move(a))
	}
	for _, e := range c.Env {
		switch r := e.ValueFrom; {
		case r == nil:
			env = append(env, e.Name+"="+move(e.Value))
		case r.SecretKeyRef != nil:
			// Optional (deployCheckReferences) and not created here.
		case r.ResourceFieldRef != nil && r.ResourceFieldRef.Resource == "limits.memory":
			env = append(env, fmt.Sprintf("%s=%d", e.Name, c.Resources.Limits.Memory().Value()))
		default:
			t.Fatalf("%s: env %s from a source this test does not provide", w.name, e.Name)
		}
	}
	return args, env, config, func(volume string) string { return at[volume] }
}

// deployCheckListen: the addresses the config file gives are the ports the
// pod declares, probes and Service use, on every address, not loopback.
func deployCheckListen(t *testing.T, w deployWorkload, c corev1.Container, config []byte) {
	t.Helper()
	var cfg map[string]map[string]any
	if err := utilyaml.Unmarshal(config, &cfg); err != nil {
		t.Fatalf("config.yaml: %v", err)
	}
	program := strings.TrimPrefix(strings.Split(c.Image, ":")[0], "etcdns/")
	want := map[string]string{"metrics-listen": "metrics"}
	if program == "dnsd" {
		want["listen"] = "dns"
	}
	for key, port := range want {
		addr, _ := cfg[program][key].(string)
		i := slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == port })
		if i < 0 {
			t.Errorf("%s: no container port %s", w.name, port)
			continue
		}
		if wantAddr := fmt.Sprintf(":%d", c.Ports[i].ContainerPort); addr != wantAddr {
			t.Errorf("%s: %s.%s is %q, want %q (container port %s, every address)", w.name, program, key, addr, wantAddr, port)
		}
	}
}

func deployAnswer(addr, name string, qtype uint16, want string) error {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	r, _, err := (&dns.Client{Timeout: time.Second}).Exchange(m, addr)
	if err != nil {
		return err
	}
	for _, rr := range r.Answer {
		if strings.HasSuffix(rr.String(), "\t"+want) || strings.HasSuffix(rr.String(), "\t\""+want+"\"") {
			return nil
		}
	}
	return fmt.Errorf("%s %s at %s: %s %v, want %s", name, dns.TypeToString[qtype], addr, dns.RcodeToString[r.Rcode], r.Answer, want)
}

// deployCoreDNS runs deploy/coredns/Corefile on etcd at url, with dnsd's
// client certificate (mounted where the Corefile says), loopback ports and
// that URL instead of the in-cluster members.
func deployCoreDNS(t *testing.T, root string, kube kubernetes.Interface, url string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "deploy", "coredns", "Corefile"))
	if err != nil {
		t.Fatal(err)
	}
	certs := t.TempDir()
	s, err := kube.CoreV1().Secrets("etcdns").Get(context.Background(), "dnsd-etcd-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range s.Data {
		if err := os.WriteFile(filepath.Join(certs, k), v, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(b))
	blocks := 0
	for sc.Scan() {
		line := sc.Text()
		switch trimmed := strings.TrimSpace(line); {
		case strings.HasPrefix(trimmed, "endpoint "):
			line = "        endpoint " + url
		case strings.HasPrefix(trimmed, "tls "):
			line = strings.ReplaceAll(line, "/etc/coredns/etcd/", certs+"/")
		case !strings.HasPrefix(line, " ") && strings.HasSuffix(trimmed, "{"):
			line = regexp.MustCompile(`:53\b`).ReplaceAllString(line, ":{{.Port}}") + "\n    bind 127.0.0.1"
			blocks++
		}
		out.WriteString(line + "\n")
	}
	if blocks != 2 {
		t.Fatalf("Corefile: %d server blocks, want 2 (one per prefix)", blocks)
	}
	c := harness.StartCoreDNS(t, out.String())
	for _, q := range []struct {
		name  string
		qtype uint16
		want  string
	}{
		{"kubernetes.default.svc.cluster.local.", dns.TypeA, "10.96.0.1"},
		{"1.0.96.10.in-addr.arpa.", dns.TypePTR, "kubernetes.default.svc.cluster.local."},
	} {
		// The first query opens CoreDNS's TLS connection to etcd.
		waitFor(t, 10*time.Second, func() error {
			if err := deployAnswer(c.Addr, q.name, q.qtype, q.want); err != nil {
				return fmt.Errorf("CoreDNS with deploy/coredns/Corefile: %w", err)
			}
			return nil
		})
	}
}

const deployKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: harness
  cluster:
    server: %s
    insecure-skip-tls-verify: true
users:
- name: publisher
  user:
    token: %s
contexts:
- name: harness
  context:
    cluster: harness
    user: publisher
current-context: harness
`

package harness

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/rest"
)

// KubeAPIServer is a real kube-apiserver without controller-manager or
// scheduler: tests create the objects controllers would (EndpointSlices,
// CRDs) themselves.
type KubeAPIServer struct {
	*Process
	URL        string // https://127.0.0.1:port
	Token      string // bearer token of an admin in system:masters
	Kubeconfig string // path of a kubeconfig for the admin
}

// StartKubeAPIServer starts kube-apiserver on etcd and waits until /readyz is
// ok. Each server stores its objects under its own etcd prefix, so several
// may share one etcd.
func StartKubeAPIServer(t testing.TB, etcd *Etcd) *KubeAPIServer {
	t.Helper()
	bin := Tool(t, "kube-apiserver")
	dir := t.TempDir()
	port := FreePort(t)
	k := &KubeAPIServer{
		URL:        fmt.Sprintf("https://127.0.0.1:%d", port),
		Token:      rand.Text(),
		Kubeconfig: filepath.Join(dir, "kubeconfig"),
	}
	keyFile := filepath.Join(dir, "sa.key")
	pubFile := filepath.Join(dir, "sa.pub")
	writeServiceAccountKey(t, keyFile, pubFile)
	tokenFile := filepath.Join(dir, "tokens.csv")
	writeFile(t, tokenFile, fmt.Sprintf("%s,admin,admin,\"system:masters\"\n", k.Token))
	writeFile(t, k.Kubeconfig, fmt.Sprintf(kubeconfig, k.URL, k.Token))

	args := []string{
		"--etcd-servers=" + etcd.Endpoint,
		"--etcd-prefix=/registry-" + rand.Text(),
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + pubFile,
		"--service-account-signing-key-file=" + keyFile,
		"--token-auth-file=" + tokenFile,
		"--authorization-mode=RBAC",
		// Dual-stack, so tests can create the services the docs page describes.
		"--service-cluster-ip-range=10.96.0.0/16,fd00:10:96::/112",
	}
	// The serving certificate is self-signed and generated at startup, so
	// there is nothing to verify it against; the target is loopback anyway.
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	k.Process = StartProcess(t, bin, args, nil, func() error {
		if err := getOK(client, k.URL+"/readyz", k.Token); err != nil {
			return err
		}
		// The API server creates its own service only once it is ready;
		// tests count on it being there from the start.
		return getOK(client, k.URL+"/api/v1/namespaces/default/services/kubernetes", k.Token)
	})
	return k
}

// RESTConfig returns a client-go configuration for the admin user.
func (k *KubeAPIServer) RESTConfig() *rest.Config {
	return &rest.Config{
		Host:            k.URL,
		BearerToken:     k.Token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
	}
}

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: harness
  cluster:
    server: %s
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: %s
contexts:
- name: harness
  context:
    cluster: harness
    user: admin
current-context: harness
`

func writeServiceAccountKey(t testing.TB, keyFile, pubFile string) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, keyFile, string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})))
	writeFile(t, pubFile, string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})))
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

package harness

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// PKI is a throwaway certificate authority, valid for a day, whose files
// live in a test's temporary directory. Test code only.
type PKI struct {
	Dir    string
	CAFile string // PEM of the CA certificate

	ca  *x509.Certificate
	key *ecdsa.PrivateKey
}

var pkiSerial atomic.Int64

// NewPKI makes a CA and writes its certificate to <Dir>/ca.pem.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	p := &PKI{Dir: t.TempDir()}
	p.ca, p.key = p.issue(t, "ca", &x509.Certificate{
		Subject: pkix.Name{CommonName: "etcdns test CA"},
		IsCA:    true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	})
	p.CAFile = filepath.Join(p.Dir, "ca.pem")
	return p
}

// Server issues a certificate for 127.0.0.1 and localhost. It may also
// authenticate as a client: etcd dials its own gRPC gateway with it.
func (p *PKI) Server(t testing.TB, name string) (certFile, keyFile string) {
	t.Helper()
	p.issue(t, name, &x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	})
	return p.files(name)
}

// Client issues a client certificate whose common name is cn: the etcd
// user, once etcd auth is on and the client sends no password. It is
// issued once per name: running programs reread their files.
func (p *PKI) Client(t testing.TB, cn string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = p.files(cn)
	if _, err := os.Stat(certFile); err == nil {
		return certFile, keyFile
	}
	p.issue(t, cn, &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	return certFile, keyFile
}

func (p *PKI) files(name string) (certFile, keyFile string) {
	return filepath.Join(p.Dir, name+".pem"), filepath.Join(p.Dir, name+"-key.pem")
}

// issue signs tmpl with the CA (itself when there is none yet) and writes
// <name>.pem and <name>-key.pem.
func (p *PKI) issue(t testing.TB, name string, tmpl *x509.Certificate) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = big.NewInt(pkiSerial.Add(1))
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	parent, parentKey := p.ca, p.key
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := p.files(name)
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// TLSEtcd is a single-member etcd that serves clients over TLS only and
// requires a client certificate signed by PKI (--client-cert-auth), as
// deploy/etcd runs it.
type TLSEtcd struct {
	*Process
	Endpoint string // https://127.0.0.1:port
	PKI      *PKI
	DataDir  string
}

// StartEtcdTLS starts etcd with a new PKI on free loopback ports and waits
// until /health, served in plain HTTP on a separate metrics port (the
// probe holds no certificate), reports healthy.
func StartEtcdTLS(t testing.TB) *TLSEtcd {
	t.Helper()
	pki := NewPKI(t)
	cert, key := pki.Server(t, "etcd")
	e := &TLSEtcd{
		Endpoint: fmt.Sprintf("https://127.0.0.1:%d", FreePort(t)),
		PKI:      pki,
		DataDir:  t.TempDir(),
	}
	peer := fmt.Sprintf("http://127.0.0.1:%d", FreePort(t))
	metrics := fmt.Sprintf("http://127.0.0.1:%d", FreePort(t))
	e.Process = StartProcess(t, Tool(t, "etcd"), []string{
		"--name=harness",
		"--data-dir=" + e.DataDir,
		"--listen-client-urls=" + e.Endpoint,
		"--advertise-client-urls=" + e.Endpoint,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=harness=" + peer,
		"--listen-metrics-urls=" + metrics,
		"--client-cert-auth",
		"--trusted-ca-file=" + pki.CAFile,
		"--cert-file=" + cert,
		"--key-file=" + key,
	}, nil, func() error { return HTTPOK(metrics + "/health") })
	return e
}

// Client returns a client of e with a certificate for user, closed when
// the test ends. Without a password etcd takes the certificate's common
// name as the user; with one, the user logs in with it.
func (e *TLSEtcd) Client(t testing.TB, user, password string) *clientv3.Client {
	t.Helper()
	cert, key := e.PKI.Client(t, user)
	tc, err := (transport.TLSInfo{TrustedCAFile: e.PKI.CAFile, CertFile: cert, KeyFile: key}).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	tc.MinVersion = tls.VersionTLS12
	cfg := clientv3.Config{Endpoints: []string{e.Endpoint}, DialTimeout: 5 * time.Second, TLS: tc, Logger: zap.NewNop()}
	if password != "" {
		cfg.Username, cfg.Password = user, password
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

package etcdclient

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/etcdns/etcdns/config"
	"github.com/etcdns/etcdns/etcdclient/embedded"
)

// writeCert writes a certificate (signed by parent, or self-signed when
// parent is nil) and its key as PEM files.
func writeCert(t *testing.T, dir, name string, tmpl *x509.Certificate, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return cert, key, certFile, keyFile
}

// writeCA writes a self-signed CA of an hour either side of now.
func writeCA(t *testing.T, dir string) (*x509.Certificate, *ecdsa.PrivateKey, string) {
	t.Helper()
	now := time.Now()
	ca, key, file, _ := writeCert(t, dir, "ca", &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}, nil, nil)
	return ca, key, file
}

func TestNewWithTLS(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	ca, caKey, caFile := writeCA(t, dir)
	_, _, srvCert, srvKey := writeCert(t, dir, "server", &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "etcd"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
	}, ca, caKey)
	_, _, cliCert, cliKey := writeCert(t, dir, "client", &x509.Certificate{
		SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "publisher"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
	}, ca, caKey)

	client, _ := embedded.LoopbackURL("client", "http://127.0.0.1:0")
	peer, _ := embedded.LoopbackURL("peer", "http://127.0.0.1:0")
	client.Scheme = "https"
	cfg := embed.NewConfig()
	cfg.Dir = filepath.Join(dir, "data")
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	cfg.ClientTLSInfo = transport.TLSInfo{CertFile: srvCert, KeyFile: srvKey, TrustedCAFile: caFile, ClientCertAuth: true}
	cfg.LogLevel = "error"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	<-e.Server.ReadyNotify()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := config.Etcd{Endpoints: []string{client.String()}, DialTimeout: 2 * time.Second, CAFile: caFile, CertFile: cliCert, KeyFile: cliKey}
	// With etcd auth on, etcd takes the certificate's CN as the user, also
	// where a username is given without a password: no login is made.
	if u := User(c); u != "publisher" {
		t.Errorf("User: %q, want the certificate's CN", u)
	}
	named := c
	named.Username = "someone"
	if u := User(named); u != "publisher" {
		t.Errorf("User with a username and no password: %q, want the certificate's CN", u)
	}
	named.Password = "pw"
	if u := User(named); u != "someone" {
		t.Errorf("User with a password login: %q, want its username", u)
	}
	cli, err := New(ctx, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, "/k", "v"); err != nil {
		t.Fatal(err)
	}
	// Without the client certificate the server refuses us.
	noCert := c
	noCert.CertFile, noCert.KeyFile = "", ""
	if cli2, err := New(ctx, noCert, nil); err == nil {
		cli2.Close()
		t.Fatal("connected without a client certificate")
	}
}

// The log's tls says what the endpoints' schemes make of the connection:
// clientv3 dials http:// in cleartext whatever TLS files it is given, and
// https:// with TLS (the system's roots) without them.
func TestLogSaysTLSByScheme(t *testing.T) {
	dir := t.TempDir()
	_, _, caFile := writeCA(t, dir)
	for _, tc := range []struct {
		c    config.Etcd
		want string
	}{
		{config.Etcd{Endpoints: []string{"http://127.0.0.1:1"}, CAFile: caFile}, "tls=false"},
		{config.Etcd{Endpoints: []string{"https://127.0.0.1:1"}}, "tls=true"},
		{config.Etcd{Endpoints: []string{"HTTPS://127.0.0.1:1"}}, "tls=true"},
		{config.Etcd{Endpoints: []string{"https://127.0.0.1:1", "http://127.0.0.1:2"}, CAFile: caFile}, "tls=mixed"},
	} {
		var buf strings.Builder
		cli, err := Dial(context.Background(), tc.c, slog.New(slog.NewTextHandler(&buf, nil)))
		if err != nil {
			t.Fatal(err)
		}
		cli.Close()
		if !strings.Contains(buf.String(), tc.want) {
			t.Errorf("%v with ca-file %q logs %q; want %s", tc.c.Endpoints, tc.c.CAFile, buf.String(), tc.want)
		}
	}
}

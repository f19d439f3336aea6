package etcdclient

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/etcdns/etcdns/config"
	"github.com/etcdns/etcdns/etcdclient/embedded"
)

func TestEmbeddedAndNew(t *testing.T) {
	dir := t.TempDir()
	e, u, err := embedded.Start(config.Embedded{
		DataDir:   filepath.Join(dir, "data"),
		ClientURL: "http://127.0.0.1:0",
		PeerURL:   "http://127.0.0.1:0",
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, err := New(ctx, config.Etcd{Endpoints: []string{u}, DialTimeout: 5 * time.Second, RequestTimeout: 5 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, "/k", "v"); err != nil {
		t.Fatal(err)
	}
	r, err := cli.Get(ctx, "/k")
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "v" {
		t.Fatalf("get: %v %v", r, err)
	}
}

func TestNewFailsFast(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	_, err := New(ctx, config.Etcd{Endpoints: []string{"http://127.0.0.1:1"}, DialTimeout: 500 * time.Millisecond}, nil)
	if err == nil {
		t.Fatal("want an error")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %s", d)
	}
}

func TestNewWithAuth(t *testing.T) {
	u := startEmbedded(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A login is a bcrypt check on the member: seconds on two loaded cores.
	base := config.Etcd{Endpoints: []string{u}, DialTimeout: 10 * time.Second, RequestTimeout: 10 * time.Second}
	admin, err := New(ctx, base, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.UserAdd(ctx, "root", "secret"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	admin.Close()

	withAuth := base
	withAuth.Username, withAuth.Password = "root", "secret"
	cli, err := New(ctx, withAuth, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, "/k", "v"); err != nil {
		t.Fatalf("put with auth: %v", err)
	}
	wrong := withAuth
	wrong.Password = "nope"
	if c, err := New(ctx, wrong, nil); err == nil {
		c.Close()
		t.Fatal("a wrong password connected")
	}
}

// A member down for maintenance must not stop a start while another answers.
func TestNewWithFirstEndpointDown(t *testing.T) {
	u := startEmbedded(t)
	cli, err := New(context.Background(), config.Etcd{Endpoints: []string{"http://127.0.0.1:1", u}, DialTimeout: time.Second}, nil)
	if err != nil {
		t.Fatalf("New with the first of two endpoints down: %v", err)
	}
	cli.Close()
}

// startEmbedded starts an in-process etcd on free loopback ports for one test.
func startEmbedded(t *testing.T) string {
	t.Helper()
	e, u, err := embedded.Start(config.Embedded{
		DataDir: filepath.Join(t.TempDir(), "data"), ClientURL: "http://127.0.0.1:0", PeerURL: "http://127.0.0.1:0",
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return u
}

// Without its grants to go by, the message names the first key and says
// that it may be another.
func TestDeniedErrorText(t *testing.T) {
	for _, c := range []struct {
		err  *DeniedError
		want string
	}{
		{&DeniedError{User: "cluster-a", Op: "write", Key: "/skydns-b/k"},
			`etcd refused the write to /skydns-b/k: user "cluster-a" has no write permission there (etcd auth)`},
		{&DeniedError{User: "dnsd", Op: "write", Key: "/skydns-a/k", Of: 3},
			`etcd refused the write to /skydns-a/k (or another of the 3 keys of one transaction): user "dnsd" has no write permission there (etcd auth)`},
		{&DeniedError{Op: "read", Key: "/skydns-b/"},
			`etcd refused the read of /skydns-b/: the client's user has no read permission there (etcd auth)`},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("got  %s\nwant %s", got, c.want)
		}
		if !IsDenied(fmt.Errorf("wrapped: %w", c.err)) {
			t.Errorf("%v: not IsDenied", c.err)
		}
	}
}

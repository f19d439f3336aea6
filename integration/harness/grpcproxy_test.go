//go:build integration

package harness

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestGRPCProxy(t *testing.T) {
	t.Parallel()
	e := StartEtcd(t)
	p := StartGRPCProxy(t, e.Endpoint)
	pc := p.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A put through the proxy lands in etcd, and a watch through the proxy
	// sees a put made directly in etcd.
	if _, err := pc.Put(ctx, "/harness/via-proxy", "1"); err != nil {
		t.Fatal(err)
	}
	if got := e.Etcdctl(t, "get", "--print-value-only", "/harness/via-proxy"); got != "1" {
		t.Fatalf("etcd has %q, want %q", got, "1")
	}
	wch := pc.Watch(ctx, "/harness/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	// Created before the put: a watch from no revision starts where etcd
	// is when it creates it, which may be after the put.
	select {
	case wr := <-wch:
		if !wr.Created {
			t.Fatalf("watch through the proxy: %v %v, want it created", wr.Err(), wr.Events)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch through the proxy not created after 10s")
	}
	e.Etcdctl(t, "put", "/harness/direct", "2")
	select {
	case wr := <-wch:
		if err := wr.Err(); err != nil || len(wr.Events) != 1 || string(wr.Events[0].Kv.Key) != "/harness/direct" || string(wr.Events[0].Kv.Value) != "2" {
			t.Fatalf("watch through the proxy: %v %v", err, wr.Events)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event through the proxy after 10s")
	}

	// Stopped, it answers nothing; started again, it serves on the same port.
	p.Stop()
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	_, err := pc.Get(short, "/harness/direct")
	cancelShort()
	if err == nil {
		t.Fatal("get through a stopped proxy succeeded")
	}
	p.Start()
	r, err := pc.Get(ctx, "/harness/direct")
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "2" {
		t.Fatalf("get through the restarted proxy: %v %v", err, r)
	}
}

package elect

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdns/etcdns/internal/freeze"
	"github.com/etcdns/etcdns/internal/testetcd"
)

func TestResignHandsOverAtOnce(t *testing.T) {
	cli := testetcd.Start(t, nil)

	leading := make(chan string, 4)
	lead := func(name string) Lead {
		return func(ctx context.Context, term *Term) error {
			if fence, _ := term.Fence(); len(fence) != 1 {
				t.Errorf("fence %v", fence)
			}
			leading <- name
			<-ctx.Done()
			return nil
		}
	}
	// A long TTL: only a resign can hand over within the test's time.
	ctx1, stop1 := context.WithCancel(context.Background())
	done1 := make(chan error, 1)
	go func() {
		done1 <- (&Elector{Client: cli, Cluster: "c1", ID: "one", TTL: 60 * time.Second}).Run(ctx1, lead("one"))
	}()
	if got := <-leading; got != "one" {
		t.Fatalf("leader %s", got)
	}
	ctx2, stop2 := context.WithCancel(context.Background())
	defer stop2()
	go (&Elector{Client: cli, Cluster: "c1", ID: "two", TTL: 60 * time.Second}).Run(ctx2, lead("two"))
	// Another cluster's election is independent.
	ctx3, stop3 := context.WithCancel(context.Background())
	defer stop3()
	go (&Elector{Client: cli, Cluster: "c2", ID: "other", TTL: 60 * time.Second}).Run(ctx3, lead("other"))
	if got := <-leading; got != "other" {
		t.Fatalf("leader of c2: %s", got)
	}

	start := time.Now()
	stop1()
	<-done1
	select {
	case got := <-leading:
		if got != "two" {
			t.Fatalf("leader %s", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no handover after resign")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("handover took %s", d)
	}
}

// The lease is renewed through one keeper at a time: one that stops
// answering (a frozen member) costs a renewal's timeout, not the
// leadership, which holds through three TTLs of the freeze. With every
// keeper frozen, the term ends within about a TTL, as the lease may.
func TestRenewalsMovePastAFrozenKeeper(t *testing.T) {
	cli := testetcd.Start(t, nil)
	a, b := freeze.New(t, cli.Endpoints()[0]), freeze.New(t, cli.Endpoints()[0])
	const ttl = 2 * time.Second
	leading, ended := make(chan struct{}, 4), make(chan time.Time, 4)
	el := &Elector{Client: cli, Cluster: "c1", ID: "one", TTL: ttl, Keepers: []*clientv3.Client{a.Client, b.Client}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- el.Run(ctx, func(ctx context.Context, _ *Term) error {
			leading <- struct{}{}
			<-ctx.Done()
			ended <- time.Now()
			return nil
		})
	}()
	defer func() { cancel(); <-done }()
	select {
	case <-leading:
	case <-time.After(10 * time.Second):
		t.Fatal("not leading")
	}

	a.Hung.Store(true)
	select {
	case <-ended:
		t.Fatal("leadership ended with one of two keepers frozen")
	case <-time.After(3 * ttl):
	}
	resp, err := cli.Get(ctx, Key("c1"), clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("election keys %v, %v; want the leader's", resp, err)
	}
	if ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil || ttl.TTL <= 0 {
		t.Fatalf("the leader's lease: %v, %v", ttl, err)
	}

	b.Hung.Store(true)
	start := time.Now()
	select {
	case at := <-ended:
		if d := at.Sub(start); d > 2*ttl {
			t.Errorf("leadership ended %v after every keeper froze; want within about the TTL (%v)", d, ttl)
		}
	case <-time.After(3 * ttl):
		t.Fatal("leadership held with every keeper frozen")
	}
}

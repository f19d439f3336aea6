package elect

import (
	"context"
	"errors"
	"strings"
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

// Replicas of one cluster with Solo each lead at once, side by side, and a
// replica that runs the cluster's election after them waits behind them.
func TestSoloElectionsLeadSideBySide(t *testing.T) {
	cli := testetcd.Start(t, nil)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	leading := make(chan string, 3)
	lead := func(name string) Lead {
		return func(ctx context.Context, term *Term) error {
			leading <- name + " " + term.Key()
			<-ctx.Done()
			return nil
		}
	}
	for _, id := range []string{"a", "b"} {
		go (&Elector{Client: cli, Cluster: "c1", ID: id, TTL: 60 * time.Second, Solo: id}).Run(ctx, lead(id))
	}
	got := map[string]bool{}
	for range 2 {
		select {
		case l := <-leading:
			name, key, _ := strings.Cut(l, " ")
			if !strings.HasPrefix(key, Key("c1")+"/writers/"+name+"/") {
				t.Errorf("%s leads with key %s, want one under %s/writers/%s/", name, key, Key("c1"), name)
			}
			got[name] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("leading after 10 s: %v", got)
		}
	}
	if !got["a"] || !got["b"] {
		t.Errorf("leading: %v, want a and b", got)
	}
	go (&Elector{Client: cli, Cluster: "c1", ID: "elected", TTL: 60 * time.Second}).Run(ctx, lead("elected"))
	select {
	case l := <-leading:
		t.Errorf("%s leads beside two solo writers", l)
	case <-time.After(time.Second):
	}
}

// A term that ends in an error soon after it began is campaigned for again
// after a wait that doubles: with leader election off every replica leads,
// and a load that fails must not be repeated by all of them each second.
func TestFailedTermsBackOff(t *testing.T) {
	cli := testetcd.Start(t, nil)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	began := make(chan time.Time, 8)
	go (&Elector{Client: cli, Cluster: "c1", ID: "one", TTL: 60 * time.Second, Solo: "one"}).Run(ctx, func(context.Context, *Term) error {
		began <- time.Now()
		return errors.New("the load failed")
	})
	var at []time.Time
	for len(at) < 3 {
		select {
		case t0 := <-began:
			at = append(at, t0)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d terms in 10 s", len(at))
		}
	}
	if first, second := at[1].Sub(at[0]), at[2].Sub(at[1]); first < retryFirst || second < 2*retryFirst {
		t.Errorf("terms %v then %v apart, want at least %v then %v", first, second, retryFirst, 2*retryFirst)
	}
}

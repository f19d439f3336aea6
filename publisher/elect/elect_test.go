package elect

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdns/etcdns/internal/testetcd"
)

func TestResignHandsOverAtOnce(t *testing.T) {
	cli := testetcd.Start(t, nil)

	leading := make(chan string, 4)
	lead := func(name string) Lead {
		return func(ctx context.Context, fence []clientv3.Cmp) error {
			if len(fence) != 1 {
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

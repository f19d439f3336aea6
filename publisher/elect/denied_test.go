package elect

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdns/etcdns/config"
	"github.com/etcdns/etcdns/etcdclient"
	"github.com/etcdns/etcdns/internal/testetcd"
)

// A user without the election grant gets one error, not a campaign
// retried every second.
func TestRunStopsWhenTheElectionIsRefused(t *testing.T) {
	admin := testetcd.Start(t, nil)
	ctx := context.Background()
	for _, step := range []func() error{
		func() error { _, err := admin.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.RoleAdd(ctx, "a-publisher"); return err },
		func() error {
			_, err := admin.RoleGrantPermission(ctx, "a-publisher", "/skydns-a/", clientv3.GetPrefixRangeEnd("/skydns-a/"), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := admin.UserAdd(ctx, "a-publisher", "pw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "a-publisher", "a-publisher"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	cli, err := etcdclient.New(ctx, config.Etcd{Endpoints: admin.Endpoints(), Username: "a-publisher", Password: "pw"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = (&Elector{Client: cli, Cluster: "a", ID: "one", TTL: 5 * time.Second, User: "a-publisher"}).Run(rctx,
		func(context.Context, *Term) error { t.Error("led without the election grant"); return nil })
	want := `etcd refused the write to /etcdns-election/a/: user "a-publisher" has no write permission there (etcd auth)`
	if err == nil || err.Error() != want {
		t.Fatalf("Run: %v\nwant %s", err, want)
	}
	if rctx.Err() != nil {
		t.Fatal("Run retried until the deadline")
	}
	err = Exclusive(ctx, cli, "a", "withdraw", "a-publisher", func(context.Context, *Term) error { return nil })
	if want := `etcd refused the read of /etcdns-election/a/: user "a-publisher" has no read permission there (etcd auth)`; err == nil || err.Error() != want {
		t.Fatalf("Exclusive: %v\nwant %s", err, want)
	}
}

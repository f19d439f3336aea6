package etcdstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdns/etcdns/config"
	"github.com/etcdns/etcdns/etcdclient"
	"github.com/etcdns/etcdns/publisher/plan"
)

// asClusterA turns on etcd auth with a user cluster-a whose role may read
// and write /skydns-a/ only, and returns admin's and cluster-a's clients
// and cluster-a's configuration.
func asClusterA(t *testing.T) (admin, a *clientv3.Client, ca config.Etcd) {
	t.Helper()
	admin = start(t)
	ctx := context.Background()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(admin.UserAdd(ctx, "root", "rootpw"))
	must(admin.UserGrantRole(ctx, "root", "root"))
	must(admin.RoleAdd(ctx, "cluster-a"))
	must(admin.RoleGrantPermission(ctx, "cluster-a", "/skydns-a/", clientv3.GetPrefixRangeEnd("/skydns-a/"), clientv3.PermissionType(clientv3.PermReadWrite)))
	must(admin.UserAdd(ctx, "cluster-a", "apw"))
	must(admin.UserGrantRole(ctx, "cluster-a", "cluster-a"))
	must(admin.AuthEnable(ctx))
	c := config.Etcd{Endpoints: admin.Endpoints(), DialTimeout: 5 * time.Second}
	c.Username, c.Password = "root", "rootpw"
	admin, err := etcdclient.New(ctx, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	c.Username, c.Password = "cluster-a", "apw"
	if a, err = etcdclient.New(ctx, c, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return admin, a, c
}

func TestDeniedNamesTheKeyAndTheUser(t *testing.T) {
	admin, cli, c := asClusterA(t)
	t.Run("client", func(t *testing.T) { deniedNamesTheKeyAndTheUser(t, admin, &Store{Client: cli, User: "cluster-a"}) })
	// The clients of DialEach run as the same user: the grants hold, and
	// a refusal is explained as through the one client.
	c.Endpoints = append(c.Endpoints, c.Endpoints[0])
	each, names, err := etcdclient.DialEach(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range each {
		t.Cleanup(func() { e.Close() })
	}
	t.Run("endpoints", func(t *testing.T) {
		deniedNamesTheKeyAndTheUser(t, admin, &Store{Client: cli, Endpoints: etcdclient.NewFailover(each, names, nil, nil, "/skydns-a/"), User: "cluster-a"})
	})
}

func deniedNamesTheKeyAndTheUser(t *testing.T, admin *clientv3.Client, s *Store) {
	ctx := context.Background()
	if _, err := admin.Delete(ctx, "/skydns", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}

	_, _, err := s.Load(ctx, []string{"/skydns-a/local/cluster/", "/skydns-b/arpa/"})
	if want := `etcd refused the read of /skydns-b/arpa/: user "cluster-a" has no read permission there (etcd auth)`; err == nil || err.Error() != want {
		t.Errorf("load:\n got %v\nwant %s", err, want)
	}
	if !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("load: %v is not ErrPermissionDenied", err)
	}

	// The refused key sorts after one that is granted: the grants, not
	// the order, must tell which.
	ops := []plan.Op{
		{Kind: plan.Put, Key: "/skydns-a/local/cluster/svc/ns/x/id", Value: []byte(`{"host":"10.0.0.1"}`)},
		{Kind: plan.Put, Key: "/skydns-b/local/cluster/svc/ns/x/id", Value: []byte(`{"host":"10.0.0.2"}`)},
	}
	_, err = s.Apply(ctx, nil, ops)
	if want := `etcd refused the write to /skydns-b/local/cluster/svc/ns/x/id: user "cluster-a" has no write permission there (etcd auth)`; err == nil || err.Error() != want {
		t.Errorf("apply:\n got %v\nwant %s", err, want)
	}
	if r, err := admin.Get(ctx, "/skydns", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || r.Count != 0 {
		t.Errorf("a refused transaction wrote: %v %v", r, err)
	}
	// A fence on a key the role may not read is refused as a read.
	fence := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision("/etcdns-election/a/1"), "=", 7)}
	_, err = s.Apply(ctx, fence, ops[:1])
	if want := `etcd refused the read of /etcdns-election/a/1: user "cluster-a" has no read permission there (etcd auth)`; err == nil || err.Error() != want {
		t.Errorf("fenced apply:\n got %v\nwant %s", err, want)
	}
	if _, err := s.Apply(ctx, nil, ops[:1]); err != nil {
		t.Errorf("a write to cluster-a's own prefix: %v", err)
	}
	_, _, _, err = s.Get(ctx, []string{"/skydns-a/x", "/skydns-b/y"})
	if want := `etcd refused the read of /skydns-b/y: user "cluster-a" has no read permission there (etcd auth)`; err == nil || err.Error() != want {
		t.Errorf("get:\n got %v\nwant %s", err, want)
	}
	// The ordered read writes next to the keys it reads: a grant of
	// their prefix covers it.
	if _, _, _, err := s.GetOrdered(ctx, []string{"/skydns-a/x"}); err != nil {
		t.Errorf("an ordered read of cluster-a's own prefix: %v", err)
	}
	_, _, _, err = s.GetOrdered(ctx, []string{"/skydns-a/x", "/skydns-b/y"})
	if want := `etcd refused the read of /skydns-b/y: user "cluster-a" has no read permission there (etcd auth)`; err == nil || err.Error() != want {
		t.Errorf("ordered get:\n got %v\nwant %s", err, want)
	}
}

package harness

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// EnableAuth turns on e's auth with a root user (password rootPassword)
// and user, of password, who may read readPrefix and nothing else, as
// docs/security.md grants dnsd. It returns a client logged in as root,
// closed when the test ends. A grpc-proxy reads without a user for its
// health check, which etcd refuses once auth is on: start proxies before.
func (e *Etcd) EnableAuth(t testing.TB, rootPassword, user, password, readPrefix string) *clientv3.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open := e.Client(t)
	for _, step := range []func() error{
		func() error { _, err := open.UserAdd(ctx, "root", rootPassword); return err },
		func() error { _, err := open.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := open.RoleAdd(ctx, user); return err },
		func() error {
			_, err := open.RoleGrantPermission(ctx, user, readPrefix, clientv3.GetPrefixRangeEnd(readPrefix), clientv3.PermissionType(clientv3.PermRead))
			return err
		},
		func() error { _, err := open.UserAdd(ctx, user, password); return err },
		func() error { _, err := open.UserGrantRole(ctx, user, user); return err },
		func() error { _, err := open.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	root, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint}, DialTimeout: 5 * time.Second, Username: "root", Password: rootPassword})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	return root
}

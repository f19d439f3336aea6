package etcdclient

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdns/etcdns/config"
)

// authentications is how many Authenticate calls the in-process etcd has
// answered, by its gRPC server metrics.
func authentications(t *testing.T) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "grpc_server_handled_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "grpc_method" && l.GetValue() == "Authenticate" {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// enableAuth makes root and a user "reader" who may read /r/, and turns
// auth on.
func enableAuth(t *testing.T, ctx context.Context, u string) {
	t.Helper()
	admin, err := New(ctx, config.Etcd{Endpoints: []string{u}, DialTimeout: 2 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for _, step := range []func() error{
		func() error { _, err := admin.UserAdd(ctx, "root", "secret"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.RoleAdd(ctx, "r"); return err },
		func() error {
			_, err := admin.RoleGrantPermission(ctx, "r", "/r/", clientv3.GetPrefixRangeEnd("/r/"), clientv3.PermissionType(clientv3.PermRead))
			return err
		},
		func() error { _, err := admin.UserAdd(ctx, "reader", "pw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "reader", "r"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
}

// newWatch opens a watch on a stream of its own (a Watcher per stream, as
// dnsd's store opens one per move) and returns its first response.
func newWatch(t *testing.T, ctx context.Context, cli *clientv3.Client) clientv3.WatchResponse {
	t.Helper()
	w := clientv3.NewWatcher(cli)
	defer w.Close()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, ok := <-w.Watch(wctx, "/r/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	if !ok {
		t.Fatal("watch closed before its first response")
	}
	return resp
}

// A process's clients of one configuration authenticate once, however many
// streams they open, and again only when etcd refuses the token: clientv3
// alone authenticated for every client and every stream, each a bcrypt
// hash and a raft proposal for the member.
func TestPasswordAuthenticatesOnce(t *testing.T) {
	u := startEmbedded(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	enableAuth(t, ctx, u)
	c := config.Etcd{Endpoints: []string{u}, DialTimeout: 2 * time.Second, Username: "reader", Password: "pw"}

	before := authentications(t)
	cli, err := New(ctx, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	each, _, err := DialEach(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer each[0].Close()
	for _, cl := range []*clientv3.Client{cli, each[0]} {
		if _, err := cl.Get(ctx, "/r/x"); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if r := newWatch(t, ctx, cl); !r.Created || r.Canceled {
				t.Fatalf("watch: %+v", r)
			}
		}
	}
	if n := authentications(t) - before; n != 1 {
		t.Fatalf("two clients, two reads and six watch streams authenticated %v times, want once", n)
	}

	// etcd drops a user's tokens when the user is deleted (and when its
	// password changes, or a token goes unused for --auth-token-ttl): the
	// next read is refused once, authenticates, and is sent again.
	admin, err := New(ctx, config.Etcd{Endpoints: []string{u}, DialTimeout: 2 * time.Second, Username: "root", Password: "secret"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	recreate := func() {
		t.Helper()
		for _, step := range []func() error{
			func() error { _, err := admin.UserDelete(ctx, "reader"); return err },
			func() error { _, err := admin.UserAdd(ctx, "reader", "pw"); return err },
			func() error { _, err := admin.UserGrantRole(ctx, "reader", "r"); return err },
		} {
			if err := step(); err != nil {
				t.Fatal(err)
			}
		}
	}
	recreate()
	before = authentications(t)
	if _, err := each[0].Get(ctx, "/r/x"); err != nil {
		t.Fatalf("a read with an old token: %v", err)
	}
	if _, err := cli.Get(ctx, "/r/x"); err != nil {
		t.Fatal(err)
	}
	if n := authentications(t) - before; n != 1 {
		t.Fatalf("after the user's tokens were dropped, two reads authenticated %v times, want once", n)
	}

	// A watch is refused in its create response: the stream cannot be sent
	// again, but the next one authenticates first.
	recreate()
	before = authentications(t)
	if r := newWatch(t, ctx, each[0]); !r.Canceled {
		t.Fatalf("a watch with an old token was not refused: %+v", r)
	} else {
		t.Logf("refused: %v", r.Err())
	}
	if r := newWatch(t, ctx, each[0]); !r.Created || r.Canceled {
		t.Fatalf("the watch after a refused one: %v", r.Err())
	}
	if n := authentications(t) - before; n != 1 {
		t.Fatalf("a refused watch and the next authenticated %v times, want once", n)
	}
}

// A refused password is not sent again at once: every try is a bcrypt hash
// for the member, and a fleet with a wrong Secret retries all the time.
func TestWrongPasswordWaits(t *testing.T) {
	u := startEmbedded(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	enableAuth(t, ctx, u)
	cli, err := Dial(ctx, config.Etcd{Endpoints: []string{u}, DialTimeout: 2 * time.Second, Username: "reader", Password: "wrong"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	before := authentications(t)
	for i := range 5 {
		_, err := cli.Get(ctx, "/r/x")
		if !errors.Is(err, rpctypes.ErrAuthFailed) || i > 0 && !strings.Contains(err.Error(), "not tried again") {
			t.Fatalf("read %d with a wrong password: %v", i, err)
		}
	}
	if n := authentications(t) - before; n != 1 {
		t.Fatalf("five reads with a wrong password sent it %v times, want once", n)
	}
}

// Programs given a password before auth is turned on (the order
// docs/security.md gives) send no token until etcd asks for one, then log
// in once, for requests and streams alike.
func TestPasswordBeforeAuthIsOn(t *testing.T) {
	u := startEmbedded(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli, err := Dial(ctx, config.Etcd{Endpoints: []string{u}, DialTimeout: 2 * time.Second, Username: "reader", Password: "pw"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Get(ctx, "/r/x"); err != nil {
		t.Fatalf("a read before auth is on: %v", err)
	}
	if r := newWatch(t, ctx, cli); !r.Created || r.Canceled {
		t.Fatalf("a watch before auth is on: %v", r.Err())
	}
	enableAuth(t, ctx, u)
	before := authentications(t)
	if r := newWatch(t, ctx, cli); !r.Canceled {
		t.Fatalf("a watch with no token once auth is on was not refused: %+v", r)
	}
	if r := newWatch(t, ctx, cli); !r.Created || r.Canceled {
		t.Fatalf("the watch after: %v", r.Err())
	}
	if _, err := cli.Get(ctx, "/r/x"); err != nil {
		t.Fatalf("a read once auth is on: %v", err)
	}
	if n := authentications(t) - before; n != 1 {
		t.Fatalf("logged in %v times once auth was on, want once", n)
	}
}

// A login on a member that does not answer is bounded, and the clients of
// the same configuration on a healthy member log in there meanwhile: every
// client waits for the one login at a time.
func TestLoginOnAFrozenMemberHoldsNobody(t *testing.T) {
	u := startEmbedded(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	enableAuth(t, ctx, u)
	frozen, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Close()
	go func() { // accepts, and never answers
		for {
			c, err := frozen.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	c := config.Etcd{Endpoints: []string{"http://" + frozen.Addr().String(), u}, DialTimeout: time.Second, Username: "reader", Password: "pw"}
	clis, _, err := DialEach(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range clis {
		defer cl.Close()
	}
	go clis[0].Get(ctx, "/r/x") // logs in first, on the frozen member, and waits
	time.Sleep(100 * time.Millisecond)
	hctx, hcancel := context.WithTimeout(ctx, 4*time.Second)
	defer hcancel()
	began := time.Now()
	if _, err := clis[1].Get(hctx, "/r/x"); err != nil {
		t.Fatalf("a read on the healthy member while a login waited on the frozen one: %v (after %s)", err, time.Since(began).Round(time.Millisecond))
	}
	t.Logf("the healthy member's read took %s", time.Since(began).Round(time.Millisecond))
}

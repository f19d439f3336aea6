package elect

import (
	"context"
	"errors"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/etcdns/etcdns/internal/testetcd"
)

// TestTermAdvance: a write fenced before an Advance fails, one fenced after
// it commits; an Advance already done is not done again; one whose answer
// was lost but which committed is taken for done; a term whose key is gone
// ends.
func TestTermAdvance(t *testing.T) {
	ctx := context.Background()
	cli := testetcd.Start(t, nil)
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(60))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	e := concurrency.NewElection(sess, Key("c1"))
	if err := e.Campaign(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	term := won(e, sess.Lease(), "one")
	write := func(fence []clientv3.Cmp) bool {
		t.Helper()
		resp, err := cli.Txn(ctx).If(fence...).Then(clientv3.OpPut("/x", "y")).Commit()
		if err != nil {
			t.Fatal(err)
		}
		return resp.Succeeded
	}
	revision := func() int64 {
		t.Helper()
		resp, err := cli.Get(ctx, "/nothing")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}

	old, e0 := term.Fence()
	if !write(old) {
		t.Fatal("the fresh term's fence does not hold")
	}
	if err := term.Advance(ctx, cli, e0); err != nil {
		t.Fatal(err)
	}
	cur, e1 := term.Fence()
	if e1 <= e0 {
		t.Fatalf("epoch %d -> %d", e0, e1)
	}
	if write(old) {
		t.Error("a write fenced before the advance committed")
	}
	if !write(cur) {
		t.Error("a write fenced after the advance failed")
	}
	if v, err := cli.Get(ctx, e.Key()); err != nil || string(v.Kvs[0].Value) != "one" || clientv3.LeaseID(v.Kvs[0].Lease) != sess.Lease() {
		t.Fatalf("the election key after the advance: %v, %v", v, err)
	}

	// Past e0 already: nothing is written.
	r := revision()
	if err := term.Advance(ctx, cli, e0); err != nil || revision() != r || term.Epoch() != e1 {
		t.Fatalf("a second advance past %d: %v, revision %d -> %d, epoch %d", e0, err, r, revision(), term.Epoch())
	}

	// An advance whose answer was lost committed: the next finds it and
	// takes its revision, writing nothing.
	lost, err := cli.Put(ctx, e.Key(), "one", clientv3.WithLease(sess.Lease()))
	if err != nil {
		t.Fatal(err)
	}
	r = revision()
	if err := term.Advance(ctx, cli, e1); err != nil || revision() != r || term.Epoch() != lost.Header.Revision {
		t.Fatalf("after a lost advance: %v, revision %d -> %d, epoch %d, want %d", err, r, revision(), term.Epoch(), lost.Header.Revision)
	}
	if cur, _ := term.Fence(); !write(cur) {
		t.Error("the fence taken from a lost advance does not hold")
	}

	// The lease gone, the term is over.
	if _, err := cli.Revoke(ctx, sess.Lease()); err != nil {
		t.Fatal(err)
	}
	if err := term.Advance(ctx, cli, term.Epoch()); !errors.Is(err, ErrTermEnded) {
		t.Fatalf("advance after the key went: %v, want ErrTermEnded", err)
	}
	if cur, _ := term.Fence(); write(cur) {
		t.Error("a write fenced by an ended term committed")
	}

	var none *Term
	if f, ep := none.Fence(); f != nil || ep != 0 || none.Advance(ctx, cli, 0) != nil {
		t.Error("a nil term (a single writer) fences")
	}
}

package etcdclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/connectivity"

	"github.com/etcdns/etcdns/config"
	"github.com/etcdns/etcdns/internal/freeze"
)

// failover is a Failover of clients named a, b, ... with its log and the
// number of moves it counted.
func failover(clients ...*clientv3.Client) (*Failover, *bytes.Buffer, *atomic.Int64) {
	names := make([]string, len(clients))
	for i := range clients {
		names[i] = string(rune('a' + i))
	}
	var log bytes.Buffer
	var moves atomic.Int64
	f := NewFailover(clients, names, slog.New(slog.NewTextHandler(&log, nil)), func() { moves.Add(1) }, "")
	return f, &log, &moves
}

func put(ctx context.Context, f *Failover, timeout time.Duration, key string) error {
	return f.Do(ctx, timeout, func(ctx context.Context, cli *clientv3.Client) error {
		_, err := cli.Put(ctx, key, "v")
		return err
	})
}

// putWrite is put through DoWrite.
func putWrite(ctx context.Context, f *Failover, timeout time.Duration, key string) error {
	return f.DoWrite(ctx, timeout, func(ctx context.Context, cli *clientv3.Client) error {
		_, err := cli.Put(ctx, key, "v")
		return err
	})
}

// Requests that wait on a frozen member together time out together; the
// first to come back moves the writer on, once, and the retries all go to
// the next endpoint, which takes them at once.
func TestFailoverMovesOnceWhenRequestsTimeOut(t *testing.T) {
	u := startEmbedded(t)
	a, b := freeze.New(t, u), freeze.New(t, u)
	f, log, moves := failover(a.Client, b.Client)
	a.Hung.Store(true)
	const timeout = 300 * time.Millisecond
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := put(ctx, f, timeout, "/k"); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("a put through the frozen member: %v, want a deadline exceeded", err)
			}
		})
	}
	wg.Wait()
	if n := moves.Load(); n != 1 {
		t.Fatalf("%d moves after 8 requests timed out together, want 1:\n%s", n, log)
	}
	if !strings.Contains(log.String(), `msg="etcd requests moved to the next endpoint" from=a to=b reason=timeout`) {
		t.Errorf("log:\n%s", log)
	}
	start := time.Now()
	for range 8 {
		if err := put(ctx, f, timeout, "/k"); err != nil {
			t.Fatalf("the retry: %v", err)
		}
	}
	if d := time.Since(start); d > timeout {
		t.Errorf("8 retries took %v, more than one timeout (%v)", d, timeout)
	}
	// Past the last endpoint the first comes round again.
	a.Hung.Store(false)
	b.Hung.Store(true)
	if err := put(ctx, f, timeout, "/k"); err == nil {
		t.Fatal("a put through a frozen member succeeded")
	}
	if err := put(ctx, f, timeout, "/k"); err != nil || moves.Load() != 2 {
		t.Fatalf("after b froze: %v, %d moves, want 2", err, moves.Load())
	}
}

// A write can time out on a member that is alive (it forwarded the write
// to a frozen leader, which lost it) when the next endpoint in line is the
// frozen one: the writer moves past it, to the first endpoint that answers
// a read, and the retry is taken at once.
func TestFailoverMovesPastAFrozenEndpoint(t *testing.T) {
	u := startEmbedded(t)
	a, b, c := freeze.New(t, u), freeze.New(t, u), freeze.New(t, u)
	f, log, moves := failover(a.Client, b.Client, c.Client)
	a.Lost.Store(true)
	b.Hung.Store(true)
	// Long enough for a loaded CI machine (at 300 ms the retry once ran out
	// of it there), short against the frozen endpoint's forever.
	const timeout = time.Second
	if err := put(context.Background(), f, timeout, "/k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a put whose proposal was lost: %v, want a deadline exceeded", err)
	}
	start := time.Now()
	if err := put(context.Background(), f, timeout, "/k"); err != nil {
		t.Fatalf("the retry: %v", err)
	}
	if d := time.Since(start); d > timeout {
		t.Errorf("the retry took %v, more than one timeout (%v)", d, timeout)
	}
	if n := moves.Load(); n != 1 {
		t.Errorf("%d moves, want 1", n)
	}
	if !strings.Contains(log.String(), `msg="etcd requests moved to the next endpoint" from=a to=c reason=timeout`) {
		t.Errorf("log without the move from a to c:\n%s", log)
	}
}

// A request its caller gives up on says nothing about the endpoint.
func TestFailoverStaysWhenTheCallerGivesUp(t *testing.T) {
	u := startEmbedded(t)
	a, b := freeze.New(t, u), freeze.New(t, u)
	f, log, moves := failover(a.Client, b.Client)
	a.Hung.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := put(ctx, f, time.Second, "/k"); err == nil {
		t.Fatal("a put through a frozen member succeeded")
	}
	if n := moves.Load(); n != 0 {
		t.Errorf("%d moves after the caller's own deadline, want 0:\n%s", n, log)
	}
}

// A member without a leader says so at once: the writer moves on without
// waiting. An error of the request itself (a refused grant) moves nothing.
func TestFailoverMovesOnUnavailable(t *testing.T) {
	u := startEmbedded(t)
	a, b := freeze.New(t, u), freeze.New(t, u)
	f, log, moves := failover(a.Client, b.Client)
	denied := rpctypes.ErrGRPCPermissionDenied
	a.Fail.Store(&denied)
	if err := put(context.Background(), f, time.Second, "/k"); !IsDenied(err) || moves.Load() != 0 {
		t.Fatalf("a refused put: %v, %d moves, want permission denied and none", err, moves.Load())
	}
	noLeader := rpctypes.ErrGRPCNoLeader
	a.Fail.Store(&noLeader)
	if err := put(context.Background(), f, time.Second, "/k"); !errors.Is(err, rpctypes.ErrNoLeader) {
		t.Fatalf("a put through a member without a leader: %v", err)
	}
	if err := put(context.Background(), f, time.Second, "/k"); err != nil || moves.Load() != 1 {
		t.Fatalf("the retry: %v, %d moves, want 1", err, moves.Load())
	}
	if !strings.Contains(log.String(), `from=a to=b reason=unavailable err="etcdserver: no leader"`) {
		t.Errorf("log:\n%s", log)
	}
}

// A member that is down refuses connections, and gRPC knows it before a
// request is sent: the request goes to the next endpoint at once instead
// of waiting out its timeout. DialEach gives the clients, as the publisher's.
func TestFailoverPassesOverRefusingEndpoint(t *testing.T) {
	u := startEmbedded(t)
	clients, names, err := DialEach(context.Background(), config.Etcd{Endpoints: []string{"http://127.0.0.1:1", u}, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for deadline := time.Now().Add(5 * time.Second); clients[0].ActiveConnection().GetState() != connectivity.TransientFailure; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the connection to a closed port is %v", clients[0].ActiveConnection().GetState())
		}
	}
	var log bytes.Buffer
	f := NewFailover(clients, names, slog.New(slog.NewTextHandler(&log, nil)), nil, "")
	start := time.Now()
	if err := put(context.Background(), f, 5*time.Second, "/k"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the put took %v", d)
	}
	if want := `from=http://127.0.0.1:1 to=` + u + ` reason=unreachable`; !strings.Contains(log.String(), want) {
		t.Errorf("log without %s:\n%s", want, log.String())
	}
}

// With one endpoint there is nowhere to go: requests stay, and nothing is
// logged or counted.
func TestFailoverOneEndpoint(t *testing.T) {
	a := freeze.New(t, startEmbedded(t))
	f, log, moves := failover(a.Client)
	a.Hung.Store(true)
	if err := put(context.Background(), f, 100*time.Millisecond, "/k"); err == nil {
		t.Fatal("a put through a frozen member succeeded")
	}
	a.Hung.Store(false)
	if err := put(context.Background(), f, time.Second, "/k"); err != nil {
		t.Fatal(err)
	}
	if moves.Load() != 0 || log.Len() != 0 {
		t.Errorf("%d moves with one endpoint:\n%s", moves.Load(), log)
	}
}

// A frozen member is left once it stops answering reads, not after the
// whole timeout: the request ends with ErrNotAnswering and the next is
// sent to the next endpoint.
func TestFailoverLeavesAFrozenEndpointEarly(t *testing.T) {
	u := startEmbedded(t)
	a, b := freeze.New(t, u), freeze.New(t, u)
	f, log, moves := failover(a.Client, b.Client)
	a.Hung.Store(true)
	const timeout = 10 * time.Second
	start := time.Now()
	err := put(context.Background(), f, timeout, "/k")
	if !errors.Is(err, ErrNotAnswering) {
		t.Fatalf("a put through the frozen member: %v, want ErrNotAnswering", err)
	}
	// One probe is due after probeEvery, and gives up after answerTimeout.
	if d := time.Since(start); d > timeout/2 {
		t.Errorf("the put ended after %v, want about %v", d, probeEvery+answerTimeout)
	}
	if n := moves.Load(); n != 1 || !strings.Contains(log.String(), `from=a to=b reason="not answering"`) {
		t.Errorf("%d moves, log:\n%s", n, log)
	}
	if err := put(context.Background(), f, timeout, "/k"); err != nil {
		t.Fatalf("the retry: %v", err)
	}
}

// A write whose member took it but whose leader changed meanwhile ends
// when a probe shows the new term, on the same endpoint; a read that waits
// as long is not ended for it.
func TestFailoverWriteEndsOnLeaderChange(t *testing.T) {
	u := startEmbedded(t)
	a, b := freeze.New(t, u), freeze.New(t, u)
	f, log, moves := failover(a.Client, b.Client)
	var probes atomic.Int64
	f.probe = func(*clientv3.Client) (uint64, bool) {
		if probes.Add(1) < 3 {
			return 5, true
		}
		return 6, true
	}
	a.Lost.Store(true) // its writes wait; its reads are answered
	start := time.Now()
	err := putWrite(context.Background(), f, 10*time.Second, "/k")
	if !errors.Is(err, ErrLeaderChanged) {
		t.Fatalf("a write across a leader change: %v, want ErrLeaderChanged", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the write ended after %v, want about %v", d, 3*probeEvery)
	}
	if n := moves.Load(); n != 0 {
		t.Errorf("%d moves after a leader change, want 0 (the member is fine):\n%s", n, log)
	}

	probes.Store(0)
	const readTimeout = 1500 * time.Millisecond
	err = f.Do(context.Background(), readTimeout, func(ctx context.Context, cli *clientv3.Client) error {
		<-ctx.Done() // a read that takes its time
		return ctx.Err()
	})
	if !errors.Is(err, context.DeadlineExceeded) || probes.Load() < 3 {
		t.Errorf("a slow read across a leader change: %v after %d probes, want its own deadline", err, probes.Load())
	}
}

// Under etcd auth the probes read the key they are given, which the user
// may read, and learn the raft term; "health" is refused, which counts as
// an answer but tells no term.
func TestFailoverProbeKeyUnderAuth(t *testing.T) {
	u := startEmbedded(t)
	ctx := context.Background()
	admin, err := New(ctx, config.Etcd{Endpoints: []string{u}, DialTimeout: 5 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for _, step := range []func() error{
		func() error { _, err := admin.RoleAdd(ctx, "reader"); return err },
		func() error {
			_, err := admin.RoleGrantPermission(ctx, "reader", "/granted/", clientv3.GetPrefixRangeEnd("/granted/"), clientv3.PermissionType(clientv3.PermRead))
			return err
		},
		func() error { _, err := admin.UserAdd(ctx, "reader", "pw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "reader", "reader"); return err },
		func() error { _, err := admin.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := admin.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := admin.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	cli, err := New(ctx, config.Etcd{Endpoints: []string{u}, DialTimeout: 5 * time.Second, Username: "reader", Password: "pw"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	clients := []*clientv3.Client{cli, cli}
	if term, ok := NewFailover(clients, []string{"a", "b"}, nil, nil, "/granted/").probe(cli); !ok || term == 0 {
		t.Errorf("probe of a granted key: term %d, answered %v; want the term", term, ok)
	}
	if term, ok := NewFailover(clients, []string{"a", "b"}, nil, nil, "").probe(cli); !ok || term != 0 {
		t.Errorf("probe of health, refused: term %d, answered %v; want an answer without a term", term, ok)
	}
}

// An election between a write's send and its first probe is seen too: the
// write's probes compare with the term an earlier probe of its endpoint
// saw (here the read that chose it).
func TestFailoverWriteSeesAnElectionBeforeItsFirstProbe(t *testing.T) {
	u := startEmbedded(t)
	a, b := freeze.New(t, u), freeze.New(t, u)
	f, _, _ := failover(a.Client, b.Client)
	var term atomic.Uint64
	term.Store(5)
	f.probe = func(*clientv3.Client) (uint64, bool) { return term.Load(), true }
	if _, ok := f.answers(0); !ok {
		t.Fatal("no answer")
	}
	term.Store(6) // elected before the write's first probe
	a.Lost.Store(true)
	heldWriteEndsOnElection(t, f, time.Now(), "a write sent in term 5 and probed in term 6")
}

// heldWriteEndsOnElection sends a write that its endpoint holds (Lost), and
// wants it ended by the term's move, about probeEvery after start.
func heldWriteEndsOnElection(t *testing.T, f *Failover, start time.Time, what string) {
	t.Helper()
	err := putWrite(context.Background(), f, 5*time.Second, "/k")
	if !errors.Is(err, ErrLeaderChanged) {
		t.Fatalf("%s: %v, want ErrLeaderChanged", what, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("%s ended after %v, want about %v", what, d, probeEvery)
	}
}

// A write to an endpoint no probe has asked yet learns its term before it
// is sent: an election before the first periodic probe is seen too.
func TestFailoverFirstWriteKnowsItsTerm(t *testing.T) {
	u := startEmbedded(t)
	a, b := freeze.New(t, u), freeze.New(t, u)
	f, _, _ := failover(a.Client, b.Client)
	start := time.Now()
	const elected = probeEvery / 2
	f.probe = func(*clientv3.Client) (uint64, bool) {
		if time.Since(start) < elected {
			return 5, true
		}
		return 6, true
	}
	a.Lost.Store(true)
	heldWriteEndsOnElection(t, f, start, fmt.Sprintf("the first write, sent in term 5 with term 6 elected %v later", elected))
}

// When the probes are refused (the user may not read the probe key), they
// tell no term; a refusal is an answer all the same, and writes sent soon
// after it do not ask again.
func TestFailoverTermlessWritesGoAtOnce(t *testing.T) {
	u := startEmbedded(t)
	a, b := freeze.New(t, u), freeze.New(t, u)
	f, _, _ := failover(a.Client, b.Client)
	var probes atomic.Int64
	f.probe = func(*clientv3.Client) (uint64, bool) { probes.Add(1); return 0, true }
	for i := range 5 {
		if err := putWrite(context.Background(), f, 5*time.Second, "/k"); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if n := probes.Load(); n != 1 {
		t.Errorf("%d probes for five quick writes with refused probes, want 1 (the first write's)", n)
	}
}

// A term seen longer ago than termFresh is asked for again before a write
// is sent: an election since must not end a write that is only slow.
func TestFailoverStaleTermIsAskedAgain(t *testing.T) {
	u := startEmbedded(t)
	a, b := freeze.New(t, u), freeze.New(t, u)
	f, _, moves := failover(a.Client, b.Client)
	var term atomic.Uint64
	term.Store(5)
	f.probe = func(*clientv3.Client) (uint64, bool) { return term.Load(), true }
	f.answers(0)
	term.Store(6) // an election, and quick requests only since
	time.Sleep(termFresh + 100*time.Millisecond)
	err := f.DoWrite(context.Background(), 5*time.Second, func(ctx context.Context, cli *clientv3.Client) error {
		select { // slow, past a few probes, but fine
		case <-time.After(3 * probeEvery):
		case <-ctx.Done():
			return ctx.Err()
		}
		_, err := cli.Put(ctx, "/k", "v")
		return err
	})
	if err != nil || moves.Load() != 0 {
		t.Errorf("a slow write sent in term 6, with term 5 seen %v before: %v, %d moves; want it to succeed where it was sent", termFresh, err, moves.Load())
	}
}

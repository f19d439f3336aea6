package store

import (
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdns/etcdns/internal/testetcd"
)

// freezer is a TCP proxy to etcd that can stop passing bytes while keeping
// its connections open: what a client sees of a member frozen by SIGSTOP.
type freezer struct {
	l      net.Listener
	target string

	mu     sync.Mutex
	thawed *sync.Cond
	frozen bool
}

func startFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{l: l, target: target}
	f.thawed = sync.NewCond(&f.mu)
	t.Cleanup(func() { l.Close(); f.thaw() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			go f.pipe(c, u)
			go f.pipe(u, c)
		}
	}()
	return f
}

func (f *freezer) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		f.mu.Lock()
		for f.frozen {
			f.thawed.Wait()
		}
		f.mu.Unlock()
		if n > 0 {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (f *freezer) freeze() { f.mu.Lock(); f.frozen = true; f.mu.Unlock() }
func (f *freezer) thaw()   { f.mu.Lock(); f.frozen = false; f.thawed.Broadcast(); f.mu.Unlock() }

func client(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A watch stream that goes quiet (its member frozen) is dropped within the
// liveness timeout and resumed on the next endpoint from the snapshot's
// revision, without a relist; a healthy idle stream is kept alive by its
// progress answers; the staleness metric rises while blind and returns to 0.
func TestQuietStreamMovesToNextEndpoint(t *testing.T) {
	cli := testetcd.Start(t, nil)
	direct := strings.TrimPrefix(cli.Endpoints()[0], "http://") // host:port, for the freezer
	frz := startFreezer(t, direct)
	a, b := "frozen-to-be", "healthy"
	loads := 0
	s := New(cli, testZones, 5*time.Second, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.afterLoad = func() { loads++ }
	live := Liveness{Interval: 200 * time.Millisecond, Timeout: 500 * time.Millisecond}
	s.WatchOn([]Endpoint{{Name: a, Client: client(t, frz.l.Addr().String())}, {Name: b, Client: client(t, direct)}}, live)
	runStore(t, s)

	mustPut(t, cli, "/skydns/local/cluster/svc/ns/a/x", `{"host":"10.0.0.1"}`)
	eventually(t, "a change through the first endpoint", func() bool { return len(addrs(s.Snapshot(), "a.ns.svc.cluster.local")) == 1 })
	if got := value(s.endpoint.WithLabelValues(a)); got != 1 {
		t.Fatalf("watch_endpoint{%s} = %v, want 1", a, got)
	}
	// Idle for several timeouts: the progress answers keep the stream.
	time.Sleep(4 * live.Timeout)
	if got := value(s.restarts.WithLabelValues(ReasonProgressTimeout)); got != 0 {
		t.Fatalf("a healthy idle stream was dropped %v times", got)
	}
	if got := s.staleness(); got != 0 {
		t.Fatalf("staleness %v on a healthy stream, want 0", got)
	}

	frz.freeze()
	put := time.Now()
	mustPut(t, cli, "/skydns/local/cluster/svc/ns/b/x", `{"host":"10.0.0.2"}`)
	var stale float64
	eventually(t, "the change after the freeze", func() bool {
		stale = max(stale, s.staleness())
		return len(addrs(s.Snapshot(), "b.ns.svc.cluster.local")) == 1
	})
	t.Logf("blind for %v with %+v", time.Since(put).Round(time.Millisecond), live)
	if stale == 0 {
		t.Error("staleness stayed 0 while the stream was frozen")
	}
	if got := value(s.restarts.WithLabelValues(ReasonProgressTimeout)); got != 1 {
		t.Errorf("restarts{progress_timeout} = %v, want 1", got)
	}
	if got := value(s.restarts.WithLabelValues(ReasonCompacted)); got != 0 {
		t.Errorf("restarts{compacted} = %v, want 0", got)
	}
	if loads != 1 {
		t.Errorf("%d loads, want 1: the watch must resume, not relist", loads)
	}
	if va, vb := value(s.endpoint.WithLabelValues(a)), value(s.endpoint.WithLabelValues(b)); va != 0 || vb != 1 {
		t.Errorf("watch_endpoint %s=%v %s=%v, want 0 and 1", a, va, b, vb)
	}
	eventually(t, "staleness back to 0", func() bool { return s.staleness() == 0 })
	// Nothing was missed between the snapshot's revision and the new watch.
	mustPut(t, cli, "/skydns/local/cluster/svc/ns/c/x", `{"host":"10.0.0.3"}`)
	eventually(t, "a change on the second endpoint", func() bool { return len(addrs(s.Snapshot(), "c.ns.svc.cluster.local")) == 1 })
	frz.thaw()
}

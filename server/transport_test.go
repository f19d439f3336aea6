package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/etcdns/etcdns/server/forward"
)

// serve starts srv on a loopback port and stops it when the test ends.
func serve(t *testing.T, srv *Server, addr string) string {
	t.Helper()
	l, stop, done := start(t, srv, addr)
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return l.Addr
}

// start serves srv on addr until stop is called; done then has Serve's
// error.
func start(t *testing.T, srv *Server, addr string) (l *Listener, stop func(), done <-chan error) {
	t.Helper()
	l, err := Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, l) }()
	return l, cancel, served
}

func pack(t *testing.T, id uint16, name string, qtype uint16) []byte {
	t.Helper()
	m := new(dns.Msg).SetQuestion(name, qtype)
	m.Id = id
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A burst of datagrams, read and answered in batches, each gets its own
// answer at its own address: over IPv4 and IPv6.
// Either way a reader waits for a dry socket: in Go's poller, and (on
// Linux) in the kernel.
func TestUDPBurst(t *testing.T) {
	for _, wait := range readerWaits {
		t.Run(wait.name, func(t *testing.T) { testUDPBurst(t, wait.from) })
	}
}

// readerWaits are the GOMAXPROCS thresholds (Server.kernelWaitFrom) that
// make every UDP reader wait in the kernel, where it can, or in Go's
// poller.
var readerWaits = []struct {
	name string
	from int
}{{"kernel", 1}, {"poller", 1 << 30}}

func testUDPBurst(t *testing.T, kernelWaitFrom int) {
	if kernelWaitFrom == 1 && runtime.GOOS == "linux" {
		// Without an eventfd the readers would wait in the poller, and
		// this would pass for the wrong reason.
		srv := newServer(t, testSnapshot(t, 0))
		srv.kernelWaitFrom = kernelWaitFrom
		stop := srv.newUDPStop()
		if stop == nil {
			t.Fatal("no eventfd: the readers cannot wait in the kernel")
		}
		stop.close()
	}
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		srv := newServer(t, testSnapshot(t, 0))
		srv.kernelWaitFrom = kernelWaitFrom
		at := serve(t, srv, addr)
		var conns []net.Conn
		for range 3 {
			c, err := net.Dial("udp", at)
			if err != nil {
				t.Skipf("%s: %v", addr, err) // no IPv6 loopback here
			}
			defer c.Close()
			conns = append(conns, c)
		}
		const n = 200
		for i := range n {
			name := "kubernetes.default.svc.cluster.local."
			if i%2 == 1 {
				name = "nope.default.svc.cluster.local."
			}
			if _, err := conns[i%3].Write(pack(t, uint16(i), name, dns.TypeA)); err != nil {
				t.Fatal(err)
			}
		}
		seen := map[uint16]bool{}
		buf := make([]byte, 4096)
		for i, c := range conns {
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			for j := i; j < n; j += len(conns) {
				k, err := c.Read(buf)
				if err != nil {
					t.Fatalf("%s: %d of %d queries answered: %v", addr, len(seen), n, err)
				}
				var m dns.Msg
				if err := m.Unpack(buf[:k]); err != nil {
					t.Fatalf("%s: %v", addr, err)
				}
				if int(m.Id)%len(conns) != i {
					t.Fatalf("%s: answer %d reached the socket of query %d", addr, m.Id, i)
				}
				want := dns.RcodeSuccess
				if m.Id%2 == 1 {
					want = dns.RcodeNameError
				}
				if m.Rcode != want || seen[m.Id] {
					t.Fatalf("%s: answer %d: rcode %s, seen before %v", addr, m.Id, dns.RcodeToString[m.Rcode], seen[m.Id])
				}
				seen[m.Id] = true
			}
		}
		if len(seen) != n {
			t.Fatalf("%s: %d of %d queries answered", addr, len(seen), n)
		}
	}
}

// Shutdown stops the UDP readers whether their sockets are dry (asleep in
// the poller or in the kernel) or kept busy by a client that never pauses.
func TestUDPReadersStop(t *testing.T) {
	for _, wait := range readerWaits {
		for _, busy := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/busy=%v", wait.name, busy), func(t *testing.T) {
				srv := newServer(t, testSnapshot(t, 0))
				srv.kernelWaitFrom = wait.from
				l, cancel, done := start(t, srv, "127.0.0.1:0")
				c, err := net.Dial("udp", l.Addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				q := pack(t, 1, "kubernetes.default.svc.cluster.local.", dns.TypeA)
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				buf := make([]byte, 512)
				if _, err := c.Write(q); err != nil {
					t.Fatal(err)
				}
				if _, err := c.Read(buf); err != nil {
					t.Fatalf("no answer before shutdown: %v", err)
				}
				quit := make(chan struct{})
				defer close(quit)
				if busy {
					go func() {
						for {
							select {
							case <-quit:
								return
							default:
								_, _ = c.Write(q)
							}
						}
					}()
					time.Sleep(50 * time.Millisecond)
				}
				cancel()
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("Serve: %v", err)
					}
				case <-time.After(5 * time.Second):
					t.Fatal("Serve still running 5 s after shutdown began")
				}
			})
		}
	}
}

// Queries pipelined on one connection are answered in order, each whole.
func TestTCPPipelined(t *testing.T) {
	at := serve(t, newServer(t, testSnapshot(t, 300)), "127.0.0.1:0")
	c, err := net.Dial("tcp", at)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var burst []byte
	for i := range 50 {
		name := "kubernetes.default.svc.cluster.local."
		if i%5 == 0 {
			name = "big.default.svc.cluster.local."
		}
		q := pack(t, uint16(i), name, dns.TypeA)
		burst = binary.BigEndian.AppendUint16(burst, uint16(len(q)))
		burst = append(burst, q...)
	}
	if _, err := c.Write(burst); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for i := range 50 {
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		b := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatal(err)
		}
		var m dns.Msg
		if err := m.Unpack(b); err != nil {
			t.Fatal(err)
		}
		want := 1
		if i%5 == 0 {
			want = 300
		}
		if int(m.Id) != i || len(m.Answer) != want || m.Truncated {
			t.Fatalf("answer %d: id %d, %d records (want %d), TC %v", i, m.Id, len(m.Answer), want, m.Truncated)
		}
	}
}

// A connection that sends nothing is closed after the idle time, and
// past the maximum a new connection is closed at once while the open ones
// keep working.
func TestTCPBounds(t *testing.T) {
	srv := newServer(t, testSnapshot(t, 0))
	srv.TCPIdle, srv.TCPMaxConns = 300*time.Millisecond, 2
	at := serve(t, srv, "127.0.0.1:0")
	client := &dns.Client{Net: "tcp", Timeout: 2 * time.Second}
	var open []*dns.Conn
	for range 2 {
		c, err := client.Dial(at)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		open = append(open, c)
	}
	q := new(dns.Msg).SetQuestion("kubernetes.default.svc.cluster.local.", dns.TypeA)
	for _, c := range open {
		if r, _, err := client.ExchangeWithConn(q, c); err != nil || len(r.Answer) != 1 {
			t.Fatalf("open connection: %v %v", r, err)
		}
	}
	third, err := client.Dial(at)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	if _, _, err := client.ExchangeWithConn(q, third); err == nil {
		t.Fatal("a third connection was served past the maximum of 2")
	}
	// A silent connection goes after the idle time, query or not before.
	start := time.Now()
	_ = open[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := open[0].Read(make([]byte, 1)); err == nil {
		t.Fatal("an idle connection got data")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("idle connection closed after %v, idle time 300ms", d)
	}
	// Its slot is free again.
	waitUntil(t, func() bool {
		c, err := client.Dial(at)
		if err != nil {
			return false
		}
		defer c.Close()
		r, _, err := client.ExchangeWithConn(q, c)
		return err == nil && len(r.Answer) == 1
	})
}

// Messages that get no answer (empty frames) do not keep a connection
// from being idle: only answers move its deadline.
func TestTCPIdleIgnoresUnansweredMessages(t *testing.T) {
	srv := newServer(t, testSnapshot(t, 0))
	srv.TCPIdle = 300 * time.Millisecond
	at := serve(t, srv, "127.0.0.1:0")
	c, err := net.Dial("tcp", at)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q, err := new(dns.Msg).SetQuestion("kubernetes.default.svc.cluster.local.", dns.TypeA).Pack()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(append([]byte{byte(len(q) >> 8), byte(len(q))}, q...)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 2)); err != nil {
		t.Fatalf("no answer to a query: %v", err)
	}
	start := time.Now()
	closed := make(chan time.Duration)
	go func() {
		_, _ = io.Copy(io.Discard, c) // the rest of the answer, then EOF when closed
		closed <- time.Since(start)
	}()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case d := <-closed:
			if d > time.Second {
				t.Fatalf("closed %v after the last answer, idle time 300ms", d)
			}
			return
		case <-tick.C:
			if _, err := c.Write([]byte{0, 0}); err != nil {
				return // closed while we wrote
			}
			if time.Since(start) > 3*time.Second {
				t.Fatal("empty frames kept the connection open past three seconds, idle time 300ms")
			}
		}
	}
}

func waitUntil(t *testing.T, f func() bool) {
	t.Helper()
	for range 100 {
		if f() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("condition not met within 2s")
}

// A 0x20 query is answered from the cache made by any spelling, with its
// own spelling in the question section.
func TestMixedCaseFromCache(t *testing.T) {
	srv := newServer(t, testSnapshot(t, 0))
	w := &worker{s: srv}
	for i, name := range []string{"KuBeRnEtEs.default.svc.cluster.local.", "kubernetes.default.svc.cluster.local.", "kubernetes.DEFAULT.svc.cluster.local."} {
		var m dns.Msg
		if err := m.Unpack(w.handle(pack(t, uint16(i), name, dns.TypeA))); err != nil {
			t.Fatal(err)
		}
		if m.Question[0].Name != name || len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "10.96.0.1" {
			t.Fatalf("query %d (%s): %v", i, name, &m)
		}
	}
	c, _ := srv.cacheFor(srv.snapshot())
	n := 0
	for i := range c.shards {
		n += c.shards[i].idx.live
	}
	if n != 1 {
		t.Fatalf("%d cache entries for three spellings of one question, want 1", n)
	}
}

// Cached answers still rotate: successive queries for n records start at
// each of them in turn (at rotations of them, for more), evenly where n
// divides rotations.
func TestCachedRotation(t *testing.T) {
	for _, n := range []int{2, 3, 4, 5, 7, 8, 11} {
		srv := newServer(t, testSnapshot(t, n))
		w := &worker{s: srv}
		q := pack(t, 1, "big.default.svc.cluster.local.", dns.TypeA)
		firsts := map[string]int{}
		for range 2 * rotations {
			var m dns.Msg
			if err := m.Unpack(w.handle(q)); err != nil || len(m.Answer) != n {
				t.Fatalf("%v %v", &m, err)
			}
			firsts[m.Answer[0].(*dns.A).A.String()]++
		}
		if len(firsts) != min(n, rotations) {
			t.Errorf("%d records: first records over %d queries %v, want %d of them in turn", n, 2*rotations, firsts, min(n, rotations))
		}
		for a, k := range firsts {
			if rotations%n == 0 && k != 2*rotations/n {
				t.Errorf("%d records: first records %v, want an even spread (%s)", n, firsts, a)
			}
		}
	}
}

// A client that asks again over TCP after a truncated answer opens a
// connection for the one question: successive connections still rotate.
func TestTCPConnectionsRotate(t *testing.T) {
	srv := newServer(t, testSnapshot(t, 4))
	l, stop, done := start(t, srv, "127.0.0.1:0")
	defer func() {
		stop()
		<-done
	}()
	firsts := map[string]int{}
	for range 16 {
		m, _, err := (&dns.Client{Net: "tcp", Timeout: 2 * time.Second}).Exchange(new(dns.Msg).SetQuestion("big.default.svc.cluster.local.", dns.TypeA), l.Addr)
		if err != nil || len(m.Answer) != 4 {
			t.Fatalf("%v %v", m, err)
		}
		firsts[m.Answer[0].(*dns.A).A.String()]++
	}
	if len(firsts) != 4 {
		t.Errorf("first records over 16 connections of one question: %v, want each of the 4", firsts)
	}
}

// A truncated answer is cached for its size only: a client with a larger
// buffer gets the whole answer.
func TestTruncationCachedBySize(t *testing.T) {
	srv := newServer(t, testSnapshot(t, 60))
	w := &worker{s: srv}
	ask := func(size uint16) *dns.Msg {
		m := new(dns.Msg).SetQuestion("big.default.svc.cluster.local.", dns.TypeA)
		m.SetEdns0(size, false)
		b, _ := m.Pack()
		var r dns.Msg
		if err := r.Unpack(w.handle(b)); err != nil {
			t.Fatal(err)
		}
		return &r
	}
	for range 2 {
		if r := ask(512); !r.Truncated || len(r.Answer) != 28 {
			t.Fatalf("60 records in 512 octets: TC %v, %d records, want TC and the 28 that fit", r.Truncated, len(r.Answer))
		}
		if r := ask(4096); r.Truncated || len(r.Answer) != 60 {
			t.Fatalf("60 records in 4096 octets: TC %v, %d records", r.Truncated, len(r.Answer))
		}
	}
}

// A question waiting on a silent upstream does not hold a shutdown for
// the upstream's whole timeout: the exchange is ended a moment in.
func TestShutdownEndsWaitingForwards(t *testing.T) {
	srv := newServer(t, testSnapshot(t, 0))
	silent, err := net.ListenPacket("udp", "127.0.0.1:0") // reads, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	f, err := forward.New(forward.Config{Upstreams: []netip.AddrPort{netip.MustParseAddrPort(silent.LocalAddr().String())}, Timeout: 20 * time.Second,
		Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, Listen: "127.0.0.1:1"}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	srv.SetForwarder(f)
	l, stop, done := start(t, srv, "127.0.0.1:0")
	c, err := net.Dial("udp", l.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(pack(t, 1, "www.example.org.", dns.TypeA)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the question is with the upstream
	start := time.Now()
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("shutdown took %v", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("shutdown still waits on the upstream after 10 s (its timeout is 20 s)")
	}
}

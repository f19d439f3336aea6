package etcdclient

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func TestWatchReadsTarget(t *testing.T) {
	for addr, want := range map[string][2]string{
		"127.0.0.1:2379":        {"tcp", "127.0.0.1:2379"},
		"[::1]:2379":            {"tcp", "[::1]:2379"},
		"unix:///run/etcd.sock": {"unix", "/run/etcd.sock"},
		"unix:etcd.sock":        {"unix", "etcd.sock"},
	} {
		if n, a := target(addr); n != want[0] || a != want[1] {
			t.Errorf("target(%q) = %s %s; want %s %s", addr, n, a, want[0], want[1])
		}
	}
}

// Every connection the dialer makes adds what it reads to one count, and
// only what it reads: docs/fleet.md's bandwidth a frontend costs.
func TestWatchReadsCountWhatTheyRead(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns WatchConns
	sent := map[int]string{0: strings.Repeat("a", 1000), 1: strings.Repeat("b", 70000)}
	for i := range 2 {
		c, s := dialed(t, ln, 0, &conns)
		const req = "a request, not counted"
		go func() {
			io.ReadFull(s, make([]byte, len(req)))
			s.Write([]byte(sent[i]))
			s.Close()
		}()
		if _, err := c.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(c)
		if err != nil || string(got) != sent[i] {
			t.Fatalf("connection %d read %d bytes, %v; want %d", i, len(got), err, len(sent[i]))
		}
	}
	if got, want := conns.Received(), uint64(71000); got != want {
		t.Errorf("counted %d bytes read; want %d", got, want)
	}
}

// Reset closes every connection the dialer made that is still open, and
// forgets them; one closed before is not closed again.
func TestWatchConnsReset(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns WatchConns
	var clients, servers []net.Conn
	for range 3 {
		c, s := dialed(t, ln, 0, &conns)
		clients, servers = append(clients, c), append(servers, s)
	}
	clients[0].Close()
	conns.Reset()
	if n := len(conns.open); n != 0 {
		t.Errorf("%d connections still kept after Reset", n)
	}
	for i, s := range servers {
		s.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := s.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("connection %d: the server read %v; want EOF, the client closed", i, err)
		}
	}
	if _, err := clients[1].Write([]byte("x")); err == nil {
		t.Error("a write on a reset connection succeeded")
	}
}

// dialed dials ln as WatchReads does (coalescing reads for coalesce, into
// conns if set), and returns the connection and the listener's end of it,
// both closed when the test ends.
func dialed(t *testing.T, ln net.Listener, coalesce time.Duration, conns *WatchConns) (net.Conn, net.Conn) {
	t.Helper()
	c, err := watchDialer(3*time.Second, coalesce, conns)(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

package etcdclient

import (
	"io"
	"net"
	"testing"
	"time"
)

// pair is a loopback TCP connection: the client end as WatchReads makes it,
// and the server end.
func pair(t *testing.T, coalesce time.Duration) (*watchConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	w := newWatchConn(c, coalesce)
	if w.rc == nil {
		t.Fatal("no raw reads on Linux")
	}
	return w, s
}

// writeApart writes each part gap after the one before, in the background.
func writeApart(s net.Conn, gap time.Duration, parts ...string) {
	go func() {
		for i, p := range parts {
			if i > 0 {
				time.Sleep(gap)
			}
			s.Write([]byte(p))
		}
	}()
}

// The first change after a quiet spell is read at once; the changes that
// follow it within the window are read together, once, after it.
func TestWatchReadsTakeTheFirstAtOnceAndTheRestOfABurstTogether(t *testing.T) {
	const window, gap = 600 * time.Millisecond, 50 * time.Millisecond
	for _, tc := range []struct {
		coalesce time.Duration
		second   string
	}{
		{window, "bcd"},
		{0, "b"}, // each as it comes
	} {
		w, s := pair(t, tc.coalesce)
		buf := make([]byte, 64)
		writeApart(s, gap, "", "a")
		start := time.Now()
		n, err := w.Read(buf)
		if err != nil || string(buf[:n]) != "a" {
			t.Fatalf("coalesce %v: first read %q, %v; want \"a\"", tc.coalesce, buf[:n], err)
		}
		if d := time.Since(start); d >= window {
			t.Errorf("coalesce %v: the first change was read after %v: it must not wait for the window", tc.coalesce, d)
		}
		writeApart(s, gap, "b", "c", "d")
		n, err = w.Read(buf)
		if err != nil || string(buf[:n]) != tc.second {
			t.Errorf("coalesce %v: second read %q, %v; want %q", tc.coalesce, buf[:n], err, tc.second)
		}
	}
}

// A read that fills the buffer leaves more to read: the next read does not
// wait for the window.
func TestWatchReadsDoNotWaitInTheMiddleOfAResponse(t *testing.T) {
	w, s := pair(t, time.Hour)
	writeApart(s, 50*time.Millisecond, "", "abcdef")
	buf := make([]byte, 4)
	if n, err := w.Read(buf); err != nil || string(buf[:n]) != "abcd" {
		t.Fatalf("first read %q, %v", buf[:n], err)
	}
	done := make(chan string)
	go func() {
		n, _ := w.Read(buf)
		done <- string(buf[:n])
	}()
	select {
	case got := <-done:
		if got != "ef" {
			t.Errorf("second read %q; want \"ef\"", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the rest of a response waited for the window")
	}
}

func TestWatchReadsEndAtEOF(t *testing.T) {
	w, s := pair(t, 10*time.Millisecond)
	s.Write([]byte("x"))
	s.Close()
	buf := make([]byte, 8)
	if n, err := w.Read(buf); err != nil || n != 1 {
		t.Fatalf("read %d, %v", n, err)
	}
	if _, err := w.Read(buf); err != io.EOF {
		t.Errorf("after the peer closed: %v; want io.EOF", err)
	}
}

func TestWatchReadsTarget(t *testing.T) {
	for addr, want := range map[string][2]string{
		"127.0.0.1:2379":        {"tcp", "127.0.0.1:2379"},
		"unix:///run/etcd.sock": {"unix", "/run/etcd.sock"},
		"unix:etcd.sock":        {"unix", "etcd.sock"},
	} {
		if n, a := target(addr); n != want[0] || a != want[1] {
			t.Errorf("target(%q) = %s %s; want %s %s", addr, n, a, want[0], want[1])
		}
	}
}

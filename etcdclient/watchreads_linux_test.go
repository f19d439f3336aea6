package etcdclient

import (
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pair is a loopback TCP connection: the client end as WatchReads dials
// it, and the server end.
func pair(t *testing.T, coalesce time.Duration) (*watchConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, s := dialed(t, ln, coalesce, nil)
	w := c.(*watchConn)
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

// change is what stands for a change on the wire: changeMin bytes of c.
func change(c byte) string { return strings.Repeat(string(c), changeMin) }

// firstAfterQuiet reads what the server writes after a pause, and checks
// that the read had to wait for it, as a change after a quiet spell does.
func firstAfterQuiet(t *testing.T, w *watchConn, s net.Conn, want string) {
	t.Helper()
	writeApart(s, 200*time.Millisecond, "", want)
	buf := make([]byte, 1024)
	n, err := w.Read(buf)
	if err != nil || string(buf[:n]) != want {
		t.Fatalf("first read %q, %v; want %q", buf[:n], err, want)
	}
	if !w.waited {
		t.Skip("the data was there before the read: this machine was too slow to test the window")
	}
}

// The first change after a quiet spell is read at once; the changes that
// follow it within the window are read together, once, after it.
func TestWatchReadsTakeTheFirstAtOnceAndTheRestOfABurstTogether(t *testing.T) {
	const window, gap = 3 * time.Second, 200 * time.Millisecond
	for _, tc := range []struct {
		coalesce time.Duration
		second   string
	}{
		{window, "bcd"},
		{0, "b"}, // each as it comes
	} {
		w, s := pair(t, tc.coalesce)
		start := time.Now()
		firstAfterQuiet(t, w, s, change('a'))
		if d := time.Since(start); d >= window {
			t.Errorf("coalesce %v: the first change was read after %v: it must not wait for the window", tc.coalesce, d)
		}
		writeApart(s, gap, "b", "c", "d")
		buf := make([]byte, 64)
		n, err := w.Read(buf)
		if err != nil || string(buf[:n]) != tc.second {
			t.Errorf("coalesce %v: second read %q, %v; want %q", tc.coalesce, buf[:n], err, tc.second)
		}
	}
}

// A window waits on the connection's timer in the poller, the whole
// window and no less; closing the connection (gRPC does, from another
// goroutine, when the stream ends) ends a Read waiting out a window at
// once, where a sleeping Read would have slept on to the window's end.
func TestWatchReadsWaitAWindowOnTheirTimer(t *testing.T) {
	const window = 300 * time.Millisecond
	w, s := pair(t, window)
	if w.timer == nil {
		t.Fatal("no window timer on Linux")
	}
	firstAfterQuiet(t, w, s, change('a'))
	s.Write([]byte(change('b')))
	start := time.Now()
	buf := make([]byte, 1024)
	if n, err := w.Read(buf); err != nil || string(buf[:n]) != change('b') {
		t.Fatalf("read in a window %q, %v", buf[:n], err)
	}
	if d := time.Since(start); d < window {
		t.Errorf("the window ended after %v, before its %v", d, window)
	}

	w, s = pair(t, 5*time.Second)
	firstAfterQuiet(t, w, s, change('a'))
	go func() {
		time.Sleep(200 * time.Millisecond)
		w.Close()
	}()
	start = time.Now()
	if _, err := w.Read(buf); err == nil {
		t.Error("a read of a closed connection succeeded")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("closing the connection ended the window's read after %v, not at once", d)
	}
}

// Less than a change after a quiet spell (a progress answer, a liveness
// read's reply) opens no window: what comes next is read as it comes.
func TestWatchReadsOpenNoWindowForLessThanAChange(t *testing.T) {
	const window = 3 * time.Second
	w, s := pair(t, window)
	firstAfterQuiet(t, w, s, "p")
	if w.open {
		t.Error("a read of less than a change opened a window")
	}
	writeApart(s, 200*time.Millisecond, "", change('b'))
	start := time.Now()
	buf := make([]byte, 1024)
	if n, err := w.Read(buf); err != nil || string(buf[:n]) != change('b') {
		t.Fatalf("read after less than a change %q, %v; want a change", buf[:n], err)
	}
	if d := time.Since(start); d >= window {
		t.Errorf("the change was read %v after the read began: it waited for a window", d)
	}
}

// A window that brought changes opens the next at once, so a steady
// stream is read a window at a time, not a change alone after each
// window; a window that brought nothing ends the streak, and the next
// change after it is read as it comes.
func TestWatchReadsKeepWindowsOpenWhileChangesFlow(t *testing.T) {
	const window, gap = time.Second, 100 * time.Millisecond
	w, s := pair(t, window)
	firstAfterQuiet(t, w, s, change('a'))
	buf := make([]byte, 1024)
	writeApart(s, 0, change('b'))
	if n, err := w.Read(buf); err != nil || string(buf[:n]) != change('b') {
		t.Fatalf("the window after the first change read %q, %v; want a change", buf[:n], err)
	}
	writeApart(s, gap, change('c'), change('d'))
	if n, err := w.Read(buf); err != nil || string(buf[:n]) != change('c')+change('d') {
		t.Fatalf("the read after a window that brought a change: %q, %v; want the next two together", buf[:n], err)
	}
	// Nothing comes in the next window: its read waits past it for "e".
	writeApart(s, window+window/2, "", "e")
	start := time.Now()
	if n, err := w.Read(buf); err != nil || string(buf[:n]) != "e" {
		t.Fatalf("read after an empty window %q, %v; want \"e\"", buf[:n], err)
	}
	if d := time.Since(start); d >= 2*window+window/2 {
		t.Errorf("\"e\" was read %v after the read began: it waited for a window of its own", d)
	}
	if w.open {
		t.Error("a window that brought nothing, then less than a change, left the windows open")
	}
	// A window that brings less than a change (a call's trailers) opens
	// no other: what follows it is read as it comes.
	firstAfterQuiet(t, w, s, change('g'))
	if !w.open {
		t.Fatal("a change after a quiet spell opened no window")
	}
	writeApart(s, 0, "f")
	if n, err := w.Read(buf); err != nil || string(buf[:n]) != "f" {
		t.Fatalf("read in the window after a change: %q, %v; want \"f\"", buf[:n], err)
	}
	if w.open {
		t.Error("a window that brought less than a change opened another")
	}
}

// Through the window the socket's low-water mark is raised, so that what
// arrives does not wake the poller (that it does not is bench/changecpu's
// to show: this checks the mark). The read after the window still returns
// what came in it, less than the mark. Since that window brought data,
// the next read opens another; when that one brings nothing, the read
// waits for more with the mark at 1 again: a small change wakes it.
func TestWatchReadsHoldTheLowWaterMarkThroughTheWindow(t *testing.T) {
	w, s := pair(t, 3*time.Second)
	if w.mark <= 1 || w.mark > 32<<10 {
		t.Fatalf("mark %d; want 2 to 32 KiB", w.mark)
	}
	firstAfterQuiet(t, w, s, change('a'))
	lowat := func() int {
		var v int
		var err error
		if cerr := w.rc.Control(func(fd uintptr) {
			v, err = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT)
		}); cerr != nil || err != nil {
			t.Fatal(cerr, err)
		}
		return v
	}
	read := func() chan string {
		done := make(chan string, 1)
		go func() {
			buf := make([]byte, 1024)
			n, _ := w.Read(buf)
			done <- string(buf[:n])
		}()
		return done
	}
	// seen waits up to 5 s for the mark to be want: less than two windows.
	seen := func(what string, want int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); lowat() != want; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Errorf("low-water mark %s %d; want %d", what, lowat(), want)
				return
			}
		}
	}
	done := read()
	seen("in the window", w.mark)
	s.Write([]byte(change('b')))
	if got := <-done; got != change('b') {
		t.Errorf("read after the window %q; want a change", got)
	}
	done = read()
	seen("in the window after one that brought data", w.mark)
	seen("while a read waits for data after an empty window", 1)
	s.Write([]byte("c"))
	select {
	case got := <-done:
		if got != "c" {
			t.Errorf("read of a change after the window %q; want \"c\"", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a one-byte change did not wake a read waiting after the window")
	}
}

// A read that fills the buffer leaves more to read: the next read does not
// wait for the window.
func TestWatchReadsDoNotWaitInTheMiddleOfAResponse(t *testing.T) {
	w, s := pair(t, time.Hour)
	writeApart(s, 200*time.Millisecond, "", "abcdef")
	buf := make([]byte, 4)
	if n, err := w.Read(buf); err != nil || string(buf[:n]) != "abcd" {
		t.Fatalf("first read %q, %v", buf[:n], err)
	}
	if !w.waited {
		t.Skip("the data was there before the read: this machine was too slow to test the window")
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

func TestWatchReadsEnd(t *testing.T) {
	t.Run("EOF", func(t *testing.T) {
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
	})
	t.Run("reset", func(t *testing.T) {
		w, s := pair(t, 0)
		s.(*net.TCPConn).SetLinger(0) // close sends a reset
		s.Close()
		if _, err := w.Read(make([]byte, 8)); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("after a reset: %v; want ECONNRESET", err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		w, _ := pair(t, 0)
		w.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := w.Read(make([]byte, 8)); !errors.Is(err, syscall.ETIMEDOUT) && !isTimeout(err) {
			t.Errorf("past the deadline: %v; want a timeout", err)
		}
	})
	t.Run("closed while waiting", func(t *testing.T) {
		w, _ := pair(t, 0)
		time.AfterFunc(50*time.Millisecond, func() { w.Close() })
		if _, err := w.Read(make([]byte, 8)); !errors.Is(err, net.ErrClosed) {
			t.Errorf("closed: %v; want net.ErrClosed", err)
		}
	})
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// gRPC's transport sets TCP_USER_TIMEOUT on the connections its own dialer
// makes; on this one the dialer must, or a member that stops acknowledging
// is left to gRPC's keepalive alone.
func TestWatchReadsKeepTheSocketOptionsGRPCSets(t *testing.T) {
	w, _ := pair(t, 0)
	var alive, user int
	var gerr error
	if err := w.rc.Control(func(fd uintptr) {
		alive, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE)
		if gerr == nil {
			user, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
		}
	}); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	if alive != 1 || user != 3000 {
		t.Errorf("SO_KEEPALIVE %d, TCP_USER_TIMEOUT %d ms; want 1 and 3000", alive, user)
	}
}

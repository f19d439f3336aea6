//go:build integration

package harness

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

func TestProxy(t *testing.T) {
	t.Parallel()
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { echo.Close() })
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	p := StartProxy(t, echo.Addr().String())
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", p.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	roundTrip := func(c net.Conn, msg string, within time.Duration) error {
		if _, err := c.Write([]byte(msg)); err != nil {
			return err
		}
		return proxyRead(c, msg, within)
	}

	c := dial()
	if err := roundTrip(c, "one", time.Second); err != nil {
		t.Fatal(err)
	}
	p.Hold()
	if err := roundTrip(c, "two", 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("held: %v, want a timeout", err)
	}
	p.Release()
	if err := proxyRead(c, "two", time.Second); err != nil {
		t.Fatalf("released: %v", err)
	}
	p.Cut()
	if err := proxyRead(c, "", time.Second); !errors.Is(err, io.EOF) {
		t.Fatalf("cut: %v, want EOF", err)
	}
	if err := roundTrip(dial(), "three", time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("new connection while cut: %v, want it closed at once", err)
	}
	p.Restore()
	if err := roundTrip(dial(), "four", time.Second); err != nil {
		t.Fatalf("restored: %v", err)
	}
}

// proxyRead reads exactly len(want) bytes (one, for an empty want) within d.
func proxyRead(c net.Conn, want string, d time.Duration) error {
	c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, max(len(want), 1))
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != want {
		return errors.New("read " + string(buf) + ", want " + want)
	}
	return nil
}

package server

import (
	"bytes"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/etcdns/etcdns/config"
	"github.com/etcdns/etcdns/server/snap"
)

// lockedBuffer is a log's output, written by the server's goroutines and
// read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSpace(l.b.String()), "\n")
}

// serveLogged serves testSnapshot on loopback with the query log of
// classes, until the test ends, and returns where its log goes.
func serveLogged(t *testing.T, classes LogClasses) (*Listener, *lockedBuffer) {
	return serveLoggedOn(t, classes, "127.0.0.1:0")
}

func serveLoggedOn(t *testing.T, classes LogClasses, addr string) (*Listener, *lockedBuffer) {
	out := new(lockedBuffer)
	sn := testSnapshot(t, 0)
	srv := New(func() *snap.Snapshot { return sn }, opts, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(out, nil)))
	srv.SetQueryLog(classes)
	l, stop, done := start(t, srv, addr)
	t.Cleanup(func() {
		stop()
		<-done
	})
	return l, out
}

// The query log writes a line for each answer of the classes asked for,
// over UDP and TCP, with what CoreDNS's log plugin shows, and none for the
// others.
func TestQueryLog(t *testing.T) {
	for _, tc := range []struct {
		classes []string
		want    []string // the lines' names, in the order asked
	}{
		{[]string{"denial", "error"}, []string{"nosuch.default.svc.cluster.local.", "kubernetes.default.svc.cluster.local.", "example.com."}},
		{[]string{"all"}, []string{"kubernetes.default.svc.cluster.local.", "nosuch.default.svc.cluster.local.", "kubernetes.default.svc.cluster.local.", "example.com."}},
		{[]string{"success"}, []string{"kubernetes.default.svc.cluster.local."}},
	} {
		t.Run(strings.Join(tc.classes, ","), func(t *testing.T) {
			classes, err := ParseLogClasses(tc.classes)
			if err != nil {
				t.Fatal(err)
			}
			l, out := serveLogged(t, classes)
			for _, q := range []struct {
				net, name string
				qtype     uint16
				rcode     int
			}{
				{"udp", "kubernetes.default.svc.cluster.local.", dns.TypeA, dns.RcodeSuccess},
				{"udp", "nosuch.default.svc.cluster.local.", dns.TypeA, dns.RcodeNameError},
				{"tcp", "kubernetes.default.svc.cluster.local.", dns.TypeAAAA, dns.RcodeSuccess}, // NODATA
				{"tcp", "example.com.", dns.TypeA, dns.RcodeRefused},                             // outside the zones, no forwarder
			} {
				m := new(dns.Msg).SetQuestion(q.name, q.qtype)
				m.Id = 4242
				r, _, err := (&dns.Client{Net: q.net, Timeout: 2 * time.Second}).Exchange(m, l.Addr)
				if err != nil || r.Rcode != q.rcode {
					t.Fatalf("%s %s: %v %v", q.net, q.name, r, err)
				}
			}
			lines := out.lines()
			var names []string
			for _, line := range lines {
				if line == "" {
					continue
				}
				if !strings.Contains(line, "msg=query ") {
					t.Errorf("a line that is no query's: %s", line)
					continue
				}
				names = append(names, field(line, "name"))
			}
			if strings.Join(names, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("lines for %v; want %v:\n%s", names, tc.want, strings.Join(lines, "\n"))
			}
			for _, line := range lines {
				want := map[string]string{"id": "4242", "class": "IN", "do": "false", "bufsize": "512"}
				switch field(line, "name") {
				case "nosuch.default.svc.cluster.local.":
					want["proto"], want["type"], want["rcode"], want["flags"] = "udp", "A", "NXDOMAIN", "qr,aa,rd"
				case "example.com.":
					want["proto"], want["type"], want["rcode"], want["flags"] = "tcp", "A", "REFUSED", "qr,rd"
				case "kubernetes.default.svc.cluster.local.":
					want["rcode"], want["flags"] = "NOERROR", "qr,aa,rd"
				}
				if field(line, "proto") == "tcp" {
					want["bufsize"] = "65535" // as CoreDNS's: any size over TCP
				}
				for k, v := range want {
					if got := field(line, k); got != v {
						t.Errorf("%s=%q; want %q in %s", k, got, v, line)
					}
				}
				host, _, err := net.SplitHostPort(field(line, "client"))
				if err != nil || host != "127.0.0.1" {
					t.Errorf("client %q; want 127.0.0.1 and the client's port", field(line, "client"))
				}
				if field(line, "size") == "" || field(line, "rsize") == "" || field(line, "duration") == "" {
					t.Errorf("no size, rsize or duration: %s", line)
				}
			}
		})
	}
}

// field is the value of key in a line of slog's text format.
func field(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

func TestParseLogClasses(t *testing.T) {
	for names, want := range map[string]LogClasses{
		"":              0,
		"all":           LogAll,
		"denial,error":  LogDenial | LogError,
		"Success":       LogSuccess,
		"success,error": LogSuccess | LogError,
	} {
		var list []string
		if names != "" {
			list = strings.Split(names, ",")
		}
		if got, err := ParseLogClasses(list); err != nil || got != want {
			t.Errorf("ParseLogClasses(%q) = %v, %v; want %v", names, got, err, want)
		}
	}
	// What the configuration lets through, the server reads.
	if _, err := ParseLogClasses(config.QueryLogClasses); err != nil {
		t.Errorf("config.QueryLogClasses: %v", err)
	}
	if _, err := ParseLogClasses([]string{"nxdomain"}); err == nil || !strings.Contains(err.Error(), `"nxdomain"`) {
		t.Errorf("nxdomain: %v; want an error naming it", err)
	}
}

// The error class holds what dnsd itself turns away: an EDNS version it
// does not speak (BADVERS, an extended rcode), a datagram too large to be
// a query (FORMERR, never parsed), a question outside its zones (REFUSED).
func TestQueryLogErrors(t *testing.T) {
	l, out := serveLogged(t, LogError)
	m := new(dns.Msg).SetQuestion("kubernetes.default.svc.cluster.local.", dns.TypeA)
	m.SetEdns0(1232, false)
	m.IsEdns0().SetVersion(1)
	if r, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(m, l.Addr); err != nil || r.Rcode != dns.RcodeBadVers {
		t.Fatalf("EDNS version 1: %v %v", r, err)
	}
	c, err := net.Dial("udp", l.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	big := make([]byte, 65000)
	copy(big, pack(t, 4242, "kubernetes.default.svc.cluster.local.", dns.TypeA))
	if _, err := c.Write(big); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	resp := make([]byte, 512)
	if n, err := c.Read(resp); err != nil || n < 12 || resp[3]&0x0f != dns.RcodeFormatError {
		t.Fatalf("65,000 bytes: %x %v", resp[:n], err)
	}
	// Over TCP a message too large is skipped unread past its header.
	tc, err := net.Dial("tcp", l.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	framed := binary.BigEndian.AppendUint16(nil, 6000)
	framed = append(framed, big[:6000]...)
	if _, err := tc.Write(framed); err != nil {
		t.Fatal(err)
	}
	tc.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.ReadFull(tc, resp[:2+12]); err != nil || resp[2+3]&0x0f != dns.RcodeFormatError {
		t.Fatalf("6,000 bytes over TCP: %x %v", resp[:2+12], err)
	}
	if r, _, err := (&dns.Client{Net: "tcp", Timeout: 2 * time.Second}).Exchange(new(dns.Msg).SetQuestion("example.com.", dns.TypeA), l.Addr); err != nil || r.Rcode != dns.RcodeRefused {
		t.Fatalf("example.com: %v %v", r, err)
	}
	var got []string
	for _, line := range out.lines() {
		l := field(line, "rcode") + "/" + field(line, "proto")
		if field(line, "rcode") == "FORMERR" {
			l += "/" + field(line, "size") // the message's own size, not what was read of it
		}
		got = append(got, l)
	}
	if got, want := strings.Join(got, " "), "BADVERS/udp FORMERR/udp/65000 FORMERR/tcp/6000 REFUSED/tcp"; got != want {
		t.Errorf("logged %q; want %q:\n%s", got, want, strings.Join(out.lines(), "\n"))
	}
}

// A listener on every address of both families takes IPv4 clients as
// IPv4-mapped IPv6 addresses: the log writes them as IPv4, as CoreDNS
// does, so that a grep for a pod's address finds its queries.
func TestQueryLogUnmapsIPv4Clients(t *testing.T) {
	if _, err := net.ListenPacket("udp6", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 here: %v", err)
	}
	l, out := serveLoggedOn(t, LogAll, "[::]:0")
	_, port, _ := net.SplitHostPort(l.Addr)
	for _, proto := range []string{"udp", "tcp"} {
		if _, _, err := (&dns.Client{Net: proto, Timeout: 2 * time.Second}).Exchange(new(dns.Msg).SetQuestion("kubernetes.default.svc.cluster.local.", dns.TypeA), "127.0.0.1:"+port); err != nil {
			t.Fatalf("%s: %v", proto, err)
		}
	}
	lines := out.lines()
	if len(lines) != 2 {
		t.Fatalf("%d lines; want 2:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for _, line := range lines {
		if host, _, err := net.SplitHostPort(field(line, "client")); err != nil || host != "127.0.0.1" {
			t.Errorf("client %q; want 127.0.0.1 and the client's port: %s", field(line, "client"), line)
		}
	}
}

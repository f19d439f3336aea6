//go:build integration

package integration

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/etcdns/etcdns/integration/harness"
	"github.com/etcdns/etcdns/internal/testdns"
	"github.com/etcdns/etcdns/keys"
)

// TestAbuseItem7 is issue 9 item 7 against the built dnsd and a real etcd:
// outside its zones and configured forwarding dnsd refuses; TCP
// connections are bounded in number and idle time as dnsd.tcp-* say; a
// flood of random names leaves its memory flat; oversized and malformed
// messages get FORMERR, NOTIMP or nothing, and it goes on answering.
func TestAbuseItem7(t *testing.T) {
	etcd := harness.StartEtcd(t)
	b := dnsdBuilder(t)
	dnsdPut(t, etcd.Client(t), append([]keys.Record{b.Version()}, dnsdRecords(b.Service(dnsdService("default", "kubernetes", "10.96.0.1"), nil))...))

	t.Run("REFUSED outside the zones and forwarding", func(t *testing.T) {
		up, asked := testdns.Upstream(t)
		off := startDnsd(t, etcd)
		closed := startDnsd(t, etcd, "--dnsd.forward", "--dnsd.upstreams="+up.String(), "--dnsd.forward-allow=192.0.2.0/24")
		open := startDnsd(t, etcd, "--dnsd.forward", "--dnsd.upstreams="+up.String(), "--dnsd.forward-allow=127.0.0.0/8")
		for _, network := range []string{"udp", "tcp"} {
			for _, d := range []struct {
				what string
				addr string
			}{{"forwarding off", off.Addr}, {"loopback outside forward-allow", closed.Addr}} {
				r := forwardAsk(t, network, d.addr, "WwW.Example.ORG.", dns.TypeA, true, 1232)
				if r.Rcode != dns.RcodeRefused || len(r.Answer)+len(r.Ns) != 0 || r.Authoritative || r.RecursionAvailable ||
					len(r.Question) != 1 || r.Question[0].Name != "WwW.Example.ORG." {
					t.Errorf("%s over %s: %v; want REFUSED with the question and nothing else", d.what, network, r)
				}
			}
			if n := asked.Load(); n != 0 {
				t.Fatalf("the upstream was asked %d times for refused clients", n)
			}
			// The control: the same upstream answers an allowed client.
			r := forwardAsk(t, network, open.Addr, "WwW.Example.ORG.", dns.TypeA, true, 1232)
			if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "192.0.2.53" {
				t.Errorf("allowed client over %s: %v; want the upstream's answer", network, r)
			}
			asked.Store(0)
		}
	})

	t.Run("TCP connections bounded in number and idle time", func(t *testing.T) {
		const max, idle = 4, time.Second
		d := startDnsd(t, etcd, "--dnsd.tcp-max-connections="+strconv.Itoa(max), "--dnsd.tcp-idle-timeout="+idle.String())
		q := new(dns.Msg).SetQuestion("kubernetes.default.svc.cluster.local.", dns.TypeA)
		client := &dns.Client{Net: "tcp", Timeout: 2 * time.Second}
		conns := make([]*dns.Conn, max)
		var lastAnswer time.Time
		for i := range conns {
			c, err := client.Dial(d.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			conns[i] = c
			if r, _, err := client.ExchangeWithConn(q, c); err != nil || len(r.Answer) != 1 {
				t.Fatalf("connection %d of %d: %v %v", i+1, max, r, err)
			}
			lastAnswer = time.Now()
		}
		// The fifth is accepted by the kernel and closed by dnsd unread.
		extra, err := net.Dial("tcp", d.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer extra.Close()
		_ = extra.SetDeadline(time.Now().Add(2 * time.Second))
		_, _ = extra.Write(abuseFrame(abusePack(t, q)))
		if n, err := extra.Read(make([]byte, 512)); err == nil || n > 0 || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("connection %d past the maximum of %d: read %d octets, %v; want it closed", max+1, max, n, err)
		}
		body := dnsdGet(t, d.Metrics+"/metrics")
		if abuseMetric(t, body, "etcdns_dnsd_tcp_connections") != max || abuseMetric(t, body, "etcdns_dnsd_tcp_refused_total") < 1 {
			t.Errorf("metrics: tcp_connections %v (want %d), tcp_refused_total %v (want at least 1)",
				abuseMetric(t, body, "etcdns_dnsd_tcp_connections"), max, abuseMetric(t, body, "etcdns_dnsd_tcp_refused_total"))
		}
		// Each connection, silent since its answer, is closed after the
		// idle time: not before, and not much after.
		for i, c := range conns {
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, err := c.Read(make([]byte, 512))
			if err == nil || n > 0 || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("idle connection %d: read %d octets, %v; want it closed", i+1, n, err)
			}
		}
		if took := time.Since(lastAnswer); took < idle-100*time.Millisecond || took > idle+2*time.Second {
			t.Errorf("idle connections closed %v after their last answer; dnsd.tcp-idle-timeout is %v", took, idle)
		}
		// A client that trickles a query, never completing it, is cut at
		// the idle time too.
		slow, err := net.Dial("tcp", d.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer slow.Close()
		start := time.Now()
		msg := abuseFrame(abusePack(t, q))
		closedAt := time.Duration(0)
		for i := 0; i < len(msg)-1; i++ {
			if _, err := slow.Write(msg[i : i+1]); err != nil {
				closedAt = time.Since(start)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if closedAt == 0 {
			_ = slow.SetReadDeadline(time.Now().Add(3 * time.Second))
			if _, err := slow.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("a trickled query held its connection for %v", time.Since(start))
			}
			closedAt = time.Since(start)
		}
		if closedAt > idle+2*time.Second {
			t.Errorf("a trickled query held its connection for %v; idle timeout %v", closedAt, idle)
		}
		// Their slots are free again.
		dnsdWithin(t, 2*time.Second, "a new connection", func() bool {
			r, _, err := client.Exchange(q, d.Addr)
			return err == nil && len(r.Answer) == 1
		})
	})

	t.Run("malformed and oversized messages", func(t *testing.T) {
		d := startDnsd(t, etcd)
		const id = 0xbeef
		kube := abuseQuestion("kubernetes.default.svc.cluster.local.", dns.TypeA)
		bigTXT := abuseCat([]byte{0, 0, 16, 0, 1, 0, 0, 0, 0, 0x02, 0x59, 200}, make([]byte, 200), []byte{200}, make([]byte, 200), []byte{198}, make([]byte, 198))
		huge := abuseCat(abuseHeader(id, 0x0100, 1, 0, 0, 0), kube)
		huge = append(huge, make([]byte, 65535-len(huge))...)
		for _, c := range []struct {
			name     string
			b        []byte
			udp, tcp int // rcode, or -1: no reply
		}{
			{"header cut at 11 octets", abuseHeader(id, 0x0100, 1, 0, 0, 0)[:11], -1, -1},
			{"QR set", abuseCat(abuseHeader(id, 0x8100, 1, 0, 0, 0), kube), -1, -1},
			{"opcode UPDATE", abuseCat(abuseHeader(id, 5<<11, 1, 0, 0, 0), abuseQuestion("cluster.local.", dns.TypeSOA)), dns.RcodeNotImplemented, dns.RcodeNotImplemented},
			{"opcode NOTIFY", abuseCat(abuseHeader(id, 4<<11, 1, 0, 0, 0), abuseQuestion("cluster.local.", dns.TypeSOA)), dns.RcodeNotImplemented, dns.RcodeNotImplemented},
			{"QDCOUNT 0", abuseHeader(id, 0x0100, 0, 0, 0, 0), dns.RcodeFormatError, dns.RcodeFormatError},
			{"QDCOUNT 2", abuseCat(abuseHeader(id, 0x0100, 2, 0, 0, 0), kube, kube), dns.RcodeFormatError, dns.RcodeFormatError},
			{"label pointer loop", abuseCat(abuseHeader(id, 0x0100, 1, 0, 0, 0), []byte{1, 'a', 0xc0, 12, 0, 1, 0, 1}), dns.RcodeFormatError, dns.RcodeFormatError},
			{"label pointer forward", abuseCat(abuseHeader(id, 0x0100, 1, 0, 0, 0), []byte{0xc0, 18, 0, 1, 0, 1, 1, 'a', 0}), dns.RcodeFormatError, dns.RcodeFormatError},
			{"octets after the question", abuseCat(abuseHeader(id, 0x0100, 1, 0, 0, 0), kube, []byte("junk")), dns.RcodeFormatError, dns.RcodeFormatError},
			{"two OPT records", abuseCat(abuseHeader(id, 0x0100, 1, 0, 0, 2), kube, abuseOPT(), abuseOPT()), dns.RcodeFormatError, dns.RcodeFormatError},
			{"601 octets without OPT", abuseCat(abuseHeader(id, 0x0100, 1, 0, 0, 1), kube, bigTXT), dns.RcodeFormatError, dns.RcodeSuccess},
			{"5000 octets", huge[:5000], dns.RcodeFormatError, dns.RcodeFormatError},
			{"65535 octets", huge, -2, dns.RcodeFormatError}, // -2: no UDP datagram that large
		} {
			if c.udp != -2 {
				abuseCheck(t, c.name+" over UDP", c.udp, abuseUDP(t, d.Addr, c.b))
			}
			abuseCheck(t, c.name+" over TCP", c.tcp, abuseTCP(t, d.Addr, c.b))
		}
	})

	t.Run("a flood of random names leaves memory flat", func(t *testing.T) {
		d := startDnsd(t, etcd)
		const cacheLimit, cacheBytes = 1 << 16, 32 << 20 // server/query.go
		rss := func() int64 { return d.Memory()["VmRSS"] }
		start := rss()
		// Past the cache's 65,536 entries, so what follows is steady state.
		warm := abuseFlood(t, d.Addr, 100_000, 1)
		baseline := rss()
		const flood = 200_000
		took := abuseFlood(t, d.Addr, flood, 2)
		after := rss()
		body := dnsdGet(t, d.Metrics+"/metrics")
		entries, size := abuseMetric(t, body, "etcdns_dnsd_cache_entries"), abuseMetric(t, body, "etcdns_dnsd_cache_bytes")
		evicted := abuseMetric(t, body, "etcdns_dnsd_cache_evictions_total")
		t.Logf("RSS %d MiB at start, %d MiB after 100,000 random names (%v), %d MiB after %d more (%v, %.0f/s); cache %v entries, %.1f MiB; %v evicted",
			start>>20, baseline>>20, warm.Round(time.Millisecond), after>>20, flood, took.Round(time.Millisecond), float64(flood)/took.Seconds(), entries, size/(1<<20), evicted)
		if growth := after - baseline; growth > 20<<20 {
			t.Errorf("RSS grew %d MiB over %d random names after the cache filled; want less than 20 MiB", growth>>20, flood)
		}
		if entries > cacheLimit || entries < cacheLimit*9/10 || size > cacheBytes {
			t.Errorf("cache: %v entries, %v bytes; want it full and within %d entries, %d bytes", entries, size, cacheLimit, cacheBytes)
		}
		if evicted < flood {
			t.Errorf("%v evictions over %d new names into a full cache", evicted, flood)
		}
		if r := dnsdAsk(t, "udp", d.Addr, "kubernetes.default.svc.cluster.local.", dns.TypeA, 0); len(r.Answer) != 1 {
			t.Errorf("after the flood: %v", r)
		}
	})
}

// abuseFlood asks n random names in cluster.local over UDP from eight
// sockets at once, each waiting for its answer, and fails unless every one
// is NXDOMAIN. It returns how long that took.
func abuseFlood(t *testing.T, addr string, n int, seed uint64) time.Duration {
	t.Helper()
	const clients = 8
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.Dial("udp", addr)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close()
			rnd := rand.New(rand.NewPCG(seed, uint64(c)))
			buf := make([]byte, 1500)
			for i := c; i < n; i += clients {
				q := new(dns.Msg).SetQuestion(fmt.Sprintf("r%016x.default.svc.cluster.local.", rnd.Uint64()), dns.TypeA)
				q.Id = uint16(i)
				b, _ := q.Pack()
				var r dns.Msg
				for try := 0; ; try++ {
					_, _ = conn.Write(b)
					_ = conn.SetReadDeadline(time.Now().Add(time.Second))
					k, err := conn.Read(buf)
					if err == nil && r.Unpack(buf[:k]) == nil && r.Id == q.Id {
						break
					}
					if try == 3 {
						errs <- fmt.Errorf("query %d unanswered: %v", i, err)
						return
					}
				}
				if r.Rcode != dns.RcodeNameError {
					errs <- fmt.Errorf("random name %s: %s", q.Question[0].Name, dns.RcodeToString[r.Rcode])
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return time.Since(start)
}

// abuseMetric reads one unlabelled sample of a Prometheus text exposition.
func abuseMetric(t *testing.T, body, name string) float64 {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}

// Raw messages, octet by octet: miekg/dns packs only what it considers
// well-formed.

func abuseHeader(id, flags, qd, an, ns, ar uint16) []byte {
	var b []byte
	for _, v := range []uint16{id, flags, qd, an, ns, ar} {
		b = binary.BigEndian.AppendUint16(b, v)
	}
	return b
}

func abuseQuestion(name string, qtype uint16) []byte {
	var b []byte
	for _, l := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		b = append(append(b, byte(len(l))), l...)
	}
	return binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(append(b, 0), qtype), dns.ClassINET)
}

func abuseOPT() []byte { return []byte{0, 0, 41, 4, 0xd0, 0, 0, 0, 0, 0, 0} }

func abuseCat(bs ...[]byte) []byte {
	var out []byte
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

func abuseFrame(b []byte) []byte {
	return append(binary.BigEndian.AppendUint16(nil, uint16(len(b))), b...)
}

func abusePack(t *testing.T, m *dns.Msg) []byte {
	t.Helper()
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// abuseUDP sends b in one datagram and returns the reply, nil if none
// comes within half a second.
func abuseUDP(t *testing.T, addr string, b []byte) []byte {
	t.Helper()
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	buf := make([]byte, 65536)
	n, err := c.Read(buf)
	if err != nil {
		return nil
	}
	return buf[:n]
}

// abuseTCP sends b and then a query on one connection and returns the
// reply to b, nil if the first reply is the query's: dnsd must go on
// reading messages where they start whatever b was.
func abuseTCP(t *testing.T, addr string, b []byte) []byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	q := new(dns.Msg).SetQuestion("kubernetes.default.svc.cluster.local.", dns.TypeA)
	q.Id = 0x5eed
	if _, err := c.Write(abuseCat(abuseFrame(b), abuseFrame(abusePack(t, q)))); err != nil {
		t.Fatal(err)
	}
	read := func() []byte {
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			t.Fatalf("reading a TCP reply: %v", err)
		}
		m := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(c, m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	first := read()
	if binary.BigEndian.Uint16(first) == 0x5eed {
		return nil
	}
	if next := read(); binary.BigEndian.Uint16(next) != 0x5eed {
		t.Fatalf("after the message, the query's answer did not come")
	}
	return first
}

// abuseCheck checks a reply: want is an rcode, or -1 for none.
func abuseCheck(t *testing.T, what string, want int, reply []byte) {
	t.Helper()
	if want == -1 {
		if reply != nil {
			t.Errorf("%s: replied %x; want silence", what, reply)
		}
		return
	}
	var m dns.Msg
	if reply == nil || m.Unpack(reply) != nil {
		t.Errorf("%s: reply %x; want %s", what, reply, dns.RcodeToString[want])
		return
	}
	if m.Id != 0xbeef || !m.Response || m.Rcode != want {
		t.Errorf("%s: id %x QR %v %s; want id beef, %s", what, m.Id, m.Response, dns.RcodeToString[m.Rcode], dns.RcodeToString[want])
	}
}

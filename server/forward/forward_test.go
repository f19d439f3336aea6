package forward

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// upstream is a miekg/dns server on a loopback port, UDP and TCP, that
// remembers what it was asked.
type upstream struct {
	addr netip.AddrPort
	mu   sync.Mutex
	got  []*dns.Msg // requests, in order
	nets []string   // "udp" or "tcp" of each
}

func (u *upstream) asked() ([]*dns.Msg, []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]*dns.Msg(nil), u.got...), append([]string(nil), u.nets...)
}

func startUpstream(t *testing.T, answer func(req *dns.Msg, network string) *dns.Msg) *upstream {
	t.Helper()
	u := &upstream{}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		network := w.RemoteAddr().Network()
		u.mu.Lock()
		u.got, u.nets = append(u.got, req), append(u.nets, network)
		u.mu.Unlock()
		if m := answer(req, network); m != nil {
			_ = w.WriteMsg(m)
		}
	})
	var pc net.PacketConn
	var ln net.Listener
	for range 20 { // the UDP port may be taken for TCP
		var err error
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			break
		}
		pc.Close()
		pc = nil
	}
	if pc == nil {
		t.Fatal("no loopback port free for UDP and TCP")
	}
	u.addr = netip.MustParseAddrPort(pc.LocalAddr().String())
	for _, s := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: ln, Handler: h}} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		go s.ActivateAndServe()
		<-started
		t.Cleanup(func() { s.Shutdown() })
	}
	return u
}

// silent returns a loopback UDP address that reads queries and never
// answers, as a dead or overloaded upstream.
func silent(t *testing.T) netip.AddrPort {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	return netip.MustParseAddrPort(pc.LocalAddr().String())
}

func answerA(req *dns.Msg, _ string) *dns.Msg {
	m := new(dns.Msg).SetReply(req)
	m.RecursionAvailable = true
	m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: req.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(192, 0, 2, 1)}}
	return m
}

func value(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

func newForwarder(t *testing.T, c Config) *Forwarder {
	t.Helper()
	if c.Timeout == 0 {
		c.Timeout = time.Second
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:1"
	}
	f, err := New(c, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func query(name string, qtype uint16, id uint16) *dns.Msg {
	m := new(dns.Msg).SetQuestion(name, qtype)
	m.Id = id
	return m
}

// The client gets the upstream's answer under its own id, with its own
// spelling of the question; the upstream gets the client's RD, CD and DO
// bits and 0x20 spelling under an id of dnsd's.
func TestForwardPreservesIDCaseAndFlags(t *testing.T) {
	up := startUpstream(t, answerA)
	f := newForwarder(t, Config{Upstreams: []netip.AddrPort{up.addr}})

	req := query("WwW.ExAmPlE.TeSt.", dns.TypeA, 4242)
	req.CheckingDisabled = true
	req.SetEdns0(4096, true)
	r := f.Forward(context.Background(), req)
	if r.Id != 4242 || r.Rcode != dns.RcodeSuccess || !r.RecursionDesired || !r.CheckingDisabled || r.Question[0].Name != "WwW.ExAmPlE.TeSt." {
		t.Fatalf("answer: %v", r)
	}
	if len(r.Answer) != 1 || r.Answer[0].String() != "WwW.ExAmPlE.TeSt.\t60\tIN\tA\t192.0.2.1" {
		t.Fatalf("answer section: %v", r.Answer)
	}
	if opt := r.IsEdns0(); opt == nil || !opt.Do() || opt.UDPSize() != 1232 {
		t.Fatalf("OPT to the client: %v", opt)
	}
	got, _ := up.asked()
	sent := got[0]
	if sent.Question[0].Name != "WwW.ExAmPlE.TeSt." || !sent.RecursionDesired || !sent.CheckingDisabled || sent.IsEdns0() == nil || !sent.IsEdns0().Do() {
		t.Fatalf("upstream was asked: %v", sent)
	}

	// Without EDNS from the client, none comes back to it.
	r = f.Forward(context.Background(), query("plain.example.test.", dns.TypeA, 7))
	if r.Id != 7 || r.IsEdns0() != nil || len(r.Answer) != 1 {
		t.Fatalf("answer to a client without EDNS: %v", r)
	}
}

// A truncated UDP answer is asked again over TCP, from the same upstream.
func TestForwardTruncatedRetriesOverTCP(t *testing.T) {
	up := startUpstream(t, func(req *dns.Msg, network string) *dns.Msg {
		m := new(dns.Msg).SetReply(req)
		if network == "udp" {
			m.Truncated = true
			return m
		}
		for i := range 100 {
			m.Answer = append(m.Answer, &dns.TXT{Hdr: dns.RR_Header{Name: req.Question[0].Name, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 60}, Txt: []string{fmt.Sprintf("record %03d %s", i, strings.Repeat("x", 40))}})
		}
		return m
	})
	f := newForwarder(t, Config{Upstreams: []netip.AddrPort{up.addr}})
	r := f.Forward(context.Background(), query("big.example.test.", dns.TypeTXT, 1))
	if r.Truncated || len(r.Answer) != 100 {
		t.Fatalf("TC=%v with %d records, want the whole 100", r.Truncated, len(r.Answer))
	}
	if _, nets := up.asked(); strings.Join(nets, ",") != "udp,tcp" {
		t.Fatalf("upstream asked over %v, want udp then tcp", nets)
	}
}

// A timeout, a refused connection or SERVFAIL moves on to the next
// upstream; when none answers the client gets SERVFAIL, counted by how the
// last one failed.
func TestForwardNextUpstream(t *testing.T) {
	servfail := startUpstream(t, func(req *dns.Msg, _ string) *dns.Msg { return new(dns.Msg).SetRcode(req, dns.RcodeServerFailure) })
	good := startUpstream(t, answerA)
	pc, _ := net.ListenPacket("udp", "127.0.0.1:0") // closed: the kernel answers "port unreachable"
	refused := netip.MustParseAddrPort(pc.LocalAddr().String())
	pc.Close()

	f := newForwarder(t, Config{Upstreams: []netip.AddrPort{silent(t), refused, servfail.addr, good.addr}, Timeout: 200 * time.Millisecond})
	start := time.Now()
	r := f.Forward(context.Background(), query("a.example.test.", dns.TypeA, 9))
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Id != 9 {
		t.Fatalf("answer: %v", r)
	}
	if d := time.Since(start); d < 200*time.Millisecond || d > 2*time.Second {
		t.Errorf("took %v: want one timeout of 200ms, then quick failures", d)
	}
	if got, _ := servfail.asked(); len(got) != 1 {
		t.Errorf("the SERVFAIL upstream was asked %d times", len(got))
	}

	for _, c := range []struct {
		ups    []netip.AddrPort
		result string
	}{
		{[]netip.AddrPort{silent(t)}, "timeout"},
		{[]netip.AddrPort{refused}, "error"},
		{[]netip.AddrPort{silent(t), servfail.addr}, "servfail"},
	} {
		f := newForwarder(t, Config{Upstreams: c.ups, Timeout: 100 * time.Millisecond})
		req := query("b.example.test.", dns.TypeA, 11).SetEdns0(1232, false)
		r := f.Forward(context.Background(), req)
		if r.Rcode != dns.RcodeServerFailure || r.Id != 11 || r.Question[0].Name != "b.example.test." || r.IsEdns0() == nil {
			t.Errorf("%v: %v", c.ups, r)
		}
		if n := value(f.results.WithLabelValues(c.result)); n != 1 {
			t.Errorf("%v: forward_queries_total{result=%q} = %v", c.ups, c.result, n)
		}
	}
}

// The cache answers a question again (any spelling, any id) within the
// answer's TTL capped by MaxTTL, a negative answer within its SOA's
// negative TTL, and holds at most CacheSize entries.
func TestForwardCache(t *testing.T) {
	var n atomic.Int32
	up := startUpstream(t, func(req *dns.Msg, _ string) *dns.Msg {
		n.Add(1)
		if strings.HasPrefix(strings.ToLower(req.Question[0].Name), "nx.") {
			m := new(dns.Msg).SetRcode(req, dns.RcodeNameError)
			m.Ns = []dns.RR{&dns.SOA{Hdr: dns.RR_Header{Name: "example.test.", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 3600},
				Ns: "ns.example.test.", Mbox: "h.example.test.", Serial: 1, Refresh: 1, Retry: 1, Expire: 1, Minttl: 5}}
			return m
		}
		return answerA(req, "")
	})
	now := time.Unix(1e9, 0)
	f := newForwarder(t, Config{Upstreams: []netip.AddrPort{up.addr}, CacheSize: 2, MaxTTL: 30})
	f.now = func() time.Time { return now }
	ask := func(name string, id uint16) *dns.Msg {
		t.Helper()
		r := f.Forward(context.Background(), query(name, dns.TypeA, id))
		if r.Id != id || r.Question[0].Name != name {
			t.Fatalf("%s: %v", name, r)
		}
		return r
	}

	ask("www.example.test.", 1)
	now = now.Add(10 * time.Second)
	r := ask("WWW.example.TEST.", 2)
	if n.Load() != 1 || r.Answer[0].Header().Ttl != 20 || r.Answer[0].Header().Name != "WWW.example.TEST." {
		t.Fatalf("after 10s: %d upstream queries, answer %v; want 1 and TTL 20 (max-ttl 30)", n.Load(), r.Answer)
	}
	if h, m := value(f.hits), value(f.misses); h != 1 || m != 1 {
		t.Errorf("hits %v misses %v, want 1 and 1", h, m)
	}
	now = now.Add(20 * time.Second)
	ask("www.example.test.", 3)
	if n.Load() != 2 {
		t.Fatalf("after max-ttl: %d upstream queries, want 2", n.Load())
	}

	if r := ask("nx.example.test.", 4); r.Rcode != dns.RcodeNameError {
		t.Fatalf("negative: %v", r)
	}
	now = now.Add(4 * time.Second)
	if r := ask("nx.example.test.", 5); n.Load() != 3 || r.Rcode != dns.RcodeNameError || r.Ns[0].Header().Ttl != 1 {
		t.Fatalf("negative within 5s: %d upstream queries, %v", n.Load(), r)
	}
	now = now.Add(2 * time.Second)
	ask("nx.example.test.", 6)
	if n.Load() != 4 {
		t.Fatalf("negative after 5s: %d upstream queries, want 4", n.Load())
	}

	for _, name := range []string{"a.example.test.", "b.example.test.", "c.example.test."} {
		ask(name, 7)
	}
	if l := len(f.cache.m); l > 2 {
		t.Errorf("cache holds %d entries, limit 2", l)
	}

	off := newForwarder(t, Config{Upstreams: []netip.AddrPort{up.addr}})
	before := n.Load()
	off.Forward(context.Background(), query("www.example.test.", dns.TypeA, 8))
	off.Forward(context.Background(), query("www.example.test.", dns.TypeA, 8))
	if n.Load()-before != 2 {
		t.Errorf("forward-cache 0 still cached")
	}
}

// An upstream that is dnsd's own address would send every question back
// to dnsd to be forwarded again.
func TestNewRefusesLoop(t *testing.T) {
	for _, c := range []struct {
		upstream, listen string
		loop             bool
	}{
		{"127.0.0.1:5300", "127.0.0.1:5300", true},
		{"127.0.0.1:5300", "0.0.0.0:5300", true},
		{"[::1]:5300", ":5300", true},
		{"[::ffff:127.0.0.1]:5300", "127.0.0.1:5300", true},
		{"127.0.0.1:53", "127.0.0.1:5300", false},
		{"127.0.0.2:5300", "127.0.0.1:5300", false},
		{"192.0.2.1:5300", "0.0.0.0:5300", false},
		{"0.0.0.0:5300", "127.0.0.1:5300", true}, // resolv.conf's "nameserver 0.0.0.0" is the host
		{"[::]:5300", "127.0.0.1:5300", true},
		{"0.0.0.0:53", "127.0.0.1:5300", false},
	} {
		_, err := New(Config{Upstreams: []netip.AddrPort{netip.MustParseAddrPort(c.upstream)}, Timeout: time.Second, Listen: c.listen}, prometheus.NewRegistry())
		if loop := err != nil && strings.Contains(err.Error(), "loop"); loop != c.loop {
			t.Errorf("upstream %s, listen %s: %v; want a loop error: %v", c.upstream, c.listen, err, c.loop)
		}
	}
}

func TestAllows(t *testing.T) {
	var allow []netip.Prefix
	for _, p := range []string{"127.0.0.0/8", "::1/128", "10.0.0.0/8", "fc00::/7"} {
		allow = append(allow, netip.MustParsePrefix(p))
	}
	f := newForwarder(t, Config{Upstreams: []netip.AddrPort{netip.MustParseAddrPort("192.0.2.1:53")}, Allow: allow})
	for addr, want := range map[string]bool{
		"127.0.0.1": true, "::1": true, "10.1.2.3": true, "::ffff:10.1.2.3": true, "fd12::1": true,
		"8.8.8.8": false, "2001:db8::1": false, "192.168.1.1": false,
	} {
		if got := f.Allows(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Allows(%s) = %v", addr, got)
		}
	}
}

func TestResolvConf(t *testing.T) {
	p := filepath.Join(t.TempDir(), "resolv.conf")
	os.WriteFile(p, []byte("# host\nsearch example.test\nnameserver 10.0.0.1\nnameserver fd00::53\noptions ndots:5\n"), 0o644)
	ups, err := ResolvConf(p)
	if err != nil || len(ups) != 2 || ups[0].String() != "10.0.0.1:53" || ups[1].String() != "[fd00::53]:53" {
		t.Fatalf("ResolvConf = %v, %v", ups, err)
	}
}

// The cache holds at most CacheBytes of answers, whatever CacheSize
// allows: large answers evict others, and one answer larger than a
// sixteenth of it is not kept at all.
func TestForwardCacheBytes(t *testing.T) {
	up := startUpstream(t, func(req *dns.Msg, network string) *dns.Msg {
		m := new(dns.Msg).SetReply(req)
		n := 4
		if strings.HasPrefix(req.Question[0].Name, "huge.") {
			if network == "udp" {
				m.Truncated = true
				return m
			}
			n = 100
		}
		for i := range n {
			m.Answer = append(m.Answer, &dns.TXT{Hdr: dns.RR_Header{Name: req.Question[0].Name, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 60}, Txt: []string{fmt.Sprintf("%03d %s", i, strings.Repeat("x", 200))}})
		}
		return m
	})
	const limit = 128 << 10
	f := newForwarder(t, Config{Upstreams: []netip.AddrPort{up.addr}, CacheSize: 10000, CacheBytes: limit, MaxTTL: 30})
	for i := range 200 {
		f.Forward(context.Background(), query(fmt.Sprintf("n%d.example.test.", i), dns.TypeTXT, 1))
		if f.cache.bytes > limit {
			t.Fatalf("after %d answers of about 900 bytes the cache holds %d bytes, limit %d", i+1, f.cache.bytes, limit)
		}
	}
	if n := len(f.cache.m); n < 40 || n > 100 {
		t.Errorf("%d answers of about 900 bytes kept in %d bytes", n, limit)
	}
	sum := 0
	for _, e := range f.cache.m {
		sum += e.cost
	}
	if sum != f.cache.bytes {
		t.Errorf("entries cost %d, cache counts %d", sum, f.cache.bytes)
	}
	f.Forward(context.Background(), query("huge.example.test.", dns.TypeTXT, 1))
	if f.Cached(query("huge.example.test.", dns.TypeTXT, 2)) != nil {
		t.Error("an answer of 21 KB kept in a cache of 128 KiB")
	}
}

// An upstream that timed out is asked after the others until failedFor
// has passed: a dead first upstream does not cost every question its
// timeout. Listed twice, it is asked once; once failedFor has passed, one
// question tries it first again, not every question then in flight. A
// SERVFAIL for one name is an answer: the upstream stays first.
func TestForwardAsksAFailedUpstreamLast(t *testing.T) {
	dead := startUpstream(t, func(*dns.Msg, string) *dns.Msg { return nil })
	good := startUpstream(t, answerA)
	var mu sync.Mutex
	now := time.Unix(1e9, 0)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	f := newForwarder(t, Config{Upstreams: []netip.AddrPort{dead.addr, dead.addr, good.addr}, Timeout: 200 * time.Millisecond})
	f.now = clock
	for i := range 5 {
		if r := f.Forward(context.Background(), query(fmt.Sprintf("q%d.example.test.", i), dns.TypeA, 1)); r.Rcode != dns.RcodeSuccess {
			t.Fatalf("question %d: %v", i, r)
		}
	}
	if got, _ := dead.asked(); len(got) != 1 {
		t.Errorf("the dead upstream, listed twice, was asked %d times in 5 questions, want once", len(got))
	}
	mu.Lock()
	now = now.Add(failedFor)
	mu.Unlock()
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() { f.Forward(context.Background(), query(fmt.Sprintf("later%d.example.test.", i), dns.TypeA, 1)) })
	}
	wg.Wait()
	if got, _ := dead.asked(); len(got) != 2 {
		t.Errorf("after %v, 10 questions at once asked the dead upstream %d times in all, want it tried once more", failedFor, len(got))
	}

	picky := startUpstream(t, func(req *dns.Msg, network string) *dns.Msg {
		if strings.HasPrefix(req.Question[0].Name, "broken.") {
			return new(dns.Msg).SetRcode(req, dns.RcodeServerFailure)
		}
		return answerA(req, network)
	})
	other := startUpstream(t, answerA)
	g := newForwarder(t, Config{Upstreams: []netip.AddrPort{picky.addr, other.addr}, Timeout: 200 * time.Millisecond})
	g.Forward(context.Background(), query("broken.example.test.", dns.TypeA, 1))
	g.Forward(context.Background(), query("fine.example.test.", dns.TypeA, 1))
	if got, _ := other.asked(); len(got) != 1 {
		t.Errorf("after a SERVFAIL for one name the second upstream was asked %d times, want once (for that name)", len(got))
	}
}

// A truncated answer from an upstream that cannot be reached over TCP is
// passed on, TC set, not turned into SERVFAIL, and not cached.
func TestForwardTruncatedWithoutTCP(t *testing.T) {
	up := startUpstream(t, func(req *dns.Msg, network string) *dns.Msg {
		if network == "tcp" {
			return nil
		}
		m := answerA(req, network)
		m.Truncated = true
		return m
	})
	f := newForwarder(t, Config{Upstreams: []netip.AddrPort{up.addr}, Timeout: 200 * time.Millisecond, CacheSize: 10, MaxTTL: 30})
	r := f.Forward(context.Background(), query("big.example.test.", dns.TypeA, 1))
	if r.Rcode != dns.RcodeSuccess || !r.Truncated || len(r.Answer) != 1 {
		t.Fatalf("answer %v; want the truncated one, TC set", r)
	}
	if f.Cached(query("big.example.test.", dns.TypeA, 2)) != nil {
		t.Error("a truncated answer was cached")
	}
}

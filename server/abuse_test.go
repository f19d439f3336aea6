package server

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/etcdns/etcdns/internal/testdns"
	"github.com/etcdns/etcdns/server/answer"
	"github.com/etcdns/etcdns/server/forward"
	"github.com/etcdns/etcdns/server/snap"
)

var discardLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// Raw messages, written octet by octet: miekg/dns packs only what it
// considers well-formed.

func hdr(id, flags, qd, an, ns, ar uint16) []byte {
	b := make([]byte, 0, 12)
	for _, v := range []uint16{id, flags, qd, an, ns, ar} {
		b = binary.BigEndian.AppendUint16(b, v)
	}
	return b
}

func wireName(name string) []byte {
	var b []byte
	for _, l := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		b = append(b, byte(len(l)))
		b = append(b, l...)
	}
	return append(b, 0)
}

func question(name string, qtype uint16) []byte {
	return binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(wireName(name), qtype), dns.ClassINET)
}

// optRR is an OPT record of version 0 with the given option octets.
func optRR(size uint16, options ...byte) []byte {
	b := binary.BigEndian.AppendUint16([]byte{0, 0, 41}, size)
	b = append(b, 0, 0, 0, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(len(options)))
	return append(b, options...)
}

func cat(bs ...[]byte) []byte {
	var out []byte
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

const (
	flagRD = 0x0100
	silent = -1 // no reply at all
)

// malformedCase is a message and what dnsd replies to it over UDP and over
// TCP: an rcode, or silent. echo says the reply carries the question.
// free says screen turns it down, at no allocation; the others are turned
// down by miekg/dns's parse.
type malformedCase struct {
	name     string
	b        []byte
	udp, tcp int
	echo     bool
	free     bool
}

var kubernetesA = question("kubernetes.default.svc.cluster.local.", dns.TypeA)

// bigTXT is an additional TXT record of 601 octets of data.
var bigTXT = cat([]byte{0, 0, 16, 0, 1, 0, 0, 0, 0, 0x02, 0x59, 200}, make([]byte, 200), []byte{200}, make([]byte, 200), []byte{198}, make([]byte, 198))

// malformed is every kind of message dnsd turns down, and what it
// answers. Where CoreDNS (miekg/dns's DefaultMsgAcceptFunc) answers
// differently, the comment says how.
func malformed() []malformedCase {
	const id = 0xbeef
	return []malformedCase{
		{"header cut at 11 octets", hdr(id, flagRD, 1, 0, 0, 0)[:11], silent, silent, false, true},
		{"QR set: a response", cat(hdr(id, 0x8000|flagRD, 1, 0, 0, 0), kubernetesA), silent, silent, false, true},
		// CoreDNS echoes no question.
		{"opcode IQUERY", cat(hdr(id, 1<<11|flagRD, 1, 0, 0, 0), kubernetesA), dns.RcodeNotImplemented, dns.RcodeNotImplemented, true, true},
		{"opcode STATUS", cat(hdr(id, 2<<11|flagRD, 1, 0, 0, 0), kubernetesA), dns.RcodeNotImplemented, dns.RcodeNotImplemented, true, true},
		// CoreDNS hands NOTIFY to its plugins; dnsd is no secondary.
		{"opcode NOTIFY", cat(hdr(id, 4<<11, 1, 0, 0, 0), question("cluster.local.", dns.TypeSOA)), dns.RcodeNotImplemented, dns.RcodeNotImplemented, true, true},
		{"opcode UPDATE", cat(hdr(id, 5<<11, 1, 0, 0, 0), question("cluster.local.", dns.TypeSOA)), dns.RcodeNotImplemented, dns.RcodeNotImplemented, true, true},
		{"opcode 15, header only", hdr(id, 15<<11, 0, 0, 0, 0), dns.RcodeNotImplemented, dns.RcodeNotImplemented, false, true},
		{"QDCOUNT 0", hdr(id, flagRD, 0, 0, 0, 0), dns.RcodeFormatError, dns.RcodeFormatError, false, true},
		{"QDCOUNT 2", cat(hdr(id, flagRD, 2, 0, 0, 0), kubernetesA, kubernetesA), dns.RcodeFormatError, dns.RcodeFormatError, false, true},
		{"QDCOUNT 65535", cat(hdr(id, flagRD, 65535, 0, 0, 0), kubernetesA), dns.RcodeFormatError, dns.RcodeFormatError, false, true},
		{"ANCOUNT 2", cat(hdr(id, flagRD, 1, 2, 0, 0), kubernetesA), dns.RcodeFormatError, dns.RcodeFormatError, true, true},
		{"ARCOUNT 3", cat(hdr(id, flagRD, 1, 0, 0, 3), kubernetesA), dns.RcodeFormatError, dns.RcodeFormatError, true, true},
		{"question cut", cat(hdr(id, flagRD, 1, 0, 0, 0), kubernetesA[:20]), dns.RcodeFormatError, dns.RcodeFormatError, false, true},
		{"question without type and class", cat(hdr(id, flagRD, 1, 0, 0, 0), kubernetesA[:len(kubernetesA)-4]), dns.RcodeFormatError, dns.RcodeFormatError, false, true},
		{"label pointer to itself", cat(hdr(id, flagRD, 1, 0, 0, 0), []byte{0xc0, 12, 0, 1, 0, 1}), dns.RcodeFormatError, dns.RcodeFormatError, false, true},
		{"label pointer loop through a label", cat(hdr(id, flagRD, 1, 0, 0, 0), []byte{1, 'a', 0xc0, 12, 0, 1, 0, 1}), dns.RcodeFormatError, dns.RcodeFormatError, false, true},
		{"label pointers in a cycle of two", cat(hdr(id, flagRD, 1, 0, 0, 1), question("a.", dns.TypeA), []byte{1, 'b', 0xc0, 33, 0xc0, 29, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0}), dns.RcodeFormatError, dns.RcodeFormatError, true, true},
		// CoreDNS answers these two.
		{"label pointer forward", cat(hdr(id, flagRD, 1, 0, 0, 0), []byte{0xc0, 18, 0, 1, 0, 1, 1, 'a', 0}), dns.RcodeFormatError, dns.RcodeFormatError, false, true},
		{"label pointer into the header", cat(hdr(id, flagRD, 1, 0, 0, 0), []byte{0xc0, 4, 0, 1, 0, 1}), dns.RcodeFormatError, dns.RcodeFormatError, false, true},
		{"label type 0x40", cat(hdr(id, flagRD, 1, 0, 0, 0), []byte{0x41, 'a', 0, 0, 1, 0, 1}), dns.RcodeFormatError, dns.RcodeFormatError, false, true},
		{"name of 256 octets", cat(hdr(id, flagRD, 1, 0, 0, 0), question(strings.Repeat("a23456789.", 24)+"a2345678901.cluster.local.", dns.TypeA)), dns.RcodeFormatError, dns.RcodeFormatError, false, true},
		// CoreDNS answers these three: miekg/dns reads fewer records than
		// counted, ignores trailing octets and keeps the first OPT.
		{"ARCOUNT 1, no record", cat(hdr(id, flagRD, 1, 0, 0, 1), kubernetesA), dns.RcodeFormatError, dns.RcodeFormatError, true, true},
		{"octets after the last record", cat(hdr(id, flagRD, 1, 0, 0, 0), kubernetesA, []byte("junk")), dns.RcodeFormatError, dns.RcodeFormatError, true, true},
		{"two OPT records", cat(hdr(id, flagRD, 1, 0, 0, 2), kubernetesA, optRR(1232), optRR(1232)), dns.RcodeFormatError, dns.RcodeFormatError, true, true},
		{"OPT in the answer section", cat(hdr(id, flagRD, 1, 1, 0, 0), kubernetesA, optRR(1232)), dns.RcodeFormatError, dns.RcodeFormatError, true, true},
		{"OPT owned by a name", cat(hdr(id, flagRD, 1, 0, 0, 1), kubernetesA, []byte{1, 'a'}, optRR(1232)), dns.RcodeFormatError, dns.RcodeFormatError, true, true},
		{"OPT option past its record", cat(hdr(id, flagRD, 1, 0, 0, 1), kubernetesA, optRR(1232, 0, 10, 0, 20, 1, 2, 3, 4)), dns.RcodeFormatError, dns.RcodeFormatError, true, true},
		{"record data past the message", cat(hdr(id, flagRD, 1, 0, 0, 1), kubernetesA, []byte{0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 8, 1, 2, 3, 4}), dns.RcodeFormatError, dns.RcodeFormatError, true, true},
		// miekg/dns's parse checks what screen does not: it costs a parse.
		{"client subnet of family 9", cat(hdr(id, flagRD, 1, 0, 0, 1), kubernetesA, optRR(1232, 0, 8, 0, 4, 0, 9, 0, 0)), dns.RcodeFormatError, dns.RcodeFormatError, true, false},
		{"A record of 3 octets", cat(hdr(id, flagRD, 1, 0, 0, 1), kubernetesA, []byte{0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 3, 1, 2, 3}), dns.RcodeFormatError, dns.RcodeFormatError, true, false},
		// Over 512 octets without OPT: FORMERR over UDP, as CoreDNS (which
		// reads 512 octets and fails to parse the rest); answered over TCP.
		{"601 octets of TXT in a UDP query without OPT", cat(hdr(id, flagRD, 1, 0, 0, 1), kubernetesA, bigTXT), dns.RcodeFormatError, dns.RcodeSuccess, true, true},
	}
}

// checkReply checks a reply to a malformed message against c.
func checkReply(t *testing.T, c malformedCase, network string, want int, out []byte) {
	t.Helper()
	if want == silent {
		if out != nil {
			t.Errorf("%s over %s: replied %x; want silence", c.name, network, out)
		}
		return
	}
	var m dns.Msg
	if err := m.Unpack(out); err != nil {
		t.Errorf("%s over %s: reply does not parse: %v", c.name, network, err)
		return
	}
	reqOpcode, reqRD := int(c.b[2]>>3&0xf), c.b[2]&1 == 1
	if m.Id != 0xbeef || !m.Response || m.Opcode != reqOpcode || m.RecursionDesired != reqRD || m.Rcode != want {
		t.Errorf("%s over %s: id %x QR %v opcode %d RD %v rcode %s; want id beef, QR, opcode %d, RD %v, %s", c.name, network,
			m.Id, m.Response, m.Opcode, m.RecursionDesired, dns.RcodeToString[m.Rcode], reqOpcode, reqRD, dns.RcodeToString[want])
	}
	if want == dns.RcodeSuccess {
		return
	}
	if m.Authoritative || m.Truncated || len(m.Answer)+len(m.Ns)+len(m.Extra) != 0 {
		t.Errorf("%s over %s: more than a header: AA %v TC %v %d records", c.name, network, m.Authoritative, m.Truncated, len(m.Answer)+len(m.Ns)+len(m.Extra))
	}
	if echoed := len(m.Question) == 1; echoed != c.echo {
		t.Errorf("%s over %s: question echoed %v (%v); want %v", c.name, network, echoed, m.Question, c.echo)
	}
}

// Item 7: malformed messages get no reply, NOTIMP or FORMERR, over both
// transports, and dnsd keeps answering.
func TestMalformedItem7(t *testing.T) {
	sn := testSnapshot(t, 0)
	reg := prometheus.NewRegistry()
	srv := New(func() *snap.Snapshot { return sn }, opts, reg, discardLog)
	for _, c := range malformed() {
		udp, tcp := &worker{s: srv}, &worker{s: srv, tcp: true}
		checkReply(t, c, "UDP", c.udp, udp.handle(c.b))
		checkReply(t, c, "TCP", c.tcp, tcp.handle(c.b))
	}
	q := pack(t, 7, "kubernetes.default.svc.cluster.local.", dns.TypeA)
	var m dns.Msg
	if err := m.Unpack((&worker{s: srv}).handle(q)); err != nil || len(m.Answer) != 1 {
		t.Fatalf("a query after the junk: %v %v", &m, err)
	}
	// Rejections are counted as queries without a question type.
	formerr, notimp := 0, 0
	for _, c := range malformed() {
		for _, rc := range []int{c.udp, c.tcp} {
			switch rc {
			case dns.RcodeFormatError:
				formerr++
			case dns.RcodeNotImplemented:
				notimp++
			}
		}
	}
	if got := counterWith(t, reg, "etcdns_dnsd_queries_total", "none", "FORMERR"); got != float64(formerr) {
		t.Errorf("queries_total{qtype=none,rcode=FORMERR} = %v; want %d", got, formerr)
	}
	if got := counterWith(t, reg, "etcdns_dnsd_queries_total", "none", "NOTIMP"); got != float64(notimp) {
		t.Errorf("queries_total{qtype=none,rcode=NOTIMP} = %v; want %d", got, notimp)
	}
}

// counterWith is the value of the counter name with exactly these label
// values, in label order.
func counterWith(t *testing.T, reg prometheus.Gatherer, name string, values ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.Metric {
			if len(m.Label) != len(values) {
				continue
			}
			for i, l := range m.Label {
				if l.GetValue() != values[i] {
					continue next
				}
			}
			if m.Counter != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

// Item 7: junk costs nothing. Every message screen turns down is answered
// without an allocation, and so is a TCP message over maxQuery octets,
// which is skipped unread: a connection sending a hundred costs what one
// sending one does.
func TestMalformedCostsNothing(t *testing.T) {
	srv := newServer(t, testSnapshot(t, 0))
	for _, c := range malformed() {
		if !c.free {
			continue
		}
		for _, w := range []*worker{{s: srv, out: make([]byte, 0, 512)}, {s: srv, tcp: true, out: make([]byte, 0, 512)}} {
			if w.tcp && c.tcp == dns.RcodeSuccess {
				continue // answered, not turned down
			}
			if n := testing.AllocsPerRun(100, func() { w.handle(c.b) }); n != 0 {
				t.Errorf("%s (TCP %v): %v allocations per message; want 0", c.name, w.tcp, n)
			}
		}
	}
	if raceEnabled {
		t.Log("a connection's allocations are not counted under -race")
		return
	}
	huge := cat(hdr(0xbeef, flagRD, 1, 0, 0, 0), kubernetesA)
	huge = append(huge, make([]byte, 65535-len(huge))...)
	conn := func(n int) float64 {
		return testing.AllocsPerRun(20, func() {
			c := &streamConn{r: &repeatReader{msg: frame(huge), left: n}, w: io.Discard}
			serveConn(srv, c)
		})
	}
	if one, hundred := conn(1), conn(100); hundred > one {
		t.Errorf("a connection with 100 messages of 65535 octets makes %v allocations, with one %v; want no more", hundred, one)
	}
}

// frame prefixes a DNS message with its TCP length.
func frame(b []byte) []byte {
	return append(binary.BigEndian.AppendUint16(nil, uint16(len(b))), b...)
}

// streamConn is a TCP connection whose client sends r and takes what dnsd
// writes into w; deadlines never fire.
type streamConn struct {
	r io.Reader
	w io.Writer
}

func (c *streamConn) Read(b []byte) (int, error)  { return c.r.Read(b) }
func (c *streamConn) Write(b []byte) (int, error) { return c.w.Write(b) }
func (c *streamConn) Close() error                { return nil }
func (c *streamConn) LocalAddr() net.Addr         { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53} }
func (c *streamConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
}
func (c *streamConn) SetDeadline(time.Time) error      { return nil }
func (c *streamConn) SetReadDeadline(time.Time) error  { return nil }
func (c *streamConn) SetWriteDeadline(time.Time) error { return nil }

// repeatReader is msg left times over, without holding the copies.
type repeatReader struct {
	msg  []byte
	off  int
	left int
}

func (r *repeatReader) Read(b []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	n := copy(b, r.msg[r.off:])
	if r.off += n; r.off == len(r.msg) {
		r.off = 0
		r.left--
	}
	return n, nil
}

// serveConn runs dnsd's TCP loop on c until the client's stream ends.
func serveConn(srv *Server, c net.Conn) {
	ts := &tcpServer{s: srv, idle: time.Minute, maxConns: 1}
	if !ts.track(c) {
		panic("not tracked")
	}
	ts.conn(c)
}

// Item 7: oversized messages over real sockets. A TCP message of 65535
// octets gets FORMERR, skipped without reading it as a query, and the
// connection goes on with the next; a 5000-octet datagram is cut by the
// kernel and gets FORMERR; a UDP query of 601 octets without OPT gets
// FORMERR where TCP answers it.
func TestOversizedItem7(t *testing.T) {
	at := serve(t, newServer(t, testSnapshot(t, 0)), "127.0.0.1:0")
	huge := cat(hdr(0xbeef, flagRD, 1, 0, 0, 0), kubernetesA)
	huge = append(huge, make([]byte, 65535-len(huge))...)

	c, err := net.Dial("tcp", at)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(cat(frame(huge), frame(pack(t, 2, "kubernetes.default.svc.cluster.local.", dns.TypeA)))); err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		id    uint16
		rcode int
		n     int
	}{{0xbeef, dns.RcodeFormatError, 0}, {2, dns.RcodeSuccess, 1}} {
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			t.Fatalf("TCP reply %d: %v", i, err)
		}
		b := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatal(err)
		}
		var m dns.Msg
		if err := m.Unpack(b); err != nil || m.Id != want.id || m.Rcode != want.rcode || len(m.Answer) != want.n {
			t.Fatalf("TCP reply %d: %v %v; want id %x, %s, %d records", i, &m, err, want.id, dns.RcodeToString[want.rcode], want.n)
		}
	}

	udp := func(b []byte) *dns.Msg {
		t.Helper()
		c, err := net.Dial("udp", at)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 65536)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("%d octets over UDP: %v", len(b), err)
		}
		var m dns.Msg
		if err := m.Unpack(buf[:n]); err != nil {
			t.Fatal(err)
		}
		return &m
	}
	if m := udp(huge[:5000]); m.Id != 0xbeef || m.Rcode != dns.RcodeFormatError || len(m.Question) != 0 {
		t.Errorf("5000 octets over UDP: %v; want FORMERR", m)
	}
	txt := cat(hdr(0xbeef, flagRD, 1, 0, 0, 1), kubernetesA, bigTXT)
	if m := udp(txt); m.Rcode != dns.RcodeFormatError {
		t.Errorf("601 octets over UDP without OPT: %s; want FORMERR", dns.RcodeToString[m.Rcode])
	}
	withOPT := cat(hdr(0xbeef, flagRD, 1, 0, 0, 2), kubernetesA, bigTXT, optRR(1232))
	if m := udp(withOPT); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
		t.Errorf("612 octets over UDP with OPT: %v; want the answer", m)
	}
}

// withForwarding turns ClusterFirst forwarding on for srv, to up, for the
// clients in allow.
func withForwarding(t testing.TB, srv *Server, up netip.AddrPort, allow ...string) {
	t.Helper()
	var prefixes []netip.Prefix
	for _, a := range allow {
		prefixes = append(prefixes, netip.MustParsePrefix(a))
	}
	f, err := forward.New(forward.Config{Upstreams: []netip.AddrPort{up}, Timeout: time.Second, Allow: prefixes, Listen: "127.0.0.1:1"}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	srv.SetForwarder(f)
}

// Item 7: outside its zones dnsd answers REFUSED, exactly, unless
// forwarding is on and the client may use it: a client outside
// forward-allow, or one that does not ask for recursion, is REFUSED too,
// before and after an allowed client had the name forwarded.
func TestRefusedItem7(t *testing.T) {
	ask := func(srv *Server, from string, tcp, rd bool, name string) *dns.Msg {
		t.Helper()
		w := &worker{s: srv, tcp: tcp, from: netip.MustParseAddrPort(from)}
		q := new(dns.Msg).SetQuestion(name, dns.TypeA)
		q.Id, q.RecursionDesired = 77, rd
		q.SetEdns0(1232, false)
		b, _ := q.Pack()
		var m dns.Msg
		if err := m.Unpack(w.handle(b)); err != nil {
			t.Fatal(err)
		}
		return &m
	}
	refused := func(what string, m *dns.Msg) {
		t.Helper()
		if m.Rcode != dns.RcodeRefused || m.Id != 77 || len(m.Answer)+len(m.Ns) != 0 || m.Authoritative || m.RecursionAvailable ||
			len(m.Question) != 1 || m.Question[0].Name != "WwW.Example.ORG." {
			t.Errorf("%s: %v; want REFUSED with the question and nothing else", what, m)
		}
	}

	off := newServer(t, testSnapshot(t, 0))
	for _, tcp := range []bool{false, true} {
		refused(fmt.Sprintf("forwarding off, TCP %v", tcp), ask(off, "127.0.0.1:5300", tcp, true, "WwW.Example.ORG."))
		refused(fmt.Sprintf("forwarding off, TCP %v, again (from the cache)", tcp), ask(off, "127.0.0.1:5300", tcp, true, "WwW.Example.ORG."))
	}
	if m := ask(off, "127.0.0.1:5300", false, true, "nope.cluster.local."); m.Rcode != dns.RcodeNameError || !m.Authoritative {
		t.Errorf("a missing name inside the zones: %v; want NXDOMAIN", m)
	}

	up, asked := testdns.Upstream(t)
	on := newServer(t, testSnapshot(t, 0))
	withForwarding(t, on, up, "10.0.0.0/8")
	for _, tcp := range []bool{false, true} {
		refused(fmt.Sprintf("client outside forward-allow, TCP %v", tcp), ask(on, "192.0.2.1:5300", tcp, true, "WwW.Example.ORG."))
		m := ask(on, "10.1.2.3:5300", tcp, true, "WwW.Example.ORG.")
		if m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "192.0.2.53" || m.Id != 77 {
			t.Errorf("allowed client, TCP %v: %v; want the upstream's answer", tcp, m)
		}
		refused(fmt.Sprintf("client outside forward-allow after an allowed one, TCP %v", tcp), ask(on, "192.0.2.1:5300", tcp, true, "WwW.Example.ORG."))
		refused(fmt.Sprintf("allowed client without RD, TCP %v", tcp), ask(on, "10.1.2.3:5300", tcp, false, "WwW.Example.ORG."))
	}
	if n := asked.Load(); n != 2 {
		t.Errorf("the upstream was asked %d times; want 2, once per allowed question", n)
	}

	// The same over the sockets, the UDP answer on a goroutine of its own:
	// a loopback client outside forward-allow.
	at := serve(t, on, "127.0.0.1:0")
	for _, network := range []string{"udp", "tcp"} {
		q := new(dns.Msg).SetQuestion("WwW.Example.ORG.", dns.TypeA)
		q.Id = 77
		r, _, err := (&dns.Client{Net: network, Timeout: 2 * time.Second}).Exchange(q, at)
		if err != nil {
			t.Fatal(err)
		}
		refused("loopback over "+network, r)
	}
}

// The cache's bounds are all that grows with the names asked: answering
// keeps nothing in the snapshot. Records built once asked and kept in the
// node were about 240 bytes a name outside the bounds, for as long as the
// name did not change; a node-local frontend asked every name of a large
// zone over a day would have held them all.
func TestAnsweringKeepsNothingOutsideTheCache(t *testing.T) {
	const n = 20_000
	kvs, wires := endpointNames(t, n)
	sn, errs := snap.Build(zones, 9, kvs)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	srv := newServer(t, sn)
	w := &worker{s: srv, out: make([]byte, 0, 4096)}
	for _, q := range wires {
		var m dns.Msg
		if err := m.Unpack(w.handle(q)); err != nil || len(m.Answer) != 1 {
			t.Fatalf("%v: %v", &m, err)
		}
	}
	if c, _ := srv.cacheFor(sn); c.entries() != n {
		t.Fatalf("%d entries cached; want the %d names asked", c.entries(), n)
	}
	srv, w = nil, nil // and with them the cache
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > n*16 {
		t.Errorf("the heap grew by %d bytes (%d a name) for %d names asked, the cache gone", grew, grew/n, n)
	}
	runtime.KeepAlive(sn)
}

// Item 7: a flood of random names leaves the cache bounded in entries and
// bytes, its gauges say so, and the names clients keep asking stay cached
// through it (CLOCK): none of a hundred hot entries is evicted by 200,000
// one-off names, where evicting at random would take most of them.
func TestCacheFloodItem7(t *testing.T) {
	reg := prometheus.NewRegistry()
	sn := testSnapshot(t, 0)
	srv := New(func() *snap.Snapshot { return sn }, opts, reg, discardLog)
	w := &worker{s: srv}
	ask := func(name string) *dns.Msg {
		b := pack(t, 1, name, dns.TypeA)
		var m dns.Msg
		if err := m.Unpack(w.handle(b)); err != nil {
			t.Fatal(err)
		}
		return &m
	}
	hot := make([]string, 100)
	for i := range hot {
		hot[i] = fmt.Sprintf("hot%d.default.svc.cluster.local.", i)
		ask(hot[i])
	}
	c, gen := srv.cacheFor(sn)
	entry := func(name string) *cached {
		q, _ := parseQuery(pack(t, 1, name, dns.TypeA))
		return c.get(cacheKey(nil, pack(t, 1, name, dns.TypeA), q), sn, gen)
	}
	first := make([]*cached, len(hot))
	for i, h := range hot {
		if first[i] = entry(h); first[i] == nil {
			t.Fatalf("%s not cached", h)
		}
	}

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const flood = 200_000
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range flood {
		if m := ask(fmt.Sprintf("r%x.default.svc.cluster.local.", rnd.Uint64())); m.Rcode != dns.RcodeNameError {
			t.Fatalf("random name %d: %s", i, dns.RcodeToString[m.Rcode])
		}
		if i%4 == 0 {
			ask(hot[i/4%len(hot)])
		}
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)

	entries, size := c.entries(), c.bytes.Load()
	if entries > cacheLimit || size > cacheBytes {
		t.Errorf("after %d random names: %d entries, %d bytes; bounds %d and %d", flood, entries, size, cacheLimit, cacheBytes)
	}
	if entries < cacheLimit*9/10 {
		t.Errorf("after %d random names: %d entries; the cache should be near full (%d)", flood, entries, cacheLimit)
	}
	evicted := counterWith(t, reg, "etcdns_dnsd_cache_evictions_total")
	if want := float64(flood + len(hot) - entries); evicted != want {
		t.Errorf("evictions_total = %v; want %v, every entry stored and gone", evicted, want)
	}
	if g := counterWith(t, reg, "etcdns_dnsd_cache_entries"); g != float64(entries) {
		t.Errorf("cache_entries gauge = %v; want %d", g, entries)
	}
	if g := counterWith(t, reg, "etcdns_dnsd_cache_bytes"); g != float64(size) {
		t.Errorf("cache_bytes gauge = %v; want %d", g, size)
	}
	kept := 0
	for i, h := range hot {
		if entry(h) == first[i] {
			kept++
		}
	}
	if kept != len(hot) {
		t.Errorf("%d of %d hot entries lived through the flood; want all", kept, len(hot))
	}
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d entries, %d accounted bytes, heap grew %d KiB (%d bytes per entry)", entries, size, grown>>10, grown/int64(entries))
	if grown > 40<<20 {
		t.Errorf("heap grew %d MiB over the flood; the cache's bound is %d MiB accounted", grown>>20, cacheBytes>>20)
	}
}

// Large answers are bounded by bytes, not entries: a cache of 64 KiB
// asked for forty 60-record answers in four shapes and eight orders each,
// about 1.3 MB in all, holds no more than 64 KiB, and accounts for exactly
// what its entries hold.
func TestCacheBytesBound(t *testing.T) {
	var kvs []snap.KV
	for j := range 40 {
		for i := range 60 {
			kvs = append(kvs, snap.KV{
				Key:   fmt.Sprintf("/skydns/local/cluster/svc/default/big%d/e%d", j, i),
				Value: []byte(fmt.Sprintf(`{"host":"10.%d.%d.%d"}`, j, i/250, i%250+1)),
			})
		}
	}
	sn, errs := snap.Build(zones, 9, kvs)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	srv := newServer(t, sn)
	srv.cacheLimits[1] = 64 << 10
	w := &worker{s: srv, tcp: true}
	for j := range 40 {
		for _, shape := range []struct {
			qtype    uint16
			edns, do bool
		}{{dns.TypeA, false, false}, {dns.TypeA, true, false}, {dns.TypeA, true, true}, {dns.TypeANY, false, false}} {
			m := new(dns.Msg).SetQuestion(fmt.Sprintf("big%d.default.svc.cluster.local.", j), shape.qtype)
			if shape.edns {
				m.SetEdns0(1232, shape.do)
			}
			b, _ := m.Pack()
			for range rotations {
				var r dns.Msg
				if err := r.Unpack(w.handle(b)); err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 60 {
					t.Fatalf("big%d: %v %v", j, &r, err)
				}
			}
		}
	}
	c, _ := srv.cacheFor(sn)
	var sum int64
	n := 0
	for i := range c.shards {
		c.shards[i].idx.each(func(e *cached) {
			sum += int64(e.size)
			n++
			orders := e.orders()
			for o := range orders {
				if p := orders[o].Load(); p != nil {
					sum -= int64(len(*p))
				}
			}
			sum -= int64(len(e.key) + entryCost)
		})
	}
	if got := c.bytes.Load(); got > 64<<10 || got < 32<<10 {
		t.Errorf("%d bytes cached; want the cache full to at most 64 KiB", got)
	}
	if sum != 0 || n != c.entries() {
		t.Errorf("entries' sizes are off by %d from what they hold", sum)
	}
}

// A query's answer does not wait for the next message to arrive whole:
// a client that sends a query and the start of another, then waits for the
// first answer before sending the rest, gets it at once (FuzzTCPStream
// found the loop holding it until the second message was complete, and
// dropping it if the connection ended first).
func TestTCPAnswersBeforePartialMessage(t *testing.T) {
	at := serve(t, newServer(t, testSnapshot(t, 0)), "127.0.0.1:0")
	c, err := net.Dial("tcp", at)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	second := frame(pack(t, 2, "kubernetes.default.svc.cluster.local.", dns.TypeA))
	read := func(id uint16) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			t.Fatalf("answer %d: %v", id, err)
		}
		b := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatal(err)
		}
		if be16(b) != id {
			t.Fatalf("answer to %d, want %d", be16(b), id)
		}
	}
	if _, err := c.Write(cat(frame(pack(t, 1, "kubernetes.default.svc.cluster.local.", dns.TypeA)), second[:5])); err != nil {
		t.Fatal(err)
	}
	read(1)
	if _, err := c.Write(second[5:]); err != nil {
		t.Fatal(err)
	}
	read(2)
}

// Readers flooding one small cache at once, evicting each other's entries
// and adding orders to shared ones, leave it within its bounds and its
// byte count exact; run with -race.
func TestCacheConcurrentFlood(t *testing.T) {
	srv := newServer(t, testSnapshot(t, 4))
	srv.cacheLimits = [2]int64{cacheShards * 4, 16 << 10}
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			w := &worker{s: srv}
			rnd := rand.New(rand.NewPCG(uint64(g), 7))
			for i := range 5000 {
				name := fmt.Sprintf("r%d.default.svc.cluster.local.", rnd.IntN(2000))
				if i%3 == 0 {
					name = "big.default.svc.cluster.local." // rotates: orders added to a shared entry
				}
				var m dns.Msg
				if err := m.Unpack(w.handle(pack(t, uint16(i), name, dns.TypeA))); err != nil || m.Id != uint16(i) {
					t.Errorf("%s: %v %v", name, &m, err)
					return
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
	c, _ := srv.cacheFor(srv.snapshot())
	var sum int64
	for i := range c.shards {
		if live := c.shards[i].idx.live; live != len(c.shards[i].ring) || live > 4 {
			t.Errorf("shard %d: %d entries, %d in its ring; at most 4", i, live, len(c.shards[i].ring))
		}
		c.shards[i].idx.each(func(e *cached) { sum += int64(e.size) })
	}
	if got := c.bytes.Load(); got != sum || got > 16<<10+4*1024 {
		t.Errorf("%d bytes accounted, entries hold %d; bound %d plus a response per racing reader", got, sum, 16<<10)
	}
}

// The cluster holds the PTR records of its own addresses only: with
// forwarding on, a reverse question it has no name for (dig -x of a public
// address) goes upstream for a client that may forward, as CoreDNS's
// default Corefile falls through in-addr.arpa and ip6.arpa; its own
// addresses are still answered from the zone, and a client that may not
// forward gets the zone's NXDOMAIN, also after one that may.
func TestReverseFallsThroughToForwarding(t *testing.T) {
	ask := func(srv *Server, from string, rd bool, name string) *dns.Msg {
		t.Helper()
		w := &worker{s: srv, tcp: true, from: netip.MustParseAddrPort(from)}
		q := new(dns.Msg).SetQuestion(name, dns.TypePTR)
		q.RecursionDesired = rd
		b, _ := q.Pack()
		var m dns.Msg
		if err := m.Unpack(w.handle(b)); err != nil {
			t.Fatal(err)
		}
		return &m
	}
	ours := func(what string, m *dns.Msg) {
		t.Helper()
		if m.Rcode != dns.RcodeNameError || !m.Authoritative {
			t.Errorf("%s: %v; want the zone's NXDOMAIN", what, m)
		}
	}
	off := newServer(t, testSnapshot(t, 0))
	ours("forwarding off", ask(off, "10.1.2.3:5300", true, "8.8.8.8.in-addr.arpa."))

	up, asked := testdns.Upstream(t)
	on := newServer(t, testSnapshot(t, 0))
	withForwarding(t, on, up, "10.0.0.0/8")
	ours("client outside forward-allow", ask(on, "192.0.2.1:5300", true, "8.8.8.8.in-addr.arpa."))
	if m := ask(on, "10.1.2.3:5300", true, "8.8.8.8.in-addr.arpa."); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 || asked.Load() != 1 {
		t.Errorf("allowed client: %v, upstream asked %d times; want the upstream's answer", m, asked.Load())
	}
	ours("client outside forward-allow after an allowed one", ask(on, "192.0.2.1:5300", true, "8.8.8.8.in-addr.arpa."))
	ours("allowed client without RD", ask(on, "10.1.2.3:5300", false, "8.8.8.8.in-addr.arpa."))
	m := ask(on, "10.1.2.3:5300", true, "1.0.96.10.in-addr.arpa.")
	if len(m.Answer) != 1 || m.Answer[0].(*dns.PTR).Ptr != "kubernetes.default.svc.cluster.local." || !m.Authoritative {
		t.Errorf("the cluster's own address: %v; want its PTR from the zone", m)
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("the upstream was asked %d times; want once", n)
	}
}

// An answer in the forwarding cache needs no slot to wait for an
// upstream in: with every slot taken (a flood of questions to a dead
// upstream), it still answers over UDP, where it got SERVFAIL.
func TestForwardCacheNeedsNoSlot(t *testing.T) {
	up, asked := testdns.Upstream(t)
	srv := newServer(t, testSnapshot(t, 0))
	f, err := forward.New(forward.Config{Upstreams: []netip.AddrPort{up}, Timeout: time.Second, CacheSize: 100, MaxTTL: 30,
		Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, Listen: "127.0.0.1:1"}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	srv.SetForwarder(f)
	q := new(dns.Msg).SetQuestion("www.example.org.", dns.TypeA)
	b, _ := q.Pack()
	from := netip.MustParseAddrPort("127.0.0.1:5300")
	var m dns.Msg
	if err := m.Unpack((&worker{s: srv, tcp: true, from: from}).handle(b)); err != nil || len(m.Answer) != 1 {
		t.Fatalf("over TCP: %v %v", &m, err)
	}
	for range cap(srv.slots) {
		srv.slots <- struct{}{}
	}
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	out := (&worker{s: srv, from: from, pc: pc}).handle(b)
	if out == nil || m.Unpack(out) != nil || m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 || asked.Load() != 1 {
		t.Errorf("over UDP, every slot taken: %v; want the cached answer, the upstream asked once (%d)", &m, asked.Load())
	}
}

// TestNotImpEchoesEDNS: NOTIMP to a sound message with an OPT record
// carries an OPT record of dnsd's (RFC 6891 section 7: every answer to a
// query with one does); to one without, or with a broken one, none.
func TestNotImpEchoesEDNS(t *testing.T) {
	srv := New(func() *snap.Snapshot { return testSnapshot(t, 0) }, opts, prometheus.NewRegistry(), discardLog)
	const id = 0xbeef
	for _, c := range []struct {
		name string
		b    []byte
		opt  bool
	}{
		{"STATUS with OPT", cat(hdr(id, 2<<11|flagRD, 1, 0, 0, 1), kubernetesA, optRR(4096)), true},
		{"UPDATE with a record and OPT", cat(hdr(id, 5<<11, 1, 0, 1, 1), question("cluster.local.", dns.TypeSOA),
			[]byte{0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4, 1, 2, 3, 4}, optRR(1232)), true},
		{"STATUS without OPT", cat(hdr(id, 2<<11|flagRD, 1, 0, 0, 0), kubernetesA), false},
		{"STATUS with two OPT records", cat(hdr(id, 2<<11|flagRD, 1, 0, 0, 2), kubernetesA, optRR(1232), optRR(1232)), false},
		{"STATUS with OPT and junk after it", cat(hdr(id, 2<<11|flagRD, 1, 0, 0, 1), kubernetesA, optRR(1232), []byte("junk")), false},
	} {
		for _, w := range []*worker{{s: srv}, {s: srv, tcp: true}} {
			var m dns.Msg
			if err := m.Unpack(w.handle(c.b)); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			opt := m.IsEdns0()
			if m.Rcode != dns.RcodeNotImplemented || (opt != nil) != c.opt || len(m.Extra) > 1 {
				t.Errorf("%s (TCP %v): %s, OPT %v; want NOTIMP, OPT %v", c.name, w.tcp, dns.RcodeToString[m.Rcode], opt, c.opt)
			}
			if opt != nil && (opt.UDPSize() != answer.EDNSSize || opt.Version() != 0 || opt.Do() || len(opt.Option) != 0) {
				t.Errorf("%s: OPT %v; want dnsd's payload size, version 0, nothing else", c.name, opt)
			}
		}
	}
}

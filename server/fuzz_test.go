package server

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/etcdns/etcdns/internal/testdns"
	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/server/answer"
	"github.com/etcdns/etcdns/server/snap"
)

// The fuzz targets' seeds are files under testdata/fuzz/<target>/, written
// from fuzzSeeds by TestFuzzCorpus; `make fuzz` runs each target.

var (
	allowedClient = netip.MustParseAddrPort("127.0.0.1:40000")
	deniedClient  = netip.MustParseAddrPort("192.0.2.1:40000")
)

// probe follows every fuzzed TCP message on its connection: its answer
// proves the connection still reads messages where they start.
var probe = func() []byte {
	m := new(dns.Msg).SetQuestion("kubernetes.default.svc.cluster.local.", dns.TypeA)
	m.Id = 0x5eed
	b, _ := m.Pack()
	return b
}()

// FuzzServeDNS (issue 9 item 5, with FuzzTCPStream, FuzzRecord and the
// keys package's targets; make fuzz runs each for five minutes) feeds raw
// messages to what the listeners run: the UDP socket reader's batch (fast
// path, cache, full path, forwarding inline) from a client forwarding
// allows and from one it refuses, and the TCP connection loop with a query
// after the message. Whatever the bytes:
//
//   - no panic, and a reply exactly when the message has a header and is
//     no response;
//   - a reply parses, carries the query's id, opcode and RD, and over UDP
//     fits the client's limit (512 octets without EDNS);
//   - what miekg/dns cannot parse gets FORMERR or NOTIMP, never an answer;
//   - a reply with the question has it as asked (0x20 kept);
//   - EDNS in the query means EDNS in the reply and none means none,
//     but for FORMERR and NOTIMP;
//   - a repeated message gets the same bytes, from the cache or not;
//   - the refused client gets the allowed one's reply, or REFUSED where
//     the allowed one's question was forwarded;
//   - TCP answers what UDP truncates, with the same rcode, and goes on
//     to answer the next query.
func FuzzServeDNS(f *testing.F) {
	up, _ := testdns.Upstream(f)
	srv := newServer(f, testSnapshot(f, 60))
	srv.opts.Rotate = false // so repeated answers are comparable
	withForwarding(f, srv, up, "127.0.0.0/8")
	udp := newUDPPath(srv)
	f.Fuzz(func(t *testing.T, data []byte) {
		allowed := udp.reply(t, data, allowedClient)
		if again := udp.reply(t, data, allowedClient); !bytes.Equal(allowed, again) {
			t.Fatalf("the same message answered twice differently:\n%x\n%x", allowed, again)
		}
		denied := udp.reply(t, data, deniedClient)

		if answerable := len(data) >= 12 && data[2]&0x80 == 0; (allowed != nil) != answerable {
			t.Fatalf("reply %x to a message that has a header and is a query: %v", allowed, answerable)
		}
		if allowed == nil {
			if denied != nil {
				t.Fatal("the refused client got a reply where the allowed one got none")
			}
			return
		}
		req := new(dns.Msg)
		if req.Unpack(data) != nil {
			req = nil
		}
		m := checkServed(t, data, req, allowed, "UDP")
		limit := dns.MinMsgSize
		if req != nil {
			limit = answer.Size(req, true)
		}
		if len(allowed) > limit {
			t.Fatalf("UDP reply of %d octets; the client takes %d", len(allowed), limit)
		}
		if !bytes.Equal(denied, allowed) {
			if d := checkServed(t, data, req, denied, "UDP"); d.Rcode != dns.RcodeRefused || m.Rcode == dns.RcodeRefused {
				t.Fatalf("the refused client got %s where the allowed one got %s; only a forwarded question may differ, as REFUSED",
					dns.RcodeToString[d.Rcode], dns.RcodeToString[m.Rcode])
			}
		} else if req != nil && m.Rcode != dns.RcodeFormatError && m.Rcode != dns.RcodeNotImplemented {
			// Not forwarded: the engine's answer, which follows RFC 6891 7.
			if (req.IsEdns0() != nil) != (m.IsEdns0() != nil) {
				t.Fatalf("EDNS in the query %v, in the reply %v", req.IsEdns0() != nil, m.IsEdns0() != nil)
			}
		}

		if len(data) > dns.MaxMsgSize {
			return
		}
		stream := append(frame(data), frame(probe)...)
		var out bytes.Buffer
		serveConn(srv, &streamConn{r: bytes.NewReader(stream), w: &out})
		replies := frames(t, out.Bytes())
		if len(replies) != 2 {
			t.Fatalf("%d TCP replies to a message and a query; want 2", len(replies))
		}
		tm := checkServed(t, data, req, replies[0], "TCP")
		if tm.Truncated {
			t.Fatal("TCP reply truncated")
		}
		if len(data) <= dns.MinMsgSize && tm.Rcode != m.Rcode {
			t.Fatalf("TCP rcode %s, UDP %s", dns.RcodeToString[tm.Rcode], dns.RcodeToString[m.Rcode])
		}
		var pm dns.Msg
		if err := pm.Unpack(replies[1]); err != nil || pm.Id != 0x5eed || len(pm.Answer) != 1 {
			t.Fatalf("the query after the message: %v %v", &pm, err)
		}
	})
}

// checkServed checks a reply to data (req: data parsed, nil if miekg/dns
// cannot) and returns it parsed.
func checkServed(t *testing.T, data []byte, req *dns.Msg, reply []byte, network string) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	if err := m.Unpack(reply); err != nil {
		t.Fatalf("%s reply does not parse: %v\n%x", network, err, reply)
	}
	if m.Id != be16(data) || !m.Response || m.Opcode != int(data[2]>>3&0xf) || m.RecursionDesired != (data[2]&1 == 1) {
		t.Fatalf("%s reply header: id %x QR %v opcode %d RD %v; query: %x", network, m.Id, m.Response, m.Opcode, m.RecursionDesired, data[:4])
	}
	if req == nil {
		if m.Rcode != dns.RcodeFormatError && m.Rcode != dns.RcodeNotImplemented {
			t.Fatalf("%s: a message miekg/dns cannot parse got %s", network, dns.RcodeToString[m.Rcode])
		}
		return m
	}
	if len(m.Question) == 1 && len(req.Question) == 1 && m.Question[0] != req.Question[0] {
		t.Fatalf("%s reply's question %v; asked %v", network, m.Question[0], req.Question[0])
	}
	return m
}

// frames splits what dnsd wrote on a TCP connection into messages.
func frames(t *testing.T, b []byte) [][]byte {
	t.Helper()
	var out [][]byte
	for len(b) > 0 {
		if len(b) < 2 || len(b) < 2+int(be16(b)) {
			t.Fatalf("a TCP reply cut short: %x", b)
		}
		n := int(be16(b))
		out = append(out, b[2:2+n])
		b = b[2+n:]
	}
	return out
}

// FuzzTCPStream feeds a raw byte stream to the TCP connection loop, as a
// client might send it: length prefixes that lie, pipelined messages,
// oversized ones, a stream cut anywhere. dnsd reads it exactly as framed:
// one reply, in order, to each whole message that has a header and is
// no response (a message over maxQuery octets skipped and answered
// FORMERR), each reply parsing with that message's id; nothing after a
// message cut short.
func FuzzTCPStream(f *testing.F) {
	srv := newServer(f, testSnapshot(f, 60))
	f.Fuzz(func(t *testing.T, stream []byte) {
		var want []uint16
		for rest := stream; len(rest) >= 2; {
			n := int(be16(rest))
			if len(rest) < 2+n {
				break
			}
			if msg := rest[2 : 2+n]; n >= 12 && msg[2]&0x80 == 0 {
				want = append(want, be16(msg))
			}
			rest = rest[2+n:]
		}
		var out bytes.Buffer
		serveConn(srv, &streamConn{r: bytes.NewReader(stream), w: &out})
		replies := frames(t, out.Bytes())
		if len(replies) != len(want) {
			t.Fatalf("%d replies; want %d", len(replies), len(want))
		}
		for i, r := range replies {
			var m dns.Msg
			if err := m.Unpack(r); err != nil || m.Id != want[i] || !m.Response {
				t.Fatalf("reply %d: %v, %v; want id %x", i, &m, err, want[i])
			}
		}
	})
}

// recordZones are the zones FuzzRecord stores keys in: a forward zone,
// where a key is an owner name and an id, and a reverse zone, where it is
// the owner name alone.
var recordZones = []snap.Config{
	{Name: "cluster.local", Prefix: "/skydns", TTL: 5},
	{Name: "in-addr.arpa", Prefix: "/skydns", TTL: 5},
}

// FuzzRecord stores one key and value as etcd would hand them to dnsd and
// asks for what they encode. The zone's key parser (snap.Zone.Parse,
// keys.SplitRecordKey, keys.Name) must never panic; what it accepts must
// have an owner in the zone whose key is the key (plus an id in a forward
// zone) and the type the typing rule gives the value; and a snapshot
// built from it must answer that owner and type with a record over TCP.
func FuzzRecord(f *testing.F) {
	srv := newServer(f, nil)
	// Pods verified: every stored record is served. In the other modes
	// dnsd answers pod.<zone> from the name alone and ignores what is
	// stored there, by design (the fuzzer's first find, kept as a seed).
	srv.opts.Pods = answer.PodsVerified
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		for _, c := range recordZones {
			z := snap.NewZone(c)
			owner, e, err := z.Parse(key, value)
			if err != nil || !strings.HasPrefix(key, z.Range) || z.IsStubKey(key) {
				continue
			}
			if !keys.IsSubdomain(owner, c.Name) {
				t.Fatalf("key %q: owner %q outside zone %s", key, owner, c.Name)
			}
			ownerKey, err := keys.Key(c.Prefix, owner)
			if err != nil {
				t.Fatalf("key %q: owner %q has no key: %v", key, owner, err)
			}
			if id, ok := strings.CutPrefix(key, ownerKey+"/"); z.Reverse && key != ownerKey || !z.Reverse && (!ok || !keys.IsLabel(id)) {
				t.Fatalf("key %q: owner %q (key %q) in zone %s", key, owner, ownerKey, c.Name)
			}
			v, _ := keys.Decode(value)
			if typ, err := v.Type(owner, z.Reverse); err != nil || typ != e.Type() {
				t.Fatalf("key %q: entry of type %d; the value's is %d, %v", key, e.Type(), typ, err)
			}

			sn, errs := snap.Build([]snap.Config{c}, 1, []snap.KV{{Key: key, Value: value}})
			if len(errs) > 0 {
				t.Fatalf("key %q: parsed, yet Build fails: %v", key, errs)
			}
			cur := sn
			srv.snapshot = func() *snap.Snapshot { return cur }
			q := new(dns.Msg).SetQuestion(dns.Fqdn(owner), e.Type())
			b, err := q.Pack()
			if err != nil {
				t.Fatalf("owner %q: %v", owner, err)
			}
			var m dns.Msg
			if err := m.Unpack((&worker{s: srv, tcp: true}).handle(b)); err != nil {
				t.Fatalf("%s %s: %v", owner, dns.TypeToString[e.Type()], err)
			}
			if m.Truncated {
				continue // a TXT value too large for any message
			}
			found := false
			for _, rr := range m.Answer {
				found = found || rr.Header().Rrtype == e.Type() && strings.EqualFold(rr.Header().Name, dns.Fqdn(owner))
			}
			if m.Rcode != dns.RcodeSuccess || !found {
				t.Fatalf("key %q value %s: %s %s answered %s %v", key, value, owner, dns.TypeToString[e.Type()], dns.RcodeToString[m.Rcode], m.Answer)
			}
		}
	})
}

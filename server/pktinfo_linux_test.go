//go:build linux

package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/etcdns/etcdns/internal/testdns"
)

// A server on a wildcard address answers from the address the client
// asked, not the one the route back picks: 127.0.0.2 is the host's as
// much as 127.0.0.1, and left to the route an answer to a client at
// 127.0.0.1 leaves from 127.0.0.1. So for an IPv4 socket and for a
// dual-stack one (what Go binds for :53 and 0.0.0.0:53), read in the
// kernel and in Go's poller, for an answer from the zone and a forwarded
// one.
func TestWildcardAnswersFromAddressAsked(t *testing.T) {
	up, asked := testdns.Upstream(t)
	for _, wait := range readerWaits {
		for _, network := range []string{"udp4", "udp"} {
			t.Run(wait.name+"/"+network, func(t *testing.T) {
				srv := newServer(t, testSnapshot(t, 0))
				srv.kernelWaitFrom = wait.from
				withForwarding(t, srv, up, "127.0.0.0/8")
				port := serveWildcard(t, srv, network)
				for _, name := range []string{"kubernetes.default.svc.cluster.local.", "www.example.org."} {
					to := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), port)
					if from := answerSource(t, "127.0.0.1", to, name); from != to {
						t.Errorf("%s asked at %s: the answer came from %s", name, to, from)
					}
				}
			})
		}
	}
	if asked.Load() == 0 {
		t.Error("the upstream was never asked: no answer was forwarded")
	}
}

// Over IPv6 ::1 is the only loopback address, so this shows only that an
// IPv6 datagram's answer, sent with its own pktinfo, arrives from where
// it was sent.
func TestWildcardAnswersFromAddressAskedIPv6(t *testing.T) {
	srv := newServer(t, testSnapshot(t, 0))
	port := serveWildcard(t, srv, "udp")
	to := netip.AddrPortFrom(netip.IPv6Loopback(), port)
	if from := answerSource(t, "::1", to, "kubernetes.default.svc.cluster.local."); from != to {
		t.Errorf("asked at %s: the answer came from %s", to, from)
	}
}

// serveWildcard serves srv on a wildcard address of a socket of network
// (udp4: an IPv4 socket; udp: Go's dual-stack one), bound as Listen binds,
// until the test ends, and returns its port.
func serveWildcard(t *testing.T, srv *Server, network string) uint16 {
	t.Helper()
	pc, err := (&net.ListenConfig{Control: udpControl}).ListenPacket(context.Background(), network, "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		pc.Close()
		t.Fatal(err)
	}
	l := &Listener{Addr: pc.LocalAddr().String(), udp: []*net.UDPConn{pc.(*net.UDPConn)}, tcp: tcp}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return uint16(pc.LocalAddr().(*net.UDPAddr).Port)
}

// answerSource asks name at to from a socket bound to from, unconnected
// so that an answer from any address reaches it, and returns where the
// answer came from.
func answerSource(t *testing.T, from string, to netip.AddrPort, name string) netip.AddrPort {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(from), 0)))
	if err != nil {
		t.Skipf("binding %s: %v", from, err) // no IPv6 loopback here
	}
	defer c.Close()
	q := new(dns.Msg).SetQuestion(name, dns.TypeA)
	b, _ := q.Pack()
	if _, err := c.WriteToUDPAddrPort(b, to); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	n, src, err := c.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatalf("%s asked at %s: %v", name, to, err)
	}
	var m dns.Msg
	if err := m.Unpack(buf[:n]); err != nil || m.Id != q.Id || len(m.Answer) != 1 {
		t.Fatalf("%s asked at %s: %v %v", name, to, &m, err)
	}
	return netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
}

func TestWildcard(t *testing.T) {
	for addr, want := range map[string]bool{
		":53": true, "0.0.0.0:53": true, "[::]:53": true, "[::]:0": true,
		"127.0.0.1:53": false, "[::1]:53": false, "10.0.0.1:0": false, "nope": false,
	} {
		if wildcard(addr) != want {
			t.Errorf("wildcard(%q) = %v", addr, !want)
		}
	}
}

// Control data the kernel is not expected to send (truncated, garbled,
// of other kinds) reads as no address, without a crash, and the answer
// then goes without pktinfo.
func TestPktinfoBadControlData(t *testing.T) {
	if unix.CmsgSpace(unix.SizeofInet4Pktinfo)+unix.CmsgSpace(unix.SizeofInet6Pktinfo) > len(ctrlBuf{}.b) {
		t.Fatal("ctrlBuf holds less than both pktinfos")
	}
	var c ctrlBuf
	v4 := source{addr: netip.MustParseAddr("192.0.2.7")}
	for _, src := range []source{v4, {addr: netip.MustParseAddr("2001:db8::7")}, {addr: netip.MustParseAddr("fe80::7"), ifindex: 3}} {
		n := putPktinfo(&c, src)
		if got := pktinfoDst(c.b[:n]); got != src {
			t.Errorf("pktinfo from %v reads as %v", src, got)
		}
		for cut := range int((*unix.Cmsghdr)(unsafe.Pointer(&c.b)).Len) { // the padding after it may go
			if got := pktinfoDst(c.b[:cut]); got.addr.IsValid() {
				t.Errorf("pktinfo from %v cut at %d reads as %v", src, cut, got)
			}
		}
	}
	// Only a link-local address is sent with its interface: elsewhere the
	// route chooses, as without pktinfo.
	if n := putPktinfo(&c, source{addr: netip.MustParseAddr("2001:db8::7"), ifindex: 3}); pktinfoDst(c.b[:n]).ifindex != 0 {
		t.Error("a global IPv6 source is sent with an interface")
	}
	if n := putPktinfo(&c, source{addr: netip.MustParseAddr("::ffff:192.0.2.7")}); n == 0 || pktinfoDst(c.b[:n]) != v4 {
		t.Error("a mapped IPv4 address is not sent as in_pktinfo")
	}
	for _, src := range []netip.Addr{{}, netip.MustParseAddr("ff02::1"), netip.MustParseAddr("224.0.0.1")} {
		if n := putPktinfo(&c, source{addr: src}); n != 0 {
			t.Errorf("pktinfo from %s: %d bytes; want none", src, n)
		}
	}

	h := (*unix.Cmsghdr)(unsafe.Pointer(&c.b))
	for _, bad := range []func(){
		func() { h.SetLen(0) },
		func() { h.SetLen(unix.CmsgLen(0) - 1) },
		func() { h.SetLen(len(c.b) + 1) },
		func() { h.SetLen(1 << 30) },
		func() { h.Level = unix.SOL_SOCKET },
		func() { h.Type = unix.IP_TTL },
		func() { h.SetLen(unix.CmsgLen(unix.SizeofInet4Pktinfo - 1)) },
	} {
		c = ctrlBuf{}
		putPktinfo(&c, v4)
		bad()
		if got := pktinfoDst(c.b[:]); got.addr.IsValid() {
			t.Errorf("garbled control data reads as %v", got)
		}
	}

	// Through a batch: a datagram without control data is answered
	// without pktinfo.
	b := newUDPBatch(newServer(t, testSnapshot(t, 0)).newUDPWorker(nil), true)
	b.in[0].n = uint32(copy(b.bufs[0], pack(t, 1, "kubernetes.default.svc.cluster.local.", dns.TypeA)))
	sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(&b.names[0]))
	sa4.Family, sa4.Addr = unix.AF_INET, [4]byte{127, 0, 0, 1}
	b.in[0].hdr.SetControllen(0)
	b.out[0].hdr.Control = &b.ctrls[0].b[0] // left from an earlier batch
	b.got = 1
	b.answer()
	if b.pending != 1 || b.out[0].hdr.Control != nil || b.out[0].hdr.Controllen != 0 {
		t.Errorf("answered %d, control %p of %d bytes; want one, without", b.pending, b.out[0].hdr.Control, b.out[0].hdr.Controllen)
	}
}

// An answer the kernel refuses to send from the address asked (one the
// host has since lost) goes as it would without pktinfo.
func TestPktinfoRefusedSourceFallsBack(t *testing.T) {
	pc, rc := controlledSocket(t, "udp4", "0.0.0.0:0")
	client, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	b := newUDPBatch(newServer(t, testSnapshot(t, 0)).newUDPWorker(pc), true)
	b.rc = rc
	sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(&b.names[0]))
	sa4.Family, sa4.Addr = unix.AF_INET, [4]byte{127, 0, 0, 1}
	binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa4.Port))[:], uint16(client.LocalAddr().(*net.UDPAddr).Port))
	b.out[0].hdr.Name, b.out[0].hdr.Namelen = b.in[0].hdr.Name, unix.SizeofSockaddrInet4
	answer := []byte("answer")
	b.outIo[0].Base = &answer[0]
	b.outIo[0].SetLen(len(answer))
	b.setSource(0, &b.ctrls[0], source{addr: netip.MustParseAddr("192.0.2.7")}) // not the host's
	b.sent, b.pending = 0, 1
	b.flush()

	_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	n, from, err := client.ReadFromUDPAddrPort(buf)
	if err != nil || string(buf[:n]) != "answer" || from.Addr() != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("got %q from %s (%v); want the answer from 127.0.0.1, the route's choice", buf[:n], from, err)
	}
}

// A dual-stack wildcard socket learns where an IPv6 datagram was sent:
// ::1 alone is no proof of an answer's source (it is the only IPv6
// loopback address), so the batch's reading of it is checked here.
func TestPktinfoReadsIPv6Destination(t *testing.T) {
	pc, rc := controlledSocket(t, "udp", "[::]:0")
	port := pc.LocalAddr().(*net.UDPAddr).Port
	for _, to := range []string{"::1", "127.0.0.2"} {
		c, err := net.Dial("udp", net.JoinHostPort(to, fmt.Sprint(port)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		c.Close()
		b := newUDPBatch(newServer(t, testSnapshot(t, 0)).newUDPWorker(nil), true)
		_ = pc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if err := rc.Read(b.recv); err != nil || b.got != 1 {
			t.Fatalf("read: %v, %d datagrams", err, b.got)
		}
		got := pktinfoDst(b.ctrls[0].b[:b.in[0].hdr.Controllen])
		if got.addr.Unmap() != netip.MustParseAddr(to) || got.addr.Is6() && !got.addr.Is4In6() && got.ifindex == 0 {
			t.Errorf("a datagram to %s read as sent to %v", to, got)
		}
	}
}

// controlledSocket is a UDP socket with dnsd's options (udpControl),
// closed when the test ends, and its raw connection.
func controlledSocket(t *testing.T, network, addr string) (*net.UDPConn, syscall.RawConn) {
	t.Helper()
	pc, err := (&net.ListenConfig{Control: udpControl}).ListenPacket(context.Background(), network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	rc, err := pc.(*net.UDPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return pc.(*net.UDPConn), rc
}

// Package testdns holds DNS servers for tests: stand-ins for what dnsd
// forwards to. Test code only; it serves loopback addresses and nothing
// else.
package testdns

import (
	"net"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/miekg/dns"
)

// Upstream answers every question with A 192.0.2.53 (TTL 60, RA set) over
// UDP on a loopback port, and counts the questions it is asked. It stops
// when the test ends.
func Upstream(t testing.TB) (netip.AddrPort, *atomic.Int64) {
	t.Helper()
	var asked atomic.Int64
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		asked.Add(1)
		m := new(dns.Msg).SetReply(req)
		m.RecursionAvailable = true
		m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: req.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IPv4(192, 0, 2, 53)}}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return netip.MustParseAddrPort(pc.LocalAddr().String()), &asked
}

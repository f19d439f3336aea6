package server

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/etcdns/etcdns/server/snap"
)

// forwardUDP answers req with ask (upstreams, a stub domain's
// nameservers, an answer of ours chasing names through them) on a
// goroutine of its own, so a slow upstream holds up the queries waiting on
// it and never the socket's reader. It is false when maxForwarding queries
// wait already. forwarded: the answer is an upstream's, counted as such.
// asked: where the query was sent, the answer's source; zero: left to the
// route.
func (s *Server) forwardUDP(pc *net.UDPConn, to netip.AddrPort, asked source, sn *snap.Snapshot, req *dns.Msg, reqSize, size int, start time.Time, forwarded bool, ask func() *dns.Msg) bool {
	select {
	case s.slots <- struct{}{}:
	default:
		return false
	}
	s.forwarding.Add(1)
	go func() {
		defer s.forwarding.Done()
		defer func() { <-s.slots }()
		b, m, _ := s.pack(ask(), size, nil)
		if b != nil {
			if oob := pktinfo(asked); oob == nil {
				_, _ = pc.WriteToUDPAddrPort(b, to)
			} else if _, _, err := pc.WriteMsgUDPAddrPort(b, oob, to); sourceRefused(err) {
				_, _ = pc.WriteToUDPAddrPort(b, to)
			}
			s.cell(sn, req, m, forwarded, true).answered(pfOf(false, to.Addr()), start)
			if lm, ok := s.logs(b); ok {
				s.logQuery(to, false, req, reqSize, lm, b, time.Since(start))
			}
		}
	}()
	return true
}

// source is where a datagram was sent, as a wildcard socket learns it
// (pktinfo): the address its answer leaves from and, which a link-local
// IPv6 address needs, the interface it came in on. The zero source leaves
// both to the route.
type source struct {
	addr    netip.Addr
	ifindex uint32
}

// serveEach reads and answers one datagram per system call, where
// batching is not available, until the socket's read deadline is set in the
// past, then returns; the socket stays open for the caller to close, so the
// answer being written when shutdown starts still goes out.
func (s *Server) serveEach(pc *net.UDPConn, reads prometheus.Counter) error {
	w := s.newUDPWorker(pc)
	for {
		n, addr, err := pc.ReadFromUDPAddrPort(w.in)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			s.log.Warn("reading a UDP query failed", "err", err)
			continue
		}
		reads.Inc()
		w.from = addr
		if out := w.handle(w.in[:n]); out != nil {
			_, _ = pc.WriteToUDPAddrPort(out, addr)
		}
	}
}

// udpBufSize is the largest query read. A larger datagram is cut: on
// Linux the kernel says so (MSG_TRUNC) and it gets FORMERR; elsewhere what
// is left is screened as it is, and rarely parses.
const udpBufSize = maxQuery

func (s *Server) newUDPWorker(pc *net.UDPConn) *worker {
	return &worker{s: s, in: make([]byte, udpBufSize), out: make([]byte, 0, udpBufSize), pc: pc}
}

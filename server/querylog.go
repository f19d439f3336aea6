package server

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// LogClasses are the answers a query log writes a line for, as CoreDNS's
// log plugin classes them (its "class" setting, response.Classify), so
// that an operator's habit and filters carry over. None: no query log,
// and the answer path pays a test of the field, nothing more.
type LogClasses uint8

const (
	LogSuccess LogClasses = 1 << iota // NOERROR with records, or a referral
	LogDenial                         // NXDOMAIN or NODATA: the zone's SOA in the authority section
	LogError                          // every other answer: SERVFAIL, REFUSED, FORMERR, NOTIMP, BADVERS, a denial without an SOA
	LogAll     = LogSuccess | LogDenial | LogError
)

// ParseLogClasses reads the names of dnsd.query-log: all, success,
// denial, error.
func ParseLogClasses(names []string) (LogClasses, error) {
	var c LogClasses
	for _, n := range names {
		switch strings.ToLower(strings.TrimSpace(n)) {
		case "all":
			c |= LogAll
		case "success":
			c |= LogSuccess
		case "denial":
			c |= LogDenial
		case "error":
			c |= LogError
		default:
			return 0, fmt.Errorf("%q is no class of answers: want all, success, denial or error", n)
		}
	}
	return c, nil
}

// SetQueryLog makes s log each query whose answer is of one of classes,
// a line each at level INFO. It is for finding out why a client gets the
// answer it gets: a line costs far more than the answer itself. Call it
// before Serve.
func (s *Server) SetQueryLog(classes LogClasses) { s.queryLog = classes }

// handle returns the response to one query message, or nil to stay
// silent, and logs it when the query log is on. The response is in w.out,
// valid until the next call.
func (w *worker) handle(b []byte) []byte {
	if w.s.queryLog == 0 {
		return w.respond(b)
	}
	start := w.now() // a UDP batch's start, as the answer time metrics count it
	out := w.respond(b)
	if m, ok := w.s.logs(out); ok {
		req := new(dns.Msg)
		if req.Unpack(b) != nil {
			req = nil
		}
		w.s.logQuery(w.from, w.tcp, req, len(b), m, out, time.Since(start))
	}
	return out
}

// logs reports whether the query log writes the answer resp, and returns
// it unpacked: the class is the answer's, so a log of one class unpacks
// the query only for the answers it writes.
func (s *Server) logs(resp []byte) (*dns.Msg, bool) {
	if s.queryLog == 0 || len(resp) < 12 {
		return nil, false
	}
	m := new(dns.Msg)
	if m.Unpack(resp) != nil {
		// Not ours to fail on: the header alone, as a malformed upstream
		// answer would have been passed on.
		m = &dns.Msg{MsgHdr: dns.MsgHdr{Rcode: int(resp[3] & 0x0f)}}
	}
	return m, s.queryLog&classOf(m) != 0
}

// logQuery writes the line of one answered query: the client, the
// question as CoreDNS's log plugin shows it (id, type, class, name,
// protocol, size, DNSSEC OK, the client's UDP buffer), then the answer's
// rcode, flags and size and the time it took. req is nil for a message
// that is no query (it was answered FORMERR or NOTIMP); m is resp as logs
// unpacked it.
func (s *Server) logQuery(from netip.AddrPort, tcp bool, req *dns.Msg, size int, m *dns.Msg, resp []byte, took time.Duration) {
	proto := "udp"
	if tcp {
		proto = "tcp"
	}
	// A dual-stack listener ([::]:53) has IPv4 clients as ::ffff:a.b.c.d:
	// written as they are, a pod's address would not match a grep for it.
	client := netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
	attrs := []any{"client", client.String(), "proto", proto, "id", binary.BigEndian.Uint16(resp[0:2])}
	if req != nil && len(req.Question) == 1 {
		q := req.Question[0]
		// The size an answer may be, as CoreDNS's request.Size gives it:
		// any over TCP, at least 512 over UDP whatever the OPT says.
		do, bufsize := false, 512
		if o := req.IsEdns0(); o != nil {
			do, bufsize = o.Do(), max(512, int(o.UDPSize()))
		}
		if tcp {
			bufsize = dns.MaxMsgSize
		}
		attrs = append(attrs, "type", dns.Type(q.Qtype).String(), "class", dns.Class(q.Qclass).String(), "name", q.Name, "do", do, "bufsize", bufsize)
	}
	attrs = append(attrs, "size", size, "rcode", rcodeLabel(m.Rcode), "flags", flags(resp), "rsize", len(resp), "duration", took)
	s.log.Info("query", attrs...)
}

// classOf is the class of an answer by CoreDNS's rules (response.Typify,
// then Classify): records answered or a referral succeed; NXDOMAIN, or
// NOERROR without records, denies only with an SOA in the authority
// section; everything else, an extended rcode such as BADVERS included,
// is an error.
func classOf(m *dns.Msg) LogClasses {
	if m.Rcode == dns.RcodeSuccess && len(m.Answer) > 0 {
		return LogSuccess
	}
	soa := false
	for _, rr := range m.Ns {
		soa = soa || rr.Header().Rrtype == dns.TypeSOA
	}
	switch {
	case soa && (m.Rcode == dns.RcodeSuccess || m.Rcode == dns.RcodeNameError):
		return LogDenial
	case m.Rcode == dns.RcodeSuccess:
		return LogSuccess // a referral (NS records), or nothing at all
	}
	return LogError
}

// flags are the header flags of resp that are set, as dig and CoreDNS
// write them.
func flags(resp []byte) string {
	var f []string
	for _, b := range []struct {
		set  bool
		name string
	}{
		{resp[2]&0x80 != 0, "qr"}, {resp[2]&0x04 != 0, "aa"}, {resp[2]&0x02 != 0, "tc"},
		{resp[2]&0x01 != 0, "rd"}, {resp[3]&0x80 != 0, "ra"}, {resp[3]&0x20 != 0, "ad"}, {resp[3]&0x10 != 0, "cd"},
	} {
		if b.set {
			f = append(f, b.name)
		}
	}
	return strings.Join(f, ",")
}

package server

import (
	"encoding/binary"

	"github.com/miekg/dns"

	"github.com/etcdns/etcdns/server/answer"
)

// query is what the fast path needs of a query in the common shape.
type query struct {
	qend  int  // end of the question section
	edns  bool // one OPT record, version 0
	do    bool
	size  int // largest response the client takes over UDP
	qtype uint16
	mixed bool // the name has upper-case letters (0x20)
}

// parseQuery recognises the shape nearly every stub resolver sends: a
// QUERY with one question whose name is lowercase letters, digits, '-' or
// '_' in either case, without compression, and at most an OPT record of
// version 0 after it, nothing more. Anything else reports false and takes
// the full path through miekg/dns, which judges it exactly.
// The EDNS(0) option codes of local and experimental use (RFC 6891 9),
// where dnsd's own options live.
const (
	localOptionMin = 65001
	localOptionMax = 65534
)

func parseQuery(b []byte) (query, bool) {
	var q query
	if len(b) < 12 || b[2]&0xf8 != 0 { // QR and opcode QUERY
		return q, false
	}
	qd, an, ns, ar := be16(b[4:]), be16(b[6:]), be16(b[8:]), be16(b[10:])
	if qd != 1 || an != 0 || ns != 0 || ar > 1 {
		return q, false
	}
	off := 12
	for {
		if off >= len(b) {
			return q, false
		}
		l := int(b[off])
		if l == 0 {
			off++
			break
		}
		if l > 63 || off+1+l > len(b) || off+1+l-12 > 254 {
			return q, false
		}
		for _, c := range b[off+1 : off+1+l] {
			switch {
			case c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_':
			case c >= 'A' && c <= 'Z':
				q.mixed = true
			default:
				return q, false
			}
		}
		off += 1 + l
	}
	if off+4 > len(b) {
		return q, false
	}
	q.qtype = be16(b[off:])
	off += 4
	q.qend = off
	q.size = dns.MinMsgSize
	if ar == 1 {
		// Root owner, type OPT, class = UDP size, TTL = ext-rcode,
		// version, flags; then options, ignored (a cookie does not shape
		// the answer) except those of the local range, where the search
		// path and the source cluster travel: those answers are personal.
		if off+11 > len(b) || b[off] != 0 || be16(b[off+1:]) != dns.TypeOPT || b[off+5] != 0 || b[off+6] != 0 {
			return q, false
		}
		q.edns = true
		q.do = b[off+7]&0x80 != 0
		q.size = answer.UDPSize(be16(b[off+3:]))
		end := off + 11 + int(be16(b[off+9:]))
		for o := off + 11; o+4 <= end && end <= len(b); o += 4 + int(be16(b[o+2:])) {
			if code := be16(b[o:]); code >= localOptionMin && code <= localOptionMax {
				return q, false
			}
		}
		off = end
	}
	if off != len(b) {
		return q, false
	}
	return q, true
}

// cacheKey is the question in lowercase plus what shapes the response:
// OPT present, DO echoed, and the size it must fit (a truncated response
// is cached for its size only).
func cacheKey(dst []byte, b []byte, q query) []byte {
	dst = append(dst[:0], b[12:q.qend]...)
	if q.mixed {
		for i, c := range dst[:len(dst)-4] {
			if c >= 'A' && c <= 'Z' {
				dst[i] = c + 'a' - 'A' // label lengths are below 'A'
			}
		}
	}
	var f byte
	if q.edns {
		f |= 1
	}
	if q.do {
		f |= 2
	}
	return append(dst, f, byte(q.size>>8), byte(q.size))
}

func be16(b []byte) uint16 { return binary.BigEndian.Uint16(b) }

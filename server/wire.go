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

// The EDNS(0) option codes of local and experimental use (RFC 6891 9),
// where dnsd's own options live.
const (
	localOptionMin = 65001
	localOptionMax = 65534
)

// parseQuery recognises the shape nearly every stub resolver sends: a
// QUERY with one question whose name is lowercase letters, digits, '-' or
// '_' in either case, without compression, and at most an OPT record of
// version 0 after it, nothing more. Anything else reports false and takes
// the full path through miekg/dns, which judges it exactly.
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
		if end > len(b) {
			return q, false
		}
		o := off + 11
		for ; o+4 <= end; o += 4 + int(be16(b[o+2:])) {
			if !opaqueOption(be16(b[o:])) {
				return q, false
			}
		}
		if o != end {
			return q, false // an option runs past the record
		}
		off = end
	}
	if off != len(b) {
		return q, false
	}
	return q, true
}

// opaqueOption reports whether an option can ride the fast path: its
// content neither shapes the answer nor is checked by miekg/dns. The
// options miekg/dns validates (client subnet, keepalive, expire, ...) take
// the full path, so a malformed one gets FORMERR whether or not its
// question is cached; those of the local range make the answer personal.
func opaqueOption(code uint16) bool {
	switch code {
	case dns.EDNS0LLQ, dns.EDNS0UL, dns.EDNS0SUBNET, dns.EDNS0EXPIRE, dns.EDNS0TCPKEEPALIVE,
		dns.EDNS0EDE, dns.EDNS0REPORTING, dns.EDNS0ZONEVERSION:
		return false
	}
	return code < localOptionMin || code > localOptionMax
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

// What screen makes of a message off the fast path.
type verdict int

const (
	accept     verdict = iota // well-formed: miekg/dns parses it and the engine answers
	ignore                    // no header, or a response: never answered, as miekg/dns does
	formErr                   // FORMERR
	notImp                    // NOTIMP: an opcode other than QUERY
	notImpEDNS                // NOTIMP, to a message with one OPT record, which the reply carries (RFC 6891 section 7)
)

// maxQuery is the largest query read whole, over UDP (a larger datagram is
// cut and gets FORMERR) and TCP (a larger message is skipped and gets
// FORMERR). A question with EDNS, a cookie and padding is well below it.
const maxQuery = 4096

// screen judges a message that is not in the fast path's shape without
// allocating, so junk costs a walk over its bytes and a header-sized
// reply, never miekg/dns's parse. qend is the end of the question when
// the message holds one, uncompressed, for the reply to echo; else 0.
//
// The rules are miekg/dns's DefaultMsgAcceptFunc (what CoreDNS answers):
// QR set is ignored, an opcode other than QUERY gets NOTIMP (with an OPT
// record when the message is sound and carries one, as RFC 6891 section 7
// has every answer to one; CoreDNS's carries none), a question
// count other than one, more than one answer or authority record or more
// than two additional records get FORMERR. Beyond it a message that does
// not parse as its counts say gets FORMERR here rather than from a failed
// unpack, and so do three that miekg/dns lets through: octets after the
// last record, two OPT records (RFC 6891 6.1.1 says FORMERR) and a name
// compressed with a pointer that does not point back before its labels.
// Knot answers the first two FORMERR too and drops the third. A UDP query
// over 512 octets without OPT gets FORMERR (RFC 1035 4.2.1: only EDNS
// allows more), as from CoreDNS, which reads 512 octets and fails on the
// rest. Unlike Knot, which drops a message whose question does not
// parse, dnsd answers it FORMERR as CoreDNS does: the reply is never
// larger than the message, so it amplifies nothing, and a client learns
// at once that it is at fault.
func screen(b []byte, udp bool) (v verdict, qend int) {
	if len(b) < 12 || b[2]&0x80 != 0 {
		return ignore, 0
	}
	qd, an, ns, ar := be16(b[4:]), be16(b[6:]), be16(b[8:]), be16(b[10:])
	if qd == 1 {
		qend = plainQuestion(b)
	}
	if b[2]>>3&0xf != dns.OpcodeQuery {
		// A sound message with OPT gets OPT back, NOTIMP or not.
		if opts, ok := sections(b, int(qd), int(an), int(ns), int(ar)); ok && opts == 1 {
			return notImpEDNS, qend
		}
		return notImp, qend
	}
	if qd != 1 {
		return formErr, 0
	}
	if an > 1 || ns > 1 || ar > 2 {
		return formErr, qend
	}
	opts, ok := sections(b, 1, int(an), int(ns), int(ar))
	if !ok || udp && opts == 0 && len(b) > dns.MinMsgSize {
		return formErr, qend
	}
	return accept, qend
}

// sections walks the questions and records after the header, as counted:
// false when they do not parse so, when octets follow the last, or when
// an OPT record is not once, in the additional section, owned by the root,
// its options filling its data exactly (RFC 6891 6.1.1); opts counts the
// OPT records.
func sections(b []byte, qd, an, ns, ar int) (opts int, ok bool) {
	off := 12
	for range qd {
		if off, ok = skipName(b, off); !ok || off+4 > len(b) {
			return 0, false
		}
		off += 4
	}
	for i := range an + ns + ar {
		owner := off
		if off, ok = skipName(b, off); !ok || off+10 > len(b) {
			return 0, false
		}
		rtype, rdata := be16(b[off:]), off+10
		if off = rdata + int(be16(b[off+8:])); off > len(b) {
			return 0, false
		}
		if rtype == dns.TypeOPT {
			if opts++; opts > 1 || i < an+ns || b[owner] != 0 || !optionsFit(b[rdata:off]) {
				return 0, false
			}
		}
	}
	return opts, off == len(b)
}

// skipName returns the offset after the name at off. A pointer must point
// before where the labels it continues began, so every jump goes back and
// no loop is possible; and, as in miekg/dns, the name is at most 255
// octets expanded.
func skipName(b []byte, off int) (int, bool) {
	end := -1         // where the name ends in place, once a pointer was taken
	limit := off      // a pointer must point before this
	budget := 255 - 1 // the root octet
	for {
		if off >= len(b) {
			return 0, false
		}
		c := int(b[off])
		switch c & 0xc0 {
		case 0x00:
			if c == 0 {
				if end < 0 {
					end = off + 1
				}
				return end, true
			}
			if budget -= c + 1; budget < 0 || off+1+c > len(b) {
				return 0, false
			}
			off += 1 + c
		case 0xc0:
			if off+1 >= len(b) {
				return 0, false
			}
			to := (c&0x3f)<<8 | int(b[off+1])
			if to >= limit || to < 12 {
				return 0, false
			}
			if end < 0 {
				end = off + 2
			}
			off, limit = to, to
		default:
			return 0, false // 0x40 and 0x80 label types were never deployed
		}
	}
}

// plainQuestion returns the end of the question at offset 12 when its name
// is uncompressed and whole, else 0.
func plainQuestion(b []byte) int {
	off, budget := 12, 255-1
	for off < len(b) {
		c := int(b[off])
		switch {
		case c == 0:
			if off+5 > len(b) {
				return 0
			}
			return off + 5
		case c > 63:
			return 0
		}
		if budget -= c + 1; budget < 0 {
			return 0
		}
		off += 1 + c
	}
	return 0
}

// optionsFit reports whether EDNS options fill rdata exactly.
func optionsFit(rdata []byte) bool {
	o := 0
	for o+4 <= len(rdata) {
		o += 4 + int(be16(rdata[o+2:]))
	}
	return o == len(rdata)
}

// setSOASerial writes serial into every SOA record of the answer and
// authority sections of b, a response dnsd packed: a cached answer carried
// to a newer snapshot keeps every octet but its zone's serial. False when
// b does not parse that far.
func setSOASerial(b []byte, serial uint32) bool {
	if len(b) < 12 {
		return false
	}
	off, ok := skipName(b, 12)
	if be16(b[4:]) != 1 || !ok || off+4 > len(b) {
		return false
	}
	off += 4
	for range int(be16(b[6:])) + int(be16(b[8:])) {
		if off, ok = skipName(b, off); !ok || off+10 > len(b) {
			return false
		}
		rtype, rdata := be16(b[off:]), off+10
		if off = rdata + int(be16(b[off+8:])); off > len(b) {
			return false
		}
		if rtype != dns.TypeSOA {
			continue
		}
		mname, ok := skipName(b, rdata)
		if !ok {
			return false
		}
		at, ok := skipName(b, mname) // after rname: the serial
		if !ok || at+4 > off {
			return false
		}
		binary.BigEndian.PutUint32(b[at:], serial)
	}
	return true
}

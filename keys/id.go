package keys

import (
	"crypto/sha256"
	"encoding/base32"
	"strconv"

	"github.com/miekg/dns"
)

// idLen characters of base32hex carry 80 bits: wider than the 64 the
// contract asks for, and still a short, lowercase, valid DNS label.
const idLen = 16

var idEncoding = base32.NewEncoding("0123456789abcdefghijklmnopqrstuv").WithPadding(base32.NoPadding)

// ID derives a record's id from its owner (v.Cluster, and v.Source, the object
// in that cluster), its type and its data. The same desired record always
// gets the same id, so writing it again is a no-op; two clusters never derive
// the same id, so they never write the same key; and two objects that want
// the same record (two host-network pods on one node) get a key each, so
// removing one never removes the other's. The owner name is not hashed: it
// is already in the key.
func ID(rrtype uint16, v Value) string {
	// One buffer, on the stack when it fits, hashed at once: a hash.Hash
	// and its Sum were two allocations for every record the publisher
	// builds, a thousand for a change of a 100-endpoint service.
	var stack [160]byte
	b := append(stack[:0], v.Cluster...)
	b = append(b, 0)
	b = append(b, v.Source...)
	b = append(b, 0)
	b = append(b, dns.TypeToString[rrtype]...)
	b = append(b, 0)
	b = append(b, recordData(rrtype, v)...)
	sum := sha256.Sum256(b)
	return idEncoding.EncodeToString(sum[:10])
}

// recordData is the part of a value that makes a record distinct, in a
// canonical form; TTL, group and source are deliberately left out so that a
// TTL change rewrites a value in place instead of moving it to a new key.
func recordData(rrtype uint16, v Value) string {
	switch rrtype {
	case dns.TypeTXT:
		return v.Text
	case dns.TypeSRV:
		return strconv.Itoa(v.Priority) + " " + strconv.Itoa(v.Weight) + " " + strconv.Itoa(v.Port) + " " + v.Target()
	case dns.TypeCNAME, dns.TypePTR:
		return v.Target()
	}
	return v.Host
}

// IsID reports whether s has the shape of an id made by ID.
func IsID(s string) bool {
	if len(s) != idLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'v') {
			return false
		}
	}
	return true
}

// PackedID is an id made by ID in the ten bytes it encodes, for a reader
// that keeps a million of them: 10 bytes inline against a 16-byte string
// header and 16 bytes of text. Packed ids order as their text does, since
// the alphabet is in ASCII order and every id is idLen long.
type PackedID [idLen * 5 / 8]byte

// PackID packs s, and reports false when s is not an id made by ID, and
// for the id of ten zero bytes: the zero PackedID is none, so a reader
// tells a packed id from an id kept as text without a flag of its own.
// ID makes that one with a chance of one in 2^80, and it is then kept as
// text, as a hand-written key's is.
func PackID(s string) (PackedID, bool) {
	var p PackedID
	if len(s) != idLen {
		return p, false
	}
	var hi, lo uint64 // the id's 80 bits: hi holds the top 16
	for i := 0; i < len(s); i++ {
		c := s[i]
		var v byte
		switch {
		case c >= '0' && c <= '9':
			v = c - '0'
		case c >= 'a' && c <= 'v':
			v = c - 'a' + 10
		default:
			return PackedID{}, false
		}
		hi = hi<<5 | lo>>59
		lo = lo<<5 | uint64(v)
	}
	p[0], p[1] = byte(hi>>8), byte(hi)
	for i := range 8 {
		p[2+i] = byte(lo >> (56 - 8*i))
	}
	return p, p != PackedID{}
}

// String returns the id's text.
func (p PackedID) String() string { return idEncoding.EncodeToString(p[:]) }

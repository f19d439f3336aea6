package keys

import (
	"fmt"
	"net/netip"
	"strings"
)

// DashedIP is the label Kubernetes DNS uses for an address: 10-0-0-1 for
// IPv4 (pod records, and the endpoint name when no hostname is set) and the
// compressed IPv6 form with ':' as '-' (2001-db8--1), as CoreDNS does.
func DashedIP(ip netip.Addr) string {
	ip = ip.Unmap()
	if !ip.IsValid() {
		return ip.String() // "invalid IP", as it always was
	}
	sep := byte(':')
	if ip.Is4() {
		sep = '.'
	}
	// In a buffer of its own, one allocation: the publisher names every
	// endpoint without a hostname so, at each change of its service.
	var buf [64]byte
	b := ip.WithZone("").AppendTo(buf[:0])
	for i, c := range b {
		if c == sep {
			b[i] = '-'
		}
	}
	return string(b)
}

// ParseDashedIP is the inverse of DashedIP. It accepts exactly the forms a
// resolver could have been handed: four decimal octets, or an IPv6 address
// with '-' for ':'.
func ParseDashedIP(label string) (netip.Addr, bool) {
	if strings.Count(label, "-") == 3 {
		if ip, err := netip.ParseAddr(strings.ReplaceAll(label, "-", ".")); err == nil && ip.Is4() {
			return ip, true
		}
	}
	ip, err := netip.ParseAddr(strings.ReplaceAll(label, "-", ":"))
	if err != nil || !ip.Is6() || ip.Is4In6() || ip.Zone() != "" {
		return netip.Addr{}, false
	}
	return ip, true
}

// ReverseName is the PTR owner of ip: d.c.b.a.in-addr.arpa, or the full
// 32-nibble ip6.arpa form.
func ReverseName(ip netip.Addr) string {
	ip = ip.Unmap()
	var b strings.Builder
	if ip.Is4() {
		a := ip.As4()
		for i := 3; i >= 0; i-- {
			fmt.Fprintf(&b, "%d.", a[i])
		}
		b.WriteString("in-addr.arpa")
		return b.String()
	}
	const hex = "0123456789abcdef"
	a := ip.As16()
	for i := 15; i >= 0; i-- {
		b.WriteByte(hex[a[i]&0xf])
		b.WriteByte('.')
		b.WriteByte(hex[a[i]>>4])
		b.WriteByte('.')
	}
	b.WriteString("ip6.arpa")
	return b.String()
}

// ParseReverseName is the inverse of ReverseName for canonical names. Partial
// names (fewer than 4 or 32 labels) are not addresses and report false.
func ParseReverseName(name string) (netip.Addr, bool) {
	if rest, ok := strings.CutSuffix(name, ".in-addr.arpa"); ok {
		l := strings.Split(rest, ".")
		if len(l) != 4 {
			return netip.Addr{}, false
		}
		ip, err := netip.ParseAddr(l[3] + "." + l[2] + "." + l[1] + "." + l[0])
		return ip, err == nil
	}
	rest, ok := strings.CutSuffix(name, ".ip6.arpa")
	if !ok || len(rest) != 63 {
		return netip.Addr{}, false
	}
	var a [16]byte
	for i := 0; i < 32; i++ {
		c, dot := rest[2*i], byte('.')
		if 2*i+1 < len(rest) {
			dot = rest[2*i+1]
		}
		n := strings.IndexByte("0123456789abcdef", c)
		if n < 0 || dot != '.' {
			return netip.Addr{}, false
		}
		// Nibble i counts from the least significant end of the address.
		if i%2 == 0 {
			a[15-i/2] |= byte(n)
		} else {
			a[15-i/2] |= byte(n) << 4
		}
	}
	return netip.AddrFrom16(a), true
}

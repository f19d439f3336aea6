package keys

import (
	"net/netip"
	"testing"
)

func TestDashedIP(t *testing.T) {
	for _, tc := range []struct{ ip, label string }{
		{"172.17.0.3", "172-17-0-3"},
		{"::ffff:10.1.2.3", "10-1-2-3"},
		{"2001:db8::1", "2001-db8--1"},
		{"fd00:10:244::5", "fd00-10-244--5"},
	} {
		ip := netip.MustParseAddr(tc.ip)
		if got := DashedIP(ip); got != tc.label {
			t.Errorf("DashedIP(%s) = %q; want %q", tc.ip, got, tc.label)
		}
		back, ok := ParseDashedIP(tc.label)
		if !ok || back != ip.Unmap() {
			t.Errorf("ParseDashedIP(%q) = %s, %v", tc.label, back, ok)
		}
	}
	for _, bad := range []string{"1-2-3", "256-0-0-1", "a-b-c-d", "1-2-3-4-5", "web", ""} {
		if ip, ok := ParseDashedIP(bad); ok {
			t.Errorf("ParseDashedIP(%q) = %s; want no address", bad, ip)
		}
	}
}

func TestReverseName(t *testing.T) {
	for _, tc := range []struct{ ip, name string }{
		{"10.3.0.1", "1.0.3.10.in-addr.arpa"},
		{"2001:db8::1", "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa"},
	} {
		ip := netip.MustParseAddr(tc.ip)
		if got := ReverseName(ip); got != tc.name {
			t.Errorf("ReverseName(%s) = %q; want %q", tc.ip, got, tc.name)
		}
		if back, ok := ParseReverseName(tc.name); !ok || back != ip {
			t.Errorf("ParseReverseName(%q) = %s, %v", tc.name, back, ok)
		}
	}
	for _, bad := range []string{"0.3.10.in-addr.arpa", "x.0.3.10.in-addr.arpa", "8.b.d.0.1.0.0.2.ip6.arpa", "in-addr.arpa"} {
		if ip, ok := ParseReverseName(bad); ok {
			t.Errorf("ParseReverseName(%q) = %s; want no address", bad, ip)
		}
	}
}

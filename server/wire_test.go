package server

import (
	"testing"

	"github.com/miekg/dns"
)

// TestFastPathOptions: a cookie leaves a query on the cached fast path; an
// option of the local range (search path, source cluster) makes the answer
// personal, so such a query must never be answered from the cache.
func TestFastPathOptions(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []dns.EDNS0
		fast bool
	}{
		{"no options", nil, true},
		{"cookie", []dns.EDNS0{&dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0123456789abcdef"}}, true},
		{"local 65001", []dns.EDNS0{&dns.EDNS0_LOCAL{Code: 65001, Data: []byte("test")}}, false},
		{"cookie then local 65534", []dns.EDNS0{&dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0123456789abcdef"},
			&dns.EDNS0_LOCAL{Code: 65534, Data: []byte("x")}}, false},
		{"65535 is reserved, not local", []dns.EDNS0{&dns.EDNS0_LOCAL{Code: 65535}}, true},
	} {
		m := new(dns.Msg).SetQuestion("web.apps.svc.cluster.local.", dns.TypeA)
		m.SetEdns0(1232, false)
		opt := m.IsEdns0()
		opt.Option = c.opts
		b, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		if _, fast := parseQuery(b); fast != c.fast {
			t.Errorf("%s: fast path %v, want %v", c.name, fast, c.fast)
		}
	}
}

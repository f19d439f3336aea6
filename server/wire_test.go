package server

import (
	"bytes"
	"slices"
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
		{"padding", []dns.EDNS0{&dns.EDNS0_PADDING{Padding: make([]byte, 16)}}, true},
		// miekg/dns checks these; a malformed one must get its FORMERR
		// even when the question is cached.
		{"client subnet", []dns.EDNS0{&dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: []byte{10, 0, 0, 0}}}, false},
		{"keepalive", []dns.EDNS0{&dns.EDNS0_TCP_KEEPALIVE{Code: dns.EDNS0TCPKEEPALIVE}}, false},
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

// An option whose length runs past its OPT record leaves the fast path,
// so the cache never answers a query miekg/dns would call malformed.
func TestFastPathOptionOverrun(t *testing.T) {
	m := new(dns.Msg).SetQuestion("web.apps.svc.cluster.local.", dns.TypeA)
	m.SetEdns0(1232, false)
	m.IsEdns0().Option = []dns.EDNS0{&dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0123456789abcdef"}}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	if _, fast := parseQuery(b); !fast {
		t.Fatal("a query with a cookie is not on the fast path")
	}
	b[len(b)-9]++ // the cookie's length: one octet more than there is
	if _, fast := parseQuery(b); fast {
		t.Error("an option running past its record is on the fast path")
	}
	if new(dns.Msg).Unpack(b) == nil {
		t.Error("miekg/dns parses it; the test proves nothing")
	}
}

// setSOASerial rewrites the serial of the SOA a packed negative answer
// holds and nothing else, and turns down every cut copy of it without
// reading past its end.
func TestSetSOASerial(t *testing.T) {
	m := new(dns.Msg).SetQuestion("gone.default.svc.cluster.local.", dns.TypeA)
	m.Response, m.Rcode, m.Compress = true, dns.RcodeNameError, true
	m.Ns = []dns.RR{&dns.SOA{Hdr: dns.RR_Header{Name: "cluster.local.", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 5},
		Ns: "ns.dns.cluster.local.", Mbox: "hostmaster.cluster.local.", Serial: 7, Refresh: 1, Retry: 2, Expire: 3, Minttl: 4}}
	m.SetEdns0(1232, false)
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	w := slices.Clone(b)
	if !setSOASerial(w, 8) {
		t.Fatal("setSOASerial turned down a packed answer")
	}
	m.Ns[0].(*dns.SOA).Serial = 8
	if want, _ := m.Pack(); !bytes.Equal(w, want) {
		t.Fatalf("got\n%x\nwant\n%x", w, want)
	}
	for n := range len(b) - 11 { // short of the OPT record, which it does not read
		if setSOASerial(slices.Clone(b[:n]), 9) {
			t.Fatalf("a message cut to %d of %d octets passed", n, len(b))
		}
	}
}

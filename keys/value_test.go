package keys

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

func TestDecode(t *testing.T) {
	v, err := Decode([]byte(`{"host":"10.96.0.1","ttl":5,"group":"x","cluster":"c1","source":"service/default/x","unknown":[1,2]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := Value{Host: "10.96.0.1", TTL: 5, Group: "x", Cluster: "c1", Source: "service/default/x"}
	if v != want {
		t.Errorf("Decode = %+v; want %+v", v, want)
	}
	for _, bad := range []string{``, `{`, `null x`, `[]`, `"host"`, `{"host":1}`, `{"port":70000,"host":"a.b"}`,
		`{"priority":-1}`, `{"ttl":-5}`, `{"weight":65536}`, `{"targetstrip":-1}`, `{"host":"a"}` + strings.Repeat(" ", maxValue)} {
		if v, err := Decode([]byte(bad)); err == nil {
			t.Errorf("Decode(%.40q) = %+v; want an error", bad, v)
		}
	}
}

func TestEncodeIsStable(t *testing.T) {
	v := Value{Host: "a.b", Port: 443, TTL: 5, Group: "g", Cluster: "c", Source: "s"}
	want := `{"host":"a.b","port":443,"ttl":5,"group":"g","cluster":"c","source":"s"}`
	if got := string(v.Encode()); got != want {
		t.Errorf("Encode = %s; want %s", got, want)
	}
}

func TestType(t *testing.T) {
	for _, tc := range []struct {
		v       Value
		owner   string
		reverse bool
		want    uint16
		err     error
	}{
		{Value{Host: "10.0.0.1"}, "a.local", false, dns.TypeA, nil},
		{Value{Host: "::ffff:10.0.0.1"}, "a.local", false, dns.TypeA, nil},
		{Value{Host: "2001:db8::1"}, "a.local", false, dns.TypeAAAA, nil},
		{Value{Host: "web.prod.svc.cluster.local", Port: 80}, "_http._tcp.web.prod.svc.cluster.local", false, dns.TypeSRV, nil},
		{Value{Host: "www.example.com"}, "a.local", false, dns.TypeCNAME, nil},
		{Value{Host: "web.prod.svc.cluster.local"}, "1.0.0.10.in-addr.arpa", true, dns.TypePTR, nil},
		{Value{Text: "1.0.1"}, "dns-version.cluster.local", false, dns.TypeTXT, nil},
		{Value{}, "a.local", false, 0, ErrEmptyValue},
		{Value{Host: "a.b", Text: "x"}, "a.local", false, 0, ErrHostAndText},
		{Value{Host: "a.b", Mail: true}, "a.local", false, 0, ErrMail},
		{Value{Host: "a.b", Port: 80}, "a.local", false, 0, ErrPortNotOnSRV},
	} {
		got, err := tc.v.Type(tc.owner, tc.reverse)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("%+v at %s: Type = %s, %v; want %s, %v", tc.v, tc.owner, dns.TypeToString[got], err, dns.TypeToString[tc.want], tc.err)
		}
	}
	if _, err := (Value{Host: "bad name.example"}).Type("a.local", false); err == nil {
		t.Error("a host that is neither an IP nor a name was typed")
	}
}

func TestID(t *testing.T) {
	a := Value{Host: "10.0.0.1", Cluster: "c1", Source: "service/default/a"}
	id := ID(dns.TypeA, a)
	if !IsID(id) || len(id) != 16 {
		t.Fatalf("ID = %q; want 16 characters of base32hex", id)
	}
	// Keys in etcd were made with it: the same value must keep its id
	// (keys/kube's golden files pin more).
	if got := ID(dns.TypeA, Value{Host: "172.18.0.2", Cluster: "c1", Source: "service/default/kubernetes"}); got != "ltvbb85usv9pvpj0" {
		t.Errorf("ID = %s, want ltvbb85usv9pvpj0 as it has always been", got)
	}
	same := a
	same.TTL, same.Group = 30, "other"
	if ID(dns.TypeA, same) != id {
		t.Error("TTL or group changed the id; they are not record data")
	}
	for what, v := range map[string]Value{
		"cluster": {Host: "10.0.0.1", Cluster: "c2", Source: a.Source},
		"source":  {Host: "10.0.0.1", Cluster: "c1", Source: "pod/default/a"},
		"data":    {Host: "10.0.0.2", Cluster: "c1", Source: a.Source},
	} {
		if ID(dns.TypeA, v) == id {
			t.Errorf("another %s gave the same id", what)
		}
	}
	if ID(dns.TypeCNAME, Value{Host: "A.example.", Cluster: "c"}) != ID(dns.TypeCNAME, Value{Host: "a.example", Cluster: "c"}) {
		t.Error("the same target in two spellings gave two ids")
	}
}

// FuzzDecode: whatever the bytes, Decode never panics; a value it accepts
// encodes to JSON that decodes to the same value; the typing rule gives
// each owner a type the value's fields bear out; a stub nameserver value
// reads as the address it holds. Seeds: every value keys/README.md shows
// (testdata/fuzz/FuzzDecode, corpus_test.go).
func FuzzDecode(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := Decode(b)
		if err != nil {
			return
		}
		// Whatever decodes must encode and decode to the same value.
		w, err := Decode(v.Encode())
		if err != nil || w != v {
			t.Fatalf("re-decode of %s = %+v, %v; want %+v", v.Encode(), w, err, v)
		}
		for _, o := range []struct {
			owner   string
			reverse bool
		}{{"_https._tcp.web.prod.svc.cluster.local", false}, {"web.prod.svc.cluster.local", false}, {"1.0.96.10.in-addr.arpa", true}} {
			typ, err := v.Type(o.owner, o.reverse)
			if err != nil {
				continue
			}
			ip, ipErr := netip.ParseAddr(v.Host)
			ok := false
			switch typ {
			case dns.TypeA:
				ok = ipErr == nil && (ip.Is4() || ip.Is4In6())
			case dns.TypeAAAA:
				ok = ipErr == nil && ip.Is6() && !ip.Is4In6()
			case dns.TypeTXT:
				ok = v.Host == ""
			case dns.TypeSRV:
				ok = ipErr != nil && v.Port != 0 && IsSRVOwner(o.owner) && !o.reverse
			case dns.TypeCNAME:
				ok = ipErr != nil && v.Port == 0 && !o.reverse
			case dns.TypePTR:
				ok = ipErr != nil && o.reverse
			}
			if canonical, _ := CanonicalName(v.Host); ipErr != nil && typ != dns.TypeTXT && (canonical == "" || v.Target() != canonical) {
				ok = false // a name host must be a name, served in its canonical form
			}
			if !ok || v.Mail || v.Host != "" && v.Text != "" {
				t.Fatalf("%s at %s (reverse %v) typed %s", b, o.owner, o.reverse, dns.TypeToString[typ])
			}
		}
		if ns, err := v.Nameserver(); err == nil {
			ip, _ := netip.ParseAddr(v.Host)
			want := uint16(53)
			if v.Port > 0 {
				want = uint16(v.Port)
			}
			if ns.Addr() != ip.Unmap() || ns.Port() != want {
				t.Fatalf("%s: nameserver %s", b, ns)
			}
		}
	})
}

func TestPackID(t *testing.T) {
	ids := []string{"0000000000000001", "vvvvvvvvvvvvvvvv", "0123456789abcdef", "ghijklmnopqrstuv"}
	for i := range 50 {
		ids = append(ids, ID(1, Value{Host: fmt.Sprintf("10.0.0.%d", i)}))
	}
	packed := map[PackedID]string{}
	for _, id := range ids {
		p, ok := PackID(id)
		if !ok {
			t.Fatalf("PackID(%q) refused an id", id)
		}
		if got := p.String(); got != id {
			t.Fatalf("PackID(%q).String() = %q", id, got)
		}
		packed[p] = id
	}
	// Packed ids order as their text: a zone keeps its entries sorted by
	// either and finds them by both.
	for p, id := range packed {
		for q, jd := range packed {
			if got, want := bytes.Compare(p[:], q[:]), strings.Compare(id, jd); got != want {
				t.Fatalf("%s vs %s: packed compare %d, text %d", id, jd, got, want)
			}
		}
	}
	for _, s := range []string{"", "000000000000000", "00000000000000000", "000000000000000w", "ABCDEFGHIJKLMNOP", "x"} {
		if _, ok := PackID(s); ok {
			t.Errorf("PackID(%q) packed a string that is no id", s)
		}
	}
	// The zero PackedID is none (snap.Entry tells a packed id by it).
	if _, ok := PackID("0000000000000000"); ok {
		t.Error("PackID packed the id of ten zero bytes")
	}
}

// TestDecodeViewAllocatesNothing: a cold start decodes every value once,
// and a value it keeps nothing of must cost it no garbage.
func TestDecodeViewAllocatesNothing(t *testing.T) {
	b := []byte(`{"host":"10.0.0.1","ttl":5,"group":"g","cluster":"c1","source":"service/ns/svc"}`)
	if n := testing.AllocsPerRun(100, func() {
		if _, err := DecodeView(b); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("DecodeView: %v allocations, want 0", n)
	}
}

// hostAddr tells addresses from names exactly as netip.ParseAddr does, and
// a name costs it no allocation.
func TestHostAddrIsParseAddr(t *testing.T) {
	for _, h := range []string{
		"10.96.0.1", "0.0.0.0", "255.255.255.255", "256.1.1.1", "10.96.0", "10.96.0.1.", "010.1.1.1", "1..2.3",
		"::1", "fd00::10", "::ffff:10.96.0.1", "fe80::1%eth0", "2001:db8::g", ":", "",
		"web.ns.svc.cluster.local", "10-244-0-11.db.ns.svc.cluster.local", "WEB.", "1e5", "0x0a000001", "10.96.0.1a",
	} {
		want, err := netip.ParseAddr(h)
		got, ok := hostAddr(h)
		if ok != (err == nil) || got != want {
			t.Errorf("hostAddr(%q) = %v, %v; netip.ParseAddr: %v, %v", h, got, ok, want, err)
		}
	}
	if n := testing.AllocsPerRun(100, func() { hostAddr("_http._tcp.web.ns.svc.cluster.local") }); n != 0 {
		t.Errorf("hostAddr of a name: %v allocations, want none", n)
	}
}

func FuzzHostAddr(f *testing.F) {
	for _, h := range []string{"10.96.0.1", "::1", "fe80::1%eth0", "web.ns", "1.2.3"} {
		f.Add(h)
	}
	f.Fuzz(func(t *testing.T, h string) {
		want, err := netip.ParseAddr(h)
		if got, ok := hostAddr(h); ok != (err == nil) || got != want {
			t.Errorf("hostAddr(%q) = %v, %v; netip.ParseAddr: %v, %v", h, got, ok, want, err)
		}
	})
}

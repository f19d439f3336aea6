package keys

import (
	"errors"
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

func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"host":"10.0.0.1"}`, `{"host":"a.b","port":80}`, `{"text":"1.0.1"}`, `{`, `null`, `{"port":-1}`} {
		f.Add([]byte(s))
	}
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
		_, _ = v.Type("_a._b.c", false)
	})
}

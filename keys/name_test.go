package keys

import (
	"strings"
	"testing"
)

func TestKey(t *testing.T) {
	for _, tc := range []struct{ prefix, name, key string }{
		{"/skydns", "kubernetes.default.svc.cluster.local.", "/skydns/local/cluster/svc/default/kubernetes"},
		{"/skydns", "Kubernetes.Default.SVC.cluster.local", "/skydns/local/cluster/svc/default/kubernetes"},
		{"/skydns-c1", "_https._tcp.kubernetes.default.svc.cluster.local", "/skydns-c1/local/cluster/svc/default/kubernetes/_tcp/_https"},
		{"/skydns", "1.0.96.10.in-addr.arpa.", "/skydns/arpa/in-addr/10/96/0/1"},
	} {
		got, err := Key(tc.prefix, tc.name)
		if err != nil || got != tc.key {
			t.Errorf("Key(%q, %q) = %q, %v; want %q", tc.prefix, tc.name, got, err, tc.key)
		}
		back, err := Name(tc.prefix, got)
		if want, _ := CanonicalName(tc.name); err != nil || back != want {
			t.Errorf("Name(%q) = %q, %v; want %q", got, back, err, want)
		}
	}
}

func TestKeyRejects(t *testing.T) {
	long := strings.Repeat("a", 64)
	for _, tc := range []struct{ prefix, name, want string }{
		{"/skydns", "", "empty name"},
		{"/skydns", ".", "empty name"},
		{"/skydns", "a..b", "empty label"},
		{"/skydns", ".a", "empty label"},
		{"/skydns", long + ".local", "64 octets"},
		{"/skydns", strings.Repeat("abcdefghi.", 26), "on the wire"},
		{"/skydns", "a/b.local", `byte "/"`},
		{"/skydns", "a b.local", `byte " "`},
		{"/skydns", "caf\xc3\xa9.local", `byte "\xc3"`},
		{"/skydns/deep", "a.local", "one segment"},
		{"skydns", "a.local", "one segment"},
		{"/", "a.local", "one segment"},
	} {
		_, err := Key(tc.prefix, tc.name)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Key(%q, %q) error = %v; want it to mention %q", tc.prefix, tc.name, err, tc.want)
		}
		if err != nil && tc.name != "" && !strings.Contains(err.Error(), "one segment") && !strings.Contains(err.Error(), tc.name) {
			t.Errorf("Key(%q) error %q does not name the input", tc.name, err)
		}
	}
}

func TestNameRejects(t *testing.T) {
	for _, key := range []string{
		"/other/local/cluster",
		"/skydns",
		"/skydns/",
		"/skydns/local//cluster",
		"/skydns/Local/cluster",
	} {
		if n, err := Name("/skydns", key); err == nil {
			t.Errorf("Name(%q) = %q; want an error", key, n)
		}
	}
}

func TestSplitRecordKey(t *testing.T) {
	for _, tc := range []struct{ key, owner, id string }{
		{"/skydns/local/cluster/svc/default/kubernetes/0123456789abcdef", "kubernetes.default.svc.cluster.local", "0123456789abcdef"},
		{"/skydns/local/cluster/svc/default/kubernetes/1a2b3c4d", "kubernetes.default.svc.cluster.local", "1a2b3c4d"},
		{"/skydns/local/cluster/x", "cluster.local", "x"},
	} {
		owner, id, err := SplitRecordKey("/skydns", tc.key)
		if err != nil || owner != tc.owner || id != tc.id {
			t.Errorf("SplitRecordKey(%q) = %q, %q, %v; want %q, %q", tc.key, owner, id, err, tc.owner, tc.id)
		}
	}
	for _, key := range []string{"/skydns/local", "/skydns/local/cluster/", "/skydns/local/cluster/ID", "/other/local/cluster/x"} {
		if o, id, err := SplitRecordKey("/skydns", key); err == nil {
			t.Errorf("SplitRecordKey(%q) = %q, %q; want an error", key, o, id)
		}
	}
}

func TestIsSubdomain(t *testing.T) {
	for _, tc := range []struct {
		name, zone string
		want       bool
	}{
		{"cluster.local", "cluster.local", true},
		{"a.cluster.local", "cluster.local", true},
		{"acluster.local", "cluster.local", false},
		{"local", "cluster.local", false},
	} {
		if got := IsSubdomain(tc.name, tc.zone); got != tc.want {
			t.Errorf("IsSubdomain(%q, %q) = %v", tc.name, tc.zone, got)
		}
	}
}

// FuzzKeyRoundTrip: every name that Key accepts comes back from Name as its
// canonical form, and every key that Name accepts is Key's output for it;
// a record key and a stub domain's key made for the name split back into
// the name and the id. Seeds: testdata/fuzz/FuzzKeyRoundTrip (corpus_test.go).
func FuzzKeyRoundTrip(f *testing.F) {
	f.Fuzz(func(t *testing.T, name string) {
		key, err := Key(DefaultPrefix, name)
		if err == nil {
			back, err := Name(DefaultPrefix, key)
			if err != nil {
				t.Fatalf("Key(%q) = %q, which Name rejects: %v", name, key, err)
			}
			want, _ := CanonicalName(name)
			if back != want {
				t.Fatalf("Name(Key(%q)) = %q; want %q", name, back, want)
			}
			rk, err := RecordKey(DefaultPrefix, name, "x1")
			if err != nil || rk != key+"/x1" {
				t.Fatalf("RecordKey(%q) = %q, %v; want %q", name, rk, err, key+"/x1")
			}
			if owner, id, err := SplitRecordKey(DefaultPrefix, rk); err != nil || owner != want || id != "x1" {
				t.Fatalf("SplitRecordKey(%q) = %q, %q, %v; want %q, x1", rk, owner, id, err, want)
			}
			sk, err := StubKey(DefaultPrefix, "cluster.local", name, "ns1")
			if err != nil {
				t.Fatalf("StubKey of %q: %v", name, err)
			}
			if domain, id, err := SplitStubKey(DefaultPrefix, "cluster.local", sk); err != nil || domain != want || id != "ns1" {
				t.Fatalf("SplitStubKey(%q) = %q, %q, %v; want %q, ns1", sk, domain, id, err, want)
			}
		}
		if n, err := Name(DefaultPrefix, DefaultPrefix+"/"+name); err == nil {
			if k, err := Key(DefaultPrefix, n); err != nil || k != DefaultPrefix+"/"+name {
				t.Fatalf("Key(Name(%q)) = %q, %v", DefaultPrefix+"/"+name, k, err)
			}
		}
	})
}

// FuzzParseKey reads arbitrary keys as dnsd reads etcd's: as an exact
// name (reverse zones), a record key (forward zones) and a stub domain's
// nameserver. Whatever a parser accepts, its inverse builds back into the
// same key, so no two keys read as one record and nothing is read from a
// key the publisher could not have written. Seeds: every key keys/README.md
// shows (testdata/fuzz/FuzzParseKey, corpus_test.go).
func FuzzParseKey(f *testing.F) {
	f.Fuzz(func(t *testing.T, key string) {
		for _, prefix := range []string{DefaultPrefix, "/skydns-c1"} {
			if n, err := Name(prefix, key); err == nil {
				if k, err := Key(prefix, n); err != nil || k != key {
					t.Fatalf("Name(%q, %q) = %q, whose key is %q, %v", prefix, key, n, k, err)
				}
			}
			if owner, id, err := SplitRecordKey(prefix, key); err == nil {
				if k, err := RecordKey(prefix, owner, id); err != nil || k != key {
					t.Fatalf("SplitRecordKey(%q, %q) = %q, %q, whose key is %q, %v", prefix, key, owner, id, k, err)
				}
			}
			for _, zone := range []string{"cluster.local", "in-addr.arpa"} {
				if domain, id, err := SplitStubKey(prefix, zone, key); err == nil {
					if k, err := StubKey(prefix, zone, domain, id); err != nil || k != key {
						t.Fatalf("SplitStubKey(%q, %q) = %q, %q, whose key is %q, %v", zone, key, domain, id, k, err)
					}
				}
			}
		}
	})
}

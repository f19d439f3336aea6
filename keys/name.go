package keys

import (
	"errors"
	"fmt"
	"strings"
)

// DefaultPrefix is where SkyDNS, kube2sky, external-dns and CoreDNS put records.
const DefaultPrefix = "/skydns"

// Limits from RFC 1035 section 2.3.4, in wire octets.
const (
	maxLabel = 63
	maxName  = 255
)

// CanonicalName lowercases a DNS name, drops a trailing dot and checks it can
// be stored as a key: every label non-empty, at most 63 octets, made of
// letters, digits, '-' and '_' only (the characters Kubernetes names and SRV
// owners use), and the whole name at most 255 octets on the wire. The error
// names the input.
func CanonicalName(name string) (string, error) {
	n := strings.TrimSuffix(name, ".")
	if n == "" {
		return "", fmt.Errorf("name %q: empty name", name)
	}
	// Wire length: one length octet per label plus the root octet.
	if wire := len(n) + 2; wire > maxName {
		return "", fmt.Errorf("name %q: %d octets on the wire, more than %d", name, wire, maxName)
	}
	n = strings.ToLower(n)
	start := 0
	for i := 0; i <= len(n); i++ {
		if i < len(n) && n[i] != '.' {
			if !labelByte(n[i]) {
				return "", fmt.Errorf("name %q: byte %q cannot be part of a key segment", name, n[i:i+1])
			}
			continue
		}
		switch l := i - start; {
		case l == 0:
			return "", fmt.Errorf("name %q: empty label", name)
		case l > maxLabel:
			return "", fmt.Errorf("name %q: label %q is %d octets, more than %d", name, n[start:i], l, maxLabel)
		}
		start = i + 1
	}
	return n, nil
}

// IsLabel reports whether s is one valid label under CanonicalName's rules.
func IsLabel(s string) bool {
	if s == "" || len(s) > maxLabel {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !labelByte(s[i]) || (s[i] >= 'A' && s[i] <= 'Z') {
			return false
		}
	}
	return true
}

func labelByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '-' || b == '_' || b >= 'A' && b <= 'Z'
}

// CheckPrefix accepts exactly one leading segment such as /skydns or
// /skydns-c1. CoreDNS's msg.Domain strips exactly one element when it turns
// a key back into a name, so a deeper prefix corrupts SRV targets and glue.
func CheckPrefix(prefix string) error {
	seg, ok := strings.CutPrefix(prefix, "/")
	if !ok || seg == "" || strings.Contains(seg, "/") || !IsLabel(seg) {
		return fmt.Errorf("prefix %q: want one segment such as %q (lowercase letters, digits, '-', '_')", prefix, DefaultPrefix)
	}
	return nil
}

// Key returns the exact key of name under prefix: its labels reversed.
func Key(prefix, name string) (string, error) {
	if err := CheckPrefix(prefix); err != nil {
		return "", err
	}
	n, err := CanonicalName(name)
	if err != nil {
		return "", err
	}
	return reversed(prefix, n, ""), nil
}

// reversed is prefix, then the labels of the canonical name n in reverse
// order, each after a '/', then "/"+id when id is set: one allocation, since
// the publisher builds a key for every record of a service on each of its
// changes.
func reversed(prefix, n, id string) string {
	var b strings.Builder
	size := len(prefix) + len(n) + 1
	if id != "" {
		size += 1 + len(id)
	}
	b.Grow(size)
	b.WriteString(prefix)
	for end := len(n); end >= 0; {
		i := strings.LastIndexByte(n[:end], '.')
		b.WriteByte('/')
		b.WriteString(n[i+1 : end])
		end = i
	}
	if id != "" {
		b.WriteByte('/')
		b.WriteString(id)
	}
	return b.String()
}

// Name is the inverse of Key: the name whose exact key is key.
func Name(prefix, key string) (string, error) {
	if err := CheckPrefix(prefix); err != nil {
		return "", err
	}
	rest, ok := strings.CutPrefix(key, prefix+"/")
	if !ok {
		return "", fmt.Errorf("key %q: not under prefix %q", key, prefix)
	}
	if strings.Contains(rest, ".") {
		return "", fmt.Errorf("key %q: a segment holds '.', so it is no label", key)
	}
	// One pass from the last segment to the first: at a million keys a
	// split and a join are a second of a cold start.
	var b strings.Builder
	b.Grow(len(rest))
	for end := len(rest); ; {
		start := strings.LastIndexByte(rest[:end], '/') + 1
		if end < len(rest) {
			b.WriteByte('.')
		}
		b.WriteString(rest[start:end])
		if start == 0 {
			break
		}
		end = start - 1
	}
	n := b.String()
	c, err := CanonicalName(n)
	if err != nil {
		return "", fmt.Errorf("key %q: %w", key, err)
	}
	if c != n {
		return "", fmt.Errorf("key %q: not lowercase", key)
	}
	return c, nil
}

// RecordKey is where a forward-zone record with the given id lives.
func RecordKey(prefix, owner, id string) (string, error) {
	if !IsLabel(id) {
		return "", fmt.Errorf("record id %q: not a lowercase DNS label", id)
	}
	if err := CheckPrefix(prefix); err != nil {
		return "", err
	}
	n, err := CanonicalName(owner)
	if err != nil {
		return "", err
	}
	return reversed(prefix, n, id), nil
}

// ErrNotRecordKey marks a key that has no id segment below an owner name.
var ErrNotRecordKey = errors.New("not a record key")

// SplitRecordKey splits a forward-zone record key into its owner name and
// id. The last segment is the id whatever it looks like: ours are made by ID,
// external-dns writes 8 hex digits, and a person with etcdctl may write "x".
// Reading it as a label instead would make the answer depend on the writer.
func SplitRecordKey(prefix, key string) (owner, id string, err error) {
	i := strings.LastIndexByte(key, '/')
	if i < 0 || !IsLabel(key[i+1:]) || key[:i] == prefix {
		return "", "", fmt.Errorf("key %q: want <prefix>/<reversed owner name>/<id>: %w", key, ErrNotRecordKey)
	}
	owner, err = Name(prefix, key[:i])
	if err != nil {
		return "", "", err
	}
	return owner, key[i+1:], nil
}

// IsSubdomain reports whether name is zone or below it. Both canonical.
func IsSubdomain(name, zone string) bool {
	return name == zone || strings.HasSuffix(name, zone) && name[len(name)-len(zone)-1] == '.'
}

// IsReverseZone reports whether records of zone live at exact keys.
func IsReverseZone(zone string) bool {
	return IsSubdomain(zone, "in-addr.arpa") || IsSubdomain(zone, "ip6.arpa")
}

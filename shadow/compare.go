package shadow

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/miekg/dns"

	"github.com/etcdns/etcdns/keys"
)

// Class is the kind of a difference between a's and b's responses.
type Class string

const (
	Rcode   Class = "rcode"   // the response codes differ
	Missing Class = "missing" // a answers a record b does not
	Extra   Class = "extra"   // b answers a record a does not
	TTL     Class = "ttl"     // the same records, with other TTLs
	Order   Class = "order"   // the same records and TTLs, in another order
	Failed  Class = "failed"  // a server did not answer at all
)

// Matters says whether a client could see the difference in what it
// resolves: TTLs and order change caching and which address is tried
// first, not what a name resolves to.
func (c Class) Matters() bool { return c != TTL && c != Order }

// Question is one question to ask both servers.
type Question struct {
	Name string // fully qualified
	Type uint16
}

func (q Question) String() string { return q.Name + " " + dns.TypeToString[q.Type] }

// Difference is one way b's response differs from a's.
type Difference struct {
	Question Question
	Class    Class
	Detail   string
}

func (d Difference) String() string {
	return fmt.Sprintf("%s: %s: %s", d.Question, d.Class, d.Detail)
}

// Compare classes the differences of b's response from a's, the
// reference, in the answer section and the rcode. The authority section
// is left out: the two servers' SOA records (serials, mname) differ by
// nature and change nothing a client resolves. A different rcode is
// reported alone, as it explains the rest.
func Compare(q Question, a, b *dns.Msg) []Difference {
	diff := func(c Class, format string, args ...any) Difference {
		return Difference{Question: q, Class: c, Detail: fmt.Sprintf(format, args...)}
	}
	if a.Rcode != b.Rcode {
		return []Difference{diff(Rcode, "%s, then %s", rcodeName(a.Rcode), rcodeName(b.Rcode))}
	}
	ka, kb := recordKeys(a.Answer), recordKeys(b.Answer)
	var out []Difference
	for _, k := range multisetMinus(ka, kb) {
		out = append(out, diff(Missing, "%s", k))
	}
	for _, k := range multisetMinus(kb, ka) {
		out = append(out, diff(Extra, "%s", k))
	}
	if len(out) > 0 {
		return out
	}
	// The same records: the TTL of each, in a's order of records.
	if ta, tb := ttlsByRecord(a.Answer), ttlsByRecord(b.Answer); !equalTTLs(ta, tb) {
		for _, k := range sortedKeys(ta) {
			if !slices.Equal(ta[k], tb[k]) {
				out = append(out, diff(TTL, "%s: TTL %v, then %v", k, ta[k], tb[k]))
			}
		}
		return out
	}
	if !slices.Equal(ka, kb) {
		out = append(out, diff(Order, "%s, then %s", strings.Join(ka, "; "), strings.Join(kb, "; ")))
	}
	return out
}

// recordKeys is each record as text without its TTL, the owner name in
// lowercase: what identifies a record to a client.
func recordKeys(rrs []dns.RR) []string {
	out := make([]string, len(rrs))
	for i, rr := range rrs {
		out[i] = recordKey(rr)
	}
	return out
}

func recordKey(rr dns.RR) string {
	c := dns.Copy(rr)
	h := c.Header()
	h.Ttl = 0
	h.Name = strings.ToLower(h.Name)
	s := c.String()
	// dns.RR.String puts the TTL between the name and the class.
	return strings.Join(strings.Fields(s), " ")
}

func ttlsByRecord(rrs []dns.RR) map[string][]uint32 {
	out := map[string][]uint32{}
	for _, rr := range rrs {
		k := recordKey(rr)
		out[k] = append(out[k], rr.Header().Ttl)
	}
	for _, t := range out {
		slices.Sort(t)
	}
	return out
}

func equalTTLs(a, b map[string][]uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for k, t := range a {
		if !slices.Equal(t, b[k]) {
			return false
		}
	}
	return true
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// multisetMinus is a's elements not matched one for one in b, sorted.
func multisetMinus(a, b []string) []string {
	left := map[string]int{}
	for _, k := range b {
		left[k]++
	}
	var out []string
	for _, k := range a {
		if left[k] > 0 {
			left[k]--
			continue
		}
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func rcodeName(r int) string {
	if s, ok := dns.RcodeToString[r]; ok {
		return s
	}
	return fmt.Sprint(r)
}

// ParseQuestions reads one question a line: a name and a type (A when left
// out), such as "kubernetes.default.svc.cluster.local AAAA". Blank lines
// and lines starting with # are skipped; a line that is no question is an
// error naming it.
func ParseQuestions(r io.Reader) ([]Question, error) {
	var out []Question
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) > 2 {
			return nil, fmt.Errorf("line %d: %q: want a name and a type", n, sc.Text())
		}
		q := Question{Name: dns.Fqdn(strings.ToLower(f[0])), Type: dns.TypeA}
		if _, ok := dns.IsDomainName(q.Name); !ok {
			return nil, fmt.Errorf("line %d: %q is not a domain name", n, f[0])
		}
		if len(f) == 2 {
			t, ok := dns.StringToType[strings.ToUpper(f[1])]
			if !ok {
				return nil, fmt.Errorf("line %d: %q is not a record type", n, f[1])
			}
			q.Type = t
		}
		out = append(out, q)
	}
	return out, sc.Err()
}

// FromKeys derives questions from record keys under prefix, as read from
// etcd: each owner name's A and AAAA, its SRV where the name is a service
// port's (_port._proto...), the PTR of a reverse record. Keys that are no
// record keys (stub domains, the version key) are skipped.
func FromKeys(prefix string, recordKeys []string) []Question {
	seen := map[Question]bool{}
	var out []Question
	add := func(q Question) {
		if !seen[q] {
			seen[q] = true
			out = append(out, q)
		}
	}
	for _, k := range recordKeys {
		// Reverse records sit at their name's exact key, others one id
		// segment below it.
		if name, err := keys.Name(prefix, k); err == nil && (keys.IsSubdomain(name, "in-addr.arpa") || keys.IsSubdomain(name, "ip6.arpa")) {
			add(Question{dns.Fqdn(name), dns.TypePTR})
			continue
		}
		owner, _, err := keys.SplitRecordKey(prefix, k)
		if err != nil || owner == "" {
			continue
		}
		name := dns.Fqdn(owner)
		switch {
		case keys.IsSRVOwner(owner):
			add(Question{name, dns.TypeSRV})
		default:
			add(Question{name, dns.TypeA})
			add(Question{name, dns.TypeAAAA})
		}
	}
	return out
}

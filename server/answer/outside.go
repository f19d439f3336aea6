package answer

import (
	"slices"
	"strings"

	"github.com/miekg/dns"

	"github.com/etcdns/etcdns/server/snap"
)

// maxOutside bounds the questions about names outside every zone one
// answer may have resolved: an SRV answer with many targets elsewhere
// asks two each (A and AAAA), and each costs the server an upstream
// exchange. Past it a name gets no records, as a failed lookup does.
const maxOutside = 16

// Outside is what names in no zone dnsd serves answered, for the CNAME
// targets and SRV/MX glue of SkyDNS zones. CoreDNS's etcd plugin asks
// its own server about those, which forwards them; the engine does no
// I/O, so it answers such a name from Answers and notes in Asked each
// question Answers does not hold. The server may resolve what was asked
// and answer again with it: the second answer asks nothing new, since
// what comes from outside is added to an answer, never followed.
type Outside struct {
	// Answers holds the answer records of each question, keyed by its
	// lowercase name; a question there with no records was asked and
	// got none (an upstream's NXDOMAIN, NODATA or failure).
	Answers map[dns.Question][]dns.RR
	// Asked lists the questions, as spelled, that Answers lacked, at
	// most maxOutside of them, once each.
	Asked []dns.Question
	// Upstreams is set when names in no stub domain may go upstream
	// (forwarding is on); otherwise only names in a stub domain of the
	// snapshot are asked, and the others get nothing, as without an
	// Outside, so their answer stays cacheable.
	Upstreams bool

	consulted bool // an answer depends on it: never cached for another client
}

// lookup returns the records of name (in no zone of s) and type from
// outside, noting the question when they are not known. A nil o knows
// nothing.
func (o *Outside) lookup(s *snap.Snapshot, name string, qtype uint16) []dns.RR {
	if o == nil {
		return nil
	}
	q := dns.Question{Name: dns.Fqdn(name), Qtype: qtype, Qclass: dns.ClassINET}
	if rrs, ok := o.Answers[OutsideKey(q)]; ok {
		o.consulted = true
		return rrs
	}
	if !o.Upstreams && s.Stub(strings.ToLower(strings.TrimSuffix(name, "."))) == nil {
		return nil
	}
	o.consulted = true
	if len(o.Asked) < maxOutside && !slices.ContainsFunc(o.Asked, func(a dns.Question) bool {
		return a.Qtype == q.Qtype && strings.EqualFold(a.Name, q.Name)
	}) {
		o.Asked = append(o.Asked, q)
	}
	return nil
}

// OutsideKey is q as Outside.Answers holds it.
func OutsideKey(q dns.Question) dns.Question {
	q.Name = strings.ToLower(q.Name)
	return q
}

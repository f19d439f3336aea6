package answer

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/miekg/dns"

	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/server/snap"
)

// PodMode says where a-b-c-d.<ns>.pod.<zone> answers come from.
type PodMode string

const (
	PodsInsecure PodMode = "insecure" // synthesized from the name, any namespace
	PodsVerified PodMode = "verified" // only records held in the snapshot
	PodsDisabled PodMode = "disabled" // NXDOMAIN for everything under pod.<zone>
)

// Options are the server's settings that shape answers.
type Options struct {
	Pods       PodMode
	Rotate     bool
	SOA        SOA
	Federation Federation // federation.go
	Autopath   Autopath   // autopath.go
}

// SOA is the synthesized SOA of every zone; Mname and Rname are relative
// to the zone. TTL is also the NS record's TTL.
type SOA struct {
	Mname, Rname                         string
	TTL, Refresh, Retry, Expire, Minimum uint32
}

// EDNSSize is the UDP payload size dnsd advertises: the DNS flag day 2020
// value, which avoids IP fragmentation on common paths.
const EDNSSize = 1232

// maxChase bounds CNAME chains inside a zone, as CoreDNS does (8 links).
const maxChase = 8

// Answer returns the response to req, or nil when req must not be
// answered (it is itself a response). A nil snapshot means nothing is
// loaded yet. rot is a per-query counter used to
// rotate multi-record answers when o.Rotate is set.
func Answer(s *snap.Snapshot, req *dns.Msg, o *Options, rot uint32) *dns.Msg {
	m, _ := AnswerFrom(s, req, o, rot, Client{})
	return m
}

// Client is what the server knows of who asked: answers that depend on it
// (a search path found from the client's address, federation answers for
// the asking cluster) cannot be shared between clients.
type Client struct {
	Addr netip.Addr // the zero Addr when unknown

	// Outside, when set, is how names in no zone of the snapshot get
	// records for a SkyDNS zone's answer (outside.go); nil: they get
	// none, and are not noted.
	Outside *Outside
}

// AnswerFrom is Answer for a known client. personal is true when the
// response depends on the client (its address or its EDNS(0) options), so
// the server must not serve it to anyone else from a cache.
func AnswerFrom(s *snap.Snapshot, req *dns.Msg, o *Options, rot uint32, c Client) (m *dns.Msg, personal bool) {
	return AnswerTracked(s, req, o, rot, c, nil)
}

// AnswerTracked is AnswerFrom that also notes in rd, when not nil, what
// the answer was built from, so that a cache can tell whether it stands in
// a later snapshot (Reads.Stands).
func AnswerTracked(s *snap.Snapshot, req *dns.Msg, o *Options, rot uint32, c Client, rd *Reads) (m *dns.Msg, personal bool) {
	if req.Response {
		return nil, false
	}
	m = new(dns.Msg)
	m.Id = req.Id
	m.Response = true
	m.Opcode = req.Opcode
	m.RecursionDesired = req.RecursionDesired
	m.CheckingDisabled = req.CheckingDisabled
	m.Compress = true
	if len(req.Question) == 1 {
		m.Question = []dns.Question{req.Question[0]}
	}

	opt, opts := (*dns.OPT)(nil), 0
	for _, rr := range req.Extra {
		if o, ok := rr.(*dns.OPT); ok {
			opt = o
			opts++
		}
	}
	sound := opts <= 1 && (opt == nil || opt.Hdr.Name == ".")
	if req.Opcode != dns.OpcodeQuery {
		m.Rcode = dns.RcodeNotImplemented
		if sound && opt != nil {
			m.Extra = []dns.RR{ownOPT(opt)} // RFC 6891 section 7: an answer to a query with OPT has one
		}
		return m, false
	}
	if len(req.Question) != 1 || !sound {
		m.Rcode = dns.RcodeFormatError
		return m, false
	}
	if opt != nil {
		m.Extra = []dns.RR{ownOPT(opt)}
		if opt.Version() != 0 {
			m.Rcode = dns.RcodeBadVers
			return m, false
		}
	}

	if s == nil {
		// Nothing loaded yet: SERVFAIL makes resolvers try another server
		// or again later, where REFUSED would say the zone is not ours.
		m.Rcode = dns.RcodeServerFailure
		return m, false
	}
	q := req.Question[0]
	switch q.Qtype {
	case dns.TypeOPT, dns.TypeTSIG, dns.TypeTKEY:
		m.Rcode = dns.RcodeFormatError // meta types are never questions
		return m, false
	}
	if personal, done := searched(s, m, q, opt, o, rot, c, rd); done {
		return m, personal
	}
	name := strings.ToLower(strings.TrimSuffix(q.Name, "."))
	z := s.Zone(name)
	if z == nil || q.Qclass != dns.ClassINET {
		m.Rcode = dns.RcodeRefused // not ours: no recursion, no other classes
		return m, false
	}
	switch q.Qtype {
	case dns.TypeAXFR, dns.TypeIXFR:
		m.Rcode = dns.RcodeRefused // zone transfers are not offered
		return m, false
	}
	if z.SkyDNS {
		return answerSkyDNS(m, s, z, q, o, rd, c.Outside)
	}
	r := resolver{s: s, z: z, o: o, rot: rot, client: c, opt: opt, reads: rd}
	r.resolve(name, dns.Fqdn(q.Name), q.Qtype)
	return r.reply(m)
}

// reply puts what r found into m.
func (r *resolver) reply(m *dns.Msg) (*dns.Msg, bool) {
	m.Authoritative = true
	m.Rcode = r.rcode
	m.Answer = r.answer
	m.Extra = append(r.extra, m.Extra...)
	if r.negative {
		m.Ns = []dns.RR{r.soa(min(r.o.SOA.TTL, r.o.SOA.Minimum))}
	}
	return m, r.personal
}

type resolver struct {
	s      *snap.Snapshot
	z      *snap.Zone
	o      *Options
	rot    uint32
	client Client
	opt    *dns.OPT // the query's, nil without EDNS
	reads  *Reads   // nil: not noted; every node and serial is read through it

	personal bool // the answer depends on client: never cached for others
	target   bool // resolving a CNAME's target from another zone: no search forms
	hops     int  // CNAMEs followed in the zones before this one

	rcode    int
	answer   []dns.RR
	extra    []dns.RR
	negative bool
}

// resolve answers name (canonical) asked as owner (the question's own
// spelling, echoed in the answer for 0x20 clients), following CNAMEs
// inside the zone.
func (r *resolver) resolve(name, owner string, qtype uint16) {
	if r.federated(name, owner, qtype) {
		return
	}
	var seen []string
	for {
		node, exists := r.lookup(name)
		if !exists {
			if len(seen) == 0 && !r.target && r.searchClient(name, owner, qtype) {
				return
			}
			r.rcode, r.negative = dns.RcodeNameError, true
			return
		}
		if name == r.z.Name && r.apex(owner, qtype) {
			return
		}
		if qtype != dns.TypeCNAME && node.Has(dns.TypeCNAME) {
			cname := node.RRSetNamed(dns.TypeCNAME, owner).RRs[0]
			r.answer = append(r.answer, cname)
			next := strings.TrimSuffix(cname.(*dns.CNAME).Target, ".")
			seen = append(seen, name)
			// Ours to follow, as spec 000's ExternalName answer and
			// CoreDNS do (stub resolvers do not follow a CNAME): in the
			// zone, in another, or from outside; unless it loops or runs
			// too long.
			if qtype == dns.TypeANY || r.hops+len(seen) > maxChase || contains(seen, next) {
				return
			}
			if !keys.IsSubdomain(next, r.z.Name) {
				r.elsewhere(strings.ToLower(next), cname.(*dns.CNAME).Target, qtype, r.hops+len(seen))
				return
			}
			name, owner = next, next+"."
			continue
		}
		var set snap.RRSet
		if qtype == dns.TypeANY {
			set = node.First(owner) // RFC 8482: one RRset is a complete answer to ANY
		} else {
			set = node.RRSetNamed(qtype, owner)
		}
		if len(set.RRs) == 0 {
			r.negative = true
			return
		}
		r.add(set, owner)
		if qtype == dns.TypeSRV {
			r.glue(set.RRs)
		}
		return
	}
}

// elsewhere adds the records of a CNAME's target (canonical name, and as
// written) that is in no part of r.z. What comes from another zone is
// added, its rcode not taken: the chain's answer is this zone's.
func (r *resolver) elsewhere(name, target string, qtype uint16, hops int) {
	at := resolver{s: r.s, o: r.o, rot: r.rot, client: r.client, opt: r.opt, reads: r.reads, hops: hops}
	rrs, personal := at.follow(name, target, qtype)
	r.answer = append(r.answer, rrs...)
	r.personal = r.personal || personal
}

// follow answers a name (canonical, and as written) that a CNAME, SRV or
// MX of one zone points at from wherever it is, for the question r holds
// the rest of (its zone aside): another zone dnsd serves answers it from
// memory, and a name in none comes from r.client.Outside, what the server
// found for it upstream or at a stub domain for this client (nothing where
// this client may not have it forwarded). personal: the answer depends on
// the client. r.hops counts the CNAMEs followed before.
func (r resolver) follow(name, written string, qtype uint16) (rrs []dns.RR, personal bool) {
	out := r.client.Outside
	other := r.s.Zone(name)
	switch {
	case other == nil:
		rrs = out.lookup(r.s, written, qtype)
		return rrs, out != nil && out.consulted
	case other.SkyDNS:
		r.reads.untrack() // a subtree read
		res := askSkyDNS(r.s, other, dns.Question{Name: written, Qtype: qtype, Qclass: dns.ClassINET}, r.o, out, r.hops)
		return res.Answer, out != nil && out.consulted
	}
	r.z, r.target = other, true
	r.resolve(name, written, qtype)
	return r.answer, r.personal
}

// apex answers the synthesized SOA and NS records; false when qtype is not
// one of them.
func (r *resolver) apex(owner string, qtype uint16) bool {
	switch qtype {
	case dns.TypeSOA, dns.TypeANY:
		if n := r.reads.node(r.z, r.z.Name); qtype == dns.TypeANY && len(n.First(owner).RRs) > 0 {
			return false // records held at the apex are the one RRset
		}
		r.answer = append(r.answer, named(r.soa(r.o.SOA.TTL), owner))
	case dns.TypeNS:
		ns := r.mname()
		r.answer = append(r.answer, &dns.NS{Hdr: hdr(owner, dns.TypeNS, r.o.SOA.TTL), Ns: ns})
		r.addresses(ns)
	default:
		return false
	}
	return true
}

func (r *resolver) mname() string {
	return dns.Fqdn(r.o.SOA.Mname + "." + r.z.Name)
}

func (r *resolver) soa(ttl uint32) *dns.SOA {
	z := r.z.Name + "."
	return &dns.SOA{
		Hdr:     hdr(z, dns.TypeSOA, ttl),
		Ns:      r.mname(),
		Mbox:    dns.Fqdn(r.o.SOA.Rname + "." + r.z.Name),
		Serial:  r.reads.serial(r.z),
		Refresh: r.o.SOA.Refresh,
		Retry:   r.o.SOA.Retry,
		Expire:  r.o.SOA.Expire,
		Minttl:  r.o.SOA.Minimum,
	}
}

// lookup finds a name's node; exists is false when nothing is at or below
// the name, which is what NXDOMAIN means (RFC 8020).
func (r *resolver) lookup(name string) (*snap.Node, bool) {
	if node, ok := r.pod(name); ok {
		return node, node != nil
	}
	node := r.reads.node(r.z, name)
	return node, node != nil || name == r.z.Name
}

// pod handles names under pod.<zone> unless they come from the snapshot.
func (r *resolver) pod(name string) (*snap.Node, bool) {
	if r.z.Reverse || r.o.Pods == PodsVerified {
		return nil, false
	}
	base := "pod." + r.z.Name
	if !keys.IsSubdomain(name, base) {
		return nil, false
	}
	if r.o.Pods == PodsDisabled {
		return nil, true
	}
	if name == base {
		return &snap.Node{Name: name}, true
	}
	labels := strings.Split(strings.TrimSuffix(name, "."+base), ".")
	switch {
	case len(labels) == 1 && keys.IsLabel(labels[0]):
		return &snap.Node{Name: name}, true // <ns>.pod.<zone>: any namespace may have pods
	case len(labels) == 2 && keys.IsLabel(labels[1]):
		ip, ok := keys.ParseDashedIP(labels[0])
		if !ok {
			return nil, true
		}
		h := hdr(name+".", dns.TypeA, r.z.TTL)
		var rr dns.RR
		if ip.Is4() {
			a := ip.As4()
			rr = &dns.A{Hdr: h, A: a[:]}
		} else {
			h.Rrtype = dns.TypeAAAA
			a := ip.As16()
			rr = &dns.AAAA{Hdr: h, AAAA: a[:]}
		}
		return snap.NewNode(name, snap.RRSet{Type: h.Rrtype, RRs: []dns.RR{rr}}), true
	}
	return nil, true
}

// add appends an RRset under the owner name as asked. The local cluster's
// records and the other clusters' rotate each within their own group, so
// spreading load never puts a remote record ahead of a local one.
func (r *resolver) add(set snap.RRSet, owner string) {
	r.answer = slices.Grow(r.answer, len(set.RRs))
	r.rotated(set.RRs[:set.Local], owner)
	r.rotated(set.RRs[set.Local:], owner)
}

// rotated appends rrs turned by the query counter, so that successive
// queries spread over them.
func (r *resolver) rotated(rrs []dns.RR, owner string) {
	n := len(rrs)
	start := 0
	if r.o.Rotate && n > 1 {
		start = int(r.rot % uint32(n))
	}
	for i := range n {
		r.answer = append(r.answer, named(rrs[(start+i)%n], owner))
	}
}

// glue adds the addresses of SRV targets that we hold, so a client needs
// no second query (spec 000 sections 2.3.2 and 2.4.2). It is never
// rotated: the UDP cache decides from the answer section alone whether a
// response varies per query, and the snapshot order already puts the local
// cluster's targets and addresses first.
func (r *resolver) glue(srvs []dns.RR) {
	var buf [4]string
	done := buf[:0]
	for _, rr := range srvs {
		t := rr.(*dns.SRV).Target
		if contains(done, t) {
			continue
		}
		done = append(done, t)
		r.addresses(t)
	}
}

// addresses adds the A and AAAA records held at fqdn, named as it is.
func (r *resolver) addresses(fqdn string) {
	name := strings.TrimSuffix(fqdn, ".")
	z := r.s.Zone(name)
	if z == nil {
		return
	}
	n := r.reads.node(z, name)
	if n.Has(dns.TypeCNAME) {
		return
	}
	r.extra = append(r.extra, n.RRSetNamed(dns.TypeA, fqdn).RRs...)
	r.extra = append(r.extra, n.RRSetNamed(dns.TypeAAAA, fqdn).RRs...)
}

// named returns rr under owner, a copy where it is named otherwise. What
// a node built for this answer is named as asked already.
func named(rr dns.RR, owner string) dns.RR {
	if rr.Header().Name == owner {
		return rr
	}
	c := dns.Copy(rr)
	c.Header().Name = owner
	return c
}

func hdr(name string, t uint16, ttl uint32) dns.RR_Header {
	return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: ttl}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Size is the largest response sent: over UDP 512 octets without EDNS, the
// client's advertised buffer with it, but never less than 512 nor more than
// EDNSSize, and 65535 over TCP. The cap keeps a forged query with a 64 KiB
// buffer from turning one small packet into a large fragmented one
// (amplification); larger answers get TC and come over TCP.
func Size(req *dns.Msg, udp bool) int {
	if !udp {
		return dns.MaxMsgSize
	}
	if opt := req.IsEdns0(); opt != nil {
		return UDPSize(opt.UDPSize())
	}
	return dns.MinMsgSize
}

// UDPSize clamps a client's advertised EDNS buffer to [512, EDNSSize].
func UDPSize(advertised uint16) int {
	return min(max(int(advertised), dns.MinMsgSize), EDNSSize)
}

// Fit makes m fit in size octets: first the additional section goes,
// whole (RFC 2181 section 9: no TC for that; CoreDNS, through miekg/dns's
// Truncate, keeps what fits of it and sets TC, so the client asks again
// over TCP for glue it can ask for itself); then, if the answer still
// does not fit, it keeps the answer's records that do, in order, and TC
// tells the client to ask again over TCP. That is what CoreDNS sends, and
// what a client that takes a truncated answer as it is (musl before
// 1.2.4, in many container images) needs to get any address of a large
// headless service at all.
func Fit(m *dns.Msg, size int) {
	if m.Len() <= size {
		return
	}
	opt := m.IsEdns0()
	m.Extra = nil
	if opt != nil {
		m.Extra = []dns.RR{opt}
	}
	if m.Len() <= size {
		return
	}
	m.Truncate(size)
}

// ownOPT is the OPT record of an answer to a query with opt: dnsd's
// payload size, and the DO bit as asked (RFC 3225).
func ownOPT(opt *dns.OPT) *dns.OPT {
	r := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
	r.SetUDPSize(EDNSSize)
	r.SetDo(opt.Do())
	return r
}

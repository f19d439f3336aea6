package snap

import (
	"cmp"
	"math"
	"slices"

	"github.com/miekg/dns"
)

// Records are built from a node's entries when an answer asks for them,
// for that answer alone (see Node). Most names hold one record, and
// building it is one allocation: the record, named as the question asked
// it, with the slice holding it. Duplicates are found by comparing values,
// not text.

// Sets returns the records of the node's entries, by type, named by the
// node's own name: for debugging and tests.
func (n *Node) Sets() []RRSet {
	if n == nil {
		return nil
	}
	if sd := n.side(); sd != nil && sd.made != nil {
		return *sd.made
	}
	owner := dns.Fqdn(n.Name)
	var sets []RRSet
	for _, t := range n.types() {
		if s := n.build(t, owner); len(s.RRs) > 0 {
			sets = append(sets, s)
		}
	}
	return sets
}

// types returns the types of the node's entries, lowest first.
func (n *Node) types() []uint16 {
	var ts []uint16
	for _, e := range n.Entries() {
		if !slices.Contains(ts, e.Type()) {
			ts = append(ts, e.Type())
		}
	}
	slices.Sort(ts)
	return ts
}

// First returns the RRset of the lowest type the node serves, named
// owner: one RRset is a complete answer to ANY (RFC 8482).
func (n *Node) First(owner string) RRSet {
	if n == nil {
		return RRSet{}
	}
	if sd := n.side(); sd != nil && sd.made != nil {
		if len(*sd.made) == 0 {
			return RRSet{}
		}
		return renamed((*sd.made)[0], owner)
	}
	for _, t := range n.types() {
		if s := n.build(t, owner); len(s.RRs) > 0 {
			return s
		}
	}
	return RRSet{}
}

// RRSet returns the records of type t named by the node's own name, with
// no records if there is none.
func (n *Node) RRSet(t uint16) RRSet { return n.RRSetNamed(t, "") }

// RRSetNamed returns the records of type t named owner, a fully qualified
// name: the question's own spelling, so that an answer uses them as they
// are; "" names them by the node's own name.
func (n *Node) RRSetNamed(t uint16, owner string) RRSet {
	if n == nil {
		return RRSet{}
	}
	if sd := n.side(); sd != nil && sd.made != nil {
		if i := slices.IndexFunc(*sd.made, func(s RRSet) bool { return s.Type == t }); i >= 0 {
			return renamed((*sd.made)[i], owner)
		}
		return RRSet{}
	}
	return n.build(t, owner)
}

// renamed returns s named owner: copies of a made node's records, which
// every query that reads the node shares.
func renamed(s RRSet, owner string) RRSet {
	if owner == "" || len(s.RRs) == 0 || s.RRs[0].Header().Name == owner {
		return s
	}
	rrs := make([]dns.RR, len(s.RRs))
	for i, rr := range s.RRs {
		rrs[i] = dns.Copy(rr)
		rrs[i].Header().Name = owner
	}
	s.RRs = rrs
	return s
}

// Has reports whether the node serves a record of type t, building none.
func (n *Node) Has(t uint16) bool {
	if n == nil {
		return false
	}
	if sd := n.side(); sd != nil && sd.made != nil {
		return slices.ContainsFunc(*sd.made, func(s RRSet) bool { return s.Type == t && len(s.RRs) > 0 })
	}
	es := n.Entries()
	for i := range es {
		if es[i].Type() == t && served(&es[i]) {
			return true
		}
	}
	return false
}

// build makes the deduplicated RRset of type t, all its records with the
// smallest TTL among them (RFC 2181 section 5.2). The local cluster's
// entries go in first, so the set's local records lead it and a record
// that a remote cluster also holds is deduplicated into the local group,
// not the remote one.
func (n *Node) build(t uint16, owner string) RRSet {
	es := n.Entries()
	count, last := 0, 0
	for i := range es {
		if es[i].Type() == t && served(&es[i]) {
			count, last = count+1, i
		}
	}
	if count == 0 {
		return RRSet{}
	}
	if owner == "" {
		owner = dns.Fqdn(n.Name)
	}
	line := es[last].Origin().line // every entry of a node is of its lineage
	defTTL, cluster := line.ttl, line.cluster
	if count == 1 {
		return buildOne(owner, &es[last], defTTL, cluster)
	}
	set := RRSet{Type: t, RRs: make([]dns.RR, 0, count)}
	var seen dedup
	ttl := uint32(math.MaxUint32)
	for pass := range 2 {
		local := pass == 0
		if local && cluster == "" {
			continue // no topology: one group, in key order
		}
		for i := range es {
			e := &es[i]
			if e.Type() != t || cluster != "" && (e.Origin().Cluster == cluster) != local {
				continue
			}
			rr, _ := newRR(owner, e, defTTL, false)
			if rr == nil {
				continue
			}
			ttl = min(ttl, rr.Header().Ttl) // duplicates count for the TTL too
			if !seen.add(rdataOf(e, rr)) {
				continue
			}
			set.RRs = append(set.RRs, rr)
			if local {
				set.Local++
			}
		}
	}
	switch t {
	case dns.TypeSRV:
		spreadWeights(set.RRs)
	case dns.TypeCNAME:
		// A CNAME is alone at its name; two values claiming one (two
		// writers disagreeing) must not make an invalid RRset. The local
		// cluster's claim wins.
		set.RRs = set.RRs[:1]
		set.Local = min(set.Local, 1)
	}
	for _, rr := range set.RRs {
		rr.Header().Ttl = ttl
	}
	return set
}

// buildOne is build for a type of one served entry, e: what most names
// hold, so its record and the set's slice are one allocation.
func buildOne(owner string, e *Entry, defTTL uint32, cluster string) RRSet {
	_, rrs := newRR(owner, e, defTTL, true)
	set := RRSet{Type: e.Type(), RRs: rrs}
	if cluster != "" && e.Origin().Cluster == cluster {
		set.Local = 1
	}
	if e.Type() == dns.TypeSRV {
		spreadWeights(rrs)
	}
	return set
}

// rdata is what tells two records of one type apart: their data.
type rdata struct {
	addr                   [16]byte
	text                   string // a target, or a TXT's text
	port, priority, weight uint16
}

func rdataOf(e *Entry, rr dns.RR) rdata {
	d := rdata{addr: e.addr, text: e.Data()}
	if s, ok := rr.(*dns.SRV); ok {
		d.port, d.priority, d.weight = s.Port, s.Priority, s.Weight // the priority as served
	}
	return d
}

// dedup is the data of the records an RRset holds so far: a list while
// it is short, then a set.
type dedup struct {
	list []rdata
	set  map[rdata]struct{}
}

const dedupList = 16

// add reports whether d is new, and notes it.
func (s *dedup) add(d rdata) bool {
	if s.set == nil {
		if slices.Contains(s.list, d) {
			return false
		}
		if len(s.list) < dedupList {
			s.list = append(s.list, d)
			return true
		}
		s.set = make(map[rdata]struct{}, 2*dedupList)
		for _, x := range s.list {
			s.set[x] = struct{}{}
		}
	}
	if _, ok := s.set[d]; ok {
		return false
	}
	s.set[d] = struct{}{}
	return true
}

// served is false for what newRR makes no record of.
func served(e *Entry) bool {
	return e.Type() != dns.TypeSRV || e.Port() >= 0
}

// newRR makes e's record, nil for what it makes none of; alone, it also
// returns a slice of just that record, allocated with it. An address
// shares the entry's bytes: a published node never changes, and the
// record lives no longer than the answer that asked for it.
func newRR(owner string, e *Entry, defTTL uint32, alone bool) (dns.RR, []dns.RR) {
	ttl := e.ttl
	if ttl == 0 {
		ttl = defTTL
	}
	hdr := dns.RR_Header{Name: owner, Rrtype: e.Type(), Class: dns.ClassINET, Ttl: ttl}
	switch e.Type() {
	case dns.TypeA:
		return record(dns.A{Hdr: hdr, A: e.addr[:4:4]}, alone)
	case dns.TypeAAAA:
		return record(dns.AAAA{Hdr: hdr, AAAA: e.addr[:]}, alone)
	case dns.TypeCNAME:
		return record(dns.CNAME{Hdr: hdr, Target: fqdnIn(owner, e.Data())}, alone)
	case dns.TypePTR:
		return record(dns.PTR{Hdr: hdr, Ptr: dns.Fqdn(e.Data())}, alone)
	case dns.TypeTXT:
		return record(dns.TXT{Hdr: hdr, Txt: splitText(e.Data())}, alone)
	case dns.TypeSRV:
		if !served(e) {
			return nil, nil // CoreDNS skips port -1: "no port declared"
		}
		prio := e.Priority()
		if prio == 0 {
			prio = 10 // as CoreDNS's etcd plugin
		}
		// Weight holds the raw value until spreadWeights.
		return record(dns.SRV{Hdr: hdr, Priority: prio, Weight: e.Weight(), Port: uint16(e.Port()), Target: fqdnIn(owner, e.Data())}, alone)
	}
	return nil, nil
}

// fqdnIn returns name with a trailing dot, as the end of owner where owner
// ends in it: an SRV's target is most often the name its owner is under
// (_http._tcp.NAME -> NAME), and then needs no string of its own.
func fqdnIn(owner, name string) string {
	if n := len(owner) - len(name) - 1; n >= 0 && owner[len(owner)-1] == '.' && owner[n:len(owner)-1] == name {
		return owner[n:]
	}
	return dns.Fqdn(name)
}

// one is a record and a set's slice holding it alone.
type one[T any] struct {
	rr  T
	set [1]dns.RR
}

// record returns rr on the heap, and with alone, in a one of its own.
func record[T any, P interface {
	*T
	dns.RR
}](rr T, alone bool) (dns.RR, []dns.RR) {
	if !alone {
		p := P(new(T))
		*p = rr
		return p, nil
	}
	o := &one[T]{rr: rr}
	o.set[0] = P(&o.rr)
	return o.set[0], o.set[:]
}

// splitText cuts text into the 255-octet strings a TXT record is made of.
func splitText(s string) []string {
	var out []string
	for len(s) > 255 {
		out = append(out, s[:255])
		s = s[255:]
	}
	return append(out, s)
}

// spreadWeights re-spreads weights as CoreDNS's plugin.SRV does, so both
// servers give the same answer from the same keys: per priority, a weight
// of 0 counts as 100, and each becomes floor(100/sum*weight), at least 1.
func spreadWeights(rrs []dns.RR) {
	type sum struct {
		priority uint16
		weights  int
	}
	var few [4]sum // a set has a priority or two
	sums := few[:0]
	of := func(priority uint16) *sum {
		for i := range sums {
			if sums[i].priority == priority {
				return &sums[i]
			}
		}
		sums = append(sums, sum{priority: priority})
		return &sums[len(sums)-1]
	}
	for _, rr := range rrs {
		s := rr.(*dns.SRV)
		of(s.Priority).weights += cmp.Or(int(s.Weight), 100)
	}
	for _, rr := range rrs {
		s := rr.(*dns.SRV)
		w := 100.0 / float64(of(s.Priority).weights) * float64(cmp.Or(int(s.Weight), 100))
		s.Weight = max(uint16(math.Floor(w)), 1)
	}
}

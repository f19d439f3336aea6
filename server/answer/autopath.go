package answer

import (
	"slices"
	"strings"

	"github.com/miekg/dns"

	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/server/snap"
)

// Autopath is server-side search-path expansion: a pod's lookup of a short
// name costs it one query per address family instead of one per search
// domain (the DNS Autopath KEP). Each form is off at its zero value.
//
// A name of the search path is found when it exists (RFC 8020: NOERROR,
// records of the asked type or not, empty non-terminals included), as
// CoreDNS's autopath plugin and musl's resolver decide, not when it holds
// records of the asked type: the asked name then stands for one name
// whatever the type, so the A and the AAAA lookups of one client never
// reach two different services. The answer is a CNAME from the asked name
// to that name, then that name's answer; NXDOMAIN only when no name of the
// path exists.
type Autopath struct {
	// Suffix serves the pseudo-zone ApZone: <name>.search.<ns>.<zone>.ap.k8s.io
	// is searched over <ns>.svc.<zone>, svc.<zone>, <zone>, then <name>.
	Suffix bool
	// Option is the EDNS(0) option code whose data is a comma-separated
	// search list: the question's name is searched over it, then alone.
	// 0: off.
	Option uint16
	// Client searches, for a client whose pod record says it is in <ns>,
	// a missing <name>.<ns>.svc.<zone> over svc.<zone>, <zone>, then
	// <name>, as CoreDNS's autopath plugin does.
	Client bool
	// Observe, when set, hears of every search: its form and whether a
	// name was found. The engine counts nothing itself.
	Observe func(f Form, found bool)
}

// Form is how a query asked to be searched; its values are metric labels.
type Form string

const (
	FormSuffix Form = "suffix"
	FormOption Form = "option"
	FormClient Form = "client"
)

// Forms are every form, for those who count them.
var Forms = []Form{FormSuffix, FormOption, FormClient}

// ApZone is the KEP's suffix of names to be searched.
const ApZone = "ap.k8s.io"

// maxSearch bounds the work one query can ask for: Kubernetes allows a pod
// 32 search domains.
const maxSearch = 32

// searched answers, into m, the questions whose name says how to search
// for it (Suffix) or that carry a search list (Option); done is false for
// every other question.
func searched(s *snap.Snapshot, m *dns.Msg, q dns.Question, opt *dns.OPT, o *Options, rot uint32, c Client, rd *Reads) (personal, done bool) {
	if q.Qclass != dns.ClassINET || q.Qtype == dns.TypeAXFR || q.Qtype == dns.TypeIXFR {
		return false, false
	}
	name := strings.ToLower(strings.TrimSuffix(q.Name, "."))
	list, sent, ok := o.Autopath.searchList(opt)
	if sent && !ok {
		// As for a malformed client subnet (RFC 7871 7.1.1); a resolver
		// that falls back to plain DNS on FORMERR gets today's answer.
		m.Rcode = dns.RcodeFormatError
		return true, true
	}
	r := resolver{s: s, o: o, rot: rot, client: c, opt: opt, reads: rd}
	switch {
	case o.Autopath.Suffix && keys.IsSubdomain(name, ApZone):
		r.suffix(name, q.Name, q.Qtype)
	case sent && name != "":
		r.personal = true
		names := make([]string, 0, len(list)+1)
		for _, d := range list {
			names = append(names, name+"."+d)
		}
		r.z = s.Zone(name)
		if !r.search(FormOption, name, q.Name, append(names, name), q.Qtype) {
			if r.z == nil {
				// Not ours to deny: what the name gets without the option
				// (REFUSED, or the upstreams' answer under ClusterFirst).
				m.Rcode = dns.RcodeRefused
				return true, true
			}
			r.rcode, r.negative = dns.RcodeNameError, true
		}
	default:
		return false, false
	}
	_, personal = r.reply(m)
	return personal, true
}

// searchList reads the search list of the option; sent is false when
// the form is off or the query has no such option, ok false when it is
// not 1 to maxSearch comma-separated names.
func (a *Autopath) searchList(opt *dns.OPT) (list []string, sent, ok bool) {
	if a.Option == 0 || opt == nil {
		return nil, false, false
	}
	i := slices.IndexFunc(opt.Option, func(e dns.EDNS0) bool { return e.Option() == a.Option })
	if i < 0 {
		return nil, false, false
	}
	if slices.ContainsFunc(opt.Option[i+1:], func(e dns.EDNS0) bool { return e.Option() == a.Option }) {
		return nil, true, false
	}
	l, isLocal := opt.Option[i].(*dns.EDNS0_LOCAL)
	if !isLocal || len(l.Data) == 0 {
		return nil, true, false
	}
	list = strings.Split(string(l.Data), ",")
	if len(list) > maxSearch {
		return nil, true, false
	}
	for i, d := range list {
		n, err := keys.CanonicalName(d)
		if err != nil {
			return nil, true, false
		}
		list[i] = n
	}
	return list, true, true
}

// apZone is the pseudo-zone ApZone. It holds no records, so it never
// changes and keeps one serial for ever.
var apZone = &snap.Zone{Config: snap.Config{Name: ApZone}, Serial: 1}

// suffix answers a name of the pseudo-zone ApZone.
func (r *resolver) suffix(name, owner string, qtype uint16) {
	base, zone, ns, ent := r.parseSuffix(name)
	if base != "" && r.search(FormSuffix, name, owner, []string{
		base + "." + ns + ".svc." + zone, base + ".svc." + zone, base + "." + zone, base,
	}, qtype) {
		return
	}
	r.z = apZone
	switch {
	case name == ApZone:
		if !r.apex(owner, qtype) {
			r.negative = true
		}
	case ent:
		r.negative = true
	default:
		r.rcode, r.negative = dns.RcodeNameError, true
	}
}

// parseSuffix reads <base>.search.<ns>.<zone>.ap.k8s.io, zone being a
// served forward zone; base is "" for any other name. The names above such
// a name are empty non-terminals (ent), not NXDOMAIN: a resolver that
// minimises its questions (RFC 9156) asks them first, and one that reads
// NXDOMAIN as "nothing below" (RFC 8020) would never ask the name itself.
func (r *resolver) parseSuffix(name string) (base, zone, ns string, ent bool) {
	rest := strings.TrimSuffix(name, "."+ApZone)
	for _, z := range r.s.Zones {
		if z.Reverse {
			continue
		}
		if keys.IsSubdomain(z.Name, rest) {
			return "", "", "", true
		}
		head, ok := strings.CutSuffix(rest, "."+z.Name)
		if !ok {
			continue
		}
		// A name that is no search in this zone may be one in a zone
		// around it (a.example.com inside example.com: NAME.search.a is
		// namespace a's search of example.com).
		i := strings.LastIndexByte(head, '.')
		if ns = head[i+1:]; !keys.IsLabel(ns) {
			continue
		}
		if i < 0 || head[:i] == "search" {
			return "", "", "", true
		}
		base, ok = strings.CutSuffix(head[:i], ".search")
		if !ok {
			continue
		}
		return base, z.Name, ns, false
	}
	return "", "", "", false
}

// searchClient searches name, which does not exist, for a client in the
// namespace it names: false leaves it NXDOMAIN.
func (r *resolver) searchClient(name, owner string, qtype uint16) bool {
	if !r.o.Autopath.Client || r.z.Reverse {
		return false
	}
	rest, ok := strings.CutSuffix(name, ".svc."+r.z.Name)
	i := strings.LastIndexByte(rest, '.')
	if !ok || i < 0 {
		return false
	}
	// Another client might have been searched for: not for its cache.
	r.personal = true
	base, ns := rest[:i], rest[i+1:]
	r.reads.untrack() // the pod index, by the client's address
	if !r.client.Addr.IsValid() || !slices.Contains(r.z.PodNamespaces(r.client.Addr), ns) {
		return false
	}
	zone := r.z.Name
	return r.search(FormClient, name, owner, []string{base + ".svc." + zone, base + "." + zone, base}, qtype)
}

// search answers owner (asked as name) from the first of names that
// exists in a served zone; the last of names is the one asked for, with
// no search domain. Names outside the zones are skipped: dnsd is no
// resolver for them, and the client's own resolver asks them once dnsd
// says NXDOMAIN. False when none exists, with r as it was.
func (r *resolver) search(f Form, name, owner string, names []string, qtype uint16) bool {
	asked := r.z
	for i, n := range names {
		// Spec 003: a federated service is reached by its full name only.
		if i < len(names)-1 && r.o.InFederation(n) {
			continue
		}
		if r.z = r.s.Zone(n); r.z == nil {
			continue
		}
		if r.z.SkyDNS {
			if r.searchSkyDNS(f, n, name, owner, qtype) {
				return true
			}
			continue
		}
		if _, ok := r.lookup(n); !ok {
			continue
		}
		r.observe(f, true)
		if n != name {
			// It holds as long as the NXDOMAINs before it would be cached.
			ttl := min(r.o.SOA.TTL, r.o.SOA.Minimum)
			r.answer = append(r.answer, &dns.CNAME{Hdr: hdr(owner, dns.TypeCNAME, ttl), Target: n + "."})
			if qtype == dns.TypeCNAME || qtype == dns.TypeANY {
				return true
			}
			owner = n + "."
		}
		r.resolve(n, owner, qtype)
		return true
	}
	r.z = asked
	r.observe(f, false)
	return false
}

// searchSkyDNS is search's step for n in a SkyDNS zone (r.z), whose
// names are a tree's subtrees, not nodes: false when n does not exist.
func (r *resolver) searchSkyDNS(f Form, n, name, owner string, qtype uint16) bool {
	qn := n + "."
	if n == name {
		qn = owner
	}
	res := askSkyDNS(r.s, r.z, dns.Question{Name: qn, Qtype: qtype, Qclass: dns.ClassINET}, r.o, r.client.Outside, r.hops)
	// A subtree read, as answerSkyDNS's, which Reads does not follow: a
	// miss too, which a name written later makes a hit.
	r.reads.untrack()
	if res.Rcode == dns.RcodeNameError {
		return false
	}
	r.observe(f, true)
	r.personal = r.personal || r.client.Outside != nil && r.client.Outside.consulted
	if n != name {
		ttl := min(r.o.SOA.TTL, r.o.SOA.Minimum)
		r.answer = append(r.answer, &dns.CNAME{Hdr: hdr(owner, dns.TypeCNAME, ttl), Target: qn})
		if qtype == dns.TypeCNAME || qtype == dns.TypeANY {
			return true
		}
	}
	r.rcode = res.Rcode
	r.answer = append(r.answer, res.Answer...)
	r.extra = append(r.extra, res.Extra...)
	r.negative = len(res.Answer) == 0
	return true
}

func (r *resolver) observe(f Form, found bool) {
	if obs := r.o.Autopath.Observe; obs != nil {
		obs(f, found)
	}
}

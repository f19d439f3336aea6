package skydns

import (
	"errors"
	"math"
	"net"
	"path"
	"slices"
	"strings"

	"github.com/miekg/dns"
)

// Zone is what the answers of one zone are built with.
type Zone struct {
	Name   string // fully qualified and lowercase: "example.org."
	Prefix string // one-segment etcd prefix: "/skydns"
	TTL    uint32 // TTL of values that carry none; CoreDNS's is 300
	Serial uint32 // SOA serial
	// Mname and Rname are the SOA's server and mailbox, relative to the
	// zone; CoreDNS's are ns.dns and hostmaster.
	Mname, Rname string
}

// The SOA CoreDNS synthesizes for a zone: its TTL and minimum are the
// plugin's MinTTL, the timers are fixed.
const (
	soaTTL     = 30
	soaRefresh = 7200
	soaRetry   = 1800
	soaExpire  = 86400
	// maxCNAMEs is the longest CNAME chain followed in the zone: CoreDNS
	// stops adding once 8 are in the chain (1.11; later releases: 10).
	maxCNAMEs = 8
)

// Lookup resolves a name outside the zone, as CoreDNS's upstream does for
// CNAME targets and SRV/MX glue. ok false: the name could not be asked.
type Lookup func(name string, qtype uint16) (rrs []dns.RR, ok bool)

// Result is an answer: always authoritative, with the zone's SOA in Ns
// when Answer is empty.
type Result struct {
	Rcode             int
	Answer, Ns, Extra []dns.RR
}

var (
	errNotFound = errors.New("key not found")
	errNSName   = errors.New("NS record must be an IP address")
)

// Answer answers q from t as CoreDNS 1.11's etcd plugin answers it from
// the same keys. up asks about names outside the zone, as the plugin asks
// its own server; nil: they cannot be asked, so a CNAME to one is left
// out (the plugin's behaviour when its upstream fails) and SRV and MX
// targets outside the zone get no glue.
func Answer(t *Tree, z *Zone, q dns.Question, up Lookup) Result {
	a := &asker{t: t, z: z, up: up}
	qname := dns.Fqdn(q.Name)
	name := strings.ToLower(qname)
	var recs, extra []dns.RR
	var err error
	switch q.Qtype {
	case dns.TypeA, dns.TypeAAAA:
		recs, err = a.address(name, qname, q.Qtype, q.Qtype, nil)
	case dns.TypeTXT:
		recs, err = a.txt(name, qname, nil)
	case dns.TypeCNAME:
		recs, err = a.cname(name, qname)
	case dns.TypePTR:
		recs, err = a.ptr(name, qname)
	case dns.TypeMX:
		recs, extra, err = a.mx(name, qname)
	case dns.TypeSRV:
		recs, extra, err = a.srv(name, qname)
	case dns.TypeSOA:
		recs = []dns.RR{a.soa()}
	case dns.TypeNS:
		if name == z.Name {
			recs, extra, err = a.ns(qname)
			if errors.Is(err, errNotFound) {
				// Nothing under dns/ns: NODATA, as the apex exists (its
				// SOA is served). CoreDNS 1.11 sends no reply at all here;
				// NXDOMAIN would tell a resolver the zone is empty.
				err = nil
			}
			break
		}
		fallthrough
	default:
		// Only whether the name exists matters: NODATA or NXDOMAIN, which
		// no target decides. CoreDNS asks about one outside the zone too
		// (an HTTPS question at external-dns's CNAME of a load balancer)
		// and drops what comes back; a wait on an upstream for nothing.
		a.up = nil
		_, err = a.address(name, qname, dns.TypeA, q.Qtype, nil)
	}
	recs, extra = packable(recs), packable(extra)
	switch {
	case errors.Is(err, errNotFound):
		return Result{Rcode: dns.RcodeNameError, Ns: []dns.RR{a.soa()}}
	case err != nil:
		return Result{Rcode: dns.RcodeServerFailure, Ns: []dns.RR{a.soa()}}
	case len(recs) == 0:
		return Result{Rcode: dns.RcodeSuccess, Ns: []dns.RR{a.soa()}}
	}
	return Result{Rcode: dns.RcodeSuccess, Answer: recs, Extra: extra}
}

// packable leaves out the records that name no DNS name: a key with an
// empty segment ("a//b") or one over 63 octets, or such a host, makes an
// owner or target that no message can carry, and one such record would
// fail the whole answer (CoreDNS then sends no reply at all). The value
// still answers where its names are not needed, as CoreDNS's does: an
// address at a parent's name.
func packable(rrs []dns.RR) []dns.RR {
	out := rrs[:0]
	for _, rr := range rrs {
		if valid(rr.Header().Name) && valid(target(rr)) {
			out = append(out, rr)
		}
	}
	return out
}

func valid(name string) bool {
	_, ok := dns.IsDomainName(name)
	return ok
}

// target is the name a record points at ("." for none).
func target(rr dns.RR) string {
	switch r := rr.(type) {
	case *dns.CNAME:
		return r.Target
	case *dns.SRV:
		return r.Target
	case *dns.MX:
		return r.Mx
	case *dns.PTR:
		return r.Ptr
	case *dns.NS:
		return r.Ns
	}
	return "."
}

type asker struct {
	t  *Tree
	z  *Zone
	up Lookup
}

// svc is a value as a query sees it: its TTL and priority defaulted.
type svc struct {
	Item
	ttl uint32
}

// path is the key of a lowercase name and whether the name holds a
// wildcard label ("*" or "any"): then the key stops above the first one.
func (a *asker) path(name string) (key string, star bool) {
	l := dns.SplitDomainName(name)
	slices.Reverse(l)
	for i, label := range l {
		if label == "*" || label == "any" {
			return path.Join(append([]string{a.z.Prefix + "/"}, l[:i]...)...), true
		}
	}
	return path.Join(append([]string{a.z.Prefix + "/"}, l...)...), false
}

// services returns the values that answer name: those of its subtree, or
// when it has none (or exact is set) the one at its own key, each filtered
// as qtype asks and by group. errNotFound when no key was there at all.
func (a *asker) services(name string, qtype uint16, exact bool) ([]svc, error) {
	key, star := a.path(name)
	var items []Item
	if !exact {
		items = a.t.Prefix(strings.TrimSuffix(key, "/") + "/")
	}
	if len(items) == 0 {
		if it, ok := a.t.Get(strings.TrimSuffix(key, "/")); ok {
			items = []Item{it}
		}
	}
	if len(items) == 0 {
		return nil, errNotFound
	}
	var nameParts []string
	if star {
		l := dns.SplitDomainName(name)
		slices.Reverse(l)
		nameParts = strings.Split(path.Join(append([]string{a.z.Prefix + "/"}, l...)...), "/")
	}
	var out []svc
	for _, it := range items {
		if star && !wildMatch(nameParts, it.Key) {
			continue
		}
		s := svc{Item: it, ttl: it.TTL}
		if s.ttl == 0 {
			s.ttl = a.z.TTL
		}
		if s.Priority == 0 {
			s.Priority = 10
		}
		// A value answers only when it has a host, or text for TXT.
		if s.Host != "" || qtype == dns.TypeTXT && s.Text != "" {
			out = append(out, s)
		}
	}
	return group(out), nil
}

// wildMatch reports whether a key matches every segment of a wildcard
// name's path, "*" and "any" matching any one segment; a key shorter
// than the name does not match.
func wildMatch(nameParts []string, key string) bool {
	keyParts := strings.Split(key, "/")
	for i, p := range nameParts {
		if i >= len(keyParts) {
			return false
		}
		if p != "*" && p != "any" && keyParts[i] != p {
			return false
		}
	}
	return true
}

// group keeps, when the shallowest values carry a group, the values of
// that group and those with none. It follows CoreDNS's msg.Group to the
// letter, quirks included: the scan for the shallowest group stops at the
// first shallower value without one, and when two values at the chosen
// depth disagree nothing is filtered.
func group(sx []svc) []svc {
	if len(sx) == 0 {
		return sx
	}
	g := sx[0].Group
	depth := strings.Count(sx[0].Key, "/")
	depths := make([]int, len(sx)) // left 0 past a break, as CoreDNS leaves them
	for i, s := range sx {
		d := strings.Count(s.Key, "/")
		depths[i] = d
		if d < depth {
			if s.Group == "" {
				break
			}
			depth, g = d, s.Group
		}
	}
	if g == "" {
		return sx
	}
	out := []svc{}
	for i, s := range sx {
		switch {
		case s.Group == "":
			out = append(out, s)
		case depths[i] == depth && s.Group != g:
			return sx
		case s.Group == g:
			out = append(out, s)
		}
	}
	return out
}

// apexServices reads the zone's own name from apex.dns.<zone> when that
// holds anything, else from the whole zone, as CoreDNS does.
func (a *asker) apexServices(name string, qtype uint16) ([]svc, error) {
	if name != a.z.Name {
		return a.services(name, qtype, false)
	}
	if sx, err := a.services("apex.dns."+a.z.Name, qtype, false); err == nil {
		return sx, nil
	}
	return a.services(name, qtype, false)
}

// hostType is the record a value makes: A or AAAA for an address, CNAME
// for a name, TXT for a name with text (so such a value is never a CNAME).
func hostType(s svc) (uint16, net.IP) {
	ip := net.ParseIP(s.Host)
	switch {
	case ip == nil && s.Text == "":
		return dns.TypeCNAME, nil
	case ip == nil:
		return dns.TypeTXT, nil
	case ip.To4() != nil:
		return dns.TypeA, ip.To4()
	}
	return dns.TypeAAAA, ip.To16()
}

// isBelow reports whether child is name or below it: a CNAME there would
// loop, and is how SRV children stay out of their parent's A answer.
func isBelow(name, child string) bool {
	return name == child || dns.IsSubDomain(name, child)
}

func hasCNAMETo(target string, prev []dns.RR) bool {
	for _, rr := range prev {
		if c, ok := rr.(*dns.CNAME); ok && c.Target == target {
			return true
		}
	}
	return false
}

// chase follows a CNAME value of a question: in the zone by next (the
// same question asked of the target), outside it through up. Its records
// are nil when the CNAME is left out.
func (a *asker) chase(s svc, name, qname string, qtype uint16, prev []dns.RR,
	next func(name, qname string, prev []dns.RR) ([]dns.RR, error)) []dns.RR {
	target := dns.Fqdn(s.Host)
	if isBelow(name, target) || len(prev) >= maxCNAMEs {
		return nil
	}
	c := &dns.CNAME{Hdr: hdr(qname, dns.TypeCNAME, s.ttl), Target: target}
	if hasCNAMETo(target, prev) {
		return nil
	}
	if dns.IsSubDomain(a.z.Name, target) {
		more, err := next(strings.ToLower(target), target, append(slices.Clip(prev), c))
		if err != nil || len(more) == 0 {
			return nil
		}
		return append([]dns.RR{c}, more...)
	}
	if a.up == nil {
		return nil
	}
	rrs, ok := a.up(target, qtype)
	if !ok {
		return nil
	}
	return append([]dns.RR{c}, rrs...)
}

// address answers A or AAAA (want); qtype is the question's type, which
// filters values and is what chased names are asked for.
func (a *asker) address(name, qname string, want, qtype uint16, prev []dns.RR) ([]dns.RR, error) {
	sx, err := a.apexServices(name, qtype)
	if err != nil {
		return nil, err
	}
	var out []dns.RR
	seen := map[string]bool{}
	for _, s := range sx {
		what, ip := hostType(s)
		switch {
		case what == dns.TypeCNAME:
			out = append(out, a.chase(s, name, qname, qtype, prev, func(n, qn string, p []dns.RR) ([]dns.RR, error) {
				return a.address(n, qn, want, qtype, p)
			})...)
		case what == want && !seen[s.Host]:
			seen[s.Host] = true
			out = append(out, addrRR(qname, ip, what, s.ttl))
		}
	}
	return out, nil
}

func (a *asker) txt(name, qname string, prev []dns.RR) ([]dns.RR, error) {
	sx, err := a.services(name, dns.TypeTXT, false)
	if err != nil {
		return nil, err
	}
	var out []dns.RR
	seen := map[string]bool{}
	for _, s := range sx {
		switch what, _ := hostType(s); what {
		case dns.TypeCNAME:
			out = append(out, a.chase(s, name, qname, dns.TypeTXT, prev, a.txt)...)
		case dns.TypeTXT:
			if !seen[s.Text] {
				seen[s.Text] = true
				out = append(out, &dns.TXT{Hdr: hdr(qname, dns.TypeTXT, s.ttl), Txt: split255(s.Text)})
			}
		}
	}
	return out, nil
}

// cname answers from the exact key only, with its first value.
func (a *asker) cname(name, qname string) ([]dns.RR, error) {
	sx, err := a.services(name, dns.TypeCNAME, true)
	if err != nil || len(sx) == 0 {
		return nil, err
	}
	if net.ParseIP(sx[0].Host) != nil {
		return nil, nil
	}
	return []dns.RR{&dns.CNAME{Hdr: hdr(qname, dns.TypeCNAME, sx[0].ttl), Target: dns.Fqdn(sx[0].Host)}}, nil
}

func (a *asker) ptr(name, qname string) ([]dns.RR, error) {
	sx, err := a.services(name, dns.TypePTR, true)
	if err != nil {
		return nil, err
	}
	var out []dns.RR
	seen := map[string]bool{}
	for _, s := range sx {
		if net.ParseIP(s.Host) == nil && !seen[s.Host] {
			seen[s.Host] = true
			out = append(out, &dns.PTR{Hdr: hdr(qname, dns.TypePTR, s.ttl), Ptr: dns.Fqdn(s.Host)})
		}
	}
	return out, nil
}

// dupKey tells apart the records and glue SRV and MX answers hold once.
type dupKey struct {
	name, addr string
	port       uint16
}

func once(seen map[dupKey]bool, k dupKey) bool {
	if seen[k] {
		return false
	}
	seen[k] = true
	return true
}

// glue is the additional section for a target that is a name: its
// addresses from the zone, or from up outside it.
func (a *asker) glue(target string) []dns.RR {
	if !dns.IsSubDomain(a.z.Name, target) {
		if a.up == nil {
			return nil
		}
		var out []dns.RR
		if rrs, ok := a.up(target, dns.TypeA); ok {
			out = append(out, rrs...)
		}
		if rrs, ok := a.up(target, dns.TypeAAAA); ok {
			for _, rr := range rrs {
				if _, c := rr.(*dns.CNAME); !c {
					out = append(out, rr)
				}
			}
		}
		return out
	}
	rrs, err := a.address(strings.ToLower(target), target, dns.TypeA, dns.TypeA, nil)
	if err != nil {
		return nil
	}
	return rrs
}

// srv answers SRV: a name host is the target; an address host makes the
// target the key's own name (less targetstrip labels), with the address
// as glue. Weights become each value's share of its priority, in percent.
func (a *asker) srv(name, qname string) ([]dns.RR, []dns.RR, error) {
	sx, err := a.services(name, dns.TypeSRV, false)
	if err != nil {
		return nil, nil, err
	}
	total := map[int]int{}
	for _, s := range sx {
		w := 100
		if s.Weight != 0 {
			w = s.Weight
		}
		total[s.Priority] += w
	}
	var recs, extra []dns.RR
	seen := map[dupKey]bool{}
	asked := map[string]bool{}
	for _, s := range sx {
		if s.Port == -1 {
			continue
		}
		share := 100.0 / float64(total[s.Priority])
		if s.Weight == 0 {
			share *= 100
		} else {
			share *= float64(s.Weight)
		}
		weight := uint16(math.Floor(share))
		if weight == 0 {
			weight = 1
		}
		what, ip := hostType(s)
		switch what {
		case dns.TypeCNAME:
			rr := newSRV(qname, s, s.Host, weight)
			recs = append(recs, rr)
			if !asked[rr.Target] {
				asked[rr.Target] = true
				extra = append(extra, a.glue(rr.Target)...)
			}
		case dns.TypeA, dns.TypeAAAA:
			rr := newSRV(qname, s, domain(s.Key), weight)
			if once(seen, dupKey{name: rr.Target, port: rr.Port}) {
				recs = append(recs, rr)
			}
			if once(seen, dupKey{name: rr.Target, addr: s.Host}) {
				extra = append(extra, addrRR(rr.Target, ip, what, s.ttl))
			}
		}
	}
	return recs, extra, nil
}

// mx answers MX from the values with mail set; priority is preference.
func (a *asker) mx(name, qname string) ([]dns.RR, []dns.RR, error) {
	sx, err := a.services(name, dns.TypeMX, false)
	if err != nil {
		return nil, nil, err
	}
	var recs, extra []dns.RR
	seen := map[dupKey]bool{}
	asked := map[string]bool{}
	for _, s := range sx {
		if !s.Mail {
			continue
		}
		what, ip := hostType(s)
		switch what {
		case dns.TypeCNAME:
			rr := newMX(qname, s, s.Host)
			recs = append(recs, rr)
			if !asked[rr.Mx] {
				asked[rr.Mx] = true
				extra = append(extra, a.glue(rr.Mx)...)
			}
		case dns.TypeA, dns.TypeAAAA:
			host := domain(s.Key)
			rr := newMX(qname, s, host)
			if once(seen, dupKey{name: rr.Mx, port: rr.Preference}) {
				recs = append(recs, rr)
			}
			// CoreDNS names the glue by the key, before targetstrip.
			if once(seen, dupKey{name: host, addr: s.Host}) {
				extra = append(extra, addrRR(host, ip, what, s.ttl))
			}
		}
	}
	return recs, extra, nil
}

// ns answers the apex's NS from the address values under ns.dns.<zone>,
// each named by its key; a name value there is a SERVFAIL, as in CoreDNS.
func (a *asker) ns(qname string) ([]dns.RR, []dns.RR, error) {
	sx, err := a.services("ns.dns."+a.z.Name, dns.TypeNS, false)
	if err != nil {
		return nil, nil, err
	}
	var recs, extra []dns.RR
	seen := map[string]bool{}
	for _, s := range sx {
		what, ip := hostType(s)
		switch what {
		case dns.TypeCNAME:
			return nil, nil, errNSName
		case dns.TypeA, dns.TypeAAAA:
			target := strip(dns.Fqdn(domain(s.Key)), s.TargetStrip)
			extra = append(extra, addrRR(target, ip, what, s.ttl))
			if !seen[target] {
				seen[target] = true
				recs = append(recs, &dns.NS{Hdr: hdr(qname, dns.TypeNS, s.ttl), Ns: target})
			}
		}
	}
	return recs, extra, nil
}

func (a *asker) soa() dns.RR {
	return &dns.SOA{
		Hdr:     hdr(a.z.Name, dns.TypeSOA, soaTTL),
		Ns:      join(a.z.Mname, a.z.Name),
		Mbox:    join(a.z.Rname, a.z.Name),
		Serial:  a.z.Serial,
		Refresh: soaRefresh, Retry: soaRetry, Expire: soaExpire, Minttl: soaTTL,
	}
}

func join(rel, zone string) string {
	if rel == "" {
		return zone
	}
	return dns.Fqdn(rel + "." + strings.TrimPrefix(zone, "."))
}

func hdr(name string, t uint16, ttl uint32) dns.RR_Header {
	return dns.RR_Header{Name: name, Rrtype: t, Class: dns.ClassINET, Ttl: ttl}
}

func addrRR(name string, ip net.IP, t uint16, ttl uint32) dns.RR {
	if t == dns.TypeA {
		return &dns.A{Hdr: hdr(name, t, ttl), A: ip}
	}
	return &dns.AAAA{Hdr: hdr(name, t, ttl), AAAA: ip}
}

func newSRV(qname string, s svc, host string, weight uint16) *dns.SRV {
	return &dns.SRV{Hdr: hdr(qname, dns.TypeSRV, s.ttl), Priority: uint16(s.Priority), Weight: weight,
		Port: uint16(s.Port), Target: strip(dns.Fqdn(host), s.TargetStrip)}
}

func newMX(qname string, s svc, host string) *dns.MX {
	return &dns.MX{Hdr: hdr(qname, dns.TypeMX, s.ttl), Preference: uint16(s.Priority), Mx: strip(dns.Fqdn(host), s.TargetStrip)}
}

// strip drops n leading labels of name, keeping it whole when that would
// leave nothing.
func strip(name string, n int) string {
	if n <= 0 {
		return name
	}
	off, end := 0, false
	for range n {
		off, end = dns.NextLabel(name, off)
	}
	if end {
		return name
	}
	return name[off:]
}

// domain is the name a key stands for: its segments after the prefix,
// reversed, fully qualified.
func domain(key string) string {
	l := strings.Split(strings.TrimSuffix(key, "/"), "/")
	if len(l) < 3 {
		return "."
	}
	l = l[2:] // "" and the prefix
	slices.Reverse(l)
	return dns.Fqdn(strings.Join(l, "."))
}

// split255 cuts a text into character-strings of 255 bytes. Like
// CoreDNS's, a text of exactly a multiple of 255 bytes ends with an empty
// string.
func split255(s string) []string {
	if len(s) < 255 {
		return []string{s}
	}
	var out []string
	for len(s) >= 255 {
		out = append(out, s[:255])
		s = s[255:]
	}
	return append(out, s)
}

package answer

import (
	"net/netip"
	"strings"

	"github.com/miekg/dns"

	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/server/snap"
)

// Federation says how the federation zone is answered (spec 003). Each
// cluster of a federation publishes its shard of a federated service: its
// load balancer addresses at <svc>.<ns>.<federation>.svc.<zone> and its
// cluster IPs at <clusterid>.<svc>.<ns>.<federation>.svc.<zone>. A client of
// a known cluster gets that cluster's cluster IPs first, then the other
// shards' external addresses; anyone else gets the external addresses only,
// which is also what an unmodified CoreDNS answers from the same keys.
type Federation struct {
	Zone string // canonical name of the federation zone; "": none is served
	// Cluster is this server's own cluster id: the asking cluster of an
	// Inside client whose query names none. "": such clients are treated
	// as outside.
	Cluster string
	// Option is the EDNS(0) option code whose data is the asking cluster's
	// id, as a K8S-DNS forwarding from another cluster sends it; 0: not
	// read.
	Option uint16
	Inside []netip.Prefix // clients of this cluster
}

// InFederation reports whether name (canonical) is at or below the
// federation zone. Search-path expansion (autopath) must never produce such
// a name from a shorter one: spec 003's caveat wants federated services
// reached only when asked for by their full name, so that a short name
// never silently leads to another cluster's shard.
func (o *Options) InFederation(name string) bool {
	z := o.Federation.Zone
	return z != "" && keys.IsSubdomain(name, z)
}

// federatedService reports whether name has the shape
// <svc>.<ns>.<federation>.svc.<zone>; shard names below it are answered
// as they are stored.
func (f *Federation) federatedService(name string) bool {
	if f.Zone == "" || len(name) <= len(f.Zone) || !keys.IsSubdomain(name, f.Zone) {
		return false
	}
	labels := strings.Split(name[:len(name)-len(f.Zone)-1], ".")
	return len(labels) == 4 && labels[3] == "svc"
}

// federated answers an address question at a federated service name for
// the asking cluster; false leaves the question to the ordinary lookup,
// which answers every shard's external addresses.
func (r *resolver) federated(name, owner string, qtype uint16) bool {
	f := &r.o.Federation
	if qtype != dns.TypeA && qtype != dns.TypeAAAA || !f.federatedService(name) || r.z.Name != f.Zone {
		return false
	}
	cluster, optionSent := r.askingCluster()
	// The asking cluster comes from the client (its address or its
	// options), so any answer here may differ for the next client, even
	// the external-only one, which an inside client must not be served
	// from a cache.
	r.personal = r.personal || optionSent || f.Cluster != ""
	node := r.reads.node(r.z, name)
	if cluster == "" || node == nil || node.Has(dns.TypeCNAME) {
		return false
	}

	var ttl uint32
	var own, others []netip.Addr
	shard := r.reads.node(r.z, cluster+"."+name).RRSetNamed(qtype, owner)
	for _, rr := range shard.RRs {
		if ip, ok := rrAddr(rr); ok {
			own = append(own, ip)
		}
	}
	if len(shard.RRs) > 0 {
		ttl = shard.RRs[0].Header().Ttl
	}
	if set := node.RRSetNamed(qtype, owner); len(set.RRs) > 0 {
		// RFC 2181 5.2: one TTL for the RRset, the smallest of its parts.
		if t := set.RRs[0].Header().Ttl; len(own) == 0 || t < ttl {
			ttl = t
		}
		// A shard without a cluster IP of this family is reached through
		// its own load balancer, still ahead of the other shards.
		useExternal := len(own) == 0
		es := node.Entries()
		for i := range es {
			e := &es[i]
			ip, ok := entryAddr(e, qtype)
			switch {
			case !ok:
			case e.Origin().Cluster == cluster && useExternal:
				own = appendNew(own, ip)
			case e.Origin().Cluster != cluster:
				others = appendNew(others, ip)
			}
		}
	}
	others = removeAll(others, own)
	if len(own)+len(others) == 0 {
		r.negative = true
		return true
	}
	r.rotated(addrRRs(own, owner, qtype, ttl), owner)
	r.rotated(addrRRs(others, owner, qtype, ttl), owner)
	return true
}

// askingCluster is the cluster whose shard leads the answer: the one the
// query's source-cluster option names, else this server's own cluster for
// an inside client, else none. The option's presence says the query was
// forwarded by another cluster's server (a stub-forwarding dnsd sends it
// empty when it has no cluster id), so one whose data is no cluster id
// (not a DNS label) names nobody and is ignored; it never makes the
// forwarder's clients this cluster's, whose cluster IPs may be another
// service's address over there. optionSent says whether the query carried
// the option at all.
func (r *resolver) askingCluster() (cluster string, optionSent bool) {
	f := &r.o.Federation
	if r.opt != nil && f.Option != 0 {
		for _, o := range r.opt.Option {
			if o.Option() != f.Option {
				continue
			}
			// The first occurrence decides: one query has one source.
			if l, ok := o.(*dns.EDNS0_LOCAL); ok {
				if id := strings.ToLower(string(l.Data)); keys.IsLabel(id) {
					return id, true
				}
			}
			return "", true
		}
	}
	if f.Cluster == "" || !r.client.Addr.IsValid() {
		return "", false
	}
	for _, p := range f.Inside {
		if p.Contains(r.client.Addr) {
			return f.Cluster, false
		}
	}
	return "", false
}

func rrAddr(rr dns.RR) (netip.Addr, bool) {
	switch a := rr.(type) {
	case *dns.A:
		return netip.AddrFromSlice(a.A.To4())
	case *dns.AAAA:
		return netip.AddrFromSlice(a.AAAA.To16())
	}
	return netip.Addr{}, false
}

func entryAddr(e *snap.Entry, qtype uint16) (netip.Addr, bool) {
	if e.Type() != qtype {
		return netip.Addr{}, false
	}
	return e.Addr(), true
}

func appendNew(ips []netip.Addr, ip netip.Addr) []netip.Addr {
	for _, x := range ips {
		if x == ip {
			return ips
		}
	}
	return append(ips, ip)
}

// removeAll drops from ips those in drop: an address both a cluster IP of
// the asking shard and another shard's external one is the asking
// shard's.
func removeAll(ips, drop []netip.Addr) []netip.Addr {
	out := ips[:0]
	for _, ip := range ips {
		keep := true
		for _, d := range drop {
			keep = keep && ip != d
		}
		if keep {
			out = append(out, ip)
		}
	}
	return out
}

// addrRRs makes the records of the combined RRset, each with its TTL.
func addrRRs(ips []netip.Addr, owner string, qtype uint16, ttl uint32) []dns.RR {
	out := make([]dns.RR, 0, len(ips))
	for _, ip := range ips {
		h := hdr(owner, qtype, ttl)
		if qtype == dns.TypeA {
			a := ip.As4()
			out = append(out, &dns.A{Hdr: h, A: a[:]})
		} else {
			a := ip.As16()
			out = append(out, &dns.AAAA{Hdr: h, AAAA: a[:]})
		}
	}
	return out
}

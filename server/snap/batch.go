package snap

import (
	"cmp"
	"maps"
	"math"
	"net/netip"
	"slices"
	"strings"

	"github.com/miekg/dns"
)

// Batch derives a new zone from an old one. The old zone is never touched:
// the first write to a shard copies that shard's map, and the first write to
// a node copies the node, so a batch costs O(changed names + touched
// shards), not O(zone). The trade-off: a batch that touches many names
// copies most shards (about the size of the zone in map entries); the
// initial load avoids that by starting from an empty zone.
type Batch struct {
	z      *Zone
	copied [shards]bool
	dirty  map[string]bool // nodes copied in this batch, to rebuild
	had    map[string]bool // whether a dirty node held entries before

	podsCopied [shards]bool // pod index shards this batch owns

	stubsCopied bool            // the stub table is this batch's own
	stubCopied  map[string]bool // so are these domains' entries
}

// Edit starts a batch on z.
func (z *Zone) Edit() *Batch {
	nz := *z
	return &Batch{z: &nz, dirty: map[string]bool{}, had: map[string]bool{}}
}

func (b *Batch) mutable(name string) *Node {
	i := shardOf(name)
	if !b.copied[i] {
		b.z.names[i] = maps.Clone(b.z.names[i])
		b.copied[i] = true
	}
	n := b.z.names[i][name]
	if b.dirty[name] {
		return n
	}
	var c Node
	if n != nil {
		c = *n
		c.Entries = slices.Clone(n.Entries)
	} else {
		c.Name = name
	}
	b.z.names[i][name] = &c
	b.dirty[name] = true
	if len(c.Entries) > 0 {
		b.had[name] = true // only the true ones: a load starts from nothing
	}
	return &c
}

// Put stores an entry of owner, replacing the one at the same key.
func (b *Batch) Put(owner string, e Entry) {
	n := b.mutable(owner)
	if e.Value.Group == n.Name {
		e.Value.Group = n.Name // the node's copy: one per name, not per record
	}
	i, found := slices.BinarySearchFunc(n.Entries, e.Key, func(x Entry, k string) int { return strings.Compare(x.Key, k) })
	if found {
		n.Entries[i] = e
		return
	}
	n.Entries = slices.Insert(n.Entries, i, e)
	b.z.Records++
}

// Delete removes the entry at key of owner, if held.
func (b *Batch) Delete(owner, key string) {
	if b.z.Node(owner) == nil {
		return
	}
	n := b.mutable(owner)
	i, found := slices.BinarySearchFunc(n.Entries, key, func(x Entry, k string) int { return strings.Compare(x.Key, k) })
	if found {
		n.Entries = slices.Delete(n.Entries, i, i+1)
		b.z.Records--
	}
}

// Done finishes the batch: rebuilds the records of changed names, keeps
// the empty non-terminals above them exact and returns the new zone.
func (b *Batch) Done(serial uint32) *Zone {
	changed := slices.Collect(maps.Keys(b.dirty))
	for _, name := range changed {
		has := len(b.z.Node(name).Entries) > 0
		if has == b.had[name] {
			continue
		}
		delta := 1
		if !has {
			delta = -1
		}
		for p, ok := b.z.parent(name); ok; p, ok = b.z.parent(p) {
			b.mutable(p).below += delta
		}
	}
	for name := range b.dirty {
		n := b.z.Node(name)
		if len(n.Entries) == 0 && n.below == 0 {
			delete(b.z.names[shardOf(name)], name)
			continue
		}
		if cap(n.Entries) > len(n.Entries)+len(n.Entries)/4 {
			n.Entries = slices.Clone(n.Entries) // what appends left spare stays with the snapshot
		}
		n.Sets = buildSets(n.Name, n.Entries, b.z.TTL, b.z.Cluster)
	}
	if !b.z.Reverse {
		suffix := ".pod." + b.z.Name
		for name := range b.dirty {
			b.indexPod(name, suffix)
		}
	}
	b.z.Serial = serial
	z := b.z
	b.z = nil // a batch is used once
	return z
}

// buildSets turns a name's entries into deduplicated RRsets. The local
// cluster's entries go in first, so each set's local records lead it and a
// record that a remote cluster also holds is deduplicated into the local
// group, not the remote one.
func buildSets(owner string, entries []Entry, defTTL uint32, cluster string) []RRSet {
	fqdn := dns.Fqdn(owner)
	var sets []RRSet
	seen := map[string]bool{}
	ttls := map[uint16]uint32{} // duplicates count for the TTL too
	for pass := range 2 {
		local := pass == 0
		if local && cluster == "" {
			continue // no topology: one group, in key order
		}
		for _, e := range entries {
			if cluster != "" && (e.Value.Cluster == cluster) != local {
				continue
			}
			rr := newRR(fqdn, e, defTTL)
			if rr == nil {
				continue
			}
			if t, ok := ttls[e.Type]; !ok || rr.Header().Ttl < t {
				ttls[e.Type] = rr.Header().Ttl
			}
			id := rdata(rr)
			if seen[id] {
				continue
			}
			seen[id] = true
			i := slices.IndexFunc(sets, func(s RRSet) bool { return s.Type == e.Type })
			if i < 0 {
				sets = append(sets, RRSet{Type: e.Type})
				i = len(sets) - 1
			}
			sets[i].RRs = append(sets[i].RRs, rr)
			if local {
				sets[i].Local++
			}
		}
	}
	slices.SortFunc(sets, func(a, b RRSet) int { return cmp.Compare(a.Type, b.Type) })
	for i := range sets {
		if sets[i].Type == dns.TypeSRV {
			spreadWeights(sets[i].RRs)
		}
		// A CNAME is alone at its name; two values claiming one (two
		// writers disagreeing) must not make an invalid RRset. The local
		// cluster's claim wins.
		if sets[i].Type == dns.TypeCNAME {
			sets[i].RRs = sets[i].RRs[:1]
			sets[i].Local = min(sets[i].Local, 1)
		}
		for _, rr := range sets[i].RRs {
			rr.Header().Ttl = ttls[sets[i].Type]
		}
	}
	return sets
}

// rdata identifies a record by type and data, for deduplication. Addresses,
// most of a large zone, skip the text form: at a million records it is
// seconds of a cold start.
func rdata(rr dns.RR) string {
	switch r := rr.(type) {
	case *dns.A:
		return "A " + string(r.A)
	case *dns.AAAA:
		return "AAAA " + string(r.AAAA)
	}
	return dns.TypeToString[rr.Header().Rrtype] + " " + strings.TrimPrefix(rr.String(), rr.Header().String())
}

func newRR(owner string, e Entry, defTTL uint32) dns.RR {
	v := e.Value
	ttl := v.TTL
	if ttl == 0 {
		ttl = defTTL
	}
	hdr := dns.RR_Header{Name: owner, Rrtype: e.Type, Class: dns.ClassINET, Ttl: ttl}
	switch e.Type {
	case dns.TypeA, dns.TypeAAAA:
		ip, err := netip.ParseAddr(v.Host)
		if err != nil {
			return nil
		}
		ip = ip.Unmap()
		if e.Type == dns.TypeA {
			a := ip.As4()
			return &dns.A{Hdr: hdr, A: a[:]}
		}
		a := ip.As16()
		return &dns.AAAA{Hdr: hdr, AAAA: a[:]}
	case dns.TypeCNAME:
		return &dns.CNAME{Hdr: hdr, Target: dns.Fqdn(v.Target())}
	case dns.TypePTR:
		return &dns.PTR{Hdr: hdr, Ptr: dns.Fqdn(v.Target())}
	case dns.TypeTXT:
		return &dns.TXT{Hdr: hdr, Txt: splitText(v.Text)}
	case dns.TypeSRV:
		if v.Port < 0 {
			return nil // CoreDNS skips port -1: "no port declared"
		}
		prio := v.Priority
		if prio == 0 {
			prio = 10 // as CoreDNS's etcd plugin
		}
		// Weight holds the raw value until spreadWeights.
		return &dns.SRV{Hdr: hdr, Priority: uint16(prio), Weight: uint16(v.Weight), Port: uint16(v.Port), Target: dns.Fqdn(v.Target())}
	}
	return nil
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
	sum := map[uint16]int{}
	for _, rr := range rrs {
		s := rr.(*dns.SRV)
		sum[s.Priority] += cmp.Or(int(s.Weight), 100)
	}
	for _, rr := range rrs {
		s := rr.(*dns.SRV)
		w := 100.0 / float64(sum[s.Priority]) * float64(cmp.Or(int(s.Weight), 100))
		s.Weight = max(uint16(math.Floor(w)), 1)
	}
}

package answer

import (
	"strings"

	"github.com/miekg/dns"

	"github.com/etcdns/etcdns/server/skydns"
	"github.com/etcdns/etcdns/server/snap"
)

// answerSkyDNS answers a question of a SkyDNS zone (snap.Config.SkyDNS)
// as CoreDNS's etcd plugin does; package skydns holds the rules.
//
// The answer reads a subtree, not nodes Reads can follow, so it is marked
// untracked: a cache keeps it for the snapshot it was built in and drops
// it at the next change, never serving it stale. One that consulted out
// (personal) is not cached at all: what it holds from outside depends
// on whether the client may have names forwarded.
func answerSkyDNS(m *dns.Msg, s *snap.Snapshot, z *snap.Zone, q dns.Question, o *Options, rd *Reads, out *Outside) (_ *dns.Msg, personal bool) {
	rd.untrack()
	r := askSkyDNS(s, z, q, o, out, 0)
	m.Authoritative = true
	m.Rcode = r.Rcode
	m.Answer = r.Answer
	m.Ns = r.Ns
	m.Extra = append(r.Extra, m.Extra...)
	return m, out != nil && out.consulted
}

// askSkyDNS answers q from z. Names outside z are asked of the snapshot,
// as the plugin asks its own server: another zone dnsd serves answers
// them, and a name in none is answered from out, what the server found
// for it outside (the plugin's server forwards it, or REFUSES it and the
// plugin keeps the CNAME alone). depth bounds CNAMEs that go from zone to
// zone and back.
func askSkyDNS(s *snap.Snapshot, z *snap.Zone, q dns.Question, o *Options, out *Outside, depth int) skydns.Result {
	sz := skydns.Zone{
		Name: dns.Fqdn(z.Name), Prefix: z.Prefix, TTL: z.TTL, Serial: z.Serial,
		Mname: o.SOA.Mname, Rname: o.SOA.Rname,
	}
	up := func(name string, qtype uint16) ([]dns.RR, bool) {
		if depth >= maxChase {
			return nil, false
		}
		// answerSkyDNS tracks no reads, and tells personal by out.
		at := resolver{s: s, o: o, client: Client{Outside: out}, hops: depth + 1}
		rrs, _ := at.follow(strings.ToLower(strings.TrimSuffix(name, ".")), dns.Fqdn(name), qtype)
		return rrs, true
	}
	return skydns.Answer(z.Sky, &sz, q, up)
}

package server

import (
	"net/netip"
	"strings"
	"sync"

	"github.com/miekg/dns"

	"github.com/etcdns/etcdns/server/answer"
	"github.com/etcdns/etcdns/server/snap"
)

// chase returns how to answer req again once the names in no zone that
// its answer asked about (c.Outside.Asked: CNAME targets, an
// ExternalName's among them, and a SkyDNS answer's SRV and MX glue) are
// resolved, as CoreDNS has its own server resolve them. Each goes where a question of its own from the same client
// would: to its stub domain's nameservers, or, when req has RD set, to the
// upstreams; a name that may go nowhere gets no records, as CoreDNS's
// REFUSED gives none. nil when none may go anywhere: the answer given
// stands. What an upstream answers is added, never followed, so one round
// of exchanges, all at once, completes the answer.
func (s *Server) chase(sn *snap.Snapshot, req *dns.Msg, c answer.Client, rot uint32) func() *dns.Msg {
	type route struct {
		q       dns.Question
		servers []netip.AddrPort // a stub domain's; nil: the upstreams
	}
	var routes []route
	for _, q := range c.Outside.Asked {
		st := sn.Stub(strings.ToLower(strings.TrimSuffix(q.Name, ".")))
		switch {
		case st != nil:
			if s.stubs == nil || !s.stubs.Allows(c.Addr) || s.stubs.Looped(req) {
				continue
			}
			var servers []netip.AddrPort
			for _, ns := range st.Servers {
				servers = append(servers, ns.Addr)
			}
			if servers = s.stubs.Usable(st.Domain, servers); len(servers) > 0 {
				routes = append(routes, route{q, servers})
			}
		case s.fwd != nil && req.RecursionDesired && s.fwd.Allows(c.Addr):
			routes = append(routes, route{q: q})
		}
	}
	if len(routes) == 0 {
		return nil
	}
	// The worker's Outside serves its next query by the time this runs.
	asked, upstreams := c.Outside.Asked, c.Outside.Upstreams
	return func() *dns.Msg {
		found := &answer.Outside{Upstreams: upstreams, Answers: make(map[dns.Question][]dns.RR, len(asked))}
		for _, q := range asked {
			found.Answers[answer.OutsideKey(q)] = nil // asked, and none for those that went nowhere
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, r := range routes {
			wg.Go(func() {
				q := new(dns.Msg)
				q.Question = []dns.Question{r.q}
				q.RecursionDesired = true
				q.CheckingDisabled = req.CheckingDisabled
				if opt := req.IsEdns0(); opt != nil {
					q.SetEdns0(answer.EDNSSize, opt.Do())
				}
				var m *dns.Msg
				if r.servers != nil {
					m = s.stubs.Forward(s.upstream, q, r.servers)
				} else {
					m = s.fwd.Forward(s.upstream, q)
				}
				mu.Lock()
				found.Answers[answer.OutsideKey(r.q)] = m.Answer // a failure's SERVFAIL holds none
				mu.Unlock()
			})
		}
		wg.Wait()
		// Autopath never leads here, and a search must count once.
		o := s.opts
		o.Autopath.Observe = nil
		m, _ := answer.AnswerFrom(sn, req, &o, rot, answer.Client{Addr: c.Addr, Outside: found})
		return m
	}
}

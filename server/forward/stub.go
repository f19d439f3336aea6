package forward

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/etcdns/etcdns/server/answer"
)

// The EDNS(0) option codes of local and experimental use (RFC 6891
// section 9), where the source-cluster option has to live: no code for it
// was ever assigned.
const (
	optionMin = 65001
	optionMax = 65534
)

// StubConfig is what Stubs are built with.
type StubConfig struct {
	Timeout time.Duration  // of one exchange with one nameserver
	Allow   []netip.Prefix // clients whose questions may leave dnsd
	Listen  string         // dnsd's own DNS address: a nameserver there is skipped
	// Option is the code of the source-cluster option added to every
	// question sent to a stub domain, Cluster its value (spec 003: the
	// stub's server orders its answer for the asking cluster). A question
	// that arrives carrying Option was sent by a stub-forwarding server
	// already and never goes to a stub domain again. Without a cluster id
	// the option still goes, empty: it is what stops a loop.
	Option  uint16
	Cluster string
	Log     *slog.Logger
}

// Stubs asks the nameservers of stub domains on behalf of clients. Unlike
// Forwarder it does not need RD: a stub domain is a delegation, so dnsd
// answers for it as it would for its own zones. It is safe for concurrent
// use.
type Stubs struct {
	exchanger
	allow   []netip.Prefix
	self    func(netip.AddrPort) bool
	option  uint16
	cluster []byte
	log     *slog.Logger
	logged  sync.Map // nameservers skipped as dnsd itself, logged once each

	results          *prometheus.CounterVec
	loops, selfSkips prometheus.Counter
}

// NewStubs checks c and registers the metrics of stub forwarding on reg.
func NewStubs(c StubConfig, reg prometheus.Registerer) (*Stubs, error) {
	if c.Timeout <= 0 {
		return nil, errors.New("timeout must be positive")
	}
	if c.Option < optionMin || c.Option > optionMax {
		return nil, fmt.Errorf("source-cluster option %d: want a code of local use, %d-%d", c.Option, optionMin, optionMax)
	}
	self, err := isSelf(c.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen address %q: %w", c.Listen, err)
	}
	s := &Stubs{
		exchanger: newExchanger(c.Timeout),
		allow:     c.Allow,
		self:      self,
		option:    c.Option,
		cluster:   []byte(c.Cluster),
		log:       c.Log,
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "etcdns_dnsd_stub_queries_total",
			Help: "Questions sent to the nameservers of a stub domain, by outcome: ok (a nameserver answered), else how the last one tried failed (servfail, timeout, error).",
		}, []string{"result"}),
		loops: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "etcdns_dnsd_stub_loops_total",
			Help: "Questions for a stub domain that arrived with the source-cluster option, so from another stub-forwarding server, and were answered here instead of forwarded again.",
		}),
		selfSkips: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "etcdns_dnsd_stub_self_skips_total",
			Help: "Stub nameservers skipped because they are dnsd's own address.",
		}),
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	for _, r := range []string{"ok", "servfail", "timeout", "error"} {
		s.results.WithLabelValues(r)
	}
	reg.MustRegister(s.results, s.loops, s.selfSkips)
	return s, nil
}

// Allows reports whether client may have its questions sent to a stub
// domain: the forwarding allow list, so stubs make no open resolver.
func (s *Stubs) Allows(client netip.Addr) bool { return allows(s.allow, client) }

// Looped reports whether req carries the source-cluster option: it comes
// from a server that forwarded it to a stub domain already, and sending it
// on could make two servers that stub to each other loop. It is counted.
func (s *Stubs) Looped(req *dns.Msg) bool {
	opt := req.IsEdns0()
	if opt == nil {
		return false
	}
	for _, o := range opt.Option {
		if o.Option() == s.option {
			s.loops.Inc()
			return true
		}
	}
	return false
}

// Usable drops, in place, the nameservers of domain that are dnsd's own
// address: a stub pointing here (dnsd serving the stub's zone from the
// same etcd) would send every question back to itself. Each skip is
// counted, and logged once per nameserver.
func (s *Stubs) Usable(domain string, servers []netip.AddrPort) []netip.AddrPort {
	out := servers[:0]
	for _, ns := range servers {
		if !s.self(ns) {
			out = append(out, ns)
			continue
		}
		s.selfSkips.Inc()
		if _, seen := s.logged.LoadOrStore(domain+" "+ns.String(), true); !seen {
			s.log.Warn("ignoring a stub nameserver that is dnsd's own address", "domain", domain, "nameserver", ns)
		}
	}
	return out
}

// Forward returns the answer to req, a query with one question, from the
// first of servers that gives one, starting at a random one so a domain's
// nameservers share the load, or SERVFAIL when none does. The question
// carries the source-cluster option; nothing else of the client's EDNS(0)
// goes along. The answer carries req's id, RD and CD bits and question as
// spelled. Answers are not cached: the stub's server may answer each
// cluster differently, and it is the authority for how long its data
// stays true.
func (s *Stubs) Forward(ctx context.Context, req *dns.Msg, servers []netip.AddrPort) *dns.Msg {
	q := req.Question[0]
	opt := req.IsEdns0()
	up := new(dns.Msg)
	up.Id = dns.Id()
	up.RecursionDesired = req.RecursionDesired
	up.CheckingDisabled = req.CheckingDisabled
	up.Question = []dns.Question{q}
	up.SetEdns0(answer.EDNSSize, opt != nil && opt.Do())
	o := up.IsEdns0()
	o.Option = append(o.Option, &dns.EDNS0_LOCAL{Code: s.option, Data: s.cluster})

	order := make([]string, len(servers))
	for i := range servers {
		order[i] = servers[(int(up.Id)+i)%len(servers)].String()
	}
	m, result := s.ask(ctx, up, order, nil)
	s.results.WithLabelValues(result).Inc()
	if m == nil {
		return reply(req, new(dns.Msg).SetRcode(req, dns.RcodeServerFailure))
	}
	return reply(req, m)
}

package forward

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/etcdns/etcdns/server/answer"
)

// Config is what a Forwarder is built with.
type Config struct {
	Upstreams []netip.AddrPort // asked in this order, those that failed lately last
	Timeout   time.Duration    // of one exchange with one upstream
	CacheSize int              // entries; 0: no cache
	// CacheBytes bounds what the cached answers hold (about 1.5 times
	// their wire size, and a few hundred bytes an entry); 0: DefaultCacheBytes.
	CacheBytes int
	MaxTTL     uint32         // seconds an answer may stay cached
	Allow      []netip.Prefix // clients that may use forwarding
	Listen     string         // dnsd's own DNS address, which no upstream may be
}

// Forwarder asks upstream resolvers on behalf of clients. It is safe for
// concurrent use.
type Forwarder struct {
	exchanger
	upstreams []string
	allow     []netip.Prefix
	cache     *cache // nil: off
	now       func() time.Time

	// failed holds when each upstream last failed (no answer in time, or
	// no connection), by index: one that failed within failedFor is asked
	// after the others, so that a dead first upstream does not cost every
	// question its whole timeout, and holds no forwarding slot that long.
	// Once failedFor has passed, one question tries it first again; the
	// others keep it last until that one's answer (or failure) is in.
	mu     sync.Mutex
	failed []time.Time

	results      *prometheus.CounterVec
	hits, misses prometheus.Counter
}

// New checks c and registers the forwarder's metrics on reg. An upstream
// that is dnsd itself is an error: every query to it would come back to
// be forwarded again.
func New(c Config, reg prometheus.Registerer) (*Forwarder, error) {
	if len(c.Upstreams) == 0 {
		return nil, errors.New("no upstream")
	}
	if c.Timeout <= 0 {
		return nil, errors.New("timeout must be positive")
	}
	self, err := isSelf(c.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen address %q: %w", c.Listen, err)
	}
	f := &Forwarder{
		exchanger: newExchanger(c.Timeout),
		allow:     c.Allow,
		now:       time.Now,
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "etcdns_dnsd_forward_queries_total",
			Help: "Questions forwarded to upstreams, by outcome: ok (an upstream answered), else how the last upstream tried failed (servfail, timeout, error).",
		}, []string{"result"}),
		hits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "etcdns_dnsd_forward_cache_hits_total", Help: "Forwarded questions answered from the forwarding cache.",
		}),
		misses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "etcdns_dnsd_forward_cache_misses_total", Help: "Forwarded questions the forwarding cache could not answer.",
		}),
	}
	for _, u := range c.Upstreams {
		if self(u) {
			return nil, fmt.Errorf("upstream %s is dnsd's own address %s: forwarding to it would loop", u, c.Listen)
		}
		// Once each (resolv.conf may list one twice): asked twice in a
		// row it would cost a dead one's timeout twice, and its failure
		// is known by its address.
		if !slices.Contains(f.upstreams, u.String()) {
			f.upstreams = append(f.upstreams, u.String())
		}
	}
	f.failed = make([]time.Time, len(f.upstreams))
	if c.CacheSize > 0 {
		if c.CacheBytes <= 0 {
			c.CacheBytes = DefaultCacheBytes
		}
		f.cache = &cache{size: c.CacheSize, maxBytes: c.CacheBytes, maxTTL: c.MaxTTL, m: make(map[key]entry)}
	}
	for _, r := range []string{"ok", "servfail", "timeout", "error"} {
		f.results.WithLabelValues(r) // exported at 0, so alerts see a series from the start
	}
	reg.MustRegister(f.results, f.hits, f.misses)
	return f, nil
}

// Allows reports whether client may have its questions forwarded: without
// this check dnsd would be an open resolver, usable for amplification.
func (f *Forwarder) Allows(client netip.Addr) bool { return allows(f.allow, client) }

func allows(allow []netip.Prefix, client netip.Addr) bool {
	client = client.Unmap().WithZone("")
	for _, p := range allow {
		if p.Contains(client) {
			return true
		}
	}
	return false
}

// DefaultCacheBytes bounds the forwarding cache when Config says nothing.
const DefaultCacheBytes = 16 << 20

// failedFor is how long an upstream that failed is asked after the
// others; then it is asked in its turn again.
const failedFor = 30 * time.Second

func cacheKey(req *dns.Msg) key {
	q := req.Question[0]
	opt := req.IsEdns0()
	return key{name: strings.ToLower(q.Name), qtype: q.Qtype, qclass: q.Qclass, do: opt != nil && opt.Do(), cd: req.CheckingDisabled}
}

// Cached returns the answer to req from the cache, or nil: a caller that
// would wait for an upstream (holding a slot) needs none for it.
func (f *Forwarder) Cached(req *dns.Msg) *dns.Msg {
	if f.cache == nil {
		return nil
	}
	m := f.cache.get(cacheKey(req), f.now())
	if m == nil {
		return nil
	}
	f.hits.Inc()
	return reply(req, m)
}

// Forward returns the answer to req, a query with one question, from the
// cache or the first upstream that gives one, or SERVFAIL when none does.
// The answer carries req's id, RD and CD bits and question as spelled.
func (f *Forwarder) Forward(ctx context.Context, req *dns.Msg) *dns.Msg {
	if m := f.Cached(req); m != nil {
		return m
	}
	if f.cache != nil {
		f.misses.Inc()
	}
	q := req.Question[0]
	k := cacheKey(req)

	// A fresh id per query, and only what the client asked: its EDNS
	// options (cookies, client subnet) are for dnsd, not for upstreams.
	up := new(dns.Msg)
	up.Id = dns.Id()
	up.RecursionDesired = req.RecursionDesired
	up.CheckingDisabled = req.CheckingDisabled
	up.Question = []dns.Question{q}
	up.SetEdns0(answer.EDNSSize, k.do)

	m, result := f.ask(ctx, up, f.order(), f.note)
	f.results.WithLabelValues(result).Inc()
	if m == nil {
		m = new(dns.Msg).SetRcode(req, dns.RcodeServerFailure)
		m.RecursionAvailable = true
		return reply(req, m)
	}
	if f.cache != nil {
		f.cache.put(k, m, f.now())
	}
	return reply(req, m)
}

// order returns the upstreams to ask: in their order, but those that
// failed within failedFor after the others, the one that failed last
// last. One whose failedFor has just passed is this question's to try
// again, and stays last for the others meanwhile.
func (f *Forwarder) order() []string {
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	var ok []string
	var bad []int
	for i, u := range f.upstreams {
		switch {
		case f.failed[i].IsZero():
			ok = append(ok, u)
		case now.Sub(f.failed[i]) < failedFor:
			bad = append(bad, i)
		default:
			f.failed[i] = now // on trial: failed still, for every other question
			ok = append(ok, u)
		}
	}
	slices.SortStableFunc(bad, func(a, b int) int { return f.failed[a].Compare(f.failed[b]) })
	for _, i := range bad {
		ok = append(ok, f.upstreams[i])
	}
	return ok
}

// note records how upstream u did.
func (f *Forwarder) note(u string, ok bool) {
	i := slices.Index(f.upstreams, u)
	if i < 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if ok {
		f.failed[i] = time.Time{}
	} else {
		f.failed[i] = f.now()
	}
}

// exchanger asks upstreams: the ClusterFirst upstreams and the nameservers
// of stub domains alike.
type exchanger struct {
	udp, tcp *dns.Client
}

func newExchanger(timeout time.Duration) exchanger {
	return exchanger{udp: &dns.Client{Net: "udp", Timeout: timeout}, tcp: &dns.Client{Net: "tcp", Timeout: timeout}}
}

// ask tries upstreams in order until one answers other than SERVFAIL; m
// is nil when none did. result is "ok" or how the last one tried failed
// (servfail, timeout, error), for the caller's metrics. note, if set,
// hears how each upstream asked did.
func (x exchanger) ask(ctx context.Context, up *dns.Msg, upstreams []string, note func(u string, ok bool)) (m *dns.Msg, result string) {
	result = "error"
	for _, u := range upstreams {
		if ctx.Err() != nil {
			break
		}
		r, err := x.exchange(ctx, up, u)
		if note != nil {
			// A SERVFAIL is an answer: the upstream is there, it failed
			// this name (the next one is asked for it), not every name.
			note(u, err == nil)
		}
		switch {
		case err != nil:
			result = "error"
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
				result = "timeout"
			}
		case r.Rcode == dns.RcodeServerFailure:
			result = "servfail"
		default:
			return r, "ok"
		}
	}
	return nil, result
}

// exchange asks one upstream, over TCP again when the UDP answer is
// truncated: only the whole answer can be cached or given to a client
// that asked over TCP, and dnsd truncates for UDP clients itself.
func (x exchanger) exchange(ctx context.Context, m *dns.Msg, upstream string) (*dns.Msg, error) {
	r, err := exchangeContext(ctx, x.udp, m, upstream)
	if err == nil && r.Truncated {
		// An upstream that cannot be reached over TCP still gave what fits,
		// with TC set: the client's to take or to ask again for (never
		// cached), not a SERVFAIL.
		if whole, terr := exchangeContext(ctx, x.tcp, m, upstream); terr == nil {
			r = whole
		}
	}
	if err != nil {
		return nil, err
	}
	q := m.Question[0]
	if len(r.Question) != 1 || !strings.EqualFold(r.Question[0].Name, q.Name) || r.Question[0].Qtype != q.Qtype || r.Question[0].Qclass != q.Qclass {
		return nil, fmt.Errorf("%s answered another question: %v", upstream, r.Question)
	}
	return r, nil
}

// exchangeContext is c.ExchangeContext, ended when ctx is: miekg/dns
// takes only ctx's deadline, and a read from an upstream that never
// answers would otherwise last the whole timeout (a shutdown's cancel
// among others).
func exchangeContext(ctx context.Context, c *dns.Client, m *dns.Msg, upstream string) (*dns.Msg, error) {
	co, err := c.DialContext(ctx, upstream)
	if err != nil {
		return nil, err
	}
	defer co.Close()
	defer context.AfterFunc(ctx, func() { _ = co.SetDeadline(time.Now()) })()
	r, _, err := c.ExchangeWithConnContext(ctx, m, co)
	return r, err
}

// reply turns m, an upstream's answer that nothing else holds, into the
// answer to req.
func reply(req, m *dns.Msg) *dns.Msg {
	q := req.Question[0]
	m.Id = req.Id
	m.RecursionDesired = req.RecursionDesired
	m.CheckingDisabled = req.CheckingDisabled
	m.Question = []dns.Question{q}
	// A 0x20 client checks that its spelling comes back; a cached answer
	// holds the spelling of whoever asked first.
	for _, rr := range m.Answer {
		if h := rr.Header(); strings.EqualFold(h.Name, q.Name) {
			h.Name = q.Name
		}
	}
	m.Extra = slices.DeleteFunc(m.Extra, func(rr dns.RR) bool { return rr.Header().Rrtype == dns.TypeOPT })
	if opt := req.IsEdns0(); opt != nil {
		m.SetEdns0(answer.EDNSSize, opt.Do())
	}
	m.Compress = true
	return m
}

// ResolvConf returns the nameservers a resolv.conf file lists, on port 53:
// the resolvers the host itself uses.
func ResolvConf(path string) ([]netip.AddrPort, error) {
	c, err := dns.ClientConfigFromFile(path)
	if err != nil {
		return nil, err
	}
	var out []netip.AddrPort
	for _, s := range c.Servers {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%s: nameserver %q: %w", path, s, err)
		}
		out = append(out, netip.AddrPortFrom(a, 53))
	}
	return out, nil
}

// isSelf returns a test for upstreams that are dnsd listening on listen.
// A wildcard listen address answers on every local address.
func isSelf(listen string) (func(netip.AddrPort) bool, error) {
	host, p, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, err
	}
	port, err := net.LookupPort("udp", p)
	if err != nil {
		return nil, err
	}
	var ips []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{a}
	} else if host == "" {
		ips = []netip.Addr{netip.IPv6Unspecified()}
	} else if ips, err = net.DefaultResolver.LookupNetIP(context.Background(), "ip", host); err != nil {
		return nil, err
	}
	for i, a := range ips {
		ips[i] = a.Unmap().WithZone("")
		if a.IsUnspecified() {
			addrs, err := net.InterfaceAddrs()
			if err != nil {
				return nil, err
			}
			for _, ia := range addrs {
				if n, ok := ia.(*net.IPNet); ok {
					if a, ok := netip.AddrFromSlice(n.IP); ok {
						ips = append(ips, a.Unmap())
					}
				}
			}
		}
	}
	wildcard := slices.ContainsFunc(ips, netip.Addr.IsUnspecified)
	return func(u netip.AddrPort) bool {
		a := u.Addr().Unmap().WithZone("")
		// Linux delivers what is sent to the unspecified address to the
		// host itself (glibc reads "nameserver 0.0.0.0" so): on dnsd's
		// port it is dnsd, wherever dnsd listens.
		return int(u.Port()) == port && (slices.Contains(ips, a) || a.IsUnspecified() || wildcard && a.IsLoopback())
	}, nil
}

package server

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/etcdns/etcdns/server/answer"
	"github.com/etcdns/etcdns/server/forward"
	"github.com/etcdns/etcdns/server/snap"
)

// maxForwarding bounds the UDP queries waiting on upstreams at once, each
// on a goroutine of its own; beyond it a query gets SERVFAIL at once
// rather than memory growing while upstreams are slow.
const maxForwarding = 1024

// forwardGrace is how long a shutdown waits for exchanges with upstreams
// before it ends them: a resolver's client gives up on a question within
// seconds, and a pod has its grace period for the rest of its shutdown.
const forwardGrace = time.Second

// Server answers DNS queries from the snapshot its source returns.
type Server struct {
	snapshot func() *snap.Snapshot
	opts     answer.Options
	log      *slog.Logger
	cache    atomic.Pointer[cacheView]

	fwd        *forward.Forwarder // nil: questions outside the zones are REFUSED
	stubs      *forward.Stubs     // nil: stub domains are ignored
	slots      chan struct{}      // one per UDP query waiting on fwd or stubs
	forwarding sync.WaitGroup     // those queries, for shutdown
	// upstream is the context of every exchange with an upstream or a
	// stub domain's nameserver; Serve cancels it a moment into shutdown,
	// so that a dead upstream (forward-timeout for each of several) does
	// not hold the process past its grace period.
	upstream    context.Context
	endUpstream context.CancelFunc

	qm         *queryMetrics // metrics.go: queries and answer times, own and CoreDNS names
	udpReads   *prometheus.CounterVec
	tcpConns   prometheus.Gauge
	tcpRefused prometheus.Counter

	// The counts of rejected messages, looked up once: a flood of junk
	// must not cost a lookup each.
	formErrs, notImps *queryCell
	cacheEvictions    prometheus.Counter
	cacheKept         prometheus.Counter
	cacheDropped      prometheus.Counter
	cacheLimits       [2]int64 // entries, bytes: cacheLimit and cacheBytes but in tests

	searches map[searchKey][]prometheus.Counter // autopath.go
	queryLog LogClasses                         // querylog.go; none: no query log

	// DNS over TCP: a connection with no complete query for TCPIdle is
	// closed, and at most TCPMaxConns are open. Set before Serve.
	TCPIdle     time.Duration
	TCPMaxConns int

	// kernelWaitFrom is the GOMAXPROCS from which a UDP reader whose
	// socket runs dry waits for it in the kernel rather than in Go's
	// poller (udp_linux.go says why); tests lower it.
	kernelWaitFrom int
}

// New returns a server reading snapshots from snapshot, with its metrics
// registered on reg.
func New(snapshot func() *snap.Snapshot, opts answer.Options, reg prometheus.Registerer, log *slog.Logger) *Server {
	upstream, end := context.WithCancel(context.Background())
	s := &Server{
		upstream:    upstream,
		endUpstream: end,
		snapshot:    snapshot,
		opts:        opts,
		log:         log,
		slots:       make(chan struct{}, maxForwarding),

		cacheLimits: cacheBounds(debug.SetMemoryLimit(-1)),

		TCPIdle:        defaultTCPIdle,
		TCPMaxConns:    defaultTCPMaxConns,
		kernelWaitFrom: kernelWaitCores,
		qm:             newQueryMetrics(),
	}
	// The kernel hands each client address and port to one socket of
	// the SO_REUSEPORT group by hash, and each socket has one reader: a
	// few busy clients can load one core while others idle. This shows it.
	s.udpReads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "etcdns_dnsd_udp_socket_queries_total",
		Help: "UDP datagrams read, by socket of the listener's SO_REUSEPORT group (one a GOMAXPROCS), each read by one goroutine.",
	}, []string{"socket"})
	s.tcpConns = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "etcdns_dnsd_tcp_connections", Help: "DNS over TCP connections open.",
	})
	s.tcpRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "etcdns_dnsd_tcp_refused_total", Help: "DNS over TCP connections closed at once because the server had its maximum open.",
	})
	s.formErrs = s.qm.cell(cellKey{zone: ".", qtype: "none", rcode: rcodeLabel(dns.RcodeFormatError)})
	s.notImps = s.qm.cell(cellKey{zone: ".", qtype: "none", rcode: rcodeLabel(dns.RcodeNotImplemented)})
	s.cacheEvictions = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "etcdns_dnsd_cache_evictions_total", Help: "Responses dropped from the response cache to make room for others.",
	})
	rechecks := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "etcdns_dnsd_cache_rechecks_total",
		Help: "Cached responses checked against a newer snapshot when first asked for there: kept where every name the answer was read from is unchanged, else dropped.",
	}, []string{"result"})
	s.cacheKept, s.cacheDropped = rechecks.WithLabelValues("kept"), rechecks.WithLabelValues("dropped")
	cacheEntries := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "etcdns_dnsd_cache_entries", Help: "Questions in the response cache.",
	}, func() float64 {
		if v := s.cache.Load(); v != nil {
			return float64(v.cache.entries())
		}
		return 0
	})
	cacheSize := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "etcdns_dnsd_cache_bytes", Help: "Bytes the response cache accounts for: keys, packed responses and a fixed cost per entry.",
	}, func() float64 {
		if v := s.cache.Load(); v != nil {
			return float64(v.cache.bytes.Load())
		}
		return 0
	})
	reg.MustRegister(s.qm, s.udpReads, s.tcpConns, s.tcpRefused, s.cacheEvictions, rechecks, cacheEntries, cacheSize)
	s.searches = searchCounters(reg)
	s.opts.Autopath.Observe = func(f answer.Form, found bool) { s.countSearch(f, found) }
	return s
}

// SetForwarder makes s forward to f the questions it would refuse as
// outside its zones, when they are of class IN, have RD set and come from
// a client f allows (the ClusterFirst policy). Without RD a question still
// gets REFUSED: a client that does not ask for recursion gets none. Call
// it before Serve.
func (s *Server) SetForwarder(f *forward.Forwarder) { s.fwd = f }

// SetStubs makes s send the questions for names in the snapshot's stub
// domains to their nameservers through st, whatever RD says and whether or
// not forwarding is on, when the client is one st allows. Call it before
// Serve.
func (s *Server) SetStubs(st *forward.Stubs) { s.stubs = st }

// stubbed returns the nameservers req goes to, m being the engine's answer
// to it, when its name is in a stub domain and it may go there. under is
// true for every name in a stub domain, whether it goes or is answered
// here (a client not allowed, a question already stub-forwarded, an odd
// one): who asks decides that, so such an answer is never cached, and it
// never goes to the ClusterFirst upstreams either.
func (s *Server) stubbed(sn *snap.Snapshot, req, m *dns.Msg, client netip.Addr) (servers []netip.AddrPort, under bool) {
	if s.stubs == nil || len(req.Question) != 1 {
		return nil, false
	}
	q := req.Question[0]
	st := sn.Stub(strings.ToLower(strings.TrimSuffix(q.Name, ".")))
	if st == nil {
		return nil, false
	}
	for _, ns := range st.Servers {
		servers = append(servers, ns.Addr)
	}
	if servers = s.stubs.Usable(st.Domain, servers); len(servers) == 0 {
		return nil, false // every nameserver is dnsd itself: the names are its own
	}
	switch m.Rcode {
	case dns.RcodeSuccess, dns.RcodeNameError, dns.RcodeRefused:
	default:
		return nil, true // FORMERR, NOTIMP, BADVERS: the question is at fault
	}
	if q.Qclass != dns.ClassINET || q.Qtype == dns.TypeAXFR || q.Qtype == dns.TypeIXFR ||
		!s.stubs.Allows(client) || s.stubs.Looped(req) {
		return nil, true
	}
	return servers, true
}

// forwards reports whether m, the engine's answer to req from client, is
// one that forwarding replaces: a refusal of a name in no zone, or a name
// a reverse zone does not hold (fallsThrough). Zone transfers and other
// classes stay as they are: they are questions about a server, not about
// a name.
func (s *Server) forwards(sn *snap.Snapshot, req, m *dns.Msg, client netip.Addr) bool {
	if s.fwd == nil || !req.RecursionDesired || sn == nil || len(req.Question) != 1 {
		return false
	}
	q := req.Question[0]
	if q.Qclass != dns.ClassINET || q.Qtype == dns.TypeAXFR || q.Qtype == dns.TypeIXFR {
		return false
	}
	switch {
	case m.Rcode == dns.RcodeRefused:
		return zoneOf(sn, q.Name) == nil && s.fwd.Allows(client)
	case fallsThrough(sn, m):
		return s.fwd.Allows(client)
	}
	return false
}

// zoneOf is the zone of sn a question's name is in, or nil.
func zoneOf(sn *snap.Snapshot, name string) *snap.Zone {
	return sn.Zone(strings.ToLower(strings.TrimSuffix(name, ".")))
}

// fallsThrough reports whether m is NXDOMAIN from a reverse zone: the
// cluster holds the PTR records of its own addresses only, and with
// forwarding on, a question for any other address (dig -x of a public
// one, a server logging its clients' names) goes upstream, as CoreDNS's
// kubernetes plugin falls through in-addr.arpa and ip6.arpa to forward in
// the default Corefile.
func fallsThrough(sn *snap.Snapshot, m *dns.Msg) bool {
	if sn == nil || m.Rcode != dns.RcodeNameError || len(m.Question) != 1 {
		return false
	}
	z := zoneOf(sn, m.Question[0].Name)
	return z != nil && z.Reverse && !z.SkyDNS
}

// pack packs m into buf within size octets. whole is false when Fit had
// to cut it to size. A nil wire means nothing must be sent.
func (s *Server) pack(m *dns.Msg, size int, buf []byte) (wire []byte, _ *dns.Msg, whole bool) {
	b, err := m.PackBuffer(buf)
	if err == nil && len(b) <= size {
		return b, m, true
	}
	answer.Fit(m, size)
	if b, err = m.PackBuffer(buf); err != nil {
		// Nothing the engine builds fails to pack (an upstream's answer
		// might); if it ever does, the client gets SERVFAIL, not silence.
		s.log.Error("packing a response failed", "err", err, "question", m.Question)
		fail := &dns.Msg{MsgHdr: m.MsgHdr, Question: m.Question}
		if opt := m.IsEdns0(); opt != nil {
			fail.Extra = []dns.RR{opt} // an EDNS query's answer has one (RFC 6891)
		}
		m = fail
		m.Rcode = dns.RcodeServerFailure
		if b, err = m.PackBuffer(buf); err != nil {
			return nil, nil, false
		}
	}
	return b, m, false
}

// cell returns the cell that counts an answer m to req. forwarded: the
// answer is an upstream's or a stub domain's.
func (s *Server) cell(sn *snap.Snapshot, req, m *dns.Msg, forwarded, waited bool) *queryCell {
	k := cellKey{zone: zoneLabel(sn, req), qtype: "none", rcode: rcodeLabel(m.Rcode), waited: waited}
	if req != nil && len(req.Question) > 0 {
		k.qtype = typeLabel(req.Question[0].Qtype)
	}
	switch {
	case forwarded:
		k.plugin = "forward"
	case k.zone != "." && m.Rcode != dns.RcodeFormatError && m.Rcode != dns.RcodeNotImplemented:
		k.plugin = "etcd"
	}
	return s.qm.cell(k)
}

// typeLabel keeps the qtype label bounded: random qtypes from the network
// must not grow the metric without end.
func typeLabel(t uint16) string {
	if s, ok := dns.TypeToString[t]; ok {
		return s
	}
	return "other"
}

func rcodeLabel(r int) string {
	// 16 is BADSIG in TSIG and BADVERS in EDNS; a server without TSIG only
	// ever means the latter, and miekg/dns's table names the former.
	if r == dns.RcodeBadVers {
		return "BADVERS"
	}
	if s, ok := dns.RcodeToString[r]; ok {
		return s
	}
	return strconv.Itoa(r)
}

// Listener is the bound DNS address: UDP sockets (one per CPU, sharing the
// port with SO_REUSEPORT where available) and one TCP listener.
type Listener struct {
	Addr  string
	label string // the address as asked for, but a port 0 as bound: CoreDNS's server label is dns://:53, not dns://[::]:53
	udp   []*net.UDPConn
	tcp   net.Listener
}

// Listen binds addr for UDP and TCP. Port 0 picks one port for both.
func Listen(addr string) (*Listener, error) {
	var l *Listener
	var err error
	// Port 0 picks a free UDP port whose TCP twin may be taken: try again
	// with another, as a fixed port could not.
	for try := 0; try < 10; try++ {
		if l, err = listenPair(addr); err == nil {
			break
		}
		if _, port, _ := net.SplitHostPort(addr); port != "0" {
			return nil, err
		}
	}
	if err != nil {
		return nil, err
	}
	bound := l.Addr
	l.label = addr
	if _, port, _ := net.SplitHostPort(addr); port == "0" {
		l.label = bound
	}
	for range runtime.GOMAXPROCS(0) - 1 {
		pc, err := listenUDP(bound)
		if err != nil {
			break // no SO_REUSEPORT: one socket serves
		}
		l.udp = append(l.udp, pc)
	}
	return l, nil
}

// listenPair binds one UDP socket and TCP on the same address.
func listenPair(addr string) (*Listener, error) {
	first, err := listenUDP(addr)
	if err != nil {
		return nil, err
	}
	bound := first.LocalAddr().String()
	l := &Listener{Addr: bound, udp: []*net.UDPConn{first}}
	if l.tcp, err = net.Listen("tcp", bound); err != nil {
		first.Close()
		return nil, err
	}
	return l, nil
}

// Serve answers on l until ctx ends, then shuts down: in-flight queries
// get their answers, new ones are not read.
func (s *Server) Serve(ctx context.Context, l *Listener) error {
	label := "dns://" + cmp.Or(l.label, l.Addr)
	s.qm.server.Store(&label)
	tcp := &tcpServer{s: s, ln: l.tcp, idle: s.TCPIdle, maxConns: s.TCPMaxConns}
	errs := make(chan error, len(l.udp)+1)
	var wg sync.WaitGroup
	stop := s.newUDPStop()
	defer stop.close()
	for i, pc := range l.udp {
		reads := s.udpReads.WithLabelValues(strconv.Itoa(i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.serveUDP(pc, reads, stop); err != nil {
				errs <- err
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := tcp.serve(); err != nil {
			errs <- err
		}
	}()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errs:
		err = fmt.Errorf("dns server on %s: %w", l.Addr, err)
	}
	stop.signal()
	for _, pc := range l.udp {
		_ = pc.SetReadDeadline(time.Now())
	}
	tcp.shutdown()
	wg.Wait()
	// Their answers go out on the sockets closed next; those that need
	// more than a moment get SERVFAIL or nothing, as a client that has
	// given up already would.
	t := time.AfterFunc(forwardGrace, s.endUpstream)
	s.forwarding.Wait()
	t.Stop()
	for _, pc := range l.udp {
		pc.Close()
	}
	return err
}

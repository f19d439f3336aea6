package store

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/etcdns/etcdns/internal/testetcd"
	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/server/snap"
)

// The store's promise, under churn: whatever etcd went through (any
// transactions, watch streams cut and resumed, one watcher behind
// another, compactions that force a relist, packing of the tables), once
// the store has caught up, the snapshot it serves is the one built from
// scratch from etcd's keys at that revision, and the keys it reports
// skipped are exactly the malformed ones held. A lost event, one applied
// twice or out of order, a relist that kept something of the snapshot
// before it, an empty non-terminal left behind or dropped too soon: each
// leaves the two apart for good, since nothing is written while they are
// compared. And a relist never publishes less than was served before it.

var (
	convergeSeed  = flag.Uint64("converge.seed", 0, "TestConverge: run this seed alone (0: the fixed seeds)")
	convergeSteps = flag.Int("converge.txns", 0, "TestConverge: transactions a seed (0: the default)")
)

// convergeZones are a cluster's zones as dnsd is configured for them: the
// forward zone, both reverse zones and, under a prefix of its own (a
// second watcher on the stream), a SkyDNS zone.
var convergeZones = []snap.Config{
	{Name: "cluster.local", Prefix: "/skydns", TTL: 5, Cluster: "c1"},
	{Name: "in-addr.arpa", Prefix: "/skydns", TTL: 5, Cluster: "c1"},
	{Name: "ip6.arpa", Prefix: "/skydns", TTL: 5, Cluster: "c1"},
	{Name: "example.org", Prefix: "/coredns", TTL: 300, SkyDNS: true},
}

// convergeAddrs are every address the values and pod names below hold:
// the pod index can only be read an address at a time.
var convergeAddrs = []netip.Addr{
	netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3"),
	netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2"),
}

// slot is a key the transactions write, and the values they pick from.
type slot struct {
	key    string
	values []string
}

// convergeUniverse is a small set of keys, so that transactions keep
// hitting the same names: owners with several ids, SRV owners, pod names
// (canonical and not), names deep enough to make empty non-terminals,
// reverse names, stub domains nested in each other, a SkyDNS zone, keys
// under the prefixes outside every zone and keys that name no owner at
// all. subtrees are prefixes a transaction deletes at once.
func convergeUniverse(t testing.TB) (slots []slot, subtrees []string) {
	bad := []string{`{"host":`, `not json`, `{"host":"10.0.0.1","text":"t"}`, `{}`, `{"host":"10.0.0.1","port":70000}`, `{"host":"m.example.com","mail":true}`}
	addr := []string{`{"host":"10.0.0.1"}`, `{"host":"10.0.0.2","ttl":30}`, `{"host":"10.0.0.1","cluster":"c2"}`, `{"host":"fd00::1"}`, `{"host":"::ffff:10.0.0.3","cluster":"c1"}`}
	alias := []string{`{"host":"a.ns1.svc.cluster.local"}`, `{"host":"Target.Example.COM."}`, `{"host":"b.ns1.svc.cluster.local","cluster":"c2"}`}
	text := []string{`{"text":"v=1"}`, `{"text":"v=2","ttl":10,"cluster":"c1"}`}
	// A name host with a port: an SRV at a _port._proto owner, malformed
	// anywhere else.
	srv := []string{`{"host":"a.ns1.svc.cluster.local","port":80}`, `{"host":"b.ns1.svc.cluster.local","port":53,"priority":5,"weight":20,"cluster":"c2"}`,
		`{"host":"a.ns1.svc.cluster.local","port":-1}`, `{"host":"a.example.com","port":80,"cluster":"c1"}`}
	cat := func(lists ...[]string) []string { return slices.Concat(lists...) }

	ids := []string{"x1", "x2", "0a1b2c3d4e5f6g7h"} // the last one a publisher's: held packed
	record := func(owner string, ids []string, values []string) {
		for _, id := range ids {
			k, err := keys.RecordKey("/skydns", owner, id)
			if err != nil {
				t.Fatal(err)
			}
			slots = append(slots, slot{k, values})
		}
	}
	plain := cat(addr, alias, text, bad, srv[3:])
	for _, o := range []string{"a.ns1.svc", "b.ns1.svc", "a.ns2.svc", "c.a.ns1.svc", "w.x.y.deep", "x.y.deep", "deep", "dns"} {
		record(o+".cluster.local", ids, plain)
	}
	record("cluster.local", ids[:1], cat(text, addr[:1], bad[:1]))
	for _, o := range []string{"_http._tcp.a.ns1.svc", "_dns._udp.b.ns1.svc"} {
		record(o+".cluster.local", ids, cat(srv, addr[:2], bad[:2]))
	}
	pod := cat([]string{`{"host":"10.0.0.1"}`, `{"host":"10.0.0.2"}`, `{"host":"fd00::1"}`, `{"host":"::ffff:10.0.0.1","ttl":30}`}, bad[:1], alias[:1])
	for _, o := range []string{"10-0-0-1.ns1", "10-0-0-1.ns2", "10-0-0-2.ns1", "fd00--1.ns1", "010-0-0-1.ns1", "10-0-0-3"} {
		record(o+".pod.cluster.local", []string{"x1", ids[2]}, pod)
	}

	exact := func(name string, values []string) {
		k, err := keys.Key("/skydns", name)
		if err != nil {
			t.Fatal(err)
		}
		slots = append(slots, slot{k, values})
	}
	ptr := cat([]string{`{"host":"a.ns1.svc.cluster.local"}`, `{"host":"b.ns1.svc.cluster.local","ttl":60}`, `{"host":"a.ns2.svc.cluster.local","cluster":"c2"}`}, addr[:1], bad[:2])
	for _, n := range []string{"1.0.0.10.in-addr.arpa", "2.0.0.10.in-addr.arpa", "x1.1.0.0.10.in-addr.arpa", "0.10.in-addr.arpa"} {
		exact(n, ptr)
	}
	for _, ip := range []string{"fd00::1", "fd00::2"} {
		exact(keys.ReverseName(netip.MustParseAddr(ip)), ptr)
	}

	ns := []string{`{"host":"192.0.2.1"}`, `{"host":"192.0.2.2","port":5353}`, `{"host":"2001:db8::53"}`, `{"host":"ns.example.com"}`, `{"host":"0.0.0.0"}`, `{`}
	stub := func(zone, domain, id string) {
		k, err := keys.StubKey("/skydns", zone, domain, id)
		if err != nil {
			t.Fatal(err)
		}
		slots = append(slots, slot{k, ns})
	}
	stub("cluster.local", "corp.example", "ns1")
	stub("cluster.local", "corp.example", "ns2")
	stub("cluster.local", "a.corp.example", "ns1")
	stub("in-addr.arpa", "168.192.in-addr.arpa", "ns1")
	slots = append(slots, slot{"/skydns/local/cluster/dns/stub/ns1", ns[:1]}) // names no domain

	sky := []string{`{"host":"10.1.0.1"}`, `{"host":"www.example.org","port":80}`, `{"text":"hi"}`, `null`, `{bad`, `{"Host":"10.1.0.2","TTL":60}`, `{"host":1}`}
	for _, k := range []string{"www/x1", "www/x2", "a/b/x1", "dns/stub/foo/x1", "x1"} {
		slots = append(slots, slot{"/coredns/org/example/" + k, sky})
	}

	for _, k := range []string{
		"/skydns/local/cluster/svc/NS1/a/x1",  // no owner: not lowercase
		"/skydns/local/cluster/svc/ns1/a/x.1", // no owner: the id is no label
		"/skydns/local/other/svc/x1",          // under the prefix, in no zone
		"/coredns/com/example/x1",
		"/elsewhere/k", // under no prefix
	} {
		slots = append(slots, slot{k, cat(addr[:1], bad[:1])})
	}
	subtrees = []string{
		"/skydns/local/cluster/deep/", "/skydns/local/cluster/pod/", "/skydns/local/cluster/svc/ns1/",
		"/skydns/local/cluster/dns/", "/skydns/arpa/in-addr/10/0/0/", "/skydns/arpa/ip6/", "/coredns/org/example/",
	}
	return slots, subtrees
}

// An op is one operation of a transaction.
type op struct {
	kind  byte // 'p' put, 'd' delete, 'r' delete a subtree
	key   string
	value string
}

func (o op) String() string {
	switch o.kind {
	case 'p':
		return "put " + o.key + " " + o.value
	case 'd':
		return "del " + o.key
	}
	return "del " + o.key + "*"
}

// A step of a plan: a transaction, or what happens to the store's watch
// between them.
type step struct {
	what string // "txn", "start", "cut", "hold", "compact", "lag", "catch up", "cut behind", "quiet", "retain", "pack", "check"
	ops  []op
}

func (s step) String() string {
	if s.what != "txn" {
		return s.what
	}
	var ops []string
	for _, o := range s.ops {
		ops = append(ops, o.String())
	}
	return "txn " + strings.Join(ops, "; ")
}

// convergePlan draws a plan from seed alone, so that a failure replays
// with the same steps (the store's timing may differ). It keeps the keys
// the plan leaves in etcd, to choose deletes of present and absent keys,
// and values put again as held.
func convergePlan(seed uint64, txns int, slots []slot, subtrees []string) []step {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	var sky []slot
	for _, s := range slots {
		if strings.HasPrefix(s.key, "/coredns/org/example/") {
			sky = append(sky, s)
		}
	}
	held := map[string]string{}
	var plan []step
	holding := 0 // transactions left to write before the held watch's compaction
	lagging := 0 // transactions left to write while the second watcher lags
	packed := false
	for i := range txns {
		var ops []op
		used := map[string]bool{}
		var cleared string // a subtree this transaction deletes: no other op may touch it
		free := func(k string) bool { return !used[k] && (cleared == "" || !strings.HasPrefix(k, cleared)) }
		if lagging > 0 {
			// Something for the lagging watcher (the SkyDNS zone's) to
			// fall behind on.
			s := sky[rng.IntN(len(sky))]
			used[s.key] = true
			ops = append(ops, op{'p', s.key, s.values[rng.IntN(len(s.values))]})
		}
		for n := 1 + rng.IntN(5); len(ops) < n; {
			var o op
			switch r := rng.IntN(100); {
			case r < 8 && len(held) > 0 && len(ops) < n-1:
				// A value moved to another id of its name (or another
				// nameserver of its domain), the old one deleted first:
				// what a writer does that does not order its ops.
				k := pick(rng, held)
				dir := k[:strings.LastIndexByte(k, '/')+1]
				var siblings []slot
				for _, s := range slots {
					if rest, ok := strings.CutPrefix(s.key, dir); ok && s.key != k && !strings.Contains(rest, "/") {
						siblings = append(siblings, s)
					}
				}
				if len(siblings) == 0 {
					continue
				}
				s := siblings[rng.IntN(len(siblings))]
				if !free(k) || !free(s.key) {
					continue
				}
				used[k], used[s.key] = true, true
				ops = append(ops, op{'d', k, ""}, op{'p', s.key, s.values[rng.IntN(len(s.values))]})
				continue
			case r < 50:
				s := slots[rng.IntN(len(slots))]
				o = op{'p', s.key, s.values[rng.IntN(len(s.values))]}
			case r < 62 && len(held) > 0: // as held: etcd makes a revision of it all the same
				k := pick(rng, held)
				o = op{'p', k, held[k]}
			case r < 80 && len(held) > 0:
				o = op{'d', pick(rng, held), ""}
			case r < 90:
				o = op{'d', slots[rng.IntN(len(slots))].key, ""} // often absent
			case r < 95 && cleared == "" && len(ops) == 0:
				o = op{'r', subtrees[rng.IntN(len(subtrees))], ""}
			default:
				continue
			}
			if !free(o.key) {
				continue
			}
			used[o.key] = true
			if o.kind == 'r' {
				cleared = o.key
			}
			ops = append(ops, o)
		}
		for _, o := range ops {
			switch o.kind {
			case 'p':
				held[o.key] = o.value
			case 'd':
				delete(held, o.key)
			case 'r':
				for k := range held {
					if strings.HasPrefix(k, o.key) {
						delete(held, k)
					}
				}
			}
		}
		plan = append(plan, step{what: "txn", ops: ops})
		if holding > 0 {
			if holding--; holding == 0 {
				plan = append(plan, step{what: "compact"})
			}
			continue
		}
		if lagging > 0 {
			if lagging--; lagging == 0 {
				plan = append(plan, step{what: []string{"catch up", "cut behind", "cut behind"}[rng.IntN(3)]})
			}
			continue
		}
		switch r := rng.IntN(100); {
		case i < 15:
		case i == 15:
			plan = append(plan, step{what: "start"})
		case i >= txns/2 && !packed:
			plan = append(plan, step{what: "pack"})
			packed = true
		case r < 6:
			plan = append(plan, step{what: "cut"})
		case r < 10 && i < txns-2:
			// The next two transactions are written while the store
			// hears nothing; the compaction after them passes where its
			// watch resumes, and the cut makes it relist.
			plan = append(plan, step{what: "hold"})
			holding = 2
		case r < 12:
			plan = append(plan, step{what: "quiet"})
		case r < 15 && i < txns-2:
			// The second watcher falls behind the first for the next two
			// transactions; then it catches up, or the stream is cut
			// while it is behind and the watch resumes after what both
			// have shown.
			plan = append(plan, step{what: "lag"})
			lagging = 2
		case r < 17:
			// Checked at once, so that a relist it makes loads with no
			// writes since, at a shared revision that may be older
			// than what the store served.
			plan = append(plan, step{what: "retain"}, step{what: "check"})
		case r < 22:
			plan = append(plan, step{what: "check"})
		}
	}
	return append(plan, step{what: "check"})
}

func pick(rng *rand.Rand, held map[string]string) string {
	ks := make([]string, 0, len(held))
	for k := range held {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks[rng.IntN(len(ks))]
}

// cutter does to the store's watch streams what the network and etcd do:
// cuts every one of them at once (a member restarted, a connection
// reset); holds what they receive (a partition) until they are released
// or cut; and holds back what the second watcher of a stream sends, and
// the answers to progress requests with it, while the first one's pass
// (etcd catches each watcher up on its own, and answers only once every
// one is). What a cut stream held is lost, as in flight.
type cutter struct {
	mu      sync.Mutex
	streams map[*cutStream]context.CancelFunc
	open    chan struct{} // closed while nothing is held
	caught  chan struct{} // closed while no watcher lags
}

func newCutter() *cutter {
	c := &cutter{streams: map[*cutStream]context.CancelFunc{}, open: make(chan struct{}), caught: make(chan struct{})}
	close(c.open)
	close(c.caught)
	return c
}

func (c *cutter) hold()    { c.set(&c.open, false) }
func (c *cutter) release() { c.set(&c.open, true) }
func (c *cutter) lag()     { c.set(&c.caught, false) }
func (c *cutter) catchUp() { c.set(&c.caught, true) }

// set makes *ch closed (free) or a new open channel.
func (c *cutter) set(ch *chan struct{}, free bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-*ch:
		if !free {
			*ch = make(chan struct{})
		}
	default:
		if free {
			close(*ch)
		}
	}
}

func (c *cutter) gates() (open, caught <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open, c.caught
}

func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for s, cancel := range c.streams {
		cancel()
		delete(c.streams, s)
	}
}

func (c *cutter) forget(s *cutStream) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.streams, s)
}

// dial is a client of endpoint whose watch streams c controls.
func (c *cutter) dial(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	cl, err := clientv3.New(clientv3.Config{
		Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithChainStreamInterceptor(
			func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				if method != "/etcdserverpb.Watch/Watch" {
					return streamer(ctx, desc, cc, method, opts...)
				}
				ctx, cancel := context.WithCancel(ctx)
				cs, err := streamer(ctx, desc, cc, method, opts...)
				if err != nil {
					cancel()
					return nil, err
				}
				s := &cutStream{ClientStream: cs, c: c, ctx: ctx, in: make(chan received)}
				c.mu.Lock()
				c.streams[s] = cancel
				c.mu.Unlock()
				go s.read()
				return s, nil
			})},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// cutStream reads its stream ahead, on a goroutine of its own, so that
// it can pass the first watcher's responses while it holds back the
// second's.
type cutStream struct {
	grpc.ClientStream
	c   *cutter
	ctx context.Context
	in  chan received
	// Only the store's goroutine that receives uses these.
	created int   // watchers created on the stream
	second  int64 // the second watcher's ID, once created
	late    []*pb.WatchResponse
}

type received struct {
	resp *pb.WatchResponse
	err  error
}

func (s *cutStream) read() {
	for {
		resp := new(pb.WatchResponse)
		err := s.ClientStream.RecvMsg(resp)
		select {
		case s.in <- received{resp, err}:
		case <-s.ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

func (s *cutStream) RecvMsg(m any) error {
	err := s.recv(m.(*pb.WatchResponse))
	if err != nil {
		s.c.forget(s)
	}
	return err
}

func (s *cutStream) recv(m *pb.WatchResponse) error {
	for {
		open, caught := s.c.gates()
		var lagging <-chan struct{}
		select {
		case <-caught:
			if len(s.late) > 0 { // in the order they came, before anything after them
				*m, s.late = *s.late[0], s.late[1:]
				return nil
			}
		default:
			lagging = caught
		}
		var r received
		select {
		case r = <-s.in:
		case <-lagging:
			continue
		case <-s.ctx.Done():
			return status.FromContextError(s.ctx.Err()).Err()
		}
		if r.err != nil {
			return r.err
		}
		if r.resp.Created {
			if s.created++; s.created == 2 {
				s.second = r.resp.WatchId
			}
		} else if lagging != nil && (r.resp.WatchId == clientv3.InvalidWatchID || s.created >= 2 && r.resp.WatchId == s.second) {
			s.late = append(s.late, r.resp)
			continue
		}
		// Held once it has come: a response to a write made after the
		// hold waits, whatever was already on its way.
		select {
		case <-open:
		case <-s.ctx.Done():
			return status.FromContextError(s.ctx.Err()).Err()
		}
		*m = *r.resp
		return nil
	}
}

// canonical is everything a snapshot answers from, a line each, sorted;
// every line names its zone and name, so a diff of two reads alone. The
// snapshot's revision and the zones' serials are left out: a served one
// is the revision of the last change (a load's, after a relist), a built
// one the revision it was built at (see loadAt).
func canonical(sn *snap.Snapshot) string {
	var lines []string
	add := func(format string, a ...any) { lines = append(lines, fmt.Sprintf(format, a...)) }
	for i, z := range sn.Zones {
		add("%s zone #%d reverse=%v skydns=%v records=%d range=%s", z.Name, i, z.Reverse, z.SkyDNS, z.Records, z.Range)
		z.Names(func(n *snap.Node) {
			// The count of names below decides when a later delete drops
			// an empty non-terminal: wrong, it shows only changes later.
			kids := reflect.ValueOf(n).Elem().FieldByName("kids").Int()
			es := n.Entries()
			add("%s %s kids=%d entries=%d", z.Name, n.Name, kids, len(es))
			for j := range es {
				e := &es[j]
				add("%s %s entry#%d %s %s ttl=%d %s", z.Name, n.Name, j, e.ID(), dns.TypeToString[e.Type()], e.TTL(), e.Value().Encode())
			}
			for _, set := range n.Sets() {
				rrs := make([]string, len(set.RRs))
				for j, rr := range set.RRs {
					rrs[j] = strings.Join(strings.Fields(rr.String()), " ")
				}
				add("%s %s rrset %s local=%d [%s]", z.Name, n.Name, dns.TypeToString[set.Type], set.Local, strings.Join(rrs, " | "))
			}
		})
		for _, ip := range convergeAddrs {
			if nss := z.PodNamespaces(ip); nss != nil {
				add("%s pods %s %v", z.Name, ip, nss)
			}
		}
		for _, st := range z.Stubs() {
			add("%s stub %s servers=%d", z.Name, st.Domain, len(st.Servers))
			for _, ns := range st.Servers {
				add("%s stub %s %s %s", z.Name, st.Domain, ns.Key, ns.Addr)
			}
		}
		if z.Sky != nil {
			for _, it := range z.Sky.Prefix("") {
				add("%s sky %s %+v", z.Name, it.Key, it.Service)
			}
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// skipped is the store's list of skipped keys, a line each.
func skipped(s *Store) string {
	var lines []string
	for _, m := range s.Malformed() {
		lines = append(lines, fmt.Sprintf("skipped %s %s", m.Key, m.Value))
	}
	return strings.Join(lines, "\n")
}

// malformedOf is what skipped must say of kvs: each key that a snapshot
// built of it alone skips.
func malformedOf(kvs []snap.KV) string {
	var lines []string
	for _, kv := range kvs {
		if _, errs := snap.Build(convergeZones, 1, []snap.KV{kv}); len(errs) > 0 {
			lines = append(lines, fmt.Sprintf("skipped %s %s", kv.Key, kv.Value))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// lineDiff is the lines only one of served and built holds, at most max.
func lineDiff(served, built string, max int) string {
	s, b := strings.Split(served, "\n"), strings.Split(built, "\n")
	var out []string
	for _, only := range []struct {
		label      string
		of, beside []string
	}{{"served only: ", s, b}, {"built only:  ", b, s}} {
		for _, l := range only.of {
			if !slices.Contains(only.beside, l) {
				out = append(out, only.label+l)
			}
		}
	}
	// Side by side where they differ in a line of one name.
	slices.SortStableFunc(out, func(x, y string) int { return strings.Compare(x[13:], y[13:]) })
	if len(out) > max {
		out = append(out[:max], fmt.Sprintf("... and %d more", len(out)-max))
	}
	return "  " + strings.Join(out, "\n  ")
}

// converge is one seed's run: etcd, the store on two endpoints whose
// streams the cutter controls, and the keys the plan has left in etcd.
type converge struct {
	t     *testing.T
	cli   *clientv3.Client
	c     *cutter
	s     *Store
	loads atomic.Int32
	log   lockedBuffer
	held  map[string]string
	packs int // packings seen
	// rev is etcd's revision after the last write, heldAt what it was
	// when the streams were last held, compacted the last compaction's.
	rev, heldAt, compacted int64
	// older is set when a relist published a snapshot older than the
	// one it replaced.
	older atomic.Pointer[string]
}

// convergeWait bounds each wait for the store to catch up: far above what
// it takes (a restart's back-off is a second at most), even under -race.
const convergeWait = 20 * time.Second

func (h *converge) txn(ops []op) {
	t := h.t
	t.Helper()
	var eops []clientv3.Op
	for _, o := range ops {
		switch o.kind {
		case 'p':
			eops = append(eops, clientv3.OpPut(o.key, o.value))
		case 'd':
			eops = append(eops, clientv3.OpDelete(o.key))
		case 'r':
			eops = append(eops, clientv3.OpDelete(o.key, clientv3.WithPrefix()))
		}
	}
	resp, err := h.cli.Txn(context.Background()).Then(eops...).Commit()
	if err != nil {
		t.Fatalf("%v: %v", ops, err)
	}
	h.rev = resp.Header.Revision
	for _, o := range ops {
		switch o.kind {
		case 'p':
			h.held[o.key] = o.value
		case 'd':
			delete(h.held, o.key)
		case 'r':
			for k := range h.held {
				if strings.HasPrefix(k, o.key) {
					delete(h.held, k)
				}
			}
		}
	}
}

// tick writes outside every watched prefix and returns the revision.
func (h *converge) tick() int64 {
	h.held["/elsewhere/tick"] = "t"
	h.rev = mustPut(h.t, h.cli, "/elsewhere/tick", "t")
	return h.rev
}

// compact compacts at rev, or just past the last compaction, which etcd
// refuses to do again.
func (h *converge) compact(rev int64) {
	rev = max(rev, h.compacted+1)
	if _, err := h.cli.Compact(context.Background(), rev); err != nil {
		h.t.Fatal(err)
	}
	h.compacted = rev
}

// check waits for the store to reach etcd's revision and compares what
// it serves with a snapshot built from etcd's keys at that revision.
func (h *converge) check(label string) {
	t := h.t
	t.Helper()
	if msg := h.older.Load(); msg != nil {
		t.Fatalf("%s: %s: what it served is undone until the watch replays it", label, *msg)
	}
	resp, err := h.cli.Get(context.Background(), "/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	rev := resp.Header.Revision
	kvs := make([]snap.KV, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		kvs[i] = snap.KV{Key: string(kv.Key), Value: kv.Value}
		if h.held[kvs[i].Key] != string(kv.Value) {
			t.Fatalf("%s: etcd holds %s = %s, the plan %q", label, kv.Key, kv.Value, h.held[kvs[i].Key])
		}
	}
	if len(kvs) != len(h.held) {
		t.Fatalf("%s: etcd holds %d keys, the plan %d", label, len(kvs), len(h.held))
	}
	built, _ := snap.Build(convergeZones, rev, kvs)
	want, wantSkipped := canonical(built), malformedOf(kvs)
	deadline := time.Now().Add(convergeWait)
	for value(h.s.revision) < float64(rev) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: the store did not reach revision %d within %v: at %v", label, rev, convergeWait, value(h.s.revision))
		}
		time.Sleep(2 * time.Millisecond)
	}
	// Caught up, the store may still be a moment from serving it: a
	// relist in flight publishes its load before the watch's replay, and
	// one prefix's watcher may show a revision before the other's
	// changes up to it.
	for {
		sn := h.s.Snapshot()
		got, gotSkipped := canonical(sn), skipped(h.s)
		if got == want && gotSkipped == wantSkipped {
			counted := 0.0
			for _, z := range sn.Zones {
				if sn.Rev > rev || int64(z.Serial) > rev {
					t.Fatalf("%s: etcd at revision %d, the snapshot at %d, zone %s's serial %d", label, rev, sn.Rev, z.Name, z.Serial)
				}
				counted += value(h.s.malformed.WithLabelValues(z.Name))
			}
			if n := strings.Count(gotSkipped, "skipped "); counted < float64(n) {
				t.Fatalf("%s: %d keys skipped, %v counted", label, n, counted)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: at revision %d (the store's snapshot at %d), what the store serves differs from a snapshot built from etcd's keys:\n%s",
				label, rev, sn.Rev, lineDiff(got+"\n"+gotSkipped, want+"\n"+wantSkipped, 40))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// pack waits for the store to pack its tables, once changes pause, and
// checks what it serves after. A change made on a watch that has since
// been restarted is never packed (the new watch has no pause to wait
// for), so a change of its own starts the pause.
func (h *converge) pack(label string) {
	t := h.t
	t.Helper()
	for try := 0; ; try++ {
		h.check(label + ", before packing")
		scattered := slices.ContainsFunc(h.s.Snapshot().Zones, func(z *snap.Zone) bool { return z.Scattered() >= packScattered })
		before := h.s.PackedBytes()
		deadline := time.Now().Add(packQuiet + 5*time.Second)
		for scattered && h.s.PackedBytes() == before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if h.s.PackedBytes() > before {
			h.packs++
			h.check(label + ", after packing")
			return
		}
		if try == 3 {
			t.Fatalf("%s: the tables were not packed in %d pauses", label, try+1)
		}
		// Enough changes to scatter the tables, one transaction.
		var ops []op
		for i := range 40 {
			k, _ := keys.RecordKey("/skydns", fmt.Sprintf("p%d.pack.cluster.local", i), "x1")
			ops = append(ops, op{'p', k, fmt.Sprintf(`{"host":"10.0.0.%d"}`, 1+try%3)})
		}
		h.txn(ops)
	}
}

func runConverge(t *testing.T, seed uint64, txns int) {
	slots, subtrees := convergeUniverse(t)
	plan := convergePlan(seed, txns, slots, subtrees)
	h := &converge{t: t, cli: testetcd.Start(t, nil), c: newCutter(), held: map[string]string{}}
	done := 0
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		var b strings.Builder
		for i, st := range plan {
			mark := "  "
			if i == done {
				mark = "=>"
			}
			fmt.Fprintf(&b, "%s %3d %s\n", mark, i, st)
		}
		t.Logf("seed %d (-converge.seed=%d -converge.txns=%d), the plan, => at the step that failed:\n%s", seed, seed, txns, b.String())
		log := strings.Split(h.log.String(), "\n")
		t.Logf("the store's log, the last lines:\n%s", strings.Join(log[max(0, len(log)-40):], "\n"))
	})

	var relists, cuts int
	exec := rand.New(rand.NewPCG(seed, 0xec)) // the plan's choices that depend on etcd's revisions
	for i, st := range plan {
		done = i
		label := fmt.Sprintf("step %d (%s)", i, st.what)
		switch st.what {
		case "txn":
			h.txn(st.ops)
		case "start":
			direct := h.cli.Endpoints()[0]
			h.s = New(h.cli, convergeZones, 5*time.Second, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(&h.log, nil)))
			// Small pages and a small revision step: the loads take
			// several pages, and land at a revision the watch then
			// replays from.
			h.s.pageSize, h.s.step = 7, 16
			h.s.afterLoad = func() {
				// On Run's goroutine, where the snapshot the relist
				// replaces is still at hand.
				if h.loads.Add(1) > 1 && h.s.Snapshot().Rev < h.s.watched.Rev {
					msg := fmt.Sprintf("a relist published revision %d in place of %d", h.s.Snapshot().Rev, h.s.watched.Rev)
					h.older.CompareAndSwap(nil, &msg)
				}
			}
			if seed%2 == 0 {
				// An etcd whose progress answers may run ahead of its
				// events: they do not move the resume point.
				h.s.orders = func(context.Context, *clientv3.Client) (bool, string) { return false, "3.5.12" }
			}
			h.s.WatchOn([]Endpoint{{Name: "one", Client: h.c.dial(t, direct)}, {Name: "two", Client: h.c.dial(t, direct)}},
				Liveness{Interval: 200 * time.Millisecond, Timeout: 2 * time.Second, LagProbe: 300 * time.Millisecond, MaxLag: time.Second})
			runStore(t, h.s)
			h.check(label)
		case "cut":
			h.c.cut()
			cuts++
		case "hold":
			h.c.hold()
			h.heldAt = h.rev
		case "compact":
			// Two revisions past everything the held streams let
			// through, so that the watch resumes before the compaction,
			// which lands anywhere from there to now: a retention window
			// compacts less than all, and a relist may then load at a
			// shared revision before now.
			h.tick()
			h.tick()
			h.compact(h.heldAt + 2 + exec.Int64N(h.rev-h.heldAt-1))
			h.c.cut()
			h.c.release()
			relists++
		case "lag":
			h.c.lag()
		case "catch up":
			h.c.catchUp()
		case "cut behind":
			h.c.cut()
			h.c.catchUp()
			cuts++
		case "quiet":
			// Writes the stream never shows, compacted, then a move:
			// the resume point follows the progress answers where the
			// member orders them, and the store relists where not.
			for range 3 {
				h.tick()
			}
			h.compact(h.rev - exec.Int64N(4))
			h.c.cut()
			cuts++
		case "retain":
			// A retention window: compacted up to somewhere in the
			// history since the last compaction, which may or may not
			// pass where a prefix's watcher resumes.
			if h.rev > h.compacted {
				h.compact(h.compacted + 1 + exec.Int64N(h.rev-h.compacted))
			}
			h.c.cut()
			cuts++
		case "pack":
			h.pack(label)
		case "check":
			h.check(label)
		}
	}
	restarts := map[string]float64{}
	for _, r := range []string{ReasonCompacted, ReasonProgressTimeout, ReasonNoLeader, ReasonLagging, ReasonClosed, ReasonUnreachable, ReasonError} {
		if n := value(h.s.restarts.WithLabelValues(r)); n > 0 {
			restarts[r] = n
		}
	}
	t.Logf("seed %d: %d steps, %d cuts, %d forced relists; watch restarts %v, %d loads, %d packings, %v values skipped",
		seed, len(plan), cuts, relists, restarts, h.loads.Load(), h.packs, value(h.s.malformed.WithLabelValues("cluster.local")))
	// The faults must have happened, or the run proved nothing of them.
	if relists > 0 && (restarts[ReasonCompacted] == 0 || h.loads.Load() < 2) {
		t.Errorf("%d relists forced, but restarts %v and %d loads", relists, restarts, h.loads.Load())
	}
	if cuts > 0 && restarts[ReasonError] == 0 {
		t.Errorf("%d cuts, but restarts %v", cuts, restarts)
	}
}

// TestConverge runs random transactions over a small set of colliding
// keys, cuts the store's watch streams, holds one watcher back, compacts
// past where they resume (a relist) and pauses for packing, and at
// checkpoints compares what the store serves with a snapshot built from
// etcd's keys at the same revision. -converge.seed replays one seed,
// -converge.txns runs longer.
func TestConverge(t *testing.T) {
	// Odd seeds run on an etcd that orders its progress answers, even
	// ones on one that does not; 2 and 33 replace a stub domain's only
	// nameserver in one transaction, which once panicked the store
	// (TestStubDomainEmptiedAndRefilledInOneBatch).
	seeds := []uint64{1, 2, 33}
	if *convergeSeed != 0 {
		seeds = []uint64{*convergeSeed}
	}
	txns := 120
	if *convergeSteps > 0 {
		txns = max(*convergeSteps, 20) // the store starts after the first 15
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			runConverge(t, seed, txns)
		})
	}
}

// A relist forgets the skipped keys it no longer finds. A malformed key
// deleted in history the watch could not replay (compacted) stayed
// listed as skipped, at /debug/records, until dnsd restarted: the relist
// only added and forgot the keys it read (found by TestConverge).
func TestRelistForgetsSkippedKeysDeletedMeanwhile(t *testing.T) {
	cli := testetcd.Start(t, nil)
	mustPut(t, cli, "/skydns/local/cluster/svc/ns/a/bad", `{"host":`)
	mustPut(t, cli, "/skydns/local/cluster/svc/ns/b/bad", `{"host":`)
	var loads atomic.Int32
	s := startStore(t, cli, func() {
		if loads.Add(1) > 1 {
			return
		}
		// Between the first load and its watch: a's key goes, and then
		// the history that says so.
		if _, err := cli.Delete(context.Background(), "/skydns/local/cluster/svc/ns/a/bad"); err != nil {
			t.Error(err)
		}
		r, err := cli.Put(context.Background(), "/skydns/local/cluster/svc/ns/c/x", `{"host":"10.0.0.3"}`)
		if err == nil {
			_, err = cli.Compact(context.Background(), r.Header.Revision)
		}
		if err != nil {
			t.Error(err)
		}
	})
	eventually(t, "the relist", func() bool { return loads.Load() == 2 })
	if m := s.Malformed(); len(m) != 1 || m[0].Key != "/skydns/local/cluster/svc/ns/b/bad" {
		t.Errorf("skipped after the relist: %+v; want b's key alone", m)
	}
}

// A batch that deletes a stub domain's last nameserver and then puts one
// for it panicked, and with it dnsd: the deleted domain was still marked
// as the batch's own copy, so the put wrote into no entry. One
// transaction in that order does it, and so do two that come in one
// response, as a resumed watch replays them (found by TestConverge).
func TestStubDomainEmptiedAndRefilledInOneBatch(t *testing.T) {
	cli := testetcd.Start(t, nil)
	ns1, err := keys.StubKey("/skydns", "cluster.local", "corp.example", "ns1")
	if err != nil {
		t.Fatal(err)
	}
	ns2, _ := keys.StubKey("/skydns", "cluster.local", "corp.example", "ns2")
	mustPut(t, cli, ns1, `{"host":"192.0.2.1"}`)
	s := startStore(t, cli, nil)
	if _, err := cli.Txn(context.Background()).Then(clientv3.OpDelete(ns1), clientv3.OpPut(ns2, `{"host":"192.0.2.2"}`)).Commit(); err != nil {
		t.Fatal(err)
	}
	// Not the revision gauge: a watch's created response sets it to
	// etcd's revision before the events up to it have come.
	eventually(t, "ns2's nameserver alone", func() bool {
		st := s.Snapshot().Stub("www.corp.example")
		return st != nil && len(st.Servers) == 1 && st.Servers[0].Key == ns2
	})
}

// A relist at a shared revision older than the snapshot it replaces took
// back what the watch had applied since, until the next watch replayed
// it: a name created there answered NXDOMAIN meanwhile. It needs a
// prefix whose watcher resumes behind another's (a quiet one, on an etcd
// whose progress answers do not move the resume point) and a compaction
// past it but not past the shared revision, as etcd's retention makes
// (seen while writing TestConverge, whose writes outrun its relists).
func TestRelistLoadsNothingOlderThanServed(t *testing.T) {
	cli := testetcd.Start(t, nil)
	zones := []snap.Config{{Name: "cluster.local", Prefix: "/skydns", TTL: 5}, {Name: "cluster2.local", Prefix: "/dns2", TTL: 5}}
	s := New(cli, zones, 5*time.Second, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	const step = 16
	s.step = step
	s.orders = func(context.Context, *clientv3.Client) (bool, string) { return false, "3.5.12" }
	c := newCutter()
	s.WatchOn([]Endpoint{{Name: "one", Client: c.dial(t, cli.Endpoints()[0])}}, Liveness{Interval: 200 * time.Millisecond, Timeout: 2 * time.Second})
	var loads atomic.Int32
	var relisted atomic.Pointer[snap.Snapshot] // what the relist published first
	s.afterLoad = func() {
		if loads.Add(1) == 2 {
			relisted.Store(s.Snapshot())
		}
	}
	runStore(t, s)
	quiet := mustPut(t, cli, "/dns2/local/cluster2/svc/ns/b/x", `{"host":"10.0.0.2"}`)
	// Written up to 5 past a multiple of the step, the last name served.
	var rev int64
	var last string
	for i := 0; rev < quiet+step || rev%step != 5; i++ {
		last = fmt.Sprintf("a%d.ns.svc.cluster.local", i)
		rev = mustPut(t, cli, fmt.Sprintf("/skydns/local/cluster/svc/ns/a%d/x", i), `{"host":"10.0.0.1"}`)
	}
	eventually(t, "the writes", func() bool { return len(addrs(s.Snapshot(), last)) == 1 })
	if _, err := cli.Compact(context.Background(), rev-5); err != nil {
		t.Fatal(err)
	}
	c.cut() // the watch resumes after the quiet prefix's change, compacted: a relist
	eventually(t, "the relist", func() bool { return loads.Load() == 2 })
	if sn := relisted.Load(); len(addrs(sn, last)) != 1 {
		t.Errorf("the relist published revision %d, which does not hold %s, served before it", sn.Rev, last)
	}
}

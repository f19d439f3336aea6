package snap

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/miekg/dns"

	"github.com/etcdns/etcdns/keys"
)

var cfg = Config{Name: "cluster.local", Prefix: "/skydns", TTL: 5}

func put(t *testing.T, z *Zone, b *Batch, key, value string) {
	t.Helper()
	owner, e, err := z.Parse(key, []byte(value))
	if err != nil {
		t.Fatal(err)
	}
	b.Put(owner, e)
}

func TestBatchKeepsNonTerminalsExact(t *testing.T) {
	z0 := NewZone(cfg)
	b := z0.Edit()
	put(t, z0, b, "/skydns/local/cluster/svc/ns/a/x1", `{"host":"10.0.0.1"}`)
	put(t, z0, b, "/skydns/local/cluster/svc/ns/a/x2", `{"host":"10.0.0.2"}`)
	put(t, z0, b, "/skydns/local/cluster/svc/ns/b/x1", `{"host":"10.0.0.3"}`)
	z1 := b.Done(7)
	if z1.Records != 3 || z1.Serial != 7 {
		t.Fatalf("records %d serial %d", z1.Records, z1.Serial)
	}
	for _, n := range []string{"cluster.local", "svc.cluster.local", "ns.svc.cluster.local", "a.ns.svc.cluster.local"} {
		if z1.Node(n) == nil {
			t.Errorf("%s missing", n)
		}
	}
	if got := len(z1.Node("a.ns.svc.cluster.local").RRSet(dns.TypeA).RRs); got != 2 {
		t.Fatalf("a has %d A records", got)
	}

	b = z1.Edit()
	b.Delete("a.ns.svc.cluster.local", "x1")
	b.Delete("a.ns.svc.cluster.local", "x2")
	z2 := b.Done(8)
	if z2.Node("a.ns.svc.cluster.local") != nil || z2.Node("ns.svc.cluster.local") == nil {
		t.Fatal("a must be gone and ns kept for b")
	}
	b = z2.Edit()
	b.Delete("b.ns.svc.cluster.local", "x1")
	z3 := b.Done(9)
	for _, n := range []string{"svc.cluster.local", "ns.svc.cluster.local", "b.ns.svc.cluster.local"} {
		if z3.Node(n) != nil {
			t.Errorf("%s still exists with nothing below it", n)
		}
	}
	// Earlier zones are untouched: queries reading them see no change.
	if z1.Records != 3 || len(z1.Node("a.ns.svc.cluster.local").RRSet(dns.TypeA).RRs) != 2 || z1.Node("b.ns.svc.cluster.local") == nil {
		t.Fatal("an edit changed the zone it started from")
	}
	if z2.Node("b.ns.svc.cluster.local") == nil {
		t.Fatal("an edit changed the zone it started from")
	}
}

func TestParse(t *testing.T) {
	z := NewZone(cfg)
	rz := NewZone(Config{Name: "in-addr.arpa", Prefix: "/skydns", TTL: 5})
	for _, c := range []struct {
		z          *Zone
		key, value string
		owner      string
		typ        uint16
		bad        bool
	}{
		{z, "/skydns/local/cluster/svc/ns/a/x", `{"host":"10.0.0.1"}`, "a.ns.svc.cluster.local", dns.TypeA, false},
		{z, "/skydns/local/cluster/svc/ns/a/x", `{"host":"fd00::1"}`, "a.ns.svc.cluster.local", dns.TypeAAAA, false},
		{z, "/skydns/local/cluster/svc/ns/a/x", `{"host":"example.com"}`, "a.ns.svc.cluster.local", dns.TypeCNAME, false},
		{z, "/skydns/local/cluster/svc/ns/a/_tcp/_http/x", `{"host":"a.ns.svc.cluster.local","port":80}`, "_http._tcp.a.ns.svc.cluster.local", dns.TypeSRV, false},
		{z, "/skydns/local/cluster/dns-version/x", `{"text":"1.0.1"}`, "dns-version.cluster.local", dns.TypeTXT, false},
		{rz, "/skydns/arpa/in-addr/10/0/0/1", `{"host":"a.ns.svc.cluster.local"}`, "1.0.0.10.in-addr.arpa", dns.TypePTR, false},
		{z, "/skydns/local/cluster/svc/ns/a/x", `not json`, "a.ns.svc.cluster.local", 0, true},
		{z, "/skydns/local/cluster/svc/ns/a/x", `{"host":"10.0.0.1","text":"t"}`, "a.ns.svc.cluster.local", 0, true},
		{z, "/skydns/local/cluster/svc/ns/a/x", `{"host":"m.example.com","mail":true}`, "a.ns.svc.cluster.local", 0, true},
		{z, "/skydns/local/cluster/svc/ns/a/x", `{"host":"a.example.com","port":80}`, "a.ns.svc.cluster.local", 0, true},
		{z, "/skydns/local/cluster/svc/NS/a/x", `{"host":"10.0.0.1"}`, "", 0, true},
		{z, "/skydns/local/cluster/sv c/x", `{"host":"10.0.0.1"}`, "", 0, true},
	} {
		owner, e, err := c.z.Parse(c.key, []byte(c.value))
		if (err != nil) != c.bad || owner != c.owner || e.Type() != c.typ {
			t.Errorf("Parse(%s, %s) = %q, %s, %v; want %q, %s, bad %v", c.key, c.value, owner, dns.TypeToString[e.Type()], err, c.owner, dns.TypeToString[c.typ], c.bad)
		}
	}
}

func TestBuildDeduplicatesAndEvensTTL(t *testing.T) {
	s, errs := Build([]Config{cfg}, 3, []KV{
		{"/skydns/local/cluster/svc/ns/a/x1", []byte(`{"host":"10.0.0.1","ttl":30}`)},
		{"/skydns/local/cluster/svc/ns/a/x2", []byte(`{"host":"10.0.0.1","ttl":10}`)},
		{"/skydns/local/cluster/svc/ns/a/x3", []byte(`{"host":"10.0.0.2","ttl":20}`)},
		{"/skydns/local/cluster/svc/ns/a/x4", []byte(`{broken`)},
	})
	if len(errs) != 1 {
		t.Fatalf("want one skipped value, got %v", errs)
	}
	rrs := s.Zone("a.ns.svc.cluster.local").Node("a.ns.svc.cluster.local").RRSet(dns.TypeA).RRs
	if len(rrs) != 2 {
		t.Fatalf("want 2 distinct A records, got %v", rrs)
	}
	for _, r := range rrs {
		if r.Header().Ttl != 10 {
			t.Errorf("TTL %d: an RRset has one TTL, the smallest", r.Header().Ttl)
		}
	}
}

// TestBatchMatchesRebuild: whatever mix of puts and deletes the batches
// carry, the zone they derive holds exactly the names, empty
// non-terminals and entries of a zone built from scratch from the keys
// left, and older zones are unchanged.
func TestBatchMatchesRebuild(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	owners := []string{"a.x.svc", "b.x.svc", "c.a.x.svc", "d.c.a.x.svc", "y.svc", "e.y.svc", "z.svc", "svc",
		"_p._tcp.a.x.svc", "_q._tcp.a.x.svc", "_tcp.a.x.svc", "_p._tcp.svc", "_q._tcp.svc", "_r._tcp.w.svc", "_s._tcp.w.svc", "_p._tcp._tcp.a.x.svc"}
	// Every name that may exist: the owners, the names above them, and _tcp
	// names below them, which exist only while something is below.
	var probes []string
	for _, o := range owners {
		for n := o + ".cluster.local"; n != "local"; n = n[strings.IndexByte(n, '.')+1:] {
			probes = append(probes, n, "_tcp."+n)
		}
	}
	// Ids the publisher makes are held packed, others as text; a name's
	// entries mix both, and must order as their text does.
	ids := []string{"i0", "i1", "i000000000000000", "0000000000000000", "vvvvvvvvvvvvvvvv"}
	held := map[string]string{}
	z := NewZone(cfg)
	var history []*Zone
	var views []string
	for round := range 200 {
		b := z.Edit()
		for range 1 + rng.IntN(6) {
			owner := owners[rng.IntN(len(owners))] + ".cluster.local"
			id := ids[rng.IntN(len(ids))]
			key, _ := keys.RecordKey("/skydns", owner, id)
			if rng.IntN(2) == 0 {
				value := fmt.Sprintf(`{"host":"10.0.0.%d"}`, rng.IntN(250))
				put(t, z, b, key, value)
				held[key] = value
			} else {
				b.Delete(owner, id)
				delete(held, key)
			}
		}
		z = b.Done(uint32(round))
		var kvs []KV
		for k, v := range held {
			kvs = append(kvs, KV{Key: k, Value: []byte(v)})
		}
		want, _ := Build([]Config{cfg}, int64(round), kvs)
		if got, exp := dump(z), dump(want.Zones[0]); got != exp {
			t.Fatalf("round %d:\nincremental:\n%s\nrebuilt:\n%s", round, got, exp)
		}
		for _, name := range probes {
			want := false
			for k := range held {
				o, _, _ := keys.SplitRecordKey("/skydns", k)
				want = want || o == name || strings.HasSuffix(o, "."+name)
			}
			if got := z.Node(name) != nil; got != want {
				t.Fatalf("round %d: %s exists %v, want %v", round, name, got, want)
			}
		}
		z.Names(func(n *Node) {
			es := n.Entries()
			for i := 1; i < len(es); i++ {
				if es[i-1].ID() >= es[i].ID() {
					t.Fatalf("round %d: %s holds %s before %s", round, n.Name, es[i-1].ID(), es[i].ID())
				}
			}
		})
		history = append(history, z)
		views = append(views, dump(z))
	}
	for i, old := range history {
		if dump(old) != views[i] {
			t.Fatalf("zone of round %d changed after later batches", i)
		}
	}
	// A name of one Version in two zones holds the same in both: what the
	// answer cache relies on, counted _tcp names included.
	type seen struct {
		round int
		view  string
	}
	byVersion := map[string]map[Version]seen{}
	for i, z := range history {
		for _, name := range probes {
			n := z.Node(name)
			if n == nil {
				continue
			}
			view := fmt.Sprintf("kids=%d", n.kids)
			for _, e := range n.Entries() {
				view += " " + e.ID() + "=" + e.Addr().String()
			}
			if byVersion[name] == nil {
				byVersion[name] = map[Version]seen{}
			}
			v := z.Version(n)
			if s, ok := byVersion[name][v]; ok && s.view != view {
				t.Fatalf("%s: one Version in rounds %d (%s) and %d (%s)", name, s.round, s.view, i, view)
			}
			byVersion[name][v] = seen{i, view}
		}
	}
}

// dump lists the names that exist, each with its entries and the names
// below it, alike whether a _tcp name is a node or its parent's count.
func dump(z *Zone) string {
	var lines []string
	z.Names(func(n *Node) {
		kids := n.kids
		if u := n.one[0].under; u > 0 {
			kids++
			lines = append(lines, fmt.Sprintf("%s.%s kids=%d", countedLabel, n.Name, u))
		}
		l := fmt.Sprintf("%s kids=%d", n.Name, kids)
		for _, e := range n.Entries() {
			l += " " + e.ID() + "=" + e.Addr().String()
		}
		for _, s := range n.Sets() {
			l += fmt.Sprintf(" %v", rrStrings(s.RRs))
		}
		lines = append(lines, l)
	})
	slices.Sort(lines)
	return fmt.Sprintf("records=%d\n%s", z.Records, strings.Join(lines, "\n"))
}

// TestGrowingZoneKeepsOlderSnapshots grows a zone one batch at a time past
// several splits of its shards into many leaves, and checks that every
// older zone still holds exactly what it held: batches copy the directory,
// leaves and shards they change and never write into a shared one.
func TestGrowingZoneKeepsOlderSnapshots(t *testing.T) {
	const step, steps = 2000, 10 // 20,000 names: 512 shards in 8 leaves
	key := func(i int) string { return fmt.Sprintf("/skydns/local/cluster/svc/ns%d/s%d/x", i%7, i) }
	owner := func(i int) string { return fmt.Sprintf("s%d.ns%d.svc.cluster.local", i, i%7) }
	z := NewZone(cfg)
	var zones []*Zone
	for s := range steps {
		b := z.Edit()
		for i := s * step; i < (s+1)*step; i++ {
			put(t, z, b, key(i), fmt.Sprintf(`{"host":"10.1.%d.%d"}`, i>>8&255, i&255))
		}
		if s > 0 { // and change a name of every earlier batch
			put(t, z, b, key((s-1)*step), `{"host":"10.9.9.9"}`)
		}
		z = b.Done(uint32(s + 1))
		zones = append(zones, z)
	}
	if got := len(z.names) * leafSize; got != shardsFor(steps*step) {
		t.Fatalf("%d shards, want %d", got, shardsFor(steps*step))
	}
	for s, z := range zones {
		if z.Records != (s+1)*step {
			t.Errorf("zone %d: %d records, want %d", s, z.Records, (s+1)*step)
		}
		for i := range steps * step {
			n := z.Node(owner(i))
			if (n != nil) != (i < (s+1)*step) {
				t.Fatalf("zone %d: %s held %v", s, owner(i), n != nil)
			}
			if n == nil {
				continue
			}
			want := fmt.Sprintf("10.1.%d.%d", i>>8&255, i&255)
			if i%step == 0 && i/step < s {
				want = "10.9.9.9" // changed by the batch after its own
			}
			if got := n.Entries()[0].Addr().String(); got != want {
				t.Fatalf("zone %d: %s holds %s, want %s", s, owner(i), got, want)
			}
		}
	}
}

// Every record of one cluster shares its Origin, whatever object wrote
// it and whichever batch brought it; the value shown for debugging keeps
// the cluster and drops the source.
func TestRecordsShareTheirClustersOrigin(t *testing.T) {
	kv := func(svc, id, ip, cluster string) KV {
		return KV{Key: "/skydns/local/cluster/svc/ns/" + svc + "/" + id,
			Value: []byte(`{"host":"` + ip + `","cluster":"` + cluster + `","source":"service/ns/` + svc + `"}`)}
	}
	z := load(t, []KV{kv("a", "1", "10.0.0.1", "east"), kv("a", "2", "10.0.0.2", "west"), kv("b", "1", "10.0.1.1", "east")})
	bt := z.Edit()
	for _, kv := range []KV{kv("b", "2", "10.0.1.2", "east"), kv("c", "1", "10.0.2.1", "")} {
		owner, e, err := z.Parse(kv.Key, kv.Value)
		if err != nil {
			t.Fatal(err)
		}
		bt.Put(owner, e)
	}
	z = bt.Done(2)
	a, b, c := z.Node("a.ns.svc.cluster.local").Entries(), z.Node("b.ns.svc.cluster.local").Entries(), z.Node("c.ns.svc.cluster.local").Entries()
	if len(a) != 2 || len(b) != 2 || len(c) != 1 {
		t.Fatalf("entries a %v, b %v, c %v: want 2, 2, 1", a, b, c)
	}
	east := a[0].Origin()
	if east.Cluster != "east" || a[1].Origin().Cluster != "west" || b[0].Origin() != east || b[1].Origin() != east {
		t.Fatalf("origins a %p %+v, %p %+v; b %p, %p: want every east record on one Origin", east, *east, a[1].Origin(), *a[1].Origin(), b[0].Origin(), b[1].Origin())
	}
	if c[0].Origin() != z.line.none || len(z.line.origins) != 2 {
		t.Fatalf("c's origin %+v, %d origins in the table: want none for c, two in all", *c[0].Origin(), len(z.line.origins))
	}
	if got, want := string(b[1].Value().Encode()), `{"host":"10.0.1.2","cluster":"east"}`; got != want {
		t.Errorf("b's change shows %s, want %s", got, want)
	}
}

// An SRV whose target is the name its owner is under keeps no copy of the
// target: it is the end of the owner's name, which the node holds anyway.
// A target elsewhere, or one that only ends the same way, is its own.
func TestSRVTargetSharesItsOwnersName(t *testing.T) {
	z := NewZone(cfg)
	for _, c := range []struct {
		key, host string
		shared    bool
	}{
		{"/skydns/local/cluster/svc/ns/web/_tcp/_http/1", "web.ns.svc.cluster.local", true},
		{"/skydns/local/cluster/svc/ns/web/_tcp/_http/2", "WEB.ns.svc.cluster.local.", true},
		{"/skydns/local/cluster/svc/ns/web/_tcp/_http/3", "db.ns.svc.cluster.local", false},
		{"/skydns/local/cluster/svc/ns/web/_tcp/_http/4", "b.ns.svc.cluster.local", false}, // "...web" ends in "b" mid-label
	} {
		owner, e, err := z.Parse(c.key, []byte(`{"host":"`+c.host+`","port":80}`))
		if err != nil {
			t.Fatal(err)
		}
		want, _ := keys.CanonicalName(c.host)
		if e.Data() != want {
			t.Fatalf("%s: target %q, want %q", c.key, e.Data(), want)
		}
		start, end := uintptr(unsafe.Pointer(unsafe.StringData(owner))), uintptr(unsafe.Pointer(unsafe.StringData(owner)))+uintptr(len(owner))
		p := uintptr(unsafe.Pointer(unsafe.StringData(e.Data())))
		if shared := start <= p && p < end; shared != c.shared {
			t.Errorf("%s -> %s: target in the owner's string %v, want %v", c.key, c.host, shared, c.shared)
		}
	}
}

// A value put again as the name already holds it copies nothing and is no
// change (the store keeps the zone, and its serial, as they were); a value
// that differs in anything an answer shows is a change.
func TestPutOfAHeldValueChangesNothing(t *testing.T) {
	held := map[string]string{
		"/skydns/local/cluster/svc/ns/a/x1":            `{"host":"10.0.0.1"}`,
		"/skydns/local/cluster/svc/ns/b/_tcp/_http/x1": `{"host":"a.ns.svc.cluster.local","port":80}`,
		"/skydns/local/cluster/svc/ns/c/x1":            `{"host":"10.0.0.3","ttl":30}`,
		"/skydns/local/cluster/svc/ns/d/x1":            `{"host":"10.0.0.4","cluster":"east"}`,
		"/skydns/local/cluster/svc/ns/e/x1":            `{"host":"10.0.0.5"}`,
		"/skydns/local/cluster/svc/ns/e/x2":            `{"host":"10.0.0.6"}`,
		"/skydns/local/cluster/svc/ns/f/txt":           `{"text":"hello"}`,
	}
	z0 := NewZone(cfg)
	b := z0.Edit()
	for k, v := range held {
		put(t, z0, b, k, v)
	}
	z1 := b.Done(7)

	b = z1.Edit()
	for k, v := range held {
		put(t, z1, b, k, v)
	}
	if b.Changed() {
		t.Fatal("putting every held value again changed the zone")
	}

	for key, value := range map[string]string{
		"/skydns/local/cluster/svc/ns/a/x1":            `{"host":"10.0.0.9"}`,
		"/skydns/local/cluster/svc/ns/b/_tcp/_http/x1": `{"host":"a.ns.svc.cluster.local","port":81}`,
		"/skydns/local/cluster/svc/ns/c/x1":            `{"host":"10.0.0.3","ttl":31}`,
		"/skydns/local/cluster/svc/ns/d/x1":            `{"host":"10.0.0.4","cluster":"west"}`,
		"/skydns/local/cluster/svc/ns/e/x2":            `{"host":"10.0.0.7"}`,
		"/skydns/local/cluster/svc/ns/f/txt":           `{"text":"hello, world"}`,
		"/skydns/local/cluster/svc/ns/a/x2":            `{"host":"10.0.0.1"}`, // the same value under another id
	} {
		b := z1.Edit()
		put(t, z1, b, key, value)
		if !b.Changed() {
			t.Errorf("%s = %s: not a change", key, value)
			continue
		}
		owner, e, _ := z1.Parse(key, []byte(value))
		z := b.Done(9)
		if n := z.Node(owner); n == nil || !n.holds(&e) || z.Serial != 9 {
			t.Errorf("%s = %s: the new zone does not hold it at serial 9", key, value)
		}
		if n := z1.Node(owner); n != nil && n.holds(&e) {
			t.Errorf("%s = %s: the zone it began from holds it too", key, value)
		}
	}
}

// A node a batch copies keeps the name it had, not the one the change's
// key was parsed into: a name made for a parent by link is a suffix of its
// child's, one string for both, which a copy under the parsed name would
// hold twice for as long as the child stays.
func TestCopiedNodeKeepsItsName(t *testing.T) {
	srvKey, srvValue := "/skydns/local/cluster/svc/ns/a/_tcp/_http/x1", `{"host":"a.ns.svc.cluster.local","port":80}`
	aKey, aValue := "/skydns/local/cluster/svc/ns/a/x1", `{"host":"10.0.0.1"}`
	hostKey, hostValue := "/skydns/local/cluster/svc/ns/a/h/x1", `{"host":"10.0.0.2"}`
	values := map[string]string{srvKey: srvValue, aKey: aValue, hostKey: hostValue}
	var z1 *Zone
	var a *Node
	// The parent loaded first (in etcd's order when its id sorts before
	// "_tcp", or before a hostname) gives up its own string for its
	// child's, below a _tcp name that has no node or below one that does.
	for _, c := range []struct {
		order [2]string
		child string
	}{
		{[2]string{srvKey, aKey}, "_http._tcp.a.ns.svc.cluster.local"},
		{[2]string{aKey, srvKey}, "_http._tcp.a.ns.svc.cluster.local"},
		{[2]string{aKey, hostKey}, "h.a.ns.svc.cluster.local"},
	} {
		order := c.order
		z0 := NewZone(cfg)
		b := z0.Edit()
		for _, k := range order {
			put(t, z0, b, k, values[k])
		}
		z1 = b.Done(1)
		kid := z1.Node(c.child)
		a = z1.Node("a.ns.svc.cluster.local")
		if !strings.HasSuffix(kid.Name, a.Name) || unsafe.StringData(a.Name) != unsafe.StringData(kid.Name[len(kid.Name)-len(a.Name):]) {
			t.Fatalf("loaded %s, then %s: the parent does not share its child's name", order[0], order[1])
		}
	}
	b := z1.Edit()
	put(t, z1, b, "/skydns/local/cluster/svc/ns/a/x1", `{"host":"10.0.0.2"}`)
	z2 := b.Done(2)
	if n := z2.Node("a.ns.svc.cluster.local"); n == a || unsafe.StringData(n.Name) != unsafe.StringData(a.Name) {
		t.Error("the changed node holds a name of its own")
	}
}

// TestRecordSizes holds a record's parts to the size classes the memory
// figures were measured in (BenchmarkLoad, BenchmarkLoadFleet): a field
// more in any puts every record in the next class. An SRV's, a PTR's or
// a hand-written key's extra at 64 bytes instead of 48 was 1 MB of a
// hundred thousand services' 26.
func TestRecordSizes(t *testing.T) {
	for _, c := range []struct {
		what      string
		got, want uintptr
	}{
		{"Entry", unsafe.Sizeof(Entry{}), 40},
		{"extra", unsafe.Sizeof(extra{}), 48},
		{"Node", unsafe.Sizeof(Node{}), 64},
	} {
		if c.got != c.want {
			t.Errorf("a %s is %d bytes, want %d", c.what, c.got, c.want)
		}
	}
}

// TestRawIDs: an entry tells a packed id from one kept as text by the id
// alone: a hand-written key's id, the reverse zone's "", and the id of ten
// zero bytes, which keys.PackID does not pack, all come back as written
// and are found, replaced and deleted by it.
func TestRawIDs(t *testing.T) {
	for _, c := range []struct {
		zone  Config
		owner string
		ids   []string
		value string
	}{
		{cfg, "a.ns.svc.cluster.local", []string{"0000000000000000", "x1", "0000000000000001"}, `{"host":"10.0.0.%d"}`},
		{Config{Name: "in-addr.arpa", Prefix: "/skydns", TTL: 5}, "1.0.0.10.in-addr.arpa", []string{""}, `{"host":"h%d.ns.svc.cluster.local"}`},
	} {
		z := NewZone(c.zone)
		put := func(z *Zone, id string, i int) *Zone {
			k, err := keys.Key(c.zone.Prefix, c.owner)
			if err != nil {
				t.Fatal(err)
			}
			if id != "" {
				k += "/" + id
			}
			owner, e, err := z.Parse(k, fmt.Appendf(nil, c.value, i))
			if err != nil {
				t.Fatal(err)
			}
			b := z.Edit()
			b.Put(owner, e)
			return b.Done(1)
		}
		for i, id := range c.ids {
			z = put(z, id, i)
		}
		z = put(z, c.ids[0], 9) // replaces, by id
		es := z.Node(c.owner).Entries()
		var got []string
		for i := range es {
			got = append(got, es[i].ID())
		}
		if want := slices.Sorted(slices.Values(c.ids)); !slices.Equal(got, want) {
			t.Fatalf("%s: ids %q, want %q", c.owner, got, want)
		}
		for i := range es {
			if es[i].ID() == c.ids[0] && !strings.Contains(fmt.Sprint(es[i].Data(), es[i].Addr()), "9") {
				t.Errorf("%s: id %q holds %v / %q, want the value put last", c.owner, c.ids[0], es[i].Addr(), es[i].Data())
			}
		}
		b := z.Edit()
		for _, id := range c.ids {
			b.Delete(c.owner, id)
		}
		if z = b.Done(2); z.Node(c.owner) != nil || z.Records != 0 {
			t.Errorf("%s: %d records left after deleting every id", c.owner, z.Records)
		}
	}
}

// A Version tells one content of a name from every other, which the
// answer cache relies on to keep an answer across snapshots: a batch that
// leaves a name alone keeps its Version, one that changes it makes a new
// one, and a relist (a new NewZone, whose batches count from 1 again)
// makes new ones for every name, even where the ids of their batches are
// the same.
func TestVersionTellsContents(t *testing.T) {
	load := func(host string) *Zone {
		z := NewZone(cfg)
		b := z.Edit()
		put(t, z, b, "/skydns/local/cluster/svc/ns/a/x1", `{"host":"`+host+`"}`)
		put(t, z, b, "/skydns/local/cluster/svc/ns/b/x1", `{"host":"10.0.9.9"}`)
		return b.Done(1)
	}
	const a, b = "a.ns.svc.cluster.local", "b.ns.svc.cluster.local"
	z1 := load("10.0.0.1")
	bt := z1.Edit()
	put(t, z1, bt, "/skydns/local/cluster/svc/ns/a/x1", `{"host":"10.0.0.2"}`)
	z2 := bt.Done(2)
	if z1.Version(z1.Node(b)) != z2.Version(z2.Node(b)) {
		t.Error("a name the batch left alone has a new Version")
	}
	if z1.Version(z1.Node(a)) == z2.Version(z2.Node(a)) {
		t.Error("a changed name kept its Version")
	}
	relisted := load("10.0.0.1")
	if z1.Version(z1.Node(b)) == relisted.Version(relisted.Node(b)) {
		t.Error("a relisted name has the Version of the zone before the relist")
	}
	if (&Zone{}).Version(nil) != (Version{}) || z1.Version(z1.Node("nosuch.ns.svc.cluster.local")) != (Version{}) {
		t.Error("no node has a Version")
	}
}

// A target that a node has as its name keeps that node's string: a
// service's PTR points at its A record's name, and at a hundred thousand
// services a copy of each was a megabyte. The answer is the same.
func TestTargetsKeepHeldNames(t *testing.T) {
	fwd := NewZone(cfg)
	b := fwd.Edit()
	put(t, fwd, b, "/skydns/local/cluster/svc/ns/web/a1", `{"host":"10.96.0.10"}`)
	fwd = b.Done(1)
	name := fwd.Node("web.ns.svc.cluster.local").Name
	held := func(n string) string {
		if n := fwd.Node(n); n != nil {
			return n.Name
		}
		return ""
	}
	rev := NewZone(Config{Name: "in-addr.arpa", Prefix: "/skydns", TTL: 5})
	for _, h := range []Held{held, nil} {
		owner, e, err := rev.ParseHeld("/skydns/arpa/in-addr/10/96/0/10", []byte(`{"host":"web.ns.svc.cluster.local"}`), h)
		if err != nil {
			t.Fatal(err)
		}
		if shares := unsafe.StringData(e.Data()) == unsafe.StringData(name); shares != (h != nil) {
			t.Errorf("held %v: the PTR's target shares the A record's name: %v", h != nil, shares)
		}
		b := rev.Edit()
		b.Put(owner, e)
		z := b.Done(1)
		rrs := z.Node("10.0.96.10.in-addr.arpa").RRSet(dns.TypePTR).RRs
		if len(rrs) != 1 || rrs[0].(*dns.PTR).Ptr != "web.ns.svc.cluster.local." {
			t.Errorf("held %v: PTR records %v", h != nil, rrs)
		}
	}
}

// TestTCPNamesAreCounted: a _tcp name with no records of its own has no
// node while its parent can count the names below it, yet exists exactly
// while one does, past the count's bound too, and tells its changes by
// its Version as a node's name does.
func TestTCPNamesAreCounted(t *testing.T) {
	const svc, tcp = "a.ns.svc.cluster.local", "_tcp.a.ns.svc.cluster.local"
	srv := func(i int) string { return fmt.Sprintf("/skydns/local/cluster/svc/ns/a/_tcp/_p%d/x", i) }
	z := NewZone(cfg)
	edit := func(f func(b *Batch)) {
		b := z.Edit()
		f(b)
		z = b.Done(1)
	}
	edit(func(b *Batch) {
		put(t, z, b, "/skydns/local/cluster/svc/ns/a/x", `{"host":"10.0.0.1"}`)
		put(t, z, b, srv(0), `{"host":"a.ns.svc.cluster.local","port":80}`)
	})
	n := z.Node(tcp)
	if n == nil || len(n.Entries()) != 0 || n.kids != 1 {
		t.Fatalf("%s: %+v, want an empty non-terminal of one name", tcp, n)
	}
	if z.nodeAt(tcp, hashOf(tcp)) != nil {
		t.Fatalf("%s has a node of its own", tcp)
	}
	v := z.Version(n)
	edit(func(b *Batch) { put(t, z, b, "/skydns/local/cluster/svc/ns/b/x", `{"host":"10.0.0.2"}`) })
	if z.Version(z.Node(tcp)) != v {
		t.Error("a change elsewhere changed the _tcp name's Version")
	}
	edit(func(b *Batch) { put(t, z, b, srv(1), `{"host":"a.ns.svc.cluster.local","port":81}`) })
	if z.Version(z.Node(tcp)) == v {
		t.Error("a name more below it left the _tcp name's Version")
	}

	// Past what the parent counts, the _tcp name gets a node, and keeps
	// it while names are below it.
	const many = math.MaxUint8 + 10
	edit(func(b *Batch) {
		for i := 2; i < many; i++ {
			put(t, z, b, srv(i), `{"host":"a.ns.svc.cluster.local","port":80}`)
		}
	})
	if n := z.nodeAt(tcp, hashOf(tcp)); n == nil || n.kids != many || z.Node(svc).one[0].under != 0 {
		t.Fatalf("%d names below %s: its node %+v", many, tcp, n)
	}
	edit(func(b *Batch) {
		for i := range many - 1 {
			b.Delete("_p"+strconv.Itoa(i)+"."+tcp, "x")
		}
	})
	if n := z.Node(tcp); n == nil || n.kids != 1 {
		t.Fatalf("one name left below %s: %+v", tcp, n)
	}
	edit(func(b *Batch) { b.Delete("_p"+strconv.Itoa(many-1)+"."+tcp, "x") })
	if z.Node(tcp) != nil || z.Node(svc) == nil || z.Records != 2 {
		t.Fatalf("nothing below %s: it exists, or %s is gone", tcp, svc)
	}

	// A record at the _tcp name gives it a node, which takes the count;
	// the record gone, the names below keep it.
	edit(func(b *Batch) {
		put(t, z, b, srv(0), `{"host":"a.ns.svc.cluster.local","port":80}`)
		put(t, z, b, srv(1), `{"host":"a.ns.svc.cluster.local","port":81}`)
	})
	edit(func(b *Batch) { put(t, z, b, "/skydns/local/cluster/svc/ns/a/_tcp/x", `{"text":"t"}`) })
	if n := z.nodeAt(tcp, hashOf(tcp)); n == nil || n.kids != 2 || len(n.Entries()) != 1 || z.Node(svc).one[0].under != 0 {
		t.Fatalf("a record at %s: its node %+v", tcp, n)
	}
	edit(func(b *Batch) { b.Delete(tcp, "x") })
	if n := z.Node(tcp); n == nil || n.kids != 2 {
		t.Fatalf("the record at %s gone: %+v", tcp, n)
	}
	edit(func(b *Batch) {
		b.Delete("_p0."+tcp, "x")
		b.Delete("_p1."+tcp, "x")
		b.Delete(svc, "x")
		b.Delete("b.ns.svc.cluster.local", "x")
	})
	if z.Node(tcp) != nil || z.Node(svc) != nil || z.Node("cluster.local") != nil || z.Records != 0 {
		t.Fatal("an empty zone holds names")
	}
}

// TestTargetAtACountedNameIsCopied: a CNAME's target at a counted _tcp
// name, which no node holds, is copied out of the value, whose bytes a
// load reuses for its next page, whatever the lookup of held names gives.
func TestTargetAtACountedNameIsCopied(t *testing.T) {
	z0 := NewZone(cfg)
	b := z0.Edit()
	put(t, z0, b, "/skydns/local/cluster/svc/ns/a/x1", `{"host":"10.0.0.1"}`)
	put(t, z0, b, "/skydns/local/cluster/svc/ns/a/_tcp/_http/x1", `{"host":"a.ns.svc.cluster.local","port":80}`)
	const target = "_tcp.a.ns.svc.cluster.local"
	for what, held := range map[string]Held{
		"NameHeld": b.NameHeld,
		"Node":     func(n string) string { return b.Node(n).Name },
	} {
		if what == "NameHeld" && held(target) != "" {
			t.Fatalf("NameHeld(%s) = %q: no node holds it", target, held(target))
		}
		value := []byte(`{"host":"` + target + `"}`)
		_, e, err := z0.ParseHeld("/skydns/local/cluster/svc/ns/alias/x1", value, held)
		if err != nil {
			t.Fatal(err)
		}
		copy(value, strings.Repeat("X", len(value))) // the page's buffer, reused
		if e.Data() != target {
			t.Errorf("held names by %s: the target is %q once the value's bytes are reused", what, e.Data())
		}
	}
}

package snap

import (
	"bytes"
	"cmp"
	"hash/maphash"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/miekg/dns"

	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/server/skydns"
)

// Snapshot is every served zone at one etcd revision.
type Snapshot struct {
	Rev   int64
	Zones []*Zone // most specific first, so the first match is the longest

	id atomic.Pointer[ident] // what its Marks hold; made when first asked for
}

// NewSnapshot orders zones most labels first, so Zone finds the most
// specific one.
func NewSnapshot(rev int64, zones []*Zone) *Snapshot {
	zones = slices.Clone(zones)
	slices.SortStableFunc(zones, func(a, b *Zone) int {
		return cmp.Compare(strings.Count(b.Name, "."), strings.Count(a.Name, "."))
	})
	return &Snapshot{Rev: rev, Zones: zones}
}

// KV is one stored key and value.
type KV struct {
	Key   string
	Value []byte
}

// Build makes a snapshot at rev from stored pairs, for tests and
// benchmarks that need no etcd; the errors are the values it skipped.
func Build(zones []Config, rev int64, kvs []KV) (*Snapshot, []error) {
	var out []*Zone
	var errs []error
	for _, c := range zones {
		z := NewZone(c)
		b := z.Edit()
		for _, kv := range kvs {
			if !strings.HasPrefix(kv.Key, z.Range) {
				continue
			}
			if c.SkyDNS {
				if err := b.PutSkyDNS(kv.Key, kv.Value, false); err != nil {
					errs = append(errs, err)
				}
				continue
			}
			if z.IsStubKey(kv.Key) {
				if _, err := b.PutStub(kv.Key, kv.Value); err != nil {
					errs = append(errs, err)
				}
				continue
			}
			owner, e, err := z.Parse(kv.Key, kv.Value)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			b.Put(owner, e)
		}
		out = append(out, b.Done(uint32(rev)))
	}
	return NewSnapshot(rev, out), errs
}

// Zone returns the zone holding name (canonical), or nil.
func (s *Snapshot) Zone(name string) *Zone {
	if s == nil {
		return nil
	}
	for _, z := range s.Zones {
		if keys.IsSubdomain(name, z.Name) {
			return z
		}
	}
	return nil
}

// Config is what the records of a zone are built with.
type Config struct {
	Name   string // canonical zone name
	Prefix string // one-segment etcd prefix
	TTL    uint32 // TTL of values that carry none
	// Cluster is the id of the cluster dnsd serves: records whose value
	// carries it lead every RRset, so a client that takes the first
	// address reaches its own cluster's backends when there are any
	// (spec 003). Empty: one group, in key order.
	Cluster string
	// SkyDNS serves the zone as CoreDNS's etcd plugin does (subtree
	// answers, types inferred from values): see package skydns.
	SkyDNS bool
	// Shared is a tree every cluster's publisher writes (clusterset.local,
	// the federation zone). Its dns/stub/ keys are no stub domains: one
	// cluster's credential would send every cluster's questions, for any
	// name, to nameservers of its choosing (PutStub).
	Shared bool
}

// A zone's names are split into shards, each its own table, so a batch
// copies only the shards it touches. The number of shards grows with the
// zone, keeping them at about shardSize names: a change then copies a few
// dozen table slots whatever the zone's size (BenchmarkBurst: a rolling
// update of 100 endpoints in a million-record zone), and a small zone
// keeps a few maps, not thousands. The shards sit in leaves of leafSize
// under a directory, so a batch also copies only the directory (a pointer
// a leaf) and the leaves it touches, not a pointer for every shard: at a
// million records that was 128 KiB copied, and as much garbage, for each
// changed record.
const (
	shardSize = 64
	minShards = 64
	maxShards = 1 << 16
	leafSize  = 64  // shards a leaf; minShards is one leaf
	podShards = 256 // pod records are fewer, and change one at a time
)

var seed = maphash.MakeSeed()

// shardsFor is the number of shards for about n names: a power of two.
func shardsFor(n int) int {
	s := minShards
	for s < maxShards && s*shardSize < n {
		s *= 2
	}
	return s
}

func (z *Zone) shardOf(h uint64) int {
	return int(h & uint64(len(z.names)*leafSize-1))
}

// leaf is leafSize shards of a zone's names.
type leaf [leafSize]*table

// newLeaves returns the leaves of shards empty shards, each sized for per
// names, packed (pack.go).
func newLeaves(shards, per int) []*leaf {
	dir := make([]*leaf, shards/leafSize)
	size := tableSize(per)
	for i := range dir {
		dir[i] = packedLeaf(func(int) int { return size })
	}
	return dir
}

// Zone is one zone's names. Nodes exist for every name that holds records
// and for every empty non-terminal above one, up to the apex, but for
// most _tcp names: see countedLabel.
type Zone struct {
	Config
	Reverse bool
	Serial  uint32 // etcd revision of the zone's last change, mod 2^32
	Records int    // entries held
	// Range is the etcd key prefix of the zone: <prefix>/<reversed labels>/.
	Range  string
	names  []*leaf                             // shard i is names[i/leafSize][i%leafSize]; nil until a name lands in it
	copies int                                 // tables batches copied since the tables were packed (pack.go)
	pods   *[podShards]map[netip.Addr][]string // PodNamespaces; nil until a pod record lands, then a nil map until one lands in the shard

	stubRange  string           // Range + dns/stub/: nameservers, not records
	stubs      map[string]*Stub // by domain
	stubsBatch uint32           // the batch that last copied stubs, for Mark.SameStubs

	Sky *skydns.Tree // the values of a SkyDNS zone; nil: none yet, or not one

	line *lineage
}

// lineage is what every zone derived from one NewZone shares: what the
// records are built with, and the tables of the one writer that derives
// them. Batches of a lineage run one after another, never at once.
type lineage struct {
	ttl     uint32
	cluster string
	origins map[string]*Origin // by cluster
	none    *Origin            // of the values that name no cluster
	batches uint32             // Edit calls, so a node knows which batch made it
}

// KeyRange is the etcd key range the zone's records are under ("" if the
// prefix or name is not valid).
func (c Config) KeyRange() string {
	k, err := keys.Key(c.Prefix, c.Name)
	if err != nil {
		return ""
	}
	return k + "/"
}

// NewZone returns an empty zone.
func NewZone(c Config) *Zone {
	z := &Zone{Config: c, Reverse: keys.IsReverseZone(c.Name)}
	if z.Range = c.KeyRange(); z.Range != "" {
		z.stubRange, _ = keys.StubRange(c.Prefix, c.Name)
	}
	z.names = []*leaf{new(leaf)}
	z.line = &lineage{ttl: c.TTL, cluster: c.Cluster, origins: map[string]*Origin{}}
	z.line.none = newOrigin("", z.line)
	return z
}

// Node returns the node of a canonical name, or nil if nothing exists at
// or below it.
func (z *Zone) Node(name string) *Node {
	if len(z.names) == 0 {
		return nil // a zone made without NewZone, such as an answer engine's synthesized one
	}
	if n := z.nodeAt(name, hashOf(name)); n != nil {
		return n
	}
	return z.uncounted(name)
}

// uncounted returns a node made for a _tcp name that has none of its own
// but names below it, which its parent counts (Batch.link): an empty
// non-terminal, of the parent's Version, which changes with the count
// (and with the parent's records: a cached NODATA of the _tcp name is
// built again for them, and a service's cached answers for a port that
// comes or goes). Its Name is the caller's string: NameHeld, not Node, is
// for the names nodes hold.
func (z *Zone) uncounted(name string) *Node {
	parent, ok := z.tcpParent(name)
	if !ok {
		return nil
	}
	p := z.nodeAt(parent, hashOf(parent))
	if p == nil || p.one[0].under == 0 {
		return nil
	}
	return &Node{Name: name, kids: int32(p.one[0].under), batch: p.batch}
}

// tcpParent returns the parent of a _tcp name (countedLabel), which may
// count the names below it; false for any other name and for the apex.
func (z *Zone) tcpParent(name string) (string, bool) {
	label, parent, ok := strings.Cut(name, ".")
	return parent, ok && label == countedLabel && name != z.Name
}

// NameHeld returns the string the node of a canonical name holds as its
// name, "" if there is none (a counted _tcp name has none: see Node).
func (z *Zone) NameHeld(name string) string {
	if len(z.names) == 0 {
		return ""
	}
	if n := z.nodeAt(name, hashOf(name)); n != nil {
		return n.Name
	}
	return ""
}

// nodeAt is Node of a name whose hash is h.
func (z *Zone) nodeAt(name string, h uint64) *Node {
	i := z.shardOf(h)
	return z.names[i/leafSize][i%leafSize].get(name, h)
}

// Names calls f for every node (a counted _tcp name has none); for tests
// and debugging, not for queries.
func (z *Zone) Names(f func(*Node)) {
	for _, l := range z.names {
		for _, t := range l {
			t.each(f)
		}
	}
}

// Node is one owner name. Its records are built from its entries each
// time an answer asks (records.go), and kept by nothing but that answer:
// the answer cache, whose bounds count them, keeps the packed answers of
// the names asked. Records kept in the node once built would sit outside
// those bounds, about 240 bytes for each name ever asked and kilobytes for
// a name of many, until the name changed (BenchmarkCacheFill measured it).
//
// A node is 64 bytes, a size class of the Go heap, and most of a large
// zone's memory (at 80, with a pointer to its lineage and one to its side,
// nodes were half of a hundred thousand services' live heap). So it holds
// no pointer of its own beyond its name: what its records are built with
// (the zone's TTL and cluster) is its entries' Origin's, and what only
// some names need sits behind its empty entry (see side).
type Node struct {
	Name string // canonical, no trailing dot
	// The valid values held at the name, by id. Most names hold one: it
	// sits in the node (one), with no slice header and no array of its
	// own. A node of two or more, or of made records, has no value in
	// one; its pointer is the node's side.
	one   [1]Entry
	kids  int32  // names one label below that exist
	batch uint32 // the batch that made this copy; it may change it in place
}

// side is what a node holds beyond one entry. It is reached through x of
// the node's empty entry, the one place an Entry's x is no extra: a node
// holds a value in one, or a side, never both. It changes only while the
// node is its batch's own, before any query can see it.
type side struct {
	more []Entry
	made *[]RRSet // a node NewNode made: its records, as made
}

// side returns the node's side; nil if it has none.
func (n *Node) side() *side {
	if n.one[0].typ != 0 {
		return nil
	}
	return (*side)(n.one[0].x)
}

// setSide makes sd the node's side, in place of any value.
func (n *Node) setSide(sd *side) { n.setOne(Entry{x: unsafe.Pointer(sd)}) }

// setOne makes e the node's one entry, keeping the node's count of names
// under its _tcp child: the under of any entry but that one means nothing.
func (n *Node) setOne(e Entry) {
	e.under = n.one[0].under
	n.one[0] = e
}

// empty reports whether nothing is at or below the node, so it goes.
func (n *Node) empty() bool {
	return len(n.Entries()) == 0 && n.kids == 0 && n.one[0].under == 0
}

// Entries returns the valid values held at the name, by id. They are the
// node's own: a caller must not change them.
func (n *Node) Entries() []Entry {
	if n == nil {
		return nil
	}
	if n.one[0].typ != 0 {
		return n.one[:]
	}
	if sd := n.side(); sd != nil {
		return sd.more
	}
	return nil
}

// setEntries makes es the node's entries; es may be n.Entries(), changed.
// The node is the batch's own: no query has seen it.
func (n *Node) setEntries(es []Entry) {
	switch len(es) {
	case 0, 1:
		var one Entry
		if len(es) == 1 {
			one = es[0] // es may be n.one[:]
		}
		n.setOne(one)
	default:
		if sd := n.side(); sd != nil {
			sd.more = es
		} else {
			n.setSide(&side{more: es})
		}
	}
}

// holds reports whether e is among the node's entries as it is.
func (n *Node) holds(e *Entry) bool {
	es := n.Entries()
	i, found := slices.BinarySearchFunc(es, e.ID(), byID)
	return found && es[i].same(e)
}

// Version tells one content of a name from every other: two nodes of a
// name have the same Version exactly when one snapshot shares the other's
// node. A batch copies a node to change it, and a published node never
// changes again, so a name whose Version is the same in two snapshots
// answers the same in both. The zero Version is no node; unlike the node
// itself, a Version keeps nothing of it alive.
type Version struct {
	line  *lineage
	batch uint32
}

// Version returns the Version of n, a node of z (nodes never move from
// the lineage that made them); the zero Version for nil.
func (z *Zone) Version(n *Node) Version {
	if n == nil {
		return Version{}
	}
	return Version{z.line, n.batch}
}

// NewNode returns a node that holds sets as made, for names an answer
// engine synthesizes rather than reads.
func NewNode(name string, sets ...RRSet) *Node {
	n := &Node{Name: name}
	n.setSide(&side{made: &sets})
	return n
}

// Entry is one valid value, reduced to what answers are built from. A
// million of them make most of dnsd's memory, so it holds no key (the node
// and ID make it), no JSON and no text form of an address, and an address
// record whose id the publisher made (keys.PackID) is 40 bytes with no
// pointer of its own: what only other types or hand-written keys need
// lives beside it, in extra.
type Entry struct {
	addr [16]byte // A: the first 4 bytes; AAAA: all 16
	id   keys.PackedID
	// The record type: every type a zone holds is below 256 (Type).
	typ uint8
	// under is, in a node's one entry and nowhere else, how many names
	// are below the node's _tcp child while that child has no node (see
	// countedLabel): the byte a uint16 type took, as the node has no room.
	under uint8
	ttl   uint32 // 0: the zone's
	// x is the entry's *extra: its own, or, for an address record with a
	// packed id, the plain one its Origin holds, so the entry needs no
	// second pointer for its origin. nil only in the zero Entry. In a
	// node's empty entry, and only there, it is the node's *side (see
	// Node.side): an untyped pointer, so that the node needs no field of
	// its own for what few names have.
	x unsafe.Pointer
}

// same reports whether e and o are the same record: every answer built
// from one is built from the other.
func (e *Entry) same(o *Entry) bool {
	return e.addr == o.addr && e.id == o.id && e.typ == o.typ && e.ttl == o.ttl &&
		(e.x == o.x || e.x != nil && o.x != nil && *e.extra() == *o.extra())
}

// extra is the part of an entry most records do without, and its origin.
type extra struct {
	origin   *Origin // shared by every record of one cluster; never nil
	id       string  // the key's last segment, when the entry's is no packed id: "" in a reverse zone, whose key is the name itself
	data     string  // the canonical target of a CNAME, PTR or SRV, or the text of a TXT
	port     int32   // SRV; -1 is CoreDNS's "no port": the record is not served
	priority uint16
	weight   uint16
}

func (e *Entry) extra() *extra {
	if e.x == nil {
		return &noOrigin.plain
	}
	return (*extra)(e.x)
}

// packed reports whether e's id is packed in it; if not, its extra holds
// the text. keys.PackID never makes the zero PackedID, so the extra needs
// no flag, and is 48 bytes, not 64.
func (e *Entry) packed() bool { return e.id != keys.PackedID{} }

// ID returns the key's last segment; "" in a reverse zone.
func (e *Entry) ID() string {
	if !e.packed() {
		return e.extra().id
	}
	return e.id.String()
}

// compareID orders entries by ID as strings.Compare does, without making
// the text of a packed one.
func (e *Entry) compareID(id string) int {
	if !e.packed() {
		return strings.Compare(e.extra().id, id)
	}
	if p, ok := keys.PackID(id); ok {
		return bytes.Compare(e.id[:], p[:])
	}
	return strings.Compare(e.id.String(), id)
}

// Type is the record type: A, AAAA, CNAME, PTR, TXT or SRV.
func (e *Entry) Type() uint16 { return uint16(e.typ) }

// TTL is the value's TTL; 0: the zone's.
func (e *Entry) TTL() uint32 { return e.ttl }

// Addr is the address of an A or AAAA record.
func (e *Entry) Addr() netip.Addr {
	switch e.Type() {
	case dns.TypeA:
		return netip.AddrFrom4([4]byte(e.addr[:4]))
	case dns.TypeAAAA:
		return netip.AddrFrom16(e.addr).Unmap()
	}
	return netip.Addr{}
}

// Data is the canonical target of a CNAME, PTR or SRV, or the text of a
// TXT.
func (e *Entry) Data() string { return e.extra().data }

// Port is an SRV record's port; -1 is CoreDNS's "no port".
func (e *Entry) Port() int32 { return e.extra().port }

// Priority and Weight are an SRV record's, as stored.
func (e *Entry) Priority() uint16 { return e.extra().priority }
func (e *Entry) Weight() uint16   { return e.extra().weight }

// Origin says who wrote the record.
func (e *Entry) Origin() *Origin { return e.extra().origin }

// Origin says which cluster wrote a record: what federation answers
// order by (spec 003). A value's source (the Kubernetes object) is not
// kept: no answer depends on it, and where a service has one record a
// zone, as most have, an Origin of its own for each object was a quarter
// of the snapshot's heap (BenchmarkLoadFleet). etcdctl shows it.
//
// An Origin is its lineage's, and is how a node's records reach what they
// are built with (the zone's TTL and cluster): the node has no pointer to
// spare for it.
type Origin struct {
	Cluster string
	plain   extra // the extra of its address records with packed ids
	line    *lineage
}

// newOrigin returns an Origin of l whose plain extra points back to it.
func newOrigin(cluster string, l *lineage) *Origin {
	o := &Origin{Cluster: cluster, line: l}
	o.plain.origin = o
	return o
}

// noOrigin is the origin of an entry no value was parsed into yet (or
// none could be): such an entry is never held in a node.
var noOrigin = newOrigin("", &lineage{})

// Value returns the value an entry was read from, less what dnsd drops
// (group, targetstrip, source), for debugging.
func (e *Entry) Value() keys.Value {
	v := keys.Value{TTL: e.ttl, Port: int(e.Port()), Priority: int(e.Priority()), Weight: int(e.Weight()),
		Cluster: e.Origin().Cluster}
	switch e.Type() {
	case dns.TypeA, dns.TypeAAAA:
		v.Host = e.Addr().String()
	case dns.TypeTXT:
		v.Text = e.Data()
	default:
		v.Host = e.Data()
	}
	return v
}

// RRSet is the deduplicated records of one type at a name, all with the
// smallest TTL among them (RFC 2181 section 5.2). The first Local records
// are the local cluster's (Config.Cluster), in key order, then come the
// other clusters' records, in key order. A record that the local cluster
// and another both hold is local: it is one of ours to reach.
type RRSet struct {
	Type  uint16
	RRs   []dns.RR
	Local int
}

// Owner returns the owner name a key stands for in zone z and the record
// id: the key minus its id in a forward zone; in a reverse zone the exact
// key, with no id (where CoreDNS reads PTR records).
func (z *Zone) Owner(key string) (owner, id string, err error) {
	if z.Reverse {
		owner, err = keys.Name(z.Prefix, key)
	} else {
		owner, id, err = keys.SplitRecordKey(z.Prefix, key)
	}
	if err != nil {
		return "", "", err
	}
	if !keys.IsSubdomain(owner, z.Name) {
		return "", "", &outsideError{key: key, zone: z.Name}
	}
	return owner, id, nil
}

type outsideError struct{ key, zone string }

func (e *outsideError) Error() string {
	return "key " + e.key + ": owner is outside zone " + e.zone
}

// Key returns the etcd key of an entry of owner.
func (z *Zone) Key(owner string, e *Entry) string {
	k, _ := keys.Key(z.Prefix, owner)
	if z.Reverse {
		return k
	}
	return k + "/" + e.ID()
}

// Parse decodes a value stored at key into an entry of its owner. When
// the key names an owner but the value is invalid, it returns the owner
// and an entry with the ID, so the caller can drop what the key held.
func (z *Zone) Parse(key string, value []byte) (string, Entry, error) {
	return z.ParseHeld(key, value, nil)
}

// Held returns the string a node holds as its name, in any zone, or ""
// where no node has the name.
type Held func(name string) string

// ParseHeld is Parse, where the target of a CNAME, PTR or SRV that a node
// already has as its name (held) keeps that node's string instead of a
// copy: a service's PTR points at its A record's name, a headless
// service's SRV records at its endpoints' names. Strings never change, so
// the node may go while the entry keeps its name.
func (z *Zone) ParseHeld(key string, value []byte, held Held) (string, Entry, error) {
	owner, id, err := z.Owner(key)
	if err != nil {
		return "", Entry{}, err
	}
	e := newEntry(id)
	// The strings of v share value's memory: what the entry keeps is
	// copied below, the rest (the address, the group) is parsed or dropped.
	v, err := keys.DecodeView(value)
	if err != nil {
		return owner, e, err
	}
	if z.Cluster != "" && v.PerCluster() && v.Cluster != z.Cluster {
		// Another cluster's own answer (its clusterset IP) is never this
		// one's: it may route nowhere here, or to a different service of
		// this cluster's range, and where the service is not imported
		// here it has no clusterset IP here. An entry of no type is none.
		return owner, e, nil
	}
	t, err := v.Type(owner, z.Reverse)
	if err != nil {
		return owner, e, err
	}
	e.typ, e.ttl = uint8(t), v.TTL // keys.View.Type gives one of six types, all below 256
	switch t {
	case dns.TypeA, dns.TypeAAAA:
		ip, _ := netip.ParseAddr(v.Host) // Type parsed it already
		if ip = ip.Unmap(); t == dns.TypeA {
			a := ip.As4()
			copy(e.addr[:], a[:])
		} else {
			e.addr = ip.As16()
		}
	default:
		x := e.own()
		x.port, x.priority, x.weight = int32(v.Port), uint16(v.Priority), uint16(v.Weight)
		if t == dns.TypeTXT {
			x.data = strings.Clone(v.Text)
		} else if target := v.Target(); keys.IsSubdomain(owner, target) {
			// An SRV's target is most often the name its own owner is
			// under (_http._tcp.NAME -> NAME): a part of the owner's
			// string, which a new node keeps as its name, instead of a
			// copy. Where the node exists already the entry keeps this
			// owner string alone, a few bytes more than a copy.
			x.data = owner[len(owner)-len(target):]
		} else if s := heldName(held, target); s != "" {
			x.data = s
		} else {
			x.data = strings.Clone(target)
		}
	}
	if o := z.line.origin(v.Cluster); e.extra().shared() {
		e.x = unsafe.Pointer(&o.plain)
	} else {
		e.extra().origin = o
	}
	return owner, e, nil
}

func heldName(held Held, name string) string {
	if held == nil {
		return ""
	}
	s := held(name)
	if unsafe.StringData(s) == unsafe.StringData(name) {
		// name itself, which shares the value's bytes (a load reuses
		// them): a node made for the asking, not one a zone holds.
		return ""
	}
	return s
}

// newEntry returns an entry of id with no value yet.
func newEntry(id string) Entry {
	e := Entry{x: unsafe.Pointer(&noOrigin.plain)}
	if p, ok := keys.PackID(id); ok {
		e.id = p
	} else {
		// The id is a few bytes of a key that is garbage once parsed.
		e.x = unsafe.Pointer(&extra{origin: noOrigin, id: strings.Clone(id)})
	}
	return e
}

// own returns e's own extra, making it from the shared one.
func (e *Entry) own() *extra {
	if x := e.extra(); x.shared() {
		e.x = unsafe.Pointer(&extra{origin: x.origin})
	}
	return e.extra()
}

// shared reports whether x is its Origin's plain extra, which every
// address record of that origin points at and none may change.
func (x *extra) shared() bool { return x == &x.origin.plain }

// maxOrigins bounds the origin table: it is emptied when full, so values
// naming ever new clusters cannot grow it without end. Entries keep what
// they point to.
const maxOrigins = 1 << 10

// origin returns the one shared Origin of a cluster: a clusterset has a
// handful, and the records of each share it.
func (l *lineage) origin(cluster string) *Origin {
	if cluster == "" {
		return l.none
	}
	if o, ok := l.origins[cluster]; ok {
		return o
	}
	if len(l.origins) >= maxOrigins {
		clear(l.origins)
	}
	o := newOrigin(strings.Clone(cluster), l)
	l.origins[o.Cluster] = o
	return o
}

// Carries reports whether a record of the zone, or of one loaded before
// it of the same lineage, named cluster.
func (z *Zone) Carries(cluster string) bool {
	_, ok := z.line.origins[cluster]
	return ok
}

// parent returns the name one label up, and false at the apex.
func (z *Zone) parent(name string) (string, bool) {
	if name == z.Name {
		return "", false
	}
	_, rest, _ := strings.Cut(name, ".")
	return rest, true
}

package snap

import (
	"cmp"
	"hash/maphash"
	"net/netip"
	"slices"
	"strings"

	"github.com/miekg/dns"

	"github.com/etcdns/etcdns/keys"
)

// Snapshot is every served zone at one etcd revision.
type Snapshot struct {
	Rev   int64
	Zones []*Zone // most specific first, so the first match is the longest
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
}

// shards bounds the cost of a change: a batch copies only the shards it
// touches, about 1/256 of a zone's names each, instead of the whole map
// (BenchmarkBatch: one change costs about 20 µs at 10,000 names and
// 150 µs at 200,000). More shards make large zones cheaper per change but
// every batch copies the array of shard pointers, so small zones pay; a
// persistent map would make it O(log n) and is left to the performance
// work.
const shards = 256

var seed = maphash.MakeSeed()

func shardOf(name string) int {
	return int(maphash.String(seed, name) % shards)
}

// Zone is one zone's names. Nodes exist for every name that holds records
// and for every empty non-terminal above one, up to the apex.
type Zone struct {
	Config
	Reverse bool
	Serial  uint32 // etcd revision of the zone's last change, mod 2^32
	Records int    // entries held
	// Range is the etcd key prefix of the zone: <prefix>/<reversed labels>/.
	Range string
	names [shards]map[string]*Node
	pods  [shards]map[netip.Addr][]string // PodNamespaces; a nil map until a pod record lands in the shard

	stubRange string           // Range + dns/stub/: nameservers, not records
	stubs     map[string]*Stub // by domain
}

// NewZone returns an empty zone.
func NewZone(c Config) *Zone {
	z := &Zone{Config: c, Reverse: keys.IsReverseZone(c.Name)}
	if k, err := keys.Key(c.Prefix, c.Name); err == nil {
		z.Range = k + "/"
		z.stubRange, _ = keys.StubRange(c.Prefix, c.Name)
	}
	for i := range z.names {
		z.names[i] = map[string]*Node{}
	}
	return z
}

// Node returns the node of a canonical name, or nil if nothing exists at
// or below it.
func (z *Zone) Node(name string) *Node {
	return z.names[shardOf(name)][name]
}

// Names calls f for every node; for tests and debugging, not for queries.
func (z *Zone) Names(f func(*Node)) {
	for _, m := range z.names {
		for _, n := range m {
			f(n)
		}
	}
}

// Node is one owner name.
type Node struct {
	Name    string  // canonical, no trailing dot
	Entries []Entry // valid values held at the name, by key
	Sets    []RRSet // the records they make, by type
	below   int     // names strictly below this one that hold entries
}

// RRSet returns the RRset of type t, with no records if there is none.
func (n *Node) RRSet(t uint16) RRSet {
	if n == nil {
		return RRSet{}
	}
	for i := range n.Sets {
		if n.Sets[i].Type == t {
			return n.Sets[i]
		}
	}
	return RRSet{}
}

// Set returns the records of type t, nil if there are none.
func (n *Node) Set(t uint16) []dns.RR {
	return n.RRSet(t).RRs
}

// Entry is one valid value and the type the typing rule gave it.
type Entry struct {
	Key   string
	Value keys.Value
	Type  uint16
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

// Owner returns the owner name a key stands for in zone z: the key minus
// its id in a forward zone, the exact key in a reverse zone (where CoreDNS
// reads PTR records).
func (z *Zone) Owner(key string) (string, error) {
	var owner string
	var err error
	if z.Reverse {
		owner, err = keys.Name(z.Prefix, key)
	} else {
		owner, _, err = keys.SplitRecordKey(z.Prefix, key)
	}
	if err != nil {
		return "", err
	}
	if !keys.IsSubdomain(owner, z.Name) {
		return "", &outsideError{key: key, zone: z.Name}
	}
	return owner, nil
}

type outsideError struct{ key, zone string }

func (e *outsideError) Error() string {
	return "key " + e.key + ": owner is outside zone " + e.zone
}

// Parse decodes a value stored at key into an entry of its owner.
func (z *Zone) Parse(key string, value []byte) (string, Entry, error) {
	owner, err := z.Owner(key)
	if err != nil {
		return "", Entry{}, err
	}
	v, err := keys.Decode(value)
	if err != nil {
		return owner, Entry{}, err
	}
	t, err := v.Type(owner, z.Reverse)
	if err != nil {
		return owner, Entry{}, err
	}
	return owner, Entry{Key: key, Value: v, Type: t}, nil
}

// parent returns the name one label up, and false at the apex.
func (z *Zone) parent(name string) (string, bool) {
	if name == z.Name {
		return "", false
	}
	_, rest, _ := strings.Cut(name, ".")
	return rest, true
}

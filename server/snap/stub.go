package snap

import (
	"cmp"
	"errors"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/etcdns/etcdns/keys"
)

// Stub is a stub domain: the names at or below Domain belong to its
// nameservers, not to dnsd's records.
type Stub struct {
	Domain  string // canonical
	Servers []StubServer
}

// StubServer is one nameserver of a stub domain and the key it came from.
type StubServer struct {
	Key  string
	Addr netip.AddrPort
}

var errSharedStub = errors.New("a stub domain in a tree every cluster writes is not one: stub domains are read from this cluster's own zones")

// IsStubKey reports whether key is in the zone's stub tree
// (<zone key>/dns/stub/), whose values are nameservers, never records.
func (z *Zone) IsStubKey(key string) bool {
	return z.stubRange != "" && strings.HasPrefix(key, z.stubRange)
}

// PutStub stores the nameserver a stub key holds. A malformed value removes
// what the key held before, as a malformed record does; domain is "" when
// the key itself says no domain. A shared zone's keys (Config.Shared) are
// refused, and hold nothing.
func (b *Batch) PutStub(key string, value []byte) (domain string, err error) {
	domain, _, err = keys.SplitStubKey(b.z.Prefix, b.z.Name, key)
	if err != nil {
		return "", err
	}
	if b.z.Shared {
		return domain, errSharedStub
	}
	v, err := keys.Decode(value)
	if err != nil {
		b.DeleteStub(key)
		return domain, err
	}
	addr, err := v.Nameserver()
	if err != nil {
		b.DeleteStub(key)
		return domain, err
	}
	byKey := func(s StubServer, k string) int { return cmp.Compare(s.Key, k) }
	if held := b.z.stubs[domain]; held != nil {
		// Written again as held (a watch resumed at a revision it has
		// applied, a writer's resync): no copy, so no change.
		if i, found := slices.BinarySearchFunc(held.Servers, key, byKey); found && held.Servers[i].Addr == addr {
			return domain, nil
		}
	}
	st := b.stub(domain)
	i, found := slices.BinarySearchFunc(st.Servers, key, byKey)
	if found {
		st.Servers[i].Addr = addr
	} else {
		st.Servers = slices.Insert(st.Servers, i, StubServer{Key: strings.Clone(key), Addr: addr}) // key may share an etcd response
	}
	return domain, nil
}

// DeleteStub forgets the nameserver at key, if held.
func (b *Batch) DeleteStub(key string) {
	domain, _, err := keys.SplitStubKey(b.z.Prefix, b.z.Name, key)
	if err != nil || b.z.stubs[domain] == nil {
		return
	}
	st := b.stub(domain)
	st.Servers = slices.DeleteFunc(st.Servers, func(s StubServer) bool { return s.Key == key })
	if len(st.Servers) == 0 {
		delete(b.z.stubs, domain)
		// A put for the domain later in the batch makes its entry anew:
		// still marked as copied, stub returned the one deleted here,
		// nil, and the put panicked on it.
		delete(b.stubCopied, domain)
	}
}

// stub returns the batch's own copy of a domain's entry: snapshots share
// the old one. Stub domains are few, so a change copies the whole table.
func (b *Batch) stub(domain string) *Stub {
	if !b.stubsCopied {
		b.z.stubs = maps.Clone(b.z.stubs)
		if b.z.stubs == nil {
			b.z.stubs = map[string]*Stub{}
		}
		b.stubsCopied = true
		b.stubCopied = map[string]bool{}
		b.z.stubsBatch = b.id
	}
	st := b.z.stubs[domain]
	if b.stubCopied[domain] {
		return st
	}
	c := &Stub{Domain: domain}
	if st != nil {
		c.Servers = slices.Clone(st.Servers)
	}
	b.z.stubs[domain] = c
	b.stubCopied[domain] = true
	return c
}

// Stub returns the stub domain that name (canonical) belongs to: the
// longest one at or above it, unless a served zone is at least as close to
// the name, which keeps names of dnsd's own zones its own. Several zones
// holding the same domain: the most specific zone's entry counts.
func (s *Snapshot) Stub(name string) *Stub {
	if s == nil {
		return nil
	}
	var best *Stub
	for _, z := range s.Zones {
		if len(z.stubs) == 0 {
			continue
		}
		for n := name; ; {
			if st := z.stubs[n]; st != nil {
				if best == nil || len(st.Domain) > len(best.Domain) {
					best = st
				}
				break
			}
			_, rest, ok := strings.Cut(n, ".")
			if !ok || best != nil && len(rest) <= len(best.Domain) {
				break
			}
			n = rest
		}
	}
	if best == nil {
		return nil
	}
	if z := s.Zone(name); z != nil && len(z.Name) >= len(best.Domain) {
		return nil
	}
	return best
}

// Stubs lists the zone's stub domains, for debugging, not for queries.
func (z *Zone) Stubs() []*Stub {
	return slices.SortedFunc(maps.Values(z.stubs), func(a, b *Stub) int { return cmp.Compare(a.Domain, b.Domain) })
}

package kube

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/etcdns/etcdns/keys"
)

// SchemaVersion is the Kubernetes DNS schema these records implement.
const SchemaVersion = "1.0.1"

// TolerateUnreadyAnnotation is the pre-publishNotReadyAddresses way of
// asking for not-ready endpoints in DNS; the spec still names it.
const TolerateUnreadyAnnotation = "service.alpha.kubernetes.io/tolerate-unready-endpoints"

// Builder turns objects of one cluster into records for one cluster domain.
type Builder struct {
	keys.Layout
	Zone string // cluster domain, such as cluster.local
	// Nameserver is the namespace/name of the Service pods reach the
	// cluster's DNS through: its cluster IPs are also the address of
	// ns.dns.<zone>, the name the zone's NS record and SOA give (CoreDNS
	// answers it with its own Service's IPs). Empty: none.
	Nameserver string
}

// NameserverName, under the zone, is the name of the zone's nameserver:
// what the SOA's primary and the NS record name (dnsd.soa-mname's
// default), and where CoreDNS's etcd plugin reads the NS record's
// addresses.
const NameserverName = "ns.dns"

// NewBuilder validates the layout and zone once.
func NewBuilder(l keys.Layout, zone string) (Builder, error) {
	if err := l.Check(); err != nil {
		return Builder{}, err
	}
	z, err := keys.CanonicalName(zone)
	if err != nil {
		return Builder{}, fmt.Errorf("zone: %w", err)
	}
	return Builder{Layout: l, Zone: z}, nil
}

// Version is the dns-version TXT record of the zone.
func (b Builder) Version() keys.Record {
	v := SchemaVersion
	if b.Zone == ClustersetZone {
		v = ClustersetSchemaVersion
	}
	r, err := b.Forward("dns-version."+b.Zone, "zone/"+b.Zone, keys.Value{Text: v})
	if err != nil {
		panic(err) // the zone was validated by NewBuilder
	}
	return r
}

// set collects records, keeping the first of any two at the same key (the
// records are built in a deterministic order) and the problems met on the way.
type set struct {
	recs     []keys.Record
	seen     map[string]bool
	problems []error
}

func (s *set) add(r keys.Record, err error) {
	if err != nil {
		s.problems = append(s.problems, err)
		return
	}
	if s.seen == nil {
		s.seen = map[string]bool{}
	}
	if s.seen[r.Key] {
		return
	}
	s.seen[r.Key] = true
	s.recs = append(s.recs, r)
}

// grow makes room for n more records, so that a service of a hundred
// endpoints does not grow its slice and map a dozen times on every change
// (a third of the publisher's bytes per change: bench/publisher/README.md).
func (s *set) grow(n int) {
	s.recs = slices.Grow(s.recs, n)
	if s.seen == nil {
		s.seen = make(map[string]bool, len(s.recs)+n)
	}
}

func (s *set) fail(format string, a ...any) {
	s.problems = append(s.problems, fmt.Errorf(format, a...))
}

// sorted returns the records ordered by key, the order etcdctl shows.
func (s *set) sorted() ([]keys.Record, []error) {
	slices.SortFunc(s.recs, func(a, b keys.Record) int { return cmp.Compare(a.Key, b.Key) })
	return s.recs, s.problems
}

// label checks a Kubernetes name used as one DNS label.
func label(what, s string) error {
	if !keys.IsLabel(s) {
		return fmt.Errorf("%s %q is not a lowercase DNS label of at most 63 octets", what, s)
	}
	return nil
}

func parseIP(s string) (netip.Addr, error) {
	ip, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil || ip.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("address %q is not an IP address", s)
	}
	return ip.Unmap(), nil
}

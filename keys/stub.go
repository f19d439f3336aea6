package keys

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/miekg/dns"
)

// ClustersetZone is the multicluster zone; the MCS API fixes its name.
// Every cluster of a clusterset writes its tree.
const ClustersetZone = "clusterset.local"

// stubDir is SkyDNS's place for stub domains below a zone's key: the
// labels of the name stub.dns.<zone>, so the tree reads like every other.
const stubDir = "/dns/stub/"

// StubRange is the key prefix under which the stub domains of zone live:
// <prefix>/<zone reversed>/dns/stub/.
func StubRange(prefix, zone string) (string, error) {
	k, err := Key(prefix, zone)
	if err != nil {
		return "", err
	}
	return k + stubDir, nil
}

// StubKey is where one nameserver of a stub domain is stored:
// <prefix>/<zone reversed>/dns/stub/<domain reversed>/<id>. As in SkyDNS,
// the id only tells a domain's nameservers apart; it is not a label of
// the domain.
func StubKey(prefix, zone, domain, id string) (string, error) {
	if !IsLabel(id) {
		return "", fmt.Errorf("stub id %q: not a lowercase DNS label", id)
	}
	r, err := StubDomainRange(prefix, zone, domain)
	if err != nil {
		return "", err
	}
	return r + id, nil
}

// StubDomainRange is the key prefix of one stub domain's nameservers:
// <prefix>/<zone reversed>/dns/stub/<domain reversed>/. It also holds the
// nameservers of the domains below it.
func StubDomainRange(prefix, zone, domain string) (string, error) {
	r, err := StubRange(prefix, zone)
	if err != nil {
		return "", err
	}
	d, err := Key(prefix, domain)
	if err != nil {
		return "", err
	}
	return r + strings.TrimPrefix(d, prefix+"/") + "/", nil
}

// SplitStubKey is the inverse of StubKey: the stub domain and id of a key
// under StubRange(prefix, zone).
func SplitStubKey(prefix, zone, key string) (domain, id string, err error) {
	r, err := StubRange(prefix, zone)
	if err != nil {
		return "", "", err
	}
	rest, ok := strings.CutPrefix(key, r)
	i := strings.LastIndexByte(rest, '/')
	if !ok || i <= 0 || !IsLabel(rest[i+1:]) {
		return "", "", fmt.Errorf("key %q: want %s<reversed stub domain>/<id>", key, r)
	}
	domain, err = Name(prefix, prefix+"/"+rest[:i])
	if err != nil {
		return "", "", fmt.Errorf("key %q: stub domain: %w", key, err)
	}
	return domain, rest[i+1:], nil
}

// Nameserver reads a stub value: an IP host and its port, 53 when the
// value has none (SkyDNS's default). A host name is refused: resolving it
// would need the resolver the stub domain is part of.
func (v Value) Nameserver() (netip.AddrPort, error) {
	ip, err := netip.ParseAddr(v.Host)
	switch {
	case err != nil:
		return netip.AddrPort{}, fmt.Errorf("stub nameserver %q: host must be an IP address", v.Host)
	case ip.Zone() != "" || ip.IsUnspecified() || ip.IsMulticast():
		return netip.AddrPort{}, fmt.Errorf("stub nameserver %q: not a unicast address", v.Host)
	case v.Text != "" || v.Mail:
		return netip.AddrPort{}, fmt.Errorf("stub nameserver %q: value holds more than host and port", v.Host)
	}
	port := v.Port
	if port <= 0 {
		port = 53
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(port)), nil
}

// Stub is the record of one nameserver ns of a stub domain, stored under
// zone. source names who programs it, as in every value we write, so a
// publisher knows its own; the id hashes the address, so programming the
// same nameserver again rewrites nothing.
func (l Layout) Stub(zone, domain, source string, ns netip.AddrPort) (Record, error) {
	d, err := CanonicalName(domain)
	if err != nil {
		return Record{}, err
	}
	v := Value{Host: ns.Addr().Unmap().String(), Port: int(ns.Port()), Cluster: l.Cluster, Source: source}
	if _, err := v.Nameserver(); err != nil || ns.Port() == 0 {
		return Record{}, fmt.Errorf("stub domain %s: nameserver %s: want a unicast IP and a port", d, ns)
	}
	// The port is part of what makes a nameserver distinct: two servers
	// on one address are two keys.
	id := ID(dns.TypeNS, Value{Cluster: v.Cluster, Source: source, Host: netip.AddrPortFrom(ns.Addr().Unmap(), ns.Port()).String()})
	key, err := StubKey(l.Prefix, zone, d, id)
	if err != nil {
		return Record{}, err
	}
	return Record{Key: key, Name: d, Type: dns.TypeNS, Value: v}, nil
}

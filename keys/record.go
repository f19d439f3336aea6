package keys

import (
	"fmt"
	"net/netip"
	"strconv"

	"github.com/miekg/dns"
)

// Record is one (key, value) pair with the owner name and type it encodes.
type Record struct {
	Key   string
	Name  string // canonical owner name
	Type  uint16 // dns.TypeA, dns.TypeSRV, ...
	Value Value
}

func (r Record) String() string {
	return r.Key + " " + string(r.Value.Encode())
}

// Layout says where one cluster's records go: which prefix holds forward
// names and which holds reverse names, and what every value it writes
// carries (the cluster id, the TTL).
type Layout struct {
	Prefix        string // forward zones, such as /skydns
	ReversePrefix string // in-addr.arpa and ip6.arpa
	Cluster       string // DNS label; hashed into every id
	TTL           uint32 // written into every value; 0 leaves it to the server
}

// Check validates a layout once, so record builders need not.
func (l Layout) Check() error {
	if err := CheckPrefix(l.Prefix); err != nil {
		return err
	}
	if err := CheckPrefix(l.ReversePrefix); err != nil {
		return fmt.Errorf("reverse %w", err)
	}
	if !IsLabel(l.Cluster) {
		return fmt.Errorf("cluster id %q: not a lowercase DNS label", l.Cluster)
	}
	return nil
}

// Forward builds the record of value v at owner name, typed by the typing
// rule and stored at <prefix>/<reversed owner>/<id>.
func (l Layout) Forward(owner, source string, v Value) (Record, error) {
	name, err := CanonicalName(owner)
	if err != nil {
		return Record{}, err
	}
	if v.Host != "" {
		if t := v.Target(); t != "" {
			v.Host = t
		}
	}
	t, err := v.Type(name, false)
	if err != nil {
		return Record{}, fmt.Errorf("%s: %w", name, err)
	}
	v.TTL, v.Group, v.Cluster, v.Source = l.TTL, name, l.Cluster, source
	if err := CheckPrefix(l.Prefix); err != nil {
		return Record{}, err
	}
	// Not RecordKey: name is canonical already and an ID is a label, and
	// checking both again was a twentieth of a restart's CPU at a million
	// records (bench/publisher/README.md).
	return Record{Key: reversed(l.Prefix, name, ID(t, v)), Name: name, Type: t, Value: v}, nil
}

// Address is an A or AAAA record: Forward of the address as its host,
// without reading the type back from the text it makes (the publisher
// makes one for every endpoint of every change).
func (l Layout) Address(owner, source string, ip netip.Addr) (Record, error) {
	ip = ip.Unmap()
	if !ip.IsValid() {
		return l.Forward(owner, source, Value{Host: ip.String()}) // its error
	}
	name, err := CanonicalName(owner)
	if err != nil {
		return Record{}, err
	}
	if err := CheckPrefix(l.Prefix); err != nil {
		return Record{}, err
	}
	t := uint16(dns.TypeAAAA)
	if ip.Is4() {
		t = dns.TypeA
	}
	v := Value{Host: ip.String(), TTL: l.TTL, Group: name, Cluster: l.Cluster, Source: source}
	return Record{Key: reversed(l.Prefix, name, ID(t, v)), Name: name, Type: t, Value: v}, nil
}

// SRV is an SRV record at _<port>._<proto>.<service name>.
func (l Layout) SRV(service, port, proto, source string, number int32, target string) (Record, error) {
	if number < 1 || number > 65535 {
		return Record{}, fmt.Errorf("port %q: number %s out of range", port, strconv.Itoa(int(number)))
	}
	owner := "_" + port + "._" + proto + "." + service
	return l.Forward(owner, source, Value{Host: target, Port: int(number)})
}

// PTR is the reverse record of ip, at the exact key of its reverse name.
func (l Layout) PTR(ip netip.Addr, source, target string) (Record, error) {
	name := ReverseName(ip)
	t, err := CanonicalName(target)
	if err != nil {
		return Record{}, err
	}
	key, err := Key(l.ReversePrefix, name)
	if err != nil {
		return Record{}, err
	}
	v := Value{Host: t, TTL: l.TTL, Group: name, Cluster: l.Cluster, Source: source}
	return Record{Key: key, Name: name, Type: dns.TypePTR, Value: v}, nil
}

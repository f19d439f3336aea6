package keys

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/miekg/dns"
)

// Value is one record's etcd value. The first nine fields are CoreDNS's
// msg.Service, with the same JSON names, so the plugin serves our values
// unmodified; Cluster and Source are ours, and CoreDNS (encoding/json)
// ignores them.
type Value struct {
	Host        string `json:"host,omitempty"`
	Port        int    `json:"port,omitempty"`
	Priority    int    `json:"priority,omitempty"`
	Weight      int    `json:"weight,omitempty"`
	Text        string `json:"text,omitempty"`
	Mail        bool   `json:"mail,omitempty"`
	TTL         uint32 `json:"ttl,omitempty"`
	TargetStrip int    `json:"targetstrip,omitempty"`
	// Group is the owner name on everything we write. CoreDNS reads a
	// whole subtree per query and then keeps only the group of the
	// shortest keys, so this keeps a name's children out of its answer.
	Group string `json:"group,omitempty"`

	// Cluster is the id of the cluster whose publisher wrote the record. A
	// publisher only ever changes records that carry its own cluster id,
	// and dnsd orders multicluster answers by it.
	Cluster string `json:"cluster,omitempty"`
	// Source names the Kubernetes object the record was computed from, as
	// kind/namespace/name (for example service/default/kubernetes), so a
	// publisher can tell which records belong to which object after a
	// restart without an index of its own.
	Source string `json:"source,omitempty"`
}

// ImportSourcePrefix begins the Source of the records a cluster makes of
// its own MCS ServiceImport: its clusterset IPs (spec 001 lets each
// cluster have its own).
const ImportSourcePrefix = "serviceimport/"

// PerCluster reports whether the value is one cluster's own answer for
// its name, not a share of the clusterset's: a reader that knows its
// cluster serves that cluster's such values and no other's, as another
// cluster's clusterset IP routes nowhere there (or to a different service
// in the same range). CoreDNS's etcd plugin serves them all.
func (v Value) PerCluster() bool { return strings.HasPrefix(v.Source, ImportSourcePrefix) }

// maxValue bounds what Decode accepts. etcd's default request limit is
// 1.5 MiB; a DNS record that large is a mistake, not data.
const maxValue = 64 << 10

// Decode parses and validates a value. It never panics, whatever the bytes.
func Decode(b []byte) (Value, error) { return decode(b, false) }

// DecodeView is Decode for a reader that keeps little of the value: its
// strings may share b's memory, so they are valid only while b is, and
// what the caller keeps it must copy (strings.Clone). It saves a cold
// start most of its allocations.
func DecodeView(b []byte) (Value, error) { return decode(b, true) }

func decode(b []byte, borrow bool) (Value, error) {
	if len(b) > maxValue {
		return Value{}, fmt.Errorf("value of %d bytes: more than %d", len(b), maxValue)
	}
	if v, ok := decodeFast(b, borrow); ok {
		if err := v.check(); err != nil {
			return Value{}, err
		}
		return v, nil
	}
	return decodeJSON(b)
}

// decodeJSON is decode's slow path, in a function of its own: the value
// encoding/json fills escapes to the heap, and declared in decode it did
// so for every value, 137 bytes of garbage a record in a cold start.
func decodeJSON(b []byte) (Value, error) {
	var v Value
	if err := json.Unmarshal(b, &v); err != nil {
		return Value{}, fmt.Errorf("value is not a JSON record: %w", err)
	}
	if err := v.check(); err != nil {
		return Value{}, err
	}
	return v, nil
}

func (v Value) check() error {
	switch {
	case v.Port < -1 || v.Port > 65535:
		return fmt.Errorf("value: port %d out of range", v.Port)
	case v.Priority < 0 || v.Priority > 65535:
		return fmt.Errorf("value: priority %d out of range", v.Priority)
	case v.Weight < 0 || v.Weight > 65535:
		return fmt.Errorf("value: weight %d out of range", v.Weight)
	case v.TargetStrip < 0:
		return fmt.Errorf("value: targetstrip %d is negative", v.TargetStrip)
	}
	return nil
}

// Encode renders v as JSON with a fixed field order, so equal values are
// equal bytes and a publisher can compare what it wants with what is stored.
func (v Value) Encode() []byte {
	if b, ok := encodeFast(v); ok {
		return b
	}
	b, err := json.Marshal(v)
	if err != nil {
		// Only strings and numbers: Marshal cannot fail.
		panic(err)
	}
	return b
}

// Errors of Type, for callers that count skipped values by reason.
var (
	ErrEmptyValue   = errors.New("value has neither host nor text")
	ErrHostAndText  = errors.New("value has both host and text")
	ErrMail         = errors.New("mail (MX) values are not served")
	ErrPortNotOnSRV = errors.New("value has a name host and a port, but its owner is not _port._proto")
)

// Type applies the typing rule that both servers share:
//
//	IP host                                  -> A or AAAA
//	name host with a port, _port._proto owner -> SRV
//	name host, no port                       -> CNAME (PTR in a reverse zone)
//	text, no host                            -> TXT
//
// owner is the canonical owner name; reverse says whether it lies in a
// reverse zone.
func (v Value) Type(owner string, reverse bool) (uint16, error) {
	switch {
	case v.Mail:
		return 0, ErrMail
	case v.Host == "" && v.Text == "":
		return 0, ErrEmptyValue
	case v.Host != "" && v.Text != "":
		return 0, ErrHostAndText
	case v.Host == "":
		return dns.TypeTXT, nil
	}
	if ip, ok := hostAddr(v.Host); ok {
		if ip.Is4() || ip.Is4In6() {
			return dns.TypeA, nil
		}
		return dns.TypeAAAA, nil
	}
	if _, err := CanonicalName(v.Host); err != nil {
		return 0, fmt.Errorf("value host: %w", err)
	}
	switch {
	case reverse:
		return dns.TypePTR, nil
	case v.Port == 0:
		return dns.TypeCNAME, nil
	case IsSRVOwner(owner):
		return dns.TypeSRV, nil
	}
	return 0, ErrPortNotOnSRV
}

// IsSRVOwner reports whether a canonical name has the _port._proto shape.
func IsSRVOwner(owner string) bool {
	port, rest, ok := strings.Cut(owner, ".")
	return ok && strings.HasPrefix(port, "_") && strings.HasPrefix(rest, "_")
}

// Target returns a name host in canonical form, or "" for an IP host.
func (v Value) Target() string {
	if _, ok := hostAddr(v.Host); ok {
		return ""
	}
	n, _ := CanonicalName(v.Host)
	return n
}

// hostAddr is netip.ParseAddr for a host that may be an address or a
// name. A host with no colon (every IPv6 form has one) and anything but
// digits and dots in it is no address, and is told so without the error
// ParseAddr allocates for it: at every SRV, PTR and CNAME value of a load,
// twice.
func hostAddr(host string) (netip.Addr, bool) {
	if !strings.Contains(host, ":") {
		for i := 0; i < len(host); i++ {
			if c := host[i]; c != '.' && (c < '0' || c > '9') {
				return netip.Addr{}, false
			}
		}
	}
	ip, err := netip.ParseAddr(host)
	return ip, err == nil
}

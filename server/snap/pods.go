package snap

import (
	"hash/maphash"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/miekg/dns"

	"github.com/etcdns/etcdns/keys"
)

// PodNamespaces returns, sorted, the namespaces with a pod record
// (<dashed ip>.<ns>.pod.<zone>, which the publisher writes with
// cluster.pods: verified) holding ip. Pods that share an address, such as
// hostNetwork pods on one node, give several. It is how dnsd knows a
// client's namespace without watching Pods itself.
func (z *Zone) PodNamespaces(ip netip.Addr) []string {
	if z.pods == nil {
		return nil
	}
	ip = ip.Unmap()
	return z.pods[addrShard(ip)][ip]
}

func addrShard(ip netip.Addr) int {
	return int(maphash.Comparable(seed, ip) % podShards)
}

// indexPod brings the pod index up to date for one changed name. A pair
// (ip, ns) is indexed exactly when the name <DashedIP(ip)>.<ns>.pod.<zone>
// holds an address record of ip: each pair has one name, so the new node
// alone decides, and records written by hand under other spellings never
// claim an address.
func (b *Batch) indexPod(name, suffix string) {
	rest, ok := strings.CutSuffix(name, suffix)
	if !ok {
		return
	}
	label, ns, ok := strings.Cut(rest, ".")
	if !ok || strings.Contains(ns, ".") {
		return
	}
	ip, ok := keys.ParseDashedIP(label)
	if !ok || keys.DashedIP(ip) != label {
		return
	}
	held := false
	if n := b.z.Node(name); n != nil {
		es := n.Entries()
		for i := range es {
			if e := &es[i]; (e.Type() == dns.TypeA || e.Type() == dns.TypeAAAA) && e.Addr() == ip {
				held = true
				break
			}
		}
	}
	i := addrShard(ip)
	var nss []string
	if b.z.pods != nil {
		nss = b.z.pods[i][ip]
	}
	if slices.Contains(nss, ns) == held {
		return
	}
	if b.podsCopied == [podShards / 64]uint64{} {
		c := new([podShards]map[netip.Addr][]string)
		if b.z.pods != nil {
			*c = *b.z.pods
		}
		b.z.pods = c
	}
	if b.podsCopied[i/64]&(1<<(i%64)) == 0 {
		b.z.pods[i] = maps.Clone(b.z.pods[i])
		if b.z.pods[i] == nil {
			b.z.pods[i] = map[netip.Addr][]string{}
		}
		b.podsCopied[i/64] |= 1 << (i % 64)
	}
	// Older snapshots share the slice: it is replaced, never changed.
	if held {
		nss = slices.Insert(slices.Clone(nss), sortedIndex(nss, ns), ns)
	} else {
		nss = slices.DeleteFunc(slices.Clone(nss), func(s string) bool { return s == ns })
	}
	if len(nss) == 0 {
		delete(b.z.pods[i], ip)
		return
	}
	b.z.pods[i][ip] = nss
}

func sortedIndex(list []string, s string) int {
	i, _ := slices.BinarySearch(list, s)
	return i
}

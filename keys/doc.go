// Package keys is the contract between the publisher, dnsd, etcdctl users and
// an unmodified CoreDNS etcd plugin: where a DNS record lives in etcd and what
// its value looks like.
//
// Layout, in short (keys/README.md has every record with worked examples):
//
//   - A name is stored under a one-segment prefix with its labels reversed and
//     lowercased: kubernetes.default.svc.cluster.local under /skydns is
//     /skydns/local/cluster/svc/default/kubernetes.
//   - Forward-zone records live one level below their owner name, at
//     <owner key>/<id>. The last segment is always a record id, never a label,
//     so a reader can always recover the owner name from a key.
//   - Reverse records (in-addr.arpa, ip6.arpa) live at the exact key of the
//     reverse name, because CoreDNS reads PTR from the exact key only.
//   - Stub domains (SkyDNS's stub zones) live at
//     <zone key>/dns/stub/<stub domain reversed>/<id>, one key per nameserver.
//   - Values are CoreDNS msg.Service JSON plus two fields CoreDNS ignores
//     (cluster, source); every value's group is its owner name, which makes
//     CoreDNS answer a name without the records of its children.
//
// The package is pure: no I/O, no clocks, no etcd or Kubernetes clients. It
// must stay that way, because both sides of the store and their tests link it.
// Record sets computed from Kubernetes objects live in keys/kube, so that dnsd
// does not link the Kubernetes API types.
package keys

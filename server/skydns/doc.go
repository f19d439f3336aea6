// Package skydns serves zones in the SkyDNS layout as CoreDNS 1.11's etcd
// plugin reads it: what external-dns's coredns provider, SkyDNS and
// kube2sky write. A name is answered from every value in its key's
// subtree, the record type is inferred from the value, and the plugin's
// quirks (groups, targetstrip, apex.dns, ns.dns, wildcard questions,
// priority 0 read as 10, SRV weights as percentages) are kept, so dnsd
// can replace the plugin without its users' answers changing.
//
// A Tree is one zone's decoded values sorted by key, in chunks: a subtree
// is a binary search and a scan. A Tree never changes once built; a Batch
// derives the next one, copying only the chunks a change touches, so
// queries read it without locks while the store applies a watch event.
//
// The package is pure: it turns (key, value) pairs into a Tree and a Tree
// and a question into an answer. It must not talk to etcd, log, read
// clocks or configuration; the store feeds it and the answer engine
// calls Answer. Names outside the zone are answered only through the
// Lookup the caller passes (nil: none), never by I/O here.
package skydns

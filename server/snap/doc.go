// Package snap holds what dnsd serves from: immutable snapshots of the
// records of every zone, and the copy-on-write batches that derive one
// snapshot from the previous one.
//
// Keys under a zone's dns/stub/ are SkyDNS stub domains, not records: they
// go into a table of stub domains beside the names (Snapshot.Stub), so
// nothing is ever answered at stub.dns.<zone>, and the server forwards the
// names below a stub domain to its nameservers.
//
// Each forward zone also indexes its pod records by address
// (Zone.PodNamespaces), so the answer engine learns a client's namespace
// from the records alone, with no Pod watch.
//
// A node holds its values as compact entries (what answers need: no keys,
// no JSON) and builds DNS records from them for each answer that asks,
// keeping none: the answer cache keeps the packed answers, within its
// bounds. Most names of a large zone are never asked for, and building
// them all up front made half of the memory and of the cold start
// (BenchmarkLoad measures both).
//
// A batch copies each shard table it writes to, and the copies scatter
// the live tables over heap spans that otherwise hold thrown-away copies.
// Zone.Pack copies a zone's tables back into one allocation a leaf; the
// store calls it once changes pause (pack.go).
//
// A snapshot is never modified once published, so any number of queries
// may read it without locks while the store builds the next one. The package is pure:
// it turns (key, value) pairs into DNS records and must not talk to etcd,
// read configuration files or keep clocks; the store feeds it and the
// answer engine reads it.
package snap

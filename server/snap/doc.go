// Package snap holds what dnsd serves from: immutable snapshots of the
// records of every zone, and the copy-on-write batches that derive one
// snapshot from the previous one.
//
// A snapshot is never modified once published, so any number of queries may
// read it without locks while the store builds the next one. The package is
// pure: it turns (key, value) pairs into DNS records and must not talk to
// etcd, read configuration files or keep clocks; the store feeds it and the
// answer engine reads it.
package snap

// Package store is dnsd's edge to etcd: it loads every zone's key range at
// one revision, watches from the next, and publishes each applied watch
// response as a new immutable snap.Snapshot behind an atomic pointer.
//
// Only this package talks to etcd. It must stay off the query path:
// queries call Snapshot, which is one atomic load, and nothing here may
// block them. It does not answer DNS and does not know the DNS wire format
// beyond what snap builds.
package store

// Package etcdstore is the publisher's etcd I/O: one consistent read of the
// ranges a cluster writes, guarded and fenced transactions, and re-reads of
// single keys after a guard failed. What to write is decided by package
// plan; this package only makes sure a write happens exactly as planned or
// not at all. Given several etcd endpoints, it reads and writes through one
// of them and moves to the next that answers when a request there times
// out or finds it unavailable (etcdclient.Failover); the caller retries.
package etcdstore

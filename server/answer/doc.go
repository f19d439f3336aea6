// Package answer is dnsd's answer engine: a pure function from a snapshot,
// a request and the options to a response. It decides every rcode, flag and
// record of an answer (Kubernetes DNS schema 1.0.1 over the keys layout,
// exact-name semantics, RFC 1034/2181/2308/6891/8482 behaviour).
//
// It can also note what an answer was read from (Reads), which tells the
// server's cache whether the answer stands in a later snapshot.
//
// It must not do I/O, read clocks, log or keep state between calls: the
// server hands it everything (including the rotation counter, and what
// names outside every zone answered upstream: Outside), so tests can
// assert exact answers without a process, a socket or etcd.
package answer

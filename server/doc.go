// Package server is dnsd's front: the DNS listeners (UDP and TCP on one
// address), the per-query glue between the current snapshot and the answer
// engine, and the operations endpoints (/metrics, /healthz, /readyz,
// /debug/records, /debug/pprof).
//
// UDP is served by one reader per CPU on sockets sharing the port
// (SO_REUSEPORT), each taking and answering datagrams in batches
// (recvmmsg/sendmmsg on Linux) on the goroutine that read them. A reader
// whose socket runs dry waits in Go's poller, or from four cores up on
// Linux asleep in the kernel on its socket (udp_linux.go). TCP gets a
// goroutine per connection, at most Server.TCPMaxConns of them
// (dnsd.tcp-max-connections), each closed when no query completes within
// Server.TCPIdle (dnsd.tcp-idle-timeout); pipelined queries are answered
// in order and their responses written together. Both go through one
// worker (query.go): a query in the common shape (one question of
// letters, digits, '-' and '_' in either case, at most a version-0 OPT)
// is answered from a cache of packed responses keyed by the lowercase
// question, the EDNS state and the size it must fit. The cache outlives
// snapshots but never serves old data: an entry is served from a newer
// snapshot only once it is found to stand there, every name its answer
// was read from unchanged (answer.Reads); then only the SOA serial of a
// negative answer is rewritten, and otherwise the entry is dropped. So
// under a steady trickle of changes the answers they do not touch stay
// cached. An answer that rotates is cached in several orders. The cache is
// bounded in entries and bytes and evicts by CLOCK, so a flood of random names
// replaces its own entries, not the ones clients keep asking. Any other
// message is first screened (wire.go) without allocating: junk gets no
// reply, NOTIMP or FORMERR from its header alone, as does a message over
// 4096 octets, which is never read whole. What passes, and every first
// query, goes through miekg/dns and the answer engine.
//
// With forwarding on (ClusterFirst), a recursion-desired question outside
// every zone from an allowed client goes to server/forward instead of being
// refused; over UDP it waits on a goroutine of its own, bounded in number,
// so a slow upstream never stalls a socket's reader.
//
// A question for a name in a stub domain (snap.Snapshot.Stub) goes to that
// domain's nameservers through server/forward, RD or not and whether or
// not forwarding is on, when the client is on the forwarding allow list
// and the question does not carry the source-cluster option already;
// otherwise it gets the engine's answer. Either way its answer depends on
// who asks, so it never enters the cache.
//
// An answer of a SkyDNS zone whose CNAME, SRV or MX targets lie in no zone
// (chase.go) names the questions it needs (answer.Outside); the server asks
// them where a question of the client's own would go (a stub domain's
// nameservers, or the upstreams under ClusterFirst), all at once, and has
// the engine answer again with what came back, as CoreDNS's etcd plugin
// asks its own server. Such an answer waits like a forwarded one and is
// never cached.
//
// The query log (querylog.go, off by default) writes a line for each
// answer of the classes asked for, after the answer is built; with it
// off, the answer path pays a test of one field.
//
// It owns sockets, metrics, timing, that cache and the query log, and
// nothing else:
// answers come from server/answer, records from server/store, upstream
// answers from server/forward. It must never call etcd, and nothing but a
// forwarded question or such a chased answer ever waits on anything but
// its socket.
package server

// Package forward is the ClusterFirst half of dnsd: a question for a name
// outside every served zone goes to upstream resolvers (by default the ones
// the host's /etc/resolv.conf lists), and their answer goes back to the
// client under the client's own id, flags and spelling of the question.
//
// Stubs is the other half: a question for a name in a stub domain goes to
// that domain's nameservers, with the source-cluster EDNS(0) option added
// (spec 003) and never twice (a question already carrying the option
// stays where it is).
//
// It owns the upstream exchanges (UDP, then TCP for a truncated reply, the
// next upstream on a timeout, an error or SERVFAIL), a bounded cache of
// upstream answers, the list of clients allowed to use it and its metrics.
// It must not decide what is forwarded: it never reads snapshots, zones or
// etcd, and never answers a name of dnsd's own; the server hands it only
// questions the answer engine refused as not ours, and questions for the
// stub domains the snapshot holds, with their nameservers.
package forward

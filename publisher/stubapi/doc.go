// Package stubapi is the publisher's federation endpoint (spec 003): the
// HTTPS server through which a federation's control plane programs the stub
// domain of each federation it adds the cluster to, so that the cluster's
// dnsd sends the federation's names to the federation's nameservers.
//
//	POST   /federations/<name>  {"nameservers": ["10.0.0.1", "10.0.0.2:5353"]}
//	GET    /federations/<name>
//	DELETE /federations/<name>
//
// Federation <name> is the stub domain <name>.svc.<federation domain>, the
// suffix of the federation's service names
// (<svc>.<ns>.<name>.svc.<federation domain>). POST sets its nameservers to
// exactly the ones given, GET shows them, DELETE removes them; each is
// idempotent. The nameservers become one key each in the SkyDNS stub layout
// (keys.StubKey) under the cluster domain, which dnsd already loads and
// watches: the endpoint never talks to dnsd.
//
// Only clients with a certificate signed by the configured CA get past the
// TLS handshake: whoever programs a stub domain decides where the cluster's
// questions for it go. Writes are the publisher's usual etcd transactions,
// guarded by the revisions read and fenced by the leader election, and are
// made only by the leading replica; the others answer 503.
//
// It owns the HTTP surface and the validation of names and nameservers;
// the key layout is package keys', the transactions package etcdstore's.
package stubapi

// Package store is dnsd's edge to etcd: it loads every zone's key range at
// one revision, watches from the next, and publishes each applied watch
// response as a new immutable snap.Snapshot behind an atomic pointer.
//
// Only this package talks to etcd. It must stay off the query path:
// queries call Snapshot, which is one atomic load, and nothing here may
// block them. It does not answer DNS and does not know the DNS wire format
// beyond what snap builds.
//
// # Never blind for long
//
// A watch stream on a member that is frozen (SIGSTOP, a hung process)
// sends nothing, not even "no leader", and gRPC only notices when its
// keepalive gives up (10 s and more). So the store checks the stream
// itself: when it has been quiet for the liveness interval it sends a
// progress request on that very stream (the store reads etcd's Watch
// stream itself, stream.go, and sends the request on it), and any response
// on it (events, the answer, etcd's own progress notifications) proves it
// alive, but only an answer (watch ID -1) shows that the stream answers:
// etcd's own notifications, one watcher's each, come through a grpc-proxy
// that drops the requests. Quiet for the liveness timeout, the stream is
// dropped and the watch resumes on the next endpoint after the last
// revision the stream delivered for every one of its watchers (each
// catches up on its own, and what a prefix replays that the snapshot
// holds is dropped), writes that changed nothing served included
// (another cluster's keys under the prefix, a value written again as it
// was): etcd still holds the history after it, so there is no relist;
// only ErrCompacted relists. Writes outside the watched prefixes show nothing
// on the stream; the answer to a progress request carries the resume
// point past them, from a member that sends it after every event before
// it (etcd 3.4.31, 3.5.13 on: ordersProgress asks the member's version),
// so an etcd shared with other writers, compacted past a quiet prefix,
// does not relist on a move either. The Kubernetes apiserver leans on the
// same answers, from the same versions, to prove its watch cache current
// before serving consistent reads from it; etcd's client itself only
// resumes a broken stream on the same connection.
//
// Two details shape this. etcd 3.5 answers a progress request only when
// every watcher on the stream is synced and drops it otherwise, so a
// stream still catching up may leave it unanswered: events arriving count
// as proof too, the stream is dropped only when nothing at all came, and
// one that has not answered yet is asked again each interval. And a client of several
// endpoints keeps a stream on the connection it was opened on, which gRPC
// still reports ready while its member is frozen; so the watch runs on one
// client per endpoint (Endpoint) and moves to the next one explicitly,
// while the loads use the shared client.
//
// etcd's grpc-proxy (the fan-out tier of docs/fleet.md) drops progress
// requests unanswered, and a stream through it can be quiet for as long as
// nothing changes. So a stream that reaches the timeout without ever
// having answered one gets a second chance: one serializable read of a
// single key on the same endpoint, given the rest of the timeout. If it is
// answered, the endpoint is remembered as one that drops progress
// requests, and from then on that read, once a quiet interval, is its
// liveness check: it proves the proxy serves, not that the member behind
// it is current (the proxy's own watch to etcd is the proxy's to keep). A
// frozen member never answers it, so the frozen member is left as before,
// one interval later at most on a stream it never proved.
//
// That second chance is only for what might be a proxy. The store asks
// the cluster for its member list once at the start (one linearizable
// request, retried until answered), and an endpoint whose address is a
// member's client URL is a member: its stream is held to the revisions
// other endpoints report from the start, like a stream that answered a
// progress request, and a stream of it that shows nothing once the
// cluster is past the watch's start is left as lagging, never taken for a
// proxy's. Without this a fresh stream on a member that showed nothing
// (a CI run on etcd 3.7 left two frontends blind that way for over 5 s
// while a frozen leader was replaced, reads of the member answered) was
// judged a proxy after a while and kept for good. An endpoint under
// another name than the member advertises is judged by its stream alone,
// and so is every endpoint when the list came from a grpc-proxy started
// with an advertised address: it names itself as the cluster's only
// member, with no member ID, and such a list is not believed.
//
// A member or proxy that stopped refuses the connection, and etcd's client
// would only keep redialling that one endpoint and hold the watch for it:
// a connection in transient failure moves the watch at once.
//
// A member that answers but is behind (a slow disk, an apply backlog, cut
// off from its peers but not yet aware it has no leader) proves its stream
// alive every time, at a revision that is old. Only a revision from
// elsewhere shows it: once every lag-probe interval the store reads one
// key, serializably, from another endpoint in turn, and when that one
// reports a revision the stream has not shown (by an event or a progress
// answer), the stream is asked for progress and given the max lag to show
// it; if it does not, it is dropped and the watch resumes on the next
// endpoint, as for a quiet one. Serializable because the leader must not
// pay for a fleet's checks, and because a probed member that is behind
// itself only reports less: the check can miss, but not accuse a current
// stream. This is what the Kubernetes apiserver's watch cache does before a
// consistent read from it (compare the cache's revision with a fresh one,
// and wait for progress), turned into a standing check. Through an etcd
// grpc-proxy the stream cannot be asked for progress: a quiet one shows a
// revision only with etcd's per-watcher progress notifications, which come
// every --experimental-watch-progress-notify-interval (ten minutes by
// default). Where the members send them more often, Liveness.ProxyMaxLag
// holds a stream through what may be a proxy (no member, no progress
// answered) to a revision read linearizably (past the proxy's cache)
// through another endpoint, so that a proxy whose member is cut off from
// its peers, and still serves its upstream watch (and notifications at
// its old revision), is left. It judges only a stream that gets
// notifications, so members that send none make it do nothing. With one
// endpoint (a Service in front of proxies) the move is a new connection
// (Endpoint.Reset), which may reach another proxy.
//
// The cost per frontend is at most one progress request per liveness
// interval while idle (through a proxy, one read it answers from its
// cache) and none while events flow, plus one single-key serializable
// read of another member per lag-probe interval, and one progress request
// each time that read reports a revision the stream has not shown. With
// ProxyMaxLag, a quiet stream through a proxy adds a linearizable read
// (which the leader confirms) every half of it.
//
// # Gentle on the store
//
// A fleet of frontends started together (a DaemonSet rollout, a cluster
// restart) must not crowd out the publishers' writes. The first load waits
// a random time up to the start jitter; every retry of a load and every
// watch restart backs off exponentially with jitter. The load reads in
// pages of dnsd.page-size keys (large by default, PageSize; small through
// an etcd grpc-proxy, which keeps every page it passes on), every one
// serializable, which any member serves from its own store, at one
// revision: the cluster's, read with one linearizable request, rounded
// down to a multiple of RevisionStep. So the frontends starting together
// ask for the same pages, and an etcd grpc-proxy answers those asked for
// after the first answer from its cache; each watch replays the few
// transactions since. A relist never loads at a revision older than the
// snapshot it replaces: published at once, it would take back what was
// served (a name created since answered NXDOMAIN) until the replay came.
// Every page after the first stops where about a page of keys is expected
// to end (stops.go), because etcd counts each limited read's keys to its
// stop: read to the zone's end, the pages of a million-key zone made it
// count ten million. The stops depend only on the keys, so frontends
// loading at the same revision send the proxy the same requests. A
// page that fails is asked for again alone, at the same revision, with
// twice the time (etcdns_dnsd_load_retries_total counts them): in a storm a
// page can take etcd longer than the request timeout, and starting the
// load over would ask again for every page etcd is still serving. A page
// is read as its wire bytes into a buffer a later page reuses, and parsed
// in place (pages.go): decoded by clientv3, a page's garbage was several
// times the records it made, and the collector marked the growing
// snapshot that much more often. All prefixes are watched on one gRPC
// stream (the watches share a context).
// Readiness comes only after the first whole load, and once its watch has
// shown the cluster's revision read before it (or, through a proxy that
// cannot be asked for progress, after the liveness timeout): the shared
// revision may be up to RevisionStep-1 transactions older.
//
// etcdns_dnsd_snapshot_staleness_seconds says how long the snapshot may
// have been behind (0 while the stream is proven within the timeout and
// shows every revision reported elsewhere), and
// etcdns_dnsd_watch_lag_revisions how many revisions it is behind the
// newest one reported elsewhere; readiness stays up meanwhile, since an
// old answer beats none.
package store

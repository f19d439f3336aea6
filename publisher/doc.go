// Package publisher turns the objects of one cluster into DNS records in
// etcd, in the external-dns shape (source -> desired records -> plan ->
// apply) driven in the sample-controller shape (events -> work queue ->
// idempotent reconcile of one unit).
//
// A unit is what one transaction covers: a Service with its EndpointSlices,
// a Pod (pod records in verified mode), or the zone's dns-version record.
// Unit names are the records' Source values, so what etcd says this cluster
// owns and what the queue works on line up without an index of our own:
// ownership is in the values (cluster + source), re-read at every start.
//
// Sources live in publisher/source, the pure diff in publisher/plan, etcd
// I/O in publisher/etcdstore and the leader election in publisher/elect.
// publisher/stubapi is the federation endpoint, which writes stub domains
// beside the records with the same transactions and only while leading.
package publisher

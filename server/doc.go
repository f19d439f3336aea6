// Package server is dnsd's front: the DNS listeners (UDP and TCP on one
// address), the per-query glue between the current snapshot and the answer
// engine, and the operations endpoints (/metrics, /healthz, /readyz,
// /debug/records).
//
// It owns sockets, metrics and timing, and nothing else: answers come from
// server/answer, records from server/store. It must never call etcd or
// block a query on anything but the socket it answers on.
package server

// Package embedded runs the single-member etcd that the publisher starts
// in-process when no etcd endpoints are configured (make run, the tests),
// on loopback only, since it has neither TLS nor auth.
//
// It is a package of its own because it links etcd's whole server: dnsd,
// which only ever dials etcd, must not import it, and a test in cmd/dnsd
// keeps it that way (it cost dnsd 4.5 MB of binary and 2.6 MiB of memory
// at 10k records, bench/README.md).
package embedded

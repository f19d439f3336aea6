// Package etcdclient is the one place both programs turn config.Etcd into a
// connection: a clientv3.Client with the configured TLS, auth and timeouts,
// or, when no endpoints are configured, an embedded single-member etcd that
// the publisher runs in-process and dnsd dials at embedded.client-url.
package etcdclient

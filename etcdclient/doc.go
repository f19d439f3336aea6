// Package etcdclient is the one place both programs turn config.Etcd into a
// connection: a clientv3.Client with the configured TLS, auth and timeouts;
// with no endpoints configured, it dials embedded.client-url, where the
// publisher runs the in-process etcd of etcdclient/embedded. DialEach gives
// a client per endpoint, for what must choose its member: dnsd's watch, and
// the publisher's requests, which a Failover keeps on one endpoint until it
// times out or is unavailable.
package etcdclient

// Package etcdclient is the one place both programs turn config.Etcd into a
// connection: a clientv3.Client with the configured TLS, auth and timeouts;
// with no endpoints configured, it dials embedded.client-url, where the
// publisher runs the in-process etcd of etcdclient/embedded. DialEach gives
// a client per endpoint, for what must choose its member: dnsd's watch, and
// the publisher's requests, which a Failover keeps on one endpoint until it
// times out or is unavailable. With a password, the clients of one
// configuration share one login (auth.go): each costs a member a bcrypt
// hash, and clientv3 alone logged in for every client and every stream.
package etcdclient

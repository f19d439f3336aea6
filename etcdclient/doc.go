// Package etcdclient is the one place both programs turn config.Etcd into a
// connection: a clientv3.Client with the configured TLS, auth and timeouts;
// with no endpoints configured, it dials embedded.client-url, where the
// publisher runs the in-process etcd of etcdclient/embedded.
package etcdclient

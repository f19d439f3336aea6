// Package kube computes the DNS records of Kubernetes objects, as (key, value)
// sets in the keys layout: the records the Kubernetes DNS specification
// (schema 1.0.1) and the "DNS for Services and Pods" page call for.
//
// Every function is pure: typed objects in, records out. Watching objects,
// diffing against etcd and writing belong to the publisher; this package
// must not grow clients, caches or clocks, so that the publisher and every
// test compute records the same way.
package kube

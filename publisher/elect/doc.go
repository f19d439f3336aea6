// Package elect runs the publisher's leadership: an etcd concurrency
// election per cluster, and the fence every write of the leader carries, so
// that a replica that lost its lease (paused, partitioned) cannot write even
// before it notices.
package elect

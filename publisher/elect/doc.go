// Package elect runs the publisher's leadership: an etcd concurrency
// election per cluster, and the fence every write of the leader carries, so
// that a replica that lost its lease (paused, partitioned) cannot write even
// before it notices. The fence is the election key's mod revision, so the
// leader can move it on (Term.Advance) and refuse its own writes that are
// still held somewhere after it gave up on them.
package elect

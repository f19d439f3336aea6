// Package plan is the pure core of the publisher: what this cluster owns in
// etcd (Index), and the operations that turn one unit's owned records into
// its desired ones (Diff), cut into transactions etcd accepts (Split).
//
// Nothing here does I/O, so the rules that decide what is written and what
// is deleted are tested without etcd or Kubernetes.
package plan

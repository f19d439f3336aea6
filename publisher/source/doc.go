// Package source is where the publisher learns about objects: Kubernetes
// through client-go shared informers, or a directory of manifests re-read on
// change. Both answer the same questions (the Service, EndpointSlices and Pod
// of a unit) and report the same events, a unit name and when its change was
// seen, so everything after them is shared.
package source

package source

import (
	"context"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
)

// Notify is told that a unit may have changed, and when the change was seen
// (the start of the DNS programming latency).
type Notify func(unit string, seen time.Time)

// Source is a read-only view of the objects the publisher translates.
type Source interface {
	// Start begins watching, calls notify for every change, and returns
	// once the initial state is loaded (the informers' caches synced).
	Start(ctx context.Context, notify Notify) error
	Service(namespace, name string) (*corev1.Service, bool)
	// Slices returns the EndpointSlices labelled with a service's name.
	Slices(namespace, service string) []*discoveryv1.EndpointSlice
	Pod(namespace, name string) (*corev1.Pod, bool)
	// Exported reports whether a ServiceExport names the service, and
	// Import returns the ServiceImport of the same name (the ClusterSetIPs);
	// both are false without the multicluster API.
	Exported(namespace, name string) bool
	Import(namespace, name string) (*mcsv1alpha1.ServiceImport, bool)
	// Units lists every service, export and (when watched) pod unit
	// currently known.
	Units() []string
}

// Unit names are the records' Source values, so the owned index and the
// work queue speak the same language.
func ServiceUnit(namespace, name string) string { return "service/" + namespace + "/" + name }
func PodUnit(namespace, name string) string     { return "pod/" + namespace + "/" + name }
func ExportUnit(namespace, name string) string  { return "serviceexport/" + namespace + "/" + name }

// ParseUnit splits a unit into kind ("service", "serviceexport", "pod",
// "zone") and the object's namespace and name (for a zone, name is the zone).
func ParseUnit(unit string) (kind, namespace, name string) {
	kind, rest, _ := strings.Cut(unit, "/")
	if kind == "zone" {
		return kind, "", rest
	}
	namespace, name, _ = strings.Cut(rest, "/")
	return kind, namespace, name
}

// sliceService is the service an EndpointSlice belongs to, "" if unlabelled.
func sliceService(sl *discoveryv1.EndpointSlice) string {
	return sl.Labels[discoveryv1.LabelServiceName]
}

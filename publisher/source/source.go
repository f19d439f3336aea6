package source

import (
	"context"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/etcdns/etcdns/keys/kube"
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
	// Exported reports whether a ServiceExport names the service and the
	// MCS controller has not found it invalid (Valid=False), and Import
	// returns the ServiceImport of the same name (the ClusterSetIPs);
	// both are false without the multicluster API.
	Exported(namespace, name string) bool
	Import(namespace, name string) (*mcsv1alpha1.ServiceImport, bool)
	// ServicesAt returns the Services of this cluster that have the
	// address as a cluster IP (and so their own PTR, if published); with
	// the multicluster API only, where an import's address may be one.
	ServicesAt(ip netip.Addr) []*corev1.Service
	// Units lists every service, export, import and (when watched) pod
	// unit currently known.
	Units() []string
}

// exportValid is false for an export the MCS controller marked Valid=False
// (its service is missing, or of a type that cannot be exported): it
// publishes nothing until the controller says otherwise. A Conflict
// condition does not stop it: the export still contributes, with the
// properties the controller resolved.
func exportValid(e *mcsv1alpha1.ServiceExport) bool {
	c := meta.FindStatusCondition(e.Status.Conditions, string(mcsv1alpha1.ServiceExportValid))
	return c == nil || c.Status != metav1.ConditionFalse
}

// importIPs are the addresses of an import, as the keys of an index.
func importIPs(imp *mcsv1alpha1.ServiceImport) []string {
	var out []string
	for _, raw := range imp.Spec.IPs {
		if ip, err := netip.ParseAddr(strings.TrimSpace(raw)); err == nil {
			out = append(out, ip.Unmap().String())
		}
	}
	return out
}

// serviceIPs are a Service's cluster IPs, as the keys of an index; none
// where one is invalid, as the Service then publishes no PTR.
func serviceIPs(s *corev1.Service) []string {
	ips, _ := kube.ClusterIPs(s)
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}

// Unit names are the records' Source values, so the owned index and the
// work queue speak the same language.
func ServiceUnit(namespace, name string) string { return "service/" + namespace + "/" + name }
func PodUnit(namespace, name string) string     { return "pod/" + namespace + "/" + name }
func ExportUnit(namespace, name string) string  { return "serviceexport/" + namespace + "/" + name }
func ImportUnit(namespace, name string) string  { return "serviceimport/" + namespace + "/" + name }

// ParseUnit splits a unit into kind ("service", "serviceexport",
// "serviceimport", "pod", "zone") and the object's namespace and name (for a zone, name is the zone).
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

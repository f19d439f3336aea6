package kube

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/etcdns/etcdns/keys"
)

// ClustersetZone is the multicluster zone; the MCS API fixes its name.
const ClustersetZone = keys.ClustersetZone

// ClustersetSchemaVersion is the schema of the multicluster DNS spec.
const ClustersetSchemaVersion = "1.1.0"

// ExportSource is the Source of the clusterset records a ServiceExport
// makes: they come and go with the export, not with the Service.
func ExportSource(namespace, name string) string {
	return "serviceexport/" + namespace + "/" + name
}

// ImportSource is the Source of the records a ServiceImport makes. Its
// prefix is keys.ImportSourcePrefix: dnsd answers those records as one
// cluster's own (keys.Value.PerCluster).
func ImportSource(namespace, name string) string {
	return keys.ImportSourcePrefix + namespace + "/" + name
}

// Exported returns the records this cluster contributes to the clusterset
// zone for an exported headless service (b.Zone must be clusterset.local):
// each ready endpoint at the service name and at
// <hostname>.<clusterid>.<svc>.<ns>.svc, SRV per named port to the latter.
// The union of every exporting cluster's records is the clusterset view.
//
// A ClusterSetIP service's records are its ServiceImport's (Imported), not
// the export's: the clusterset IP may be assigned per cluster, and a
// cluster that imports without exporting needs them too. So an export of a
// service with cluster IPs contributes nothing here, and neither does a
// headless one whose import the MCS controller made ClusterSetIP (the
// export lost a type conflict: its endpoints are not the service's).
//
// A headless endpoint gets no clusterset PTR: spec 001 asks for one only
// where the IP has none, and every ready endpoint of the exporting cluster
// already has its cluster-local PTR (spec 000), in the same reverse tree.
//
// Nothing is ever written at <clusterid>.<svc>.<ns>.svc itself: the spec says
// no record may single out one cluster's backends. imp may be nil.
func (b Builder) Exported(svc *corev1.Service, epSlices []*discoveryv1.EndpointSlice, imp *mcsv1alpha1.ServiceImport) ([]keys.Record, []error) {
	var s set
	if !b.clusterset(&s, svc.Namespace, svc.Name, "export") {
		return s.sorted()
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		s.fail("export %s/%s: ExternalName services cannot be exported", svc.Namespace, svc.Name)
		return s.sorted()
	}
	clusterIPs, err := ClusterIPs(svc)
	if err != nil {
		s.fail("export %s/%s: %w", svc.Namespace, svc.Name, err)
		return s.sorted()
	}
	if len(clusterIPs) > 0 {
		return s.sorted() // ClusterSetIP: the import's records
	}
	if imp != nil && imp.Spec.Type == mcsv1alpha1.ClusterSetIP {
		// Not a problem of the object: the MCS controller resolved a
		// type conflict, and says so in the export's Conflict condition.
		return s.sorted()
	}
	name := svc.Name + "." + svc.Namespace + ".svc." + b.Zone
	src := ExportSource(svc.Namespace, svc.Name)
	inCluster := b.Cluster + "." + name
	for _, ep := range b.endpoints(svc, epSlices, &s) {
		host := ep.host + "." + inCluster
		s.add(b.Address(name, src, ep.ip))
		s.add(b.Address(host, src, ep.ip))
		b.endpointSRVs(&s, name, host, src, ep)
	}
	return s.sorted()
}

// Imported returns the records of a ClusterSetIP ServiceImport in this
// cluster (spec 001 2.3): its IPs at the service name, SRV per named port
// to the service name, and a PTR for each IP, in this cluster's own
// reverse tree, unless local says a Service here already has the address
// (an MCS implementation that backs each import with a Service of its own:
// spec 001 2.3.3's Limitations, one PTR an address, and spec 000's PTR of
// that Service is the one kept). A headless import makes nothing: its
// records are the exporting clusters' endpoints (Exported).
//
// Every cluster writes its own import's records, exporting or not, and
// dnsd answers a cluster's own and no other's where it has them: the
// spec lets an implementation give each cluster its own clusterset IP,
// and another cluster's is of no use here.
func (b Builder) Imported(imp *mcsv1alpha1.ServiceImport, local func(netip.Addr) bool) ([]keys.Record, []error) {
	var s set
	if !b.clusterset(&s, imp.Namespace, imp.Name, "serviceimport") || imp.Spec.Type == mcsv1alpha1.Headless {
		return s.sorted()
	}
	name := imp.Name + "." + imp.Namespace + ".svc." + b.Zone
	src := ImportSource(imp.Namespace, imp.Name)
	for _, raw := range imp.Spec.IPs {
		ip, err := parseIP(raw)
		if err != nil {
			s.fail("serviceimport %s/%s: %w", imp.Namespace, imp.Name, err)
			continue
		}
		s.add(b.Address(name, src, ip))
		if local == nil || !local(ip) {
			s.add(b.PTR(ip, src, name))
		}
	}
	if len(s.recs) == 0 {
		return s.sorted() // no IP allocated yet: an SRV would point at nothing
	}
	for _, p := range imp.Spec.Ports {
		if p.Name == "" {
			continue
		}
		if err := label("port name", p.Name); err != nil {
			s.fail("serviceimport %s/%s: %w", imp.Namespace, imp.Name, err)
			continue
		}
		s.add(b.SRV(name, p.Name, protoLabel(p.Protocol), src, p.Port, name))
	}
	return s.sorted()
}

// clusterset checks that the builder is clusterset.local's and that the
// object's namespace and name are labels, failing s if not.
func (b Builder) clusterset(s *set, namespace, name, kind string) bool {
	if b.Zone != ClustersetZone {
		s.fail("%s %s/%s: multicluster records are published in %s, not %s", kind, namespace, name, ClustersetZone, b.Zone)
		return false
	}
	for _, err := range []error{label("namespace", namespace), label("name", name)} {
		if err != nil {
			s.fail("%s %s/%s: %w", kind, namespace, name, err)
			return false
		}
	}
	return true
}

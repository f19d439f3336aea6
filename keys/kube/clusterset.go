package kube

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"

	"github.com/etcdns/etcdns/keys"
)

// ClustersetZone is the multicluster zone; the MCS API fixes its name.
const ClustersetZone = "clusterset.local"

// ClustersetSchemaVersion is the schema of the multicluster DNS spec.
const ClustersetSchemaVersion = "1.1.0"

// ExportSource is the Source of the clusterset records a ServiceExport
// makes: they come and go with the export, not with the Service.
func ExportSource(namespace, name string) string {
	return "serviceexport/" + namespace + "/" + name
}

// Exported returns the records this cluster contributes to the clusterset
// zone for an exported service (b.Zone must be clusterset.local). The union
// of every exporting cluster's records is the clusterset view:
//
//   - headless: each ready endpoint at the service name and at
//     <hostname>.<clusterid>.<svc>.<ns>.svc, SRV per named port to the latter;
//   - ClusterSetIP: the ServiceImport's IPs at the service name, SRV per named
//     port to the service name, PTR to the service name.
//
// A headless endpoint gets no clusterset PTR: spec 001 asks for one only
// where the IP has none, and every ready endpoint of the exporting cluster
// already has its cluster-local PTR (spec 000), in the same reverse tree.
//
// Nothing is ever written at <clusterid>.<svc>.<ns>.svc itself: the spec says
// no record may single out one cluster's backends. imp may be nil for a
// headless service; a ClusterSetIP service without an import has no IP yet
// and contributes nothing.
func (b Builder) Exported(svc *corev1.Service, epSlices []*discoveryv1.EndpointSlice, imp *mcsv1alpha1.ServiceImport) ([]keys.Record, []error) {
	var s set
	if b.Zone != ClustersetZone {
		s.fail("export %s/%s: exports are published in %s, not %s", svc.Namespace, svc.Name, ClustersetZone, b.Zone)
		return s.sorted()
	}
	for _, err := range []error{label("service namespace", svc.Namespace), label("service name", svc.Name)} {
		if err != nil {
			s.fail("export %s/%s: %w", svc.Namespace, svc.Name, err)
			return s.sorted()
		}
	}
	name := svc.Name + "." + svc.Namespace + ".svc." + b.Zone
	src := ExportSource(svc.Namespace, svc.Name)
	clusterIPs, err := serviceIPs(svc)
	if err != nil {
		s.fail("export %s/%s: %w", svc.Namespace, svc.Name, err)
		return s.sorted()
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		s.fail("export %s/%s: ExternalName services cannot be exported", svc.Namespace, svc.Name)
		return s.sorted()
	}

	if len(clusterIPs) > 0 { // ClusterSetIP
		if imp == nil {
			return s.sorted()
		}
		for _, raw := range imp.Spec.IPs {
			ip, err := parseIP(raw)
			if err != nil {
				s.fail("serviceimport %s/%s: %w", imp.Namespace, imp.Name, err)
				continue
			}
			s.add(b.Address(name, src, ip))
			s.add(b.PTR(ip, src, name))
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

	inCluster := b.Cluster + "." + name
	for _, ep := range b.endpoints(svc, epSlices, &s) {
		host := ep.host + "." + inCluster
		s.add(b.Address(name, src, ep.ip))
		s.add(b.Address(host, src, ep.ip))
		b.endpointSRVs(&s, name, host, src, ep)
	}
	return s.sorted()
}

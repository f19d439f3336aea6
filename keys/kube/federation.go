package kube

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/etcdns/etcdns/keys"
)

// FederatedAnnotation set to "true" makes a Service this cluster's shard of
// the federated service of the same namespace and name. Opt-in, because a
// federated name hands the service's load balancer addresses to every
// cluster of the federation (spec 003).
const FederatedAnnotation = "federation.etcdns.io/federated"

// IsFederated reports whether a Service asks to be federated.
func IsFederated(svc *corev1.Service) bool {
	return svc.Annotations[FederatedAnnotation] == "true"
}

// Federation builds one cluster's shard records of federated services in a
// federation domain shared by every cluster of the federation.
type Federation struct {
	Builder        // Zone is the federation domain, such as federation
	Name    string // the federation, one DNS label
}

// NewFederation validates the layout, domain and federation name once.
func NewFederation(l keys.Layout, domain, name string) (Federation, error) {
	b, err := NewBuilder(l, domain)
	if err != nil {
		return Federation{}, fmt.Errorf("federation domain: %w", err)
	}
	if !keys.IsLabel(name) {
		return Federation{}, fmt.Errorf("federation name %q: not a lowercase DNS label", name)
	}
	return Federation{Builder: b, Name: name}, nil
}

// ServiceName is the federated name of a service: spec 003's
// <svc>.<ns>.<federation>.svc.<domain>.
func (f Federation) ServiceName(namespace, name string) string {
	return name + "." + namespace + "." + f.Name + ".svc." + f.Zone
}

// Federated returns this cluster's shard of a federated service (nothing
// for a Service without FederatedAnnotation):
//
//   - each load balancer ingress IP at <svc>.<ns>.<federation>.svc.<domain>,
//     what clients outside every cluster (and an unmodified CoreDNS) get:
//     spec 003's external records;
//   - each cluster IP at <clusterid>.<svc>.<ns>.<federation>.svc.<domain>,
//     which dnsd puts first for clients of this cluster, and which names
//     this cluster's shard explicitly.
//
// The records carry the Service's source, so they come and go with the
// Service and its annotation. Ingress entries with a hostname only (some
// cloud load balancers) are left out: several clusters cannot share a name
// through CNAMEs, which must be alone at their name. No PTR is written: the
// external addresses belong to the load balancer's provider, and the
// cluster IPs already have their cluster-local PTR.
func (f Federation) Federated(svc *corev1.Service) ([]keys.Record, []error) {
	var s set
	if !IsFederated(svc) {
		return s.sorted()
	}
	for _, err := range []error{label("service namespace", svc.Namespace), label("service name", svc.Name)} {
		if err != nil {
			s.fail("federated service %s/%s: %w", svc.Namespace, svc.Name, err)
			return s.sorted()
		}
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		s.fail("federated service %s/%s: ExternalName services have no shard to federate", svc.Namespace, svc.Name)
		return s.sorted()
	}
	clusterIPs, err := ClusterIPs(svc)
	if err != nil {
		s.fail("federated service %s/%s: %w", svc.Namespace, svc.Name, err)
		return s.sorted()
	}
	name := f.ServiceName(svc.Namespace, svc.Name)
	src := ServiceSource(svc.Namespace, svc.Name)
	for _, ip := range clusterIPs {
		s.add(f.Address(f.Cluster+"."+name, src, ip))
	}
	// A Service that stopped being a LoadBalancer may keep a stale status
	// until a controller clears it; its addresses no longer lead to it.
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return s.sorted()
	}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IP == "" {
			continue
		}
		ip, err := parseIP(ing.IP)
		if err != nil {
			s.fail("federated service %s/%s: load balancer ingress: %w", svc.Namespace, svc.Name, err)
			continue
		}
		s.add(f.Address(name, src, ip))
	}
	return s.sorted()
}

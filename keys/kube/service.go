package kube

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/etcdns/etcdns/keys"
)

// ServiceSource is the Source of every record of a Service.
func ServiceSource(namespace, name string) string {
	return "service/" + namespace + "/" + name
}

// endpoint is one ready address of a service, after merging its slices.
type endpoint struct {
	host  string // hostname, or the dashed address when none is set
	ip    netip.Addr
	ports []discoveryv1.EndpointPort
}

// Service returns the records of a Service and its EndpointSlices (only
// slices of this service are read; others are ignored). When the Service
// itself is invalid it returns no records; an invalid endpoint or port is
// left out and reported, and the rest of the service is still published.
func (b Builder) Service(svc *corev1.Service, epSlices []*discoveryv1.EndpointSlice) ([]keys.Record, []error) {
	var s set
	if err := label("service namespace", svc.Namespace); err != nil {
		s.problems = append(s.problems, fmt.Errorf("service %s/%s: %w", svc.Namespace, svc.Name, err))
		return s.sorted()
	}
	if err := label("service name", svc.Name); err != nil {
		s.problems = append(s.problems, fmt.Errorf("service %s/%s: %w", svc.Namespace, svc.Name, err))
		return s.sorted()
	}
	name := svc.Name + "." + svc.Namespace + ".svc." + b.Zone
	src := ServiceSource(svc.Namespace, svc.Name)

	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		target := strings.TrimSuffix(strings.TrimSpace(svc.Spec.ExternalName), ".")
		if _, err := netip.ParseAddr(target); err == nil {
			s.fail("service %s/%s: externalName %q is an IP address, not a name", svc.Namespace, svc.Name, target)
			return s.sorted()
		}
		r, err := b.Forward(name, src, keys.Value{Host: target})
		if err != nil {
			s.fail("service %s/%s: externalName: %w", svc.Namespace, svc.Name, err)
		}
		s.add(r, err)
		return s.sorted()
	}

	clusterIPs, err := ClusterIPs(svc)
	if err != nil {
		s.fail("service %s/%s: %w", svc.Namespace, svc.Name, err)
		return s.sorted()
	}
	headless := len(clusterIPs) == 0

	nameserver := b.Nameserver != "" && b.Nameserver == svc.Namespace+"/"+svc.Name
	for _, ip := range clusterIPs {
		s.add(b.Address(name, src, ip))
		s.add(b.PTR(ip, src, name))
		if nameserver {
			s.add(b.Address(NameserverName+"."+b.Zone, src, ip))
		}
	}
	if !headless {
		for _, p := range svc.Spec.Ports {
			if p.Name == "" {
				continue // the spec: unnamed ports have no SRV record
			}
			if err := label("port name", p.Name); err != nil {
				s.fail("service %s/%s: %w", svc.Namespace, svc.Name, err)
				continue
			}
			s.add(b.SRV(name, p.Name, protoLabel(p.Protocol), src, p.Port, name))
		}
	}

	eps := b.endpoints(svc, epSlices, &s)
	per := 1
	if headless && len(eps) > 0 {
		per = 3 + len(eps[0].ports)
	}
	s.grow(len(eps) * per)
	for _, ep := range eps {
		host := ep.host + "." + name
		s.add(b.Address(host, src, ep.ip))
		if !headless {
			continue
		}
		s.add(b.Address(name, src, ep.ip))
		s.add(b.PTR(ep.ip, src, host))
		b.endpointSRVs(&s, name, host, src, ep)
	}
	return s.sorted()
}

// ClusterIPs returns the cluster IPs of a service, none for a headless one.
func ClusterIPs(svc *corev1.Service) ([]netip.Addr, error) {
	raw := svc.Spec.ClusterIPs
	if len(raw) == 0 && svc.Spec.ClusterIP != "" {
		raw = []string{svc.Spec.ClusterIP}
	}
	var ips []netip.Addr
	for _, r := range raw {
		if r == corev1.ClusterIPNone {
			return nil, nil
		}
		ip, err := parseIP(r)
		if err != nil {
			return nil, fmt.Errorf("cluster IP: %w", err)
		}
		ips = append(ips, ip)
	}
	return ips, nil
}

// endpoints merges the slices of a service into its ready addresses, each
// (hostname, address) once however many slices carry it, with the ports of
// every slice that does: the spec's SRV records are one for each endpoint
// and port, as CoreDNS answers them. Sorted so the records come out in the
// same order every time.
func (b Builder) endpoints(svc *corev1.Service, epSlices []*discoveryv1.EndpointSlice, s *set) []endpoint {
	tolerate := svc.Spec.PublishNotReadyAddresses || svc.Annotations[TolerateUnreadyAnnotation] == "true"
	n := 0
	for _, sl := range epSlices {
		n += len(sl.Endpoints)
	}
	out := make([]endpoint, 0, n)
	for _, sl := range epSlices {
		if sl.Namespace != svc.Namespace || sl.Labels[discoveryv1.LabelServiceName] != svc.Name {
			continue
		}
		if sl.AddressType == discoveryv1.AddressTypeFQDN {
			continue // FQDN slices name other DNS names; they have no address records
		}
		for _, e := range sl.Endpoints {
			// The API: a nil ready condition means unknown, read as ready.
			if !tolerate && e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			for _, a := range e.Addresses {
				ip, err := parseIP(a)
				if err != nil {
					s.fail("endpointslice %s/%s: %w", sl.Namespace, sl.Name, err)
					continue
				}
				host := keys.DashedIP(ip)
				if e.Hostname != nil && *e.Hostname != "" {
					if err := label("endpoint hostname", *e.Hostname); err != nil {
						s.fail("endpointslice %s/%s: %w", sl.Namespace, sl.Name, err)
						continue
					}
					host = *e.Hostname
				}
				out = append(out, endpoint{host: host, ip: ip, ports: sl.Ports})
			}
		}
	}
	// Sorted, and each (hostname, address) kept once, without hashing
	// every endpoint at every change of its service. Stable, so that the
	// ports come in the slices' order.
	byID := func(a, b endpoint) int { return cmp.Or(cmp.Compare(a.host, b.host), a.ip.Compare(b.ip)) }
	slices.SortStableFunc(out, byID)
	kept := out[:0]
	for _, e := range out {
		if n := len(kept); n > 0 && byID(kept[n-1], e) == 0 {
			kept[n-1].ports = unionPorts(kept[n-1].ports, e.ports)
			continue
		}
		kept = append(kept, e)
	}
	return kept
}

// unionPorts is a with the ports of b it lacks. Both are slices' own
// arrays (an informer's cache), so a is copied before it grows.
func unionPorts(a, b []discoveryv1.EndpointPort) []discoveryv1.EndpointPort {
	grown := false
	for _, p := range b {
		if slices.ContainsFunc(a, func(q discoveryv1.EndpointPort) bool { return samePort(p, q) }) {
			continue
		}
		if !grown {
			a, grown = slices.Clip(a), true
		}
		a = append(a, p)
	}
	return a
}

func samePort(a, b discoveryv1.EndpointPort) bool {
	deref := func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	}
	return deref(a.Name) == deref(b.Name) && portProto(a.Protocol) == portProto(b.Protocol) &&
		(a.Port == nil) == (b.Port == nil) && (a.Port == nil || *a.Port == *b.Port)
}

// endpointSRVs adds an SRV record at the service name for each named port
// of an endpoint, targeting the endpoint's own name: the spec's N x M.
func (b Builder) endpointSRVs(s *set, service, target, src string, ep endpoint) {
	for _, p := range ep.ports {
		if p.Name == nil || *p.Name == "" || p.Port == nil {
			continue // the spec: unnamed ports have no SRV record
		}
		if err := label("port name", *p.Name); err != nil {
			s.fail("%s: endpoint %w", src, err)
			continue
		}
		s.add(b.SRV(service, *p.Name, protoLabel(portProto(p.Protocol)), src, *p.Port, target))
	}
}

// portProto is an EndpointSlice port's protocol: TCP when unset, as the
// API defaults it.
func portProto(p *corev1.Protocol) corev1.Protocol {
	if p == nil {
		return corev1.ProtocolTCP
	}
	return *p
}

func protoLabel(p corev1.Protocol) string {
	if p == "" {
		p = corev1.ProtocolTCP
	}
	return strings.ToLower(string(p))
}

package publisher

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/keys/kube"
	"github.com/etcdns/etcdns/publisher/source"
)

// Filter says which objects are published. Records of objects outside it
// are desired by nobody, so a narrowed filter removes them.
type Filter struct {
	Namespaces []string        // empty: all
	Selector   labels.Selector // services only; nil: all
	Pods       bool            // pod records (cluster.pods: verified)
}

// NewFilter parses a label selector ("" selects everything).
func NewFilter(namespaces []string, selector string, pods bool) (Filter, error) {
	f := Filter{Namespaces: namespaces, Pods: pods}
	if selector != "" {
		s, err := labels.Parse(selector)
		if err != nil {
			return f, fmt.Errorf("publisher.label-selector: %w", err)
		}
		f.Selector = s
	}
	return f, nil
}

func (f Filter) namespace(ns string) bool {
	if len(f.Namespaces) == 0 {
		return true
	}
	for _, n := range f.Namespaces {
		if n == ns {
			return true
		}
	}
	return false
}

// service reports whether the filter publishes a Service.
func (f Filter) service(s *corev1.Service) bool {
	return f.namespace(s.Namespace) && (f.Selector == nil || f.Selector.Matches(labels.Set(s.Labels)))
}

// Zones are the trees a publisher writes: its cluster domain and, with
// multicluster on, its share of clusterset.local and, with federation on,
// its shards of federated services.
type Zones struct {
	Cluster    kube.Builder
	Clusterset *kube.Builder    // nil: exports are not published
	Federation *kube.Federation // nil: services are not federated
}

// ZoneUnit is the unit of a zone's dns-version record.
func ZoneUnit(b kube.Builder) string { return "zone/" + b.Zone }

// Manages reports whether a unit is one this publisher computes records for:
// its zones' dns-version, services, pods and (with multicluster on)
// exports and imports. Records of any other source that carry this cluster's id (a zone
// it no longer serves, a kind a newer version writes) share the ranges it
// reads but are not its to delete, so they are left alone rather than taken
// for orphans. Turning multicluster off therefore leaves the exports and
// imports in place, and turning federation off leaves the shards (their tree is no
// longer read): `publisher withdraw` is how a cluster leaves the set.
func Manages(z Zones, unit string) bool {
	kind, _, name := source.ParseUnit(unit)
	switch kind {
	case "service", "pod":
		return true
	case "serviceexport", "serviceimport":
		return z.Clusterset != nil
	case "zone":
		return name == z.Cluster.Zone || z.Clusterset != nil && name == z.Clusterset.Zone
	}
	return false
}

// Desired computes the records a unit wants now, from the source's view.
// A unit whose object is gone (or filtered out) wants nothing, which is how
// deletes and orphans are handled. Problems are parts that were skipped.
func Desired(z Zones, src source.Source, f Filter, unit string) ([]keys.Record, []error) {
	kind, ns, name := source.ParseUnit(unit)
	switch kind {
	case "zone":
		switch {
		case name == z.Cluster.Zone:
			return []keys.Record{z.Cluster.Version()}, nil
		case z.Clusterset != nil && name == z.Clusterset.Zone:
			return []keys.Record{z.Clusterset.Version()}, nil
		}
		return nil, nil // not this publisher's zone; Manages keeps it from reconcile
	case "service", "serviceexport":
		if !f.namespace(ns) || kind == "serviceexport" && (z.Clusterset == nil || !src.Exported(ns, name)) {
			return nil, nil
		}
		svc, ok := src.Service(ns, name)
		if !ok || !f.service(svc) {
			return nil, nil
		}
		if kind == "service" {
			recs, problems := z.Cluster.Service(svc, src.Slices(ns, name))
			// The shard belongs to the service unit: it is made of the
			// Service alone and goes when the Service or its annotation
			// does.
			if z.Federation != nil {
				fr, fp := z.Federation.Federated(svc)
				recs, problems = append(recs, fr...), append(problems, fp...)
			}
			return recs, problems
		}
		imp, _ := src.Import(ns, name)
		return z.Clusterset.Exported(svc, src.Slices(ns, name), imp)
	case "serviceimport":
		// The publisher's selector picks Services; an import may have no
		// Service here to match, so only the namespace filter applies.
		if z.Clusterset == nil || !f.namespace(ns) {
			return nil, nil
		}
		imp, ok := src.Import(ns, name)
		if !ok {
			return nil, nil
		}
		// A Service the filter leaves out publishes no PTR of its own.
		published := func(ip netip.Addr) bool { return slices.ContainsFunc(src.ServicesAt(ip), f.service) }
		return z.Clusterset.Imported(imp, published)
	case "pod":
		if !f.Pods || !f.namespace(ns) {
			return nil, nil
		}
		pod, ok := src.Pod(ns, name)
		if !ok {
			return nil, nil
		}
		return z.Cluster.Pod(pod)
	}
	return nil, []error{fmt.Errorf("unit %q: unknown kind", unit)}
}

// Units is every unit the source knows plus the zones, sorted.
func Units(z Zones, src source.Source) []string {
	us := append(src.Units(), ZoneUnit(z.Cluster))
	if z.Clusterset != nil {
		us = append(us, ZoneUnit(*z.Clusterset))
	} else {
		us = slices.DeleteFunc(us, func(u string) bool {
			return strings.HasPrefix(u, "serviceexport/") || strings.HasPrefix(u, "serviceimport/")
		})
	}
	sort.Strings(us)
	return us
}

// All returns every record the source's objects want, sorted by key: what
// --dry-run prints.
func All(z Zones, src source.Source, f Filter) ([]keys.Record, []error) {
	var recs []keys.Record
	var problems []error
	for _, u := range Units(z, src) {
		r, p := Desired(z, src, f, u)
		recs = append(recs, r...)
		problems = append(problems, p...)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Key < recs[j].Key })
	return recs, problems
}

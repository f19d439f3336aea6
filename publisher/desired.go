package publisher

import (
	"fmt"
	"sort"

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

// ZoneUnit is the unit of the dns-version record.
func ZoneUnit(b kube.Builder) string { return "zone/" + b.Zone }

// Manages reports whether a unit is one this publisher computes records for:
// its own zone's dns-version, services and pods. Records of any other source
// that carry this cluster's id (a clusterset export, a zone it no longer
// serves, a kind a newer version writes) share the ranges it reads but are
// not its to delete, so they are left alone rather than taken for orphans.
func Manages(b kube.Builder, unit string) bool {
	kind, _, name := source.ParseUnit(unit)
	switch kind {
	case "service", "pod":
		return true
	case "zone":
		return name == b.Zone
	}
	return false
}

// Desired computes the records a unit wants now, from the source's view.
// A unit whose object is gone (or filtered out) wants nothing, which is how
// deletes and orphans are handled. Problems are parts that were skipped.
func Desired(b kube.Builder, src source.Source, f Filter, unit string) ([]keys.Record, []error) {
	kind, ns, name := source.ParseUnit(unit)
	switch kind {
	case "zone":
		if name != b.Zone {
			return nil, nil // not this publisher's zone; Manages keeps it from reconcile
		}
		return []keys.Record{b.Version()}, nil
	case "service":
		if !f.namespace(ns) {
			return nil, nil
		}
		svc, ok := src.Service(ns, name)
		if !ok || (f.Selector != nil && !f.Selector.Matches(labels.Set(svc.Labels))) {
			return nil, nil
		}
		return b.Service(svc, src.Slices(ns, name))
	case "pod":
		if !f.Pods || !f.namespace(ns) {
			return nil, nil
		}
		pod, ok := src.Pod(ns, name)
		if !ok {
			return nil, nil
		}
		return b.Pod(pod)
	}
	return nil, []error{fmt.Errorf("unit %q: unknown kind", unit)}
}

// Units is every unit the source knows plus the zone, sorted.
func Units(b kube.Builder, src source.Source) []string {
	us := append(src.Units(), ZoneUnit(b))
	sort.Strings(us)
	return us
}

// All returns every record the source's objects want, sorted by key: what
// --dry-run prints.
func All(b kube.Builder, src source.Source, f Filter) ([]keys.Record, []error) {
	var recs []keys.Record
	var problems []error
	for _, u := range Units(b, src) {
		r, p := Desired(b, src, f, u)
		recs = append(recs, r...)
		problems = append(problems, p...)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Key < recs[j].Key })
	return recs, problems
}

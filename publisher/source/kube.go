package source

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsclient "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
	mcsinformers "sigs.k8s.io/mcs-api/pkg/client/informers/externalversions"
)

const byService = "service"

// byIP indexes Services by their cluster IPs and ServiceImports by their
// clusterset IPs: an import's PTR depends on whether a Service here has
// the address already.
const byIP = "ip"

// Kube watches Services and EndpointSlices (and Pods when asked) through
// shared informers, in all namespaces or in each of the given ones.
type Kube struct {
	client        kubernetes.Interface
	namespaces    []string
	labelSelector string
	pods          bool
	resync        time.Duration

	mcs     mcsclient.Interface
	dynamic dynamic.Interface

	services []cache.SharedIndexInformer
	slices   []cache.SharedIndexInformer
	podInfs  []cache.SharedIndexInformer
	exports  []cache.SharedIndexInformer
	imports  []cache.SharedIndexInformer
}

// NewKube builds a source; labelSelector applies to Services only (slices
// carry their own labels), and the services it filters out simply have no
// records.
func NewKube(client kubernetes.Interface, namespaces []string, labelSelector string, pods bool) *Kube {
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	return &Kube{client: client, namespaces: namespaces, labelSelector: labelSelector, pods: pods}
}

// WithMulticluster also watches ServiceExports and ServiceImports (the MCS
// API's CRDs must be installed).
func (k *Kube) WithMulticluster(c mcsclient.Interface) *Kube {
	k.mcs = c
	return k
}

// WithProperties lets Identity read ClusterProperty objects.
func (k *Kube) WithProperties(d dynamic.Interface) *Kube {
	k.dynamic = d
	return k
}

// lastApplied is the annotation kubectl apply keeps a whole copy of the
// object in.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// Lean is the informers' transform: the caches keep what the records are
// built from, not the whole objects. A Pod is cut to its name, phase and
// addresses (keys/kube's Pod reads nothing else); an EndpointSlice's
// endpoints lose their pod reference, node, zone and hints (keys/kube
// reads an endpoint's addresses, ready condition and hostname); and from
// Services and EndpointSlices the managed fields and kubectl's
// last-applied copy are dropped. In a large cluster these are most of the
// bytes an informer holds: a Pod's spec runs to kilobytes, and every
// endpoint's pod reference is seven strings, more than its address. A
// feature that reads more (topology from a zone) adds it here. Anything
// else (a tombstone) is kept as it came.
//
// Lean is exported for bench/publisher, whose in-memory source holds its
// objects as an informer's cache would.
func Lean(obj any) (any, error) {
	if o, ok := obj.(*corev1.Pod); ok {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: o.Namespace, Name: o.Name, UID: o.UID,
				ResourceVersion: o.ResourceVersion, DeletionTimestamp: o.DeletionTimestamp,
			},
			Status: corev1.PodStatus{Phase: o.Status.Phase, PodIP: o.Status.PodIP, PodIPs: o.Status.PodIPs},
		}, nil
	}
	if o, ok := obj.(*discoveryv1.EndpointSlice); ok {
		// A decoder appends endpoints one at a time, so the array keeps
		// the spare room of append's growth for as long as the slice is
		// cached: 170 endpoints of 96 bytes for 100, 6.5 KB a slice, 64 MiB
		// at a million endpoints (bench/publisher/README.md).
		if cap(o.Endpoints) > len(o.Endpoints) {
			o.Endpoints = slices.Clone(o.Endpoints)
		}
		for i := range o.Endpoints {
			e := &o.Endpoints[i]
			e.TargetRef, e.NodeName, e.Zone, e.Hints, e.DeprecatedTopology = nil, nil, nil, nil, nil
			// Three allocations of one bool each per endpoint, which the
			// controller always sets; nobody writes a cached object.
			c := &e.Conditions
			c.Ready, c.Serving, c.Terminating = sharedBool(c.Ready), sharedBool(c.Serving), sharedBool(c.Terminating)
		}
	}
	if o, ok := obj.(metav1.Object); ok {
		o.SetManagedFields(nil)
		if a := o.GetAnnotations(); a[lastApplied] != "" {
			delete(a, lastApplied)
		}
	}
	return obj, nil
}

var yes, no = true, false

// sharedBool points at one of two package-wide bools instead of its own.
func sharedBool(p *bool) *bool {
	switch {
	case p == nil:
		return nil
	case *p:
		return &yes
	}
	return &no
}

func (k *Kube) Start(ctx context.Context, notify Notify) error {
	var synced []cache.InformerSynced
	// Every informer is made before any starts: their handlers read the
	// lists of informers (Exported), which must not grow under them when
	// several namespaces are watched.
	var start []func(stop <-chan struct{})
	for _, ns := range k.namespaces {
		if k.mcs != nil {
			// Before the service informers, so that their first events
			// already see which services are exported.
			s, run, err := k.multicluster(ns, notify)
			if err != nil {
				return err
			}
			synced = append(synced, s...)
			start = append(start, run)
		}
		svcF := informers.NewSharedInformerFactoryWithOptions(k.client, k.resync,
			informers.WithNamespace(ns), informers.WithTransform(Lean),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = k.labelSelector }))
		f := informers.NewSharedInformerFactoryWithOptions(k.client, k.resync, informers.WithNamespace(ns), informers.WithTransform(Lean))

		svc := svcF.Core().V1().Services().Informer()
		if k.mcs != nil { // a few hundred bytes a Service, for imports only
			if err := svc.AddIndexers(cache.Indexers{byIP: func(obj any) ([]string, error) {
				if s, ok := obj.(*corev1.Service); ok {
					return serviceIPs(s), nil
				}
				return nil, nil
			}}); err != nil {
				return err
			}
		}
		if _, err := svc.AddEventHandler(handler(notify, func(obj any) []string {
			s, ok := obj.(*corev1.Service)
			if !ok {
				return nil
			}
			return append(k.serviceUnits(s.Namespace, s.Name), k.importsAt(serviceIPs(s))...)
		})); err != nil {
			return err
		}
		sl := f.Discovery().V1().EndpointSlices().Informer()
		if err := sl.AddIndexers(cache.Indexers{byService: func(obj any) ([]string, error) {
			s, ok := obj.(*discoveryv1.EndpointSlice)
			if !ok || sliceService(s) == "" {
				return nil, nil
			}
			return []string{s.Namespace + "/" + sliceService(s)}, nil
		}}); err != nil {
			return err
		}
		if _, err := sl.AddEventHandler(handler(notify, func(obj any) []string {
			s, ok := obj.(*discoveryv1.EndpointSlice)
			if !ok || sliceService(s) == "" {
				return nil
			}
			return k.serviceUnits(s.Namespace, sliceService(s))
		})); err != nil {
			return err
		}
		k.services = append(k.services, svc)
		k.slices = append(k.slices, sl)
		synced = append(synced, svc.HasSynced, sl.HasSynced)
		if k.pods {
			p := f.Core().V1().Pods().Informer()
			if _, err := p.AddEventHandler(handler(notify, func(obj any) []string {
				pod, ok := obj.(*corev1.Pod)
				if !ok {
					return nil
				}
				return []string{PodUnit(pod.Namespace, pod.Name)}
			})); err != nil {
				return err
			}
			k.podInfs = append(k.podInfs, p)
			synced = append(synced, p.HasSynced)
		}
		start = append(start, svcF.Start, f.Start)
	}
	for _, s := range start {
		s(ctx.Done())
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("kubernetes informers did not sync: %w", context.Cause(ctx))
	}
	return nil
}

// multicluster makes ns's ServiceExport and ServiceImport informers and
// returns their synced checks and what starts them.
func (k *Kube) multicluster(ns string, notify Notify) ([]cache.InformerSynced, func(stop <-chan struct{}), error) {
	// Without the CRDs the informers would retry their lists forever and
	// the publisher would never become ready: say what is missing instead.
	gv := mcsv1alpha1.SchemeGroupVersion.String()
	if _, err := k.client.Discovery().ServerResourcesForGroupVersion(gv); err != nil {
		return nil, nil, fmt.Errorf("publisher.clusterset is on, but the API server does not serve %s (install the MCS API CRDs: ServiceExport, ServiceImport): %w", gv, err)
	}
	f := mcsinformers.NewSharedInformerFactoryWithOptions(k.mcs, k.resync, mcsinformers.WithNamespace(ns))
	exp := f.Multicluster().V1alpha1().ServiceExports().Informer()
	imp := f.Multicluster().V1alpha1().ServiceImports().Informer()
	if err := imp.AddIndexers(cache.Indexers{byIP: func(obj any) ([]string, error) {
		if i, ok := obj.(*mcsv1alpha1.ServiceImport); ok {
			return importIPs(i), nil
		}
		return nil, nil
	}}); err != nil {
		return nil, nil, err
	}
	// An export's records are made of the service, its slices and the
	// import of the same name (whose type says whether the export's
	// endpoints are the service's), so both touch the export's unit.
	if _, err := exp.AddEventHandler(handler(notify, func(obj any) []string {
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil
		}
		return []string{ExportUnit(m.GetNamespace(), m.GetName())}
	})); err != nil {
		return nil, nil, err
	}
	if _, err := imp.AddEventHandler(handler(notify, func(obj any) []string {
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil
		}
		return []string{ImportUnit(m.GetNamespace(), m.GetName()), ExportUnit(m.GetNamespace(), m.GetName())}
	})); err != nil {
		return nil, nil, err
	}
	k.exports = append(k.exports, exp)
	k.imports = append(k.imports, imp)
	return []cache.InformerSynced{exp.HasSynced, imp.HasSynced}, f.Start, nil
}

// serviceUnits are the units a change to a service or its slices touches.
func (k *Kube) serviceUnits(namespace, name string) []string {
	if k.Exported(namespace, name) {
		return []string{ServiceUnit(namespace, name), ExportUnit(namespace, name)}
	}
	return []string{ServiceUnit(namespace, name)}
}

// handler maps every event to the units it touches; an update that moves a
// slice from one service to another touches both.
func handler(notify Notify, units func(obj any) []string) cache.ResourceEventHandlerFuncs {
	emit := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		now := time.Now()
		for _, u := range units(obj) {
			notify(u, now)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    emit,
		UpdateFunc: func(old, obj any) { emit(old); emit(obj) },
		DeleteFunc: emit,
	}
}

func (k *Kube) Service(namespace, name string) (*corev1.Service, bool) {
	for _, inf := range k.services {
		if obj, ok, _ := inf.GetStore().GetByKey(namespace + "/" + name); ok {
			return obj.(*corev1.Service), true
		}
	}
	return nil, false
}

func (k *Kube) Slices(namespace, service string) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	for _, inf := range k.slices {
		objs, _ := inf.GetIndexer().ByIndex(byService, namespace+"/"+service)
		for _, o := range objs {
			out = append(out, o.(*discoveryv1.EndpointSlice))
		}
	}
	return out
}

func (k *Kube) Pod(namespace, name string) (*corev1.Pod, bool) {
	for _, inf := range k.podInfs {
		if obj, ok, _ := inf.GetStore().GetByKey(namespace + "/" + name); ok {
			return obj.(*corev1.Pod), true
		}
	}
	return nil, false
}

func (k *Kube) Exported(namespace, name string) bool {
	for _, inf := range k.exports {
		if obj, ok, _ := inf.GetStore().GetByKey(namespace + "/" + name); ok {
			return exportValid(obj.(*mcsv1alpha1.ServiceExport))
		}
	}
	return false
}

func (k *Kube) ServicesAt(ip netip.Addr) []*corev1.Service {
	var out []*corev1.Service
	for _, inf := range k.services {
		objs, _ := inf.GetIndexer().ByIndex(byIP, ip.Unmap().String())
		for _, o := range objs {
			out = append(out, o.(*corev1.Service))
		}
	}
	return out
}

// importsAt are the units of the imports of any of the addresses.
func (k *Kube) importsAt(ips []string) []string {
	var out []string
	for _, inf := range k.imports {
		for _, ip := range ips {
			objs, _ := inf.GetIndexer().ByIndex(byIP, ip)
			for _, o := range objs {
				i := o.(*mcsv1alpha1.ServiceImport)
				out = append(out, ImportUnit(i.Namespace, i.Name))
			}
		}
	}
	return out
}

func (k *Kube) Import(namespace, name string) (*mcsv1alpha1.ServiceImport, bool) {
	for _, inf := range k.imports {
		if obj, ok, _ := inf.GetStore().GetByKey(namespace + "/" + name); ok {
			return obj.(*mcsv1alpha1.ServiceImport), true
		}
	}
	return nil, false
}

func (k *Kube) Units() []string {
	var out []string
	for _, inf := range k.exports {
		for _, o := range inf.GetStore().List() {
			e := o.(*mcsv1alpha1.ServiceExport)
			out = append(out, ExportUnit(e.Namespace, e.Name))
		}
	}
	for _, inf := range k.imports {
		for _, o := range inf.GetStore().List() {
			i := o.(*mcsv1alpha1.ServiceImport)
			out = append(out, ImportUnit(i.Namespace, i.Name))
		}
	}
	for _, inf := range k.services {
		for _, o := range inf.GetStore().List() {
			s := o.(*corev1.Service)
			out = append(out, ServiceUnit(s.Namespace, s.Name))
		}
	}
	for _, inf := range k.podInfs {
		for _, o := range inf.GetStore().List() {
			p := o.(*corev1.Pod)
			out = append(out, PodUnit(p.Namespace, p.Name))
		}
	}
	return out
}

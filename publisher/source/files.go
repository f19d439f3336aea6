package source

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
)

// decoder knows the built-in kinds and the MCS API's.
var decoder = func() runtime.Decoder {
	s := runtime.NewScheme()
	if err := scheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := mcsv1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return serializer.NewCodecFactory(s).UniversalDeserializer()
}()

// Files reads Services, EndpointSlices, Pods, ServiceExports and
// ServiceImports (and, for Identity, ClusterProperties and the kube-system
// Namespace) from the YAML and JSON
// manifests (multi-document, or kind: List) in a directory tree, and reads
// them again when a file is added, removed or modified. It polls the files'
// names, sizes and modification times once per Interval: fsnotify is not a
// dependency, and a second of delay is fine for a cluster-less setup.
type Files struct {
	Dir      string
	Interval time.Duration
	Pods     bool
	Log      *slog.Logger

	mu     sync.RWMutex
	state  *fileState
	sig    string
	notify Notify
}

type fileState struct {
	services map[string]*corev1.Service              // ns/name
	slices   map[string][]*discoveryv1.EndpointSlice // ns/service
	pods     map[string]*corev1.Pod                  // ns/name
	exports  map[string]bool                         // ns/name -> valid (exportValid)
	imports  map[string]*mcsv1alpha1.ServiceImport   // ns/name
	identity Identity
	prints   map[string]string // unit -> fingerprint
}

func NewFiles(dir string, pods bool, log *slog.Logger) *Files {
	if log == nil {
		log = slog.Default()
	}
	return &Files{Dir: dir, Interval: time.Second, Pods: pods, Log: log}
}

func (f *Files) Start(ctx context.Context, notify Notify) error {
	f.notify = notify
	sig, err := f.signature()
	if err != nil {
		return err
	}
	st, err := f.read()
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.state, f.sig = st, sig
	f.mu.Unlock()
	go f.poll(ctx)
	return nil
}

func (f *Files) poll(ctx context.Context) {
	t := time.NewTicker(f.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sig, err := f.signature()
		if err != nil {
			f.Log.Warn("reading manifests", "dir", f.Dir, "err", err)
			continue
		}
		if sig == f.sig {
			continue
		}
		st, err := f.read()
		if err != nil {
			// Keep serving the last good state: a half-written file must
			// not delete every record.
			f.Log.Warn("reading manifests; keeping the previous state", "dir", f.Dir, "err", err)
			continue
		}
		f.mu.Lock()
		old := f.state
		f.state, f.sig = st, sig
		f.mu.Unlock()
		now := time.Now()
		n := 0
		for u, p := range st.prints {
			if old.prints[u] != p {
				f.notify(u, now)
				n++
			}
		}
		for u := range old.prints {
			if _, ok := st.prints[u]; !ok {
				f.notify(u, now)
				n++
			}
		}
		f.Log.Info("manifests changed", "dir", f.Dir, "units", n)
	}
}

func (f *Files) manifests() ([]string, error) {
	var out []string
	err := filepath.WalkDir(f.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != f.Dir && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		switch strings.ToLower(filepath.Ext(p)) {
		case ".yaml", ".yml", ".json":
			out = append(out, p)
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}

func (f *Files) signature() (string, error) {
	files, err := f.manifests()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, p := range files {
		fi, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%s\x00%d\x00%d\n", p, fi.Size(), fi.ModTime().UnixNano())
	}
	return b.String(), nil
}

func (f *Files) read() (*fileState, error) {
	st := &fileState{
		services: map[string]*corev1.Service{},
		slices:   map[string][]*discoveryv1.EndpointSlice{},
		pods:     map[string]*corev1.Pod{},
		exports:  map[string]bool{},
		imports:  map[string]*mcsv1alpha1.ServiceImport{},
		identity: Identity{Properties: map[string]string{}},
		prints:   map[string]string{},
	}
	files, err := f.manifests()
	if err != nil {
		return nil, err
	}
	for _, p := range files {
		objs, err := DecodeManifests(p)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			switch o := o.(type) {
			case *corev1.Service:
				defaultNamespace(&o.ObjectMeta.Namespace)
				st.services[o.Namespace+"/"+o.Name] = o
			case *discoveryv1.EndpointSlice:
				defaultNamespace(&o.ObjectMeta.Namespace)
				if s := sliceService(o); s != "" {
					st.slices[o.Namespace+"/"+s] = append(st.slices[o.Namespace+"/"+s], o)
				}
			case *corev1.Pod:
				defaultNamespace(&o.ObjectMeta.Namespace)
				if f.Pods {
					st.pods[o.Namespace+"/"+o.Name] = o
				}
			case *mcsv1alpha1.ServiceExport:
				defaultNamespace(&o.ObjectMeta.Namespace)
				st.exports[o.Namespace+"/"+o.Name] = exportValid(o)
			case *mcsv1alpha1.ServiceImport:
				defaultNamespace(&o.ObjectMeta.Namespace)
				st.imports[o.Namespace+"/"+o.Name] = o
			case *corev1.Namespace:
				if o.Name == metav1.NamespaceSystem {
					st.identity.KubeSystemUID = string(o.UID)
				}
			case *unstructured.Unstructured:
				if v := propertyValue(o); v != "" && (o.GetName() == PropertyClusterID || o.GetName() == PropertyLegacyClusterID) {
					st.identity.Properties[o.GetName()] = v
				}
			}
		}
	}
	for k, s := range st.services {
		ns, name, _ := strings.Cut(k, "/")
		st.prints[ServiceUnit(ns, name)] = fingerprint(s, st.slices[k])
	}
	// A slice without its service still makes a unit, so that adding
	// the service later is a change of that unit.
	for k, sl := range st.slices {
		ns, name, _ := strings.Cut(k, "/")
		u := ServiceUnit(ns, name)
		if _, ok := st.prints[u]; !ok {
			st.prints[u] = fingerprint(nil, sl)
		}
	}
	for k, valid := range st.exports {
		ns, name, _ := strings.Cut(k, "/")
		st.prints[ExportUnit(ns, name)] = fingerprint(valid, st.services[k], st.slices[k], st.imports[k])
	}
	byIP := map[string][]*corev1.Service{}
	for _, s := range st.services {
		for _, ip := range serviceIPs(s) {
			byIP[ip] = append(byIP[ip], s)
		}
	}
	for k, imp := range st.imports {
		ns, name, _ := strings.Cut(k, "/")
		// Its PTR depends on the Services at its addresses, and on whether
		// the publisher's filter publishes them (their labels).
		parts := []any{imp}
		for _, ip := range importIPs(imp) {
			parts = append(parts, ip)
			for _, svc := range byIP[ip] {
				parts = append(parts, svc.Namespace, svc.Name, svc.Labels)
			}
		}
		st.prints[ImportUnit(ns, name)] = fingerprint(parts...)
	}
	for k, p := range st.pods {
		ns, name, _ := strings.Cut(k, "/")
		st.prints[PodUnit(ns, name)] = fingerprint(p)
	}
	return st, nil
}

func defaultNamespace(ns *string) {
	if *ns == "" {
		*ns = "default"
	}
}

func fingerprint(objs ...any) string {
	b, _ := json.Marshal(objs)
	return string(b)
}

// DecodeManifests reads one YAML or JSON file of Kubernetes objects. Kinds
// neither built in nor of the MCS API are skipped, except ClusterProperty,
// returned unstructured; a document that is not a Kubernetes object fails
// the file.
func DecodeManifests(path string) ([]runtime.Object, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	dec := decoder
	var out []runtime.Object
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i+1, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, _, err := dec.Decode(doc, nil, nil)
		if err != nil {
			if runtime.IsNotRegisteredError(err) {
				if u := clusterProperty(doc); u != nil {
					out = append(out, u)
				}
				continue
			}
			return nil, fmt.Errorf("%s: document %d: %w", path, i+1, err)
		}
		if l, ok := obj.(*corev1.List); ok {
			for j, item := range l.Items {
				o, _, err := dec.Decode(item.Raw, nil, nil)
				if err != nil {
					if runtime.IsNotRegisteredError(err) {
						continue
					}
					return nil, fmt.Errorf("%s: document %d item %d: %w", path, i+1, j, err)
				}
				out = append(out, o)
			}
			continue
		}
		out = append(out, obj)
	}
}

// clusterProperty decodes a ClusterProperty, nil for any other kind: its
// API (KEP-2149) is not a Go dependency, and one field is all we read.
func clusterProperty(doc []byte) *unstructured.Unstructured {
	j, err := utilyaml.ToJSON(doc)
	if err != nil {
		return nil
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(j); err != nil {
		return nil
	}
	if u.GetKind() != "ClusterProperty" || u.GroupVersionKind().Group != ClusterPropertyResource.Group {
		return nil
	}
	return u
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			b.Write(l)
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

func (f *Files) Service(namespace, name string) (*corev1.Service, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s, ok := f.state.services[namespace+"/"+name]
	return s, ok
}

func (f *Files) Slices(namespace, service string) []*discoveryv1.EndpointSlice {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.slices[namespace+"/"+service]
}

func (f *Files) Pod(namespace, name string) (*corev1.Pod, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	p, ok := f.state.pods[namespace+"/"+name]
	return p, ok
}

func (f *Files) ServicesAt(ip netip.Addr) []*corev1.Service {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []*corev1.Service
	for _, s := range f.state.services {
		if slices.Contains(serviceIPs(s), ip.Unmap().String()) {
			out = append(out, s)
		}
	}
	return out
}

func (f *Files) Exported(namespace, name string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.exports[namespace+"/"+name]
}

func (f *Files) Import(namespace, name string) (*mcsv1alpha1.ServiceImport, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	i, ok := f.state.imports[namespace+"/"+name]
	return i, ok
}

// Identity reads the manifests now: it is asked before Start.
func (f *Files) Identity(context.Context) (Identity, error) {
	st, err := f.read()
	if err != nil {
		return Identity{}, err
	}
	return st.identity, nil
}

func (f *Files) Units() []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]string, 0, len(f.state.prints))
	for u := range f.state.prints {
		out = append(out, u)
	}
	sort.Strings(out)
	return out
}

package source

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"
)

// deploymentPod is a Pod as a Deployment's ReplicaSet makes it and the
// kubelet reports it: one container with a few variables, probes and
// limits, the service account token volume, four conditions, and the
// managed fields of the controller and the kubelet. Real pods are often
// larger (sidecars, more variables and mounts).
func deploymentPod(i int) *corev1.Pod {
	now := metav1.NewTime(time.Unix(1_700_000_000, 0))
	name := fmt.Sprintf("web-7d4b9c8f6d-%05d", i)
	ip := fmt.Sprintf("10.%d.%d.%d", 128+i>>16&63, i>>8&255, i&255)
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}, PeriodSeconds: 10}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "shop", UID: types.UID(fmt.Sprintf("6f1c2d3e-4b5a-4c6d-8e7f-%012d", i)), ResourceVersion: fmt.Sprint(1000 + i),
			GenerateName: "web-7d4b9c8f6d-", CreationTimestamp: now,
			Labels:          map[string]string{"app": "web", "pod-template-hash": "7d4b9c8f6d", "tier": "frontend"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d4b9c8f6d", UID: "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"}},
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &now, FieldsType: "FieldsV1",
					FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:generateName":{},"f:labels":{".":{},"f:app":{},"f:pod-template-hash":{},"f:tier":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"0a1b2c3d\"}":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"web\"}":{".":{},"f:env":{".":{},"k:{\"name\":\"LOG_LEVEL\"}":{".":{},"f:name":{},"f:value":{}}},"f:image":{},"f:imagePullPolicy":{},"f:livenessProbe":{},"f:name":{},"f:ports":{},"f:readinessProbe":{},"f:resources":{}}},"f:dnsPolicy":{},"f:enableServiceLinks":{},"f:restartPolicy":{},"f:schedulerName":{},"f:securityContext":{},"f:terminationGracePeriodSeconds":{}}}`)}},
				{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &now, FieldsType: "FieldsV1", Subresource: "status",
					FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:conditions":{"k:{\"type\":\"ContainersReady\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}},"k:{\"type\":\"Initialized\"}":{},"k:{\"type\":\"Ready\"}":{}},"f:containerStatuses":{},"f:hostIP":{},"f:hostIPs":{},"f:phase":{},"f:podIP":{},"f:podIPs":{".":{},"k:{\"ip\":\"10.0.0.1\"}":{".":{},"f:ip":{}}},"f:startTime":{}}}`)}},
			},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "web", Image: "registry.example.com/shop/web:1.24.3", ImagePullPolicy: corev1.PullIfNotPresent,
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
				Env:   []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "info"}, {Name: "PORT", Value: "8080"}, {Name: "UPSTREAM", Value: "http://api.shop.svc.cluster.local"}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
				},
				LivenessProbe: probe, ReadinessProbe: probe,
				VolumeMounts:             []corev1.VolumeMount{{Name: "kube-api-access-x7k2p", ReadOnly: true, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}},
				TerminationMessagePath:   "/dev/termination-log",
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
			}},
			Volumes: []corev1.Volume{{Name: "kube-api-access-x7k2p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr(int64(3607))}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			}}}}},
			RestartPolicy: corev1.RestartPolicyAlways, DNSPolicy: corev1.DNSClusterFirst, ServiceAccountName: "default", NodeName: fmt.Sprintf("node-%d", i%500),
			SchedulerName: "default-scheduler", TerminationGracePeriodSeconds: ptr(int64(30)),
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(300))},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(300))},
			},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, HostIP: "192.168.0.10", PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, StartTime: &now, QOSClass: corev1.PodQOSBurstable,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			},
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: "web", Ready: true, Image: "registry.example.com/shop/web:1.24.3",
				ImageID:     "registry.example.com/shop/web@sha256:4b825dc642cb6eb9a060e54bf8d69288fbee4904b825dc642cb6eb9a060e54bf",
				ContainerID: "containerd://8f14e45fceea167a5a36dedd4bea2543a6b1f7e0c3b4a8d9e2f1c0b9a8d7e6f5",
				State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}, Started: ptr(true),
			}},
		},
	}
}

func ptr[T any](v T) *T { return &v }

// BenchmarkCachedPod is the heap an informer's cache holds a pod in,
// whole and as lean keeps it (B/pod).
func BenchmarkCachedPod(b *testing.B) {
	benchmarkCached(b, 10_000, 1, "B/pod", func(i int) any { return deploymentPod(i) })
}

// benchmarkCached reports the heap a cache.Store holds n objects in, made
// by obj, whole and as lean keeps them, per unit (an object holds per of
// them).
func benchmarkCached(b *testing.B, n, per int, unit string, obj func(i int) any) {
	for _, c := range []struct {
		name      string
		transform cache.TransformFunc
	}{{"whole", nil}, {"lean", Lean}} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				before := heapInUse()
				objs := make([]any, n)
				for i := range objs {
					objs[i] = obj(i)
				}
				b.StartTimer()
				store := cache.NewStore(cache.MetaNamespaceKeyFunc)
				for i, o := range objs {
					if c.transform != nil {
						o, _ = c.transform(o)
					}
					if err := store.Add(o); err != nil {
						b.Fatal(err)
					}
					objs[i] = nil // decoded from a watch, it is the cache's alone
				}
				b.StopTimer()
				objs = nil
				b.ReportMetric(float64(int64(heapInUse())-int64(before))/float64(n*per), unit)
				runtime.KeepAlive(store)
			}
		})
	}
}

// deploymentSlice is an EndpointSlice as the endpointslice controller
// writes it for a Deployment's 100 pods: each endpoint with its address,
// conditions, pod reference, node and zone, and the controller's managed
// fields.
func deploymentSlice(i int) *discoveryv1.EndpointSlice {
	now := metav1.NewTime(time.Unix(1_700_000_000, 0))
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("web-%05d-x7k2p", i), Namespace: "shop", GenerateName: fmt.Sprintf("web-%05d-", i),
			UID: types.UID(fmt.Sprintf("9e8d7c6b-5a4f-4e3d-8c2b-%012d", i)), ResourceVersion: fmt.Sprint(5000 + i), Generation: 3, CreationTimestamp: now,
			Labels: map[string]string{discoveryv1.LabelServiceName: fmt.Sprintf("web-%05d", i), discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io",
				"app": "web"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: fmt.Sprintf("web-%05d", i),
				UID: "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", Controller: ptr(true), BlockOwnerDeletion: ptr(true)}},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "discovery.k8s.io/v1",
				Time: &now, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:addressType":{},"f:endpoints":{},"f:metadata":{"f:generateName":{},"f:labels":{".":{},"f:app":{},"f:endpointslice.kubernetes.io/managed-by":{},"f:kubernetes.io/service-name":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"1a2b3c4d\"}":{}}},"f:ports":{}}`)}}},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(int32(8080))}},
	}
	for j := range 100 {
		n := i*100 + j
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", 128+n>>16&63, n>>8&255, n&255)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: fmt.Sprintf("web-%05d-7d4b9c8f6d-%05d", i, j),
				UID: types.UID(fmt.Sprintf("6f1c2d3e-4b5a-4c6d-8e7f-%012d", n))},
			NodeName: ptr(fmt.Sprintf("node-%d", n%500)), Zone: ptr(fmt.Sprintf("europe-west1-%c", 'b'+n%3)),
		})
	}
	return sl
}

// BenchmarkCachedEndpointSlice is the heap an informer's cache holds an
// endpoint in, whole and as lean keeps it (B/endpoint).
func BenchmarkCachedEndpointSlice(b *testing.B) {
	benchmarkCached(b, 100, 100, "B/endpoint", func(i int) any { return deploymentSlice(i) })
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

package kube

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/etcdns/etcdns/keys"
)

// PodSource is the Source of every record of a Pod.
func PodSource(namespace, name string) string {
	return "pod/" + namespace + "/" + name
}

// Pod returns the a-b-c-d.<ns>.pod.<zone> records of a pod for the
// `verified` pod mode: one per pod IP while the pod may still hold it.
// Finished pods have none, because their addresses are handed out again.
func (b Builder) Pod(pod *corev1.Pod) ([]keys.Record, []error) {
	var s set
	if err := label("pod namespace", pod.Namespace); err != nil {
		s.fail("pod %s/%s: %w", pod.Namespace, pod.Name, err)
		return s.sorted()
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return s.sorted()
	}
	raw := make([]string, 0, 2)
	for _, p := range pod.Status.PodIPs {
		raw = append(raw, p.IP)
	}
	if len(raw) == 0 && pod.Status.PodIP != "" {
		raw = append(raw, pod.Status.PodIP)
	}
	src := PodSource(pod.Namespace, pod.Name)
	for _, r := range raw {
		ip, err := parseIP(r)
		if err != nil {
			s.fail("pod %s/%s: %w", pod.Namespace, pod.Name, err)
			continue
		}
		s.add(b.Address(keys.DashedIP(ip)+"."+pod.Namespace+".pod."+b.Zone, src, ip))
	}
	return s.sorted()
}

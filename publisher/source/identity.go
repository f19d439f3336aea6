package source

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/etcdns/etcdns/keys"
)

// The ClusterProperty names that carry a cluster's id: KEP-2149 settled on
// the first; the multicluster DNS seed and early implementations used the
// second, so both are read.
const (
	PropertyClusterID       = "cluster.clusterset.k8s.io"
	PropertyLegacyClusterID = "id.k8s.io"
)

// ClusterPropertyResource is KEP-2149's cluster-scoped ClusterProperty.
var ClusterPropertyResource = schema.GroupVersionResource{Group: "about.k8s.io", Version: "v1alpha1", Resource: "clusterproperties"}

// Identity is what a cluster says about itself.
type Identity struct {
	Properties    map[string]string // ClusterProperty name -> spec.value, of the id properties present
	KubeSystemUID string            // "" when unknown
}

// Identifier is a source that can read its cluster's Identity.
type Identifier interface {
	Identity(ctx context.Context) (Identity, error)
}

// ClusterID picks the cluster id: the configured one, else the
// cluster.clusterset.k8s.io property, else id.k8s.io, else the kube-system
// namespace UID (the seed's recommendation: stable for the cluster's life).
// It returns where the id came from, for the log. The id is hashed into
// record ids, written into every value and is a DNS label in clusterset
// names, so anything else is refused here rather than at the first record.
func ClusterID(configured string, id Identity) (string, string, error) {
	var v, from string
	switch {
	case configured != "":
		v, from = configured, "cluster.id"
	case id.Properties[PropertyClusterID] != "":
		v, from = id.Properties[PropertyClusterID], "ClusterProperty "+PropertyClusterID
	case id.Properties[PropertyLegacyClusterID] != "":
		v, from = id.Properties[PropertyLegacyClusterID], "ClusterProperty "+PropertyLegacyClusterID
	case id.KubeSystemUID != "":
		v, from = id.KubeSystemUID, "kube-system namespace uid"
	default:
		return "", "", errors.New("cluster id: cluster.id is empty and the source has no ClusterProperty " +
			PropertyClusterID + " or " + PropertyLegacyClusterID + " and no kube-system namespace; set cluster.id")
	}
	if !keys.IsLabel(v) {
		return "", "", fmt.Errorf("cluster id %q (from %s) is not a lowercase DNS label of at most 63 octets", v, from)
	}
	return v, from, nil
}

// Identity reads the id ClusterProperties (when WithProperties was given a
// client; a cluster without the CRD simply has none) and the kube-system
// namespace UID.
func (k *Kube) Identity(ctx context.Context) (Identity, error) {
	id := Identity{Properties: map[string]string{}}
	if k.dynamic != nil {
		for _, name := range []string{PropertyClusterID, PropertyLegacyClusterID} {
			u, err := k.dynamic.Resource(ClusterPropertyResource).Get(ctx, name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				continue // no such property, or no ClusterProperty CRD at all
			case err != nil:
				return id, fmt.Errorf("reading ClusterProperty %s: %w", name, err)
			}
			if v := propertyValue(u); v != "" {
				id.Properties[name] = v
			}
		}
	}
	ns, err := k.client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return id, fmt.Errorf("reading namespace kube-system: %w", err)
	default:
		id.KubeSystemUID = string(ns.UID)
	}
	return id, nil
}

func propertyValue(u *unstructured.Unstructured) string {
	v, _, _ := unstructured.NestedString(u.Object, "spec", "value")
	return v
}

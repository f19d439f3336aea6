package publisher

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/etcdns/etcdns/publisher/source"
)

func TestDesiredWiring(t *testing.T) {
	labelled := clusterIP("default", "web", "10.96.0.10")
	labelled.Labels = map[string]string{"dns": "on"}
	plain := clusterIP("default", "plain", "10.96.0.11")
	elsewhere := clusterIP("kube-system", "dns", "10.96.0.12")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.9"}}
	kc := fake.NewClientset(labelled, plain, elsewhere, pod)
	src := source.NewKube(kc, nil, "", true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := src.Start(ctx, func(string, time.Time) {}); err != nil {
		t.Fatal(err)
	}
	b := builder(t, "c1")

	count := func(f Filter, unit string) int {
		recs, problems := Desired(Zones{Cluster: b}, src, f, unit)
		if len(problems) > 0 {
			t.Fatalf("%s: %v", unit, problems)
		}
		return len(recs)
	}
	all, _ := NewFilter(nil, "", true)
	if n := count(all, "service/default/web"); n != 3 { // A, PTR, SRV
		t.Errorf("web: %d records", n)
	}
	if n := count(all, "pod/default/p"); n != 1 {
		t.Errorf("pod: %d records", n)
	}
	if n := count(all, ZoneUnit(b)); n != 1 {
		t.Errorf("zone: %d records", n)
	}
	if n := count(all, "service/default/gone"); n != 0 {
		t.Errorf("deleted service: %d records", n)
	}
	if n := count(all, "zone/old.zone"); n != 0 {
		t.Errorf("zone no longer served: %d records", n)
	}
	sel, err := NewFilter([]string{"default"}, "dns=on", false)
	if err != nil {
		t.Fatal(err)
	}
	if count(sel, "service/default/plain") != 0 || count(sel, "service/kube-system/dns") != 0 || count(sel, "pod/default/p") != 0 {
		t.Error("filter not applied")
	}
	if count(sel, "service/default/web") != 3 {
		t.Error("selected service lost")
	}
	if _, err := NewFilter(nil, "in (", false); err == nil {
		t.Error("bad selector accepted")
	}

	recs, _ := All(Zones{Cluster: b}, src, all)
	for i := 1; i < len(recs); i++ {
		if recs[i-1].Key >= recs[i].Key {
			t.Fatal("All is not sorted by key")
		}
	}
	if !strings.HasPrefix(recs[0].String(), "/skydns/") {
		t.Errorf("line %q", recs[0].String())
	}
}

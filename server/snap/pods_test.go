package snap

import (
	"net/netip"
	"slices"
	"testing"
)

// The pod index follows the pod records through every batch, and a batch
// never changes what an older zone answers.
func TestPodNamespaces(t *testing.T) {
	ip := netip.MustParseAddr("10.244.0.5")
	v6 := netip.MustParseAddr("fd00::5")
	ns := func(z *Zone, ip netip.Addr) []string { return z.PodNamespaces(ip) }

	z0 := NewZone(cfg)
	b := z0.Edit()
	put(t, z0, b, "/skydns/local/cluster/pod/test/10-244-0-5/x", `{"host":"10.244.0.5"}`)
	put(t, z0, b, "/skydns/local/cluster/pod/test/fd00--5/x", `{"host":"fd00::5"}`)
	// hostNetwork pods of two namespaces on one node share its address.
	put(t, z0, b, "/skydns/local/cluster/pod/prod/10-0-0-1/x", `{"host":"10.0.0.1"}`)
	put(t, z0, b, "/skydns/local/cluster/pod/kube-system/10-0-0-1/x", `{"host":"10.0.0.1"}`)
	// Not pod records of an address: another spelling, another address,
	// a service's endpoint name, a name too deep.
	put(t, z0, b, "/skydns/local/cluster/pod/odd/10-244-000-5/x", `{"host":"10.244.0.5"}`)
	put(t, z0, b, "/skydns/local/cluster/pod/liar/10-244-0-5/x", `{"host":"10.9.9.9"}`)
	put(t, z0, b, "/skydns/local/cluster/svc/test/web/10-244-0-6/x", `{"host":"10.244.0.6"}`)
	put(t, z0, b, "/skydns/local/cluster/pod/test/10-244-0-7/deep/x", `{"host":"10.244.0.7"}`)
	z1 := b.Done(1)

	for _, c := range []struct {
		ip   netip.Addr
		want []string
	}{
		{ip, []string{"test"}},
		{netip.AddrFrom16(ip.As16()), []string{"test"}}, // v4-mapped: the same client
		{v6, []string{"test"}},
		{netip.MustParseAddr("10.0.0.1"), []string{"kube-system", "prod"}},
		{netip.MustParseAddr("10.9.9.9"), nil},
		{netip.MustParseAddr("10.244.0.6"), nil},
		{netip.MustParseAddr("10.244.0.7"), nil},
	} {
		if got := ns(z1, c.ip); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.ip, got, c.want)
		}
	}

	// The pod goes and its address comes back in another namespace.
	b = z1.Edit()
	b.Delete("10-244-0-5.test.pod.cluster.local", "x")
	put(t, z1, b, "/skydns/local/cluster/pod/prod/10-244-0-5/y", `{"host":"10.244.0.5"}`)
	b.Delete("10-0-0-1.prod.pod.cluster.local", "x")
	z2 := b.Done(2)
	if got := ns(z2, ip); !slices.Equal(got, []string{"prod"}) {
		t.Errorf("after the move: %q", got)
	}
	if got := ns(z2, netip.MustParseAddr("10.0.0.1")); !slices.Equal(got, []string{"kube-system"}) {
		t.Errorf("after one hostNetwork pod went: %q", got)
	}
	if got := ns(z1, ip); !slices.Equal(got, []string{"test"}) {
		t.Errorf("the older zone changed: %q", got)
	}
	if got := ns(z1, netip.MustParseAddr("10.0.0.1")); !slices.Equal(got, []string{"kube-system", "prod"}) {
		t.Errorf("the older zone changed: %q", got)
	}

	// A record that stops being an address drops out too.
	b = z2.Edit()
	put(t, z2, b, "/skydns/local/cluster/pod/test/fd00--5/x", `{"text":"gone"}`)
	if z3 := b.Done(3); ns(z3, v6) != nil {
		t.Errorf("a TXT record still claims %s: %q", v6, ns(z3, v6))
	}

	rz := NewZone(Config{Name: "in-addr.arpa", Prefix: "/skydns", TTL: 5})
	b = rz.Edit()
	put(t, rz, b, "/skydns/arpa/in-addr/5/0/244/10", `{"host":"10-244-0-5.test.pod.cluster.local"}`)
	if got := b.Done(1).PodNamespaces(ip); got != nil {
		t.Errorf("reverse zone: %q", got)
	}
}

package snap

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/etcdns/etcdns/keys"
)

const (
	csName = "web.app.svc.clusterset.local"
	csSRV  = "_https._tcp." + csName
)

// csKV is one clusterset value at owner. The ids are chosen so that key
// order interleaves the clusters with b first: key order alone would never
// put a's records ahead.
type csKV struct {
	owner, id, value string
}

func csBuild(t *testing.T, cluster string, kvs []csKV) *Zone {
	t.Helper()
	var in []KV
	for _, kv := range kvs {
		k, err := keys.RecordKey("/skydns", kv.owner, kv.id)
		if err != nil {
			t.Fatal(err)
		}
		in = append(in, KV{Key: k, Value: []byte(kv.value)})
	}
	s, errs := Build([]Config{{Name: "clusterset.local", Prefix: "/skydns", TTL: 5, Cluster: cluster}}, 3, in)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return s.Zone(csName)
}

func rrStrings(rrs []dns.RR) []string {
	out := make([]string, len(rrs))
	for i, r := range rrs {
		out[i] = strings.Join(strings.Fields(r.String()), " ")
	}
	return out
}

func TestBuildPutsLocalClusterFirst(t *testing.T) {
	a := func(ip, cluster string) string { return `{"host":"` + ip + `","cluster":"` + cluster + `"}` }
	srv := func(target, cluster string) string {
		return `{"host":"` + target + `","port":443,"cluster":"` + cluster + `"}`
	}
	txt := func(text, cluster string) string { return `{"text":"` + text + `","cluster":"` + cluster + `"}` }
	// A cluster's own clusterset IP, from its ServiceImport (keys.Value.PerCluster).
	own := func(ip, cluster string) string {
		return `{"host":"` + ip + `","cluster":"` + cluster + `","source":"serviceimport/app/web"}`
	}
	perCluster := []csKV{
		{csName, "k1", own("10.2.0.1", "b")},
		{csName, "k2", own("10.1.0.1", "a")},
		{csName, "k3", own("10.3.0.1", "c")},
	}
	interleaved := []csKV{
		{csName, "k1", a("10.2.0.1", "b")},
		{csName, "k2", a("10.1.0.1", "a")},
		{csName, "k3", a("10.2.0.2", "b")},
		{csName, "k4", a("10.1.0.2", "a")},
	}
	A := func(ip string) string { return csName + ". 5 IN A " + ip }
	for _, c := range []struct {
		name    string
		cluster string
		owner   string
		typ     uint16
		kvs     []csKV
		want    []string
		local   int
	}{
		{name: "A: local group first, key order within each group", cluster: "a", owner: csName, typ: dns.TypeA,
			kvs:  interleaved,
			want: []string{A("10.1.0.1"), A("10.1.0.2"), A("10.2.0.1"), A("10.2.0.2")}, local: 2},
		{name: "A: the other cluster's dnsd puts b first", cluster: "b", owner: csName, typ: dns.TypeA,
			kvs:  interleaved,
			want: []string{A("10.2.0.1"), A("10.2.0.2"), A("10.1.0.1"), A("10.1.0.2")}, local: 2},
		{name: "A: no cluster id keeps key order, nothing local", cluster: "", owner: csName, typ: dns.TypeA,
			kvs:  interleaved,
			want: []string{A("10.2.0.1"), A("10.1.0.1"), A("10.2.0.2"), A("10.1.0.2")}, local: 0},
		{name: "A: a cluster with no records here has no local group", cluster: "c", owner: csName, typ: dns.TypeA,
			kvs:  interleaved,
			want: []string{A("10.2.0.1"), A("10.1.0.1"), A("10.2.0.2"), A("10.1.0.2")}, local: 0},
		{name: "A: values without a cluster are remote", cluster: "a", owner: csName, typ: dns.TypeA,
			kvs: []csKV{
				{csName, "k1", `{"host":"10.9.0.1"}`},
				{csName, "k2", a("10.1.0.1", "a")},
			},
			want: []string{A("10.1.0.1"), A("10.9.0.1")}, local: 1},
		{name: "AAAA", cluster: "a", owner: csName, typ: dns.TypeAAAA,
			kvs: []csKV{
				{csName, "k1", a("fd00:b::1", "b")},
				{csName, "k2", a("fd00:a::1", "a")},
				{csName, "k3", a("fd00:b::2", "b")},
			},
			want: []string{csName + ". 5 IN AAAA fd00:a::1", csName + ". 5 IN AAAA fd00:b::1", csName + ". 5 IN AAAA fd00:b::2"}, local: 1},
		{name: "SRV: weights are spread over both clusters", cluster: "a", owner: csSRV, typ: dns.TypeSRV,
			kvs: []csKV{
				{csSRV, "k1", srv("p0.b."+csName, "b")},
				{csSRV, "k2", srv("p0.a."+csName, "a")},
				{csSRV, "k3", srv("p1.b."+csName, "b")},
				{csSRV, "k4", srv("p1.a."+csName, "a")},
			},
			want: []string{
				csSRV + ". 5 IN SRV 10 25 443 p0.a." + csName + ".",
				csSRV + ". 5 IN SRV 10 25 443 p1.a." + csName + ".",
				csSRV + ". 5 IN SRV 10 25 443 p0.b." + csName + ".",
				csSRV + ". 5 IN SRV 10 25 443 p1.b." + csName + ".",
			}, local: 2},
		{name: "TXT", cluster: "a", owner: csName, typ: dns.TypeTXT,
			kvs:  []csKV{{csName, "k1", txt("from b", "b")}, {csName, "k2", txt("from a", "a")}},
			want: []string{csName + `. 5 IN TXT "from a"`, csName + `. 5 IN TXT "from b"`}, local: 1},
		// Duplicates: every exporting cluster writes the ClusterSetIP and
		// the schema version; clients must see each once, and as ours.
		{name: "same ClusterSetIP from both clusters is one local record", cluster: "a", owner: csName, typ: dns.TypeA,
			kvs:  []csKV{{csName, "k1", a("10.100.0.1", "b")}, {csName, "k2", a("10.100.0.1", "a")}},
			want: []string{A("10.100.0.1")}, local: 1},
		{name: "same ClusterSetIP from two remote clusters is one remote record", cluster: "a", owner: csName, typ: dns.TypeA,
			kvs:  []csKV{{csName, "k1", a("10.100.0.1", "b")}, {csName, "k2", a("10.100.0.1", "c")}},
			want: []string{A("10.100.0.1")}, local: 0},
		{name: "same dns-version from both clusters is one record", cluster: "a", owner: csName, typ: dns.TypeTXT,
			kvs:  []csKV{{csName, "k1", txt("1.1.0", "b")}, {csName, "k2", txt("1.1.0", "a")}},
			want: []string{csName + `. 5 IN TXT "1.1.0"`}, local: 1},
		{name: "a duplicate takes its place by the local key", cluster: "a", owner: csName, typ: dns.TypeA,
			kvs: []csKV{
				{csName, "k1", a("10.1.0.9", "b")},
				{csName, "k2", a("10.1.0.1", "a")},
				{csName, "k3", a("10.2.0.1", "b")},
				{csName, "k4", a("10.1.0.9", "a")},
			},
			want: []string{A("10.1.0.1"), A("10.1.0.9"), A("10.2.0.1")}, local: 2},
		{name: "a duplicate's TTL still counts", cluster: "a", owner: csName, typ: dns.TypeA,
			kvs: []csKV{
				{csName, "k1", `{"host":"10.100.0.1","ttl":3,"cluster":"b"}`},
				{csName, "k2", `{"host":"10.100.0.1","ttl":30,"cluster":"a"}`},
				{csName, "k3", `{"host":"10.2.0.1","ttl":30,"cluster":"b"}`},
			},
			want: []string{csName + ". 3 IN A 10.100.0.1", csName + ". 3 IN A 10.2.0.1"}, local: 1},
		// Spec 001 lets each cluster have its own clusterset IP: another
		// cluster's routes nowhere here, or to a service of this cluster's
		// range, so a dnsd that knows its cluster holds its own alone.
		{name: "own answers: only the local cluster's clusterset IP", cluster: "a", owner: csName, typ: dns.TypeA,
			kvs: perCluster, want: []string{A("10.1.0.1")}, local: 1},
		{name: "own answers: another cluster's dnsd answers its own", cluster: "c", owner: csName, typ: dns.TypeA,
			kvs: perCluster, want: []string{A("10.3.0.1")}, local: 1},
		{name: "own answers: a cluster with none here answers none", cluster: "d", owner: csName, typ: dns.TypeA,
			kvs: append(slices.Clone(perCluster), csKV{csName, "k4", a("10.9.0.1", "b")}), want: []string{A("10.9.0.1")}, local: 0},
		{name: "own answers: one of its own AAAA does not let others' A in", cluster: "a", owner: csName, typ: dns.TypeA,
			kvs: []csKV{{csName, "k1", own("10.2.0.1", "b")}, {csName, "k2", own("fd00:a::1", "a")}}, want: []string{}, local: 0},
		{name: "own answers: no cluster id answers all", cluster: "", owner: csName, typ: dns.TypeA,
			kvs: perCluster, want: []string{A("10.2.0.1"), A("10.1.0.1"), A("10.3.0.1")}, local: 0},
		{name: "own answers: the same IP in every cluster is one record", cluster: "a", owner: csName, typ: dns.TypeA,
			kvs:  []csKV{{csName, "k1", own("10.100.0.1", "b")}, {csName, "k2", own("10.100.0.1", "a")}},
			want: []string{A("10.100.0.1")}, local: 1},
		{name: "own answers leave shared records of other clusters in", cluster: "a", owner: csName, typ: dns.TypeA,
			kvs:  []csKV{{csName, "k1", a("10.2.0.9", "b")}, {csName, "k2", own("10.1.0.1", "a")}, {csName, "k3", own("10.2.0.1", "b")}},
			want: []string{A("10.1.0.1"), A("10.2.0.9")}, local: 1},
		{name: "CNAME: the local cluster's claim wins", cluster: "a", owner: csName, typ: dns.TypeCNAME,
			kvs:  []csKV{{csName, "k1", `{"host":"b.example.com","cluster":"b"}`}, {csName, "k2", `{"host":"a.example.com","cluster":"a"}`}},
			want: []string{csName + ". 5 IN CNAME a.example.com."}, local: 1},
		{name: "CNAME: a remote claim alone is not local", cluster: "a", owner: csName, typ: dns.TypeCNAME,
			kvs:  []csKV{{csName, "k1", `{"host":"b.example.com","cluster":"b"}`}, {csName, "k2", `{"host":"c.example.com","cluster":"c"}`}},
			want: []string{csName + ". 5 IN CNAME b.example.com."}, local: 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			z := csBuild(t, c.cluster, c.kvs)
			set := z.Node(c.owner).RRSet(c.typ)
			if got := rrStrings(set.RRs); strings.Join(got, "\n") != strings.Join(c.want, "\n") || set.Local != c.local {
				t.Errorf("got %q local %d\nwant %q local %d", got, set.Local, c.want, c.local)
			}
		})
	}
}

// A dnsd that knows its cluster holds no other cluster's own answers: a
// name only they have does not exist for it, and costs it no memory. One
// that does not know its cluster holds them all.
func TestOthersOwnAreNotHeld(t *testing.T) {
	own := func(ip, cluster string) string {
		return `{"host":"` + ip + `","cluster":"` + cluster + `","source":"serviceimport/app/web"}`
	}
	kvs := []csKV{{csName, "k1", own("10.2.0.1", "b")}, {csName, "k2", own("10.3.0.1", "c")}}
	if z := csBuild(t, "a", kvs); z.Node(csName) != nil || z.Records != 0 {
		t.Errorf("cluster a holds %d records of other clusters' own, and the name", z.Records)
	}
	if z := csBuild(t, "", kvs); z.Records != 2 || len(z.Node(csName).RRSet(dns.TypeA).RRs) != 2 {
		t.Errorf("a dnsd with no cluster id holds %d records, want both clusters'", z.Records)
	}
}

// A key rewritten to a value this dnsd does not hold (another cluster's
// own) loses what it held, as a load of the key now would.
func TestRewriteToOthersOwnDrops(t *testing.T) {
	z0 := NewZone(Config{Name: "clusterset.local", Prefix: "/skydns", TTL: 5, Cluster: "east"})
	k, _ := keys.RecordKey("/skydns", csName, "k1")
	b := z0.Edit()
	put(t, z0, b, k, `{"host":"10.43.0.1","cluster":"east","source":"serviceexport/app/web"}`)
	z1 := b.Done(1)
	b = z1.Edit()
	put(t, z1, b, k, `{"host":"10.43.0.9","cluster":"west","source":"serviceimport/app/web"}`)
	if z2 := b.Done(2); z2.Records != 0 || z2.Node(csName) != nil {
		t.Errorf("after the rewrite: %d records, node %v; want none", z2.Records, z2.Node(csName))
	}
}

// A batch rebuilds a changed name with the same grouping, and the zone it
// started from keeps its own.
func TestBatchRegroupsDuplicates(t *testing.T) {
	c := Config{Name: "clusterset.local", Prefix: "/skydns", TTL: 5, Cluster: "a"}
	z0 := NewZone(c)
	kb, _ := keys.RecordKey("/skydns", csName, "k1")
	ka, _ := keys.RecordKey("/skydns", csName, "k2")
	b := z0.Edit()
	put(t, z0, b, kb, `{"host":"10.100.0.1","cluster":"b"}`)
	put(t, z0, b, ka, `{"host":"10.100.0.1","cluster":"a"}`)
	z1 := b.Done(1)
	if set := z1.Node(csName).RRSet(dns.TypeA); len(set.RRs) != 1 || set.Local != 1 {
		t.Fatalf("both clusters: %v local %d, want one local record", set.RRs, set.Local)
	}

	b = z1.Edit()
	b.Delete(csName, "k2")
	z2 := b.Done(2)
	if set := z2.Node(csName).RRSet(dns.TypeA); len(set.RRs) != 1 || set.Local != 0 {
		t.Fatalf("b only: %v local %d, want one remote record", set.RRs, set.Local)
	}
	if set := z1.Node(csName).RRSet(dns.TypeA); set.Local != 1 {
		t.Fatal("an edit changed the zone it started from")
	}

	b = z2.Edit()
	put(t, z2, b, ka, `{"host":"10.100.0.1","cluster":"a"}`)
	z3 := b.Done(3)
	if set := z3.Node(csName).RRSet(dns.TypeA); len(set.RRs) != 1 || set.Local != 1 {
		t.Fatalf("a back: %v local %d, want one local record", set.RRs, set.Local)
	}
}

// A load reserves for every value of its range; where this dnsd holds few
// of them (other clusters' own) the zone's tables shrink to what it holds.
func TestLoadShrinksToWhatItHolds(t *testing.T) {
	z0 := NewZone(Config{Name: "clusterset.local", Prefix: "/skydns", TTL: 5, Cluster: "east"})
	b := z0.Edit()
	b.Reserve(200_000)
	for i := range 1000 {
		k, _ := keys.RecordKey("/skydns", fmt.Sprintf("s%d.ns.svc.clusterset.local", i), "k1")
		put(t, z0, b, k, fmt.Sprintf(`{"host":"10.43.%d.%d","cluster":"east","source":"serviceimport/ns/s%d"}`, i>>8, i&255, i))
	}
	z := b.Done(1)
	if got, want := len(z.names)*leafSize, shardsFor(z.Records); got != want {
		t.Errorf("%d records in %d shards, want %d", z.Records, got, want)
	}
	for i := range 1000 {
		if z.Node(fmt.Sprintf("s%d.ns.svc.clusterset.local", i)) == nil {
			t.Fatalf("s%d lost in the regrouping", i)
		}
	}
}

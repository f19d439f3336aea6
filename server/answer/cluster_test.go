package answer

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/miekg/dns"

	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/server/snap"
)

// The clusterset fixture: clusters a and b export web.app (ClusterSetIP,
// both write the same IP, SRV, version) and db.app (headless: a has two
// ready endpoints, b three). Values are what keys.Layout writes; only the
// record ids are replaced, so key order interleaves the clusters with b's
// records first and key order alone would never put a's ahead.
const (
	csWeb = "web.app.svc.clusterset.local."
	csDB  = "db.app.svc.clusterset.local."
	csNeg = "clusterset.local. 5 IN SOA ns.dns.clusterset.local. hostmaster.clusterset.local. 42 7200 1800 86400 5"
)

func clustersetFixture(t *testing.T) []keys.Record {
	layout := func(cluster string) keys.Layout {
		return keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: cluster, TTL: 5}
	}
	var recs []keys.Record
	add := func(r keys.Record, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if r.Type != dns.TypePTR { // a PTR's key is its name: clusters share it
			if r.Key, err = keys.RecordKey("/skydns", r.Name, fmt.Sprintf("k%03d", len(recs))); err != nil {
				t.Fatal(err)
			}
		}
		recs = append(recs, r)
	}
	web, db := csWeb[:len(csWeb)-1], csDB[:len(csDB)-1]
	for _, c := range []string{"b", "a"} {
		l := layout(c)
		add(l.Forward("dns-version.clusterset.local", "zone/clusterset.local", keys.Value{Text: "1.1.0"}))
		add(l.Address(web, "serviceexport/app/web", netip.MustParseAddr("10.100.0.1")))
		add(l.Address(web, "serviceexport/app/web", netip.MustParseAddr("fd00:100::1")))
		add(l.SRV(web, "https", "tcp", "serviceexport/app/web", 443, web))
	}
	add(layout("b").PTR(netip.MustParseAddr("10.100.0.1"), "serviceexport/app/web", web))
	for i := range 3 {
		for _, c := range []string{"b", "a"} {
			if c == "a" && i == 2 {
				continue
			}
			l := layout(c)
			host := fmt.Sprintf("pet-%d.%s.%s", i, c, db)
			v4 := netip.MustParseAddr(fmt.Sprintf("10.%d.0.1%d", c[0]-'a'+1, i))
			v6 := netip.MustParseAddr(fmt.Sprintf("fd00:%s::1%d", c, i))
			for _, ip := range []netip.Addr{v4, v6} {
				add(l.Address(db, "serviceexport/app/db", ip))
				add(l.Address(host, "serviceexport/app/db", ip))
			}
			add(l.SRV(db, "https", "tcp", "serviceexport/app/db", 443, host))
		}
	}
	return recs
}

func clustersetSnap(t *testing.T, cluster string) *snap.Snapshot {
	t.Helper()
	var zones []snap.Config
	for _, z := range []string{"clusterset.local", "in-addr.arpa", "ip6.arpa"} {
		zones = append(zones, snap.Config{Name: z, Prefix: "/skydns", TTL: 5, Cluster: cluster})
	}
	var kvs []snap.KV
	for _, r := range clustersetFixture(t) {
		kvs = append(kvs, snap.KV{Key: r.Key, Value: r.Value.Encode()})
	}
	s, errs := snap.Build(zones, 42, kvs)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return s
}

// rotl is s turned left by rot, as a group of the answer rotates.
func rotl(s []string, rot uint32) []string {
	if len(s) == 0 {
		return nil
	}
	k := int(rot % uint32(len(s)))
	return append(slices.Clone(s[k:]), s[:k]...)
}

// Each answer is the local group then the remote group, each rotated on
// its own; the additional section never rotates.
func TestLocalClusterFirst(t *testing.T) {
	srvTo := func(owner, target string, weight int) string {
		return fmt.Sprintf("%s 5 IN SRV 10 %d 443 %s", owner, weight, target)
	}
	pet := func(i int, c string) string { return fmt.Sprintf("pet-%d.%s.%s", i, c, csDB) }
	glue := func(i int, c string) []string {
		return []string{
			fmt.Sprintf("%s 5 IN A 10.%d.0.1%d", pet(i, c), c[0]-'a'+1, i),
			fmt.Sprintf("%s 5 IN AAAA fd00:%s::1%d", pet(i, c), c, i),
		}
	}
	dbSRV := "_https._tcp." + csDB
	for _, c := range []struct {
		name          string
		cluster       string
		q             string
		qtype         uint16
		local, remote []string
		extra         []string
	}{
		{name: "headless A", cluster: "a", q: csDB, qtype: dns.TypeA,
			local:  []string{csDB + " 5 IN A 10.1.0.10", csDB + " 5 IN A 10.1.0.11"},
			remote: []string{csDB + " 5 IN A 10.2.0.10", csDB + " 5 IN A 10.2.0.11", csDB + " 5 IN A 10.2.0.12"}},
		{name: "headless AAAA", cluster: "a", q: csDB, qtype: dns.TypeAAAA,
			local:  []string{csDB + " 5 IN AAAA fd00:a::10", csDB + " 5 IN AAAA fd00:a::11"},
			remote: []string{csDB + " 5 IN AAAA fd00:b::10", csDB + " 5 IN AAAA fd00:b::11", csDB + " 5 IN AAAA fd00:b::12"}},
		// N x M x P SRV records, weights spread over all of them; glue in
		// snapshot order, so the local targets' addresses come first too.
		{name: "headless SRV", cluster: "a", q: dbSRV, qtype: dns.TypeSRV,
			local:  []string{srvTo(dbSRV, pet(0, "a"), 20), srvTo(dbSRV, pet(1, "a"), 20)},
			remote: []string{srvTo(dbSRV, pet(0, "b"), 20), srvTo(dbSRV, pet(1, "b"), 20), srvTo(dbSRV, pet(2, "b"), 20)},
			extra:  slices.Concat(glue(0, "a"), glue(1, "a"), glue(0, "b"), glue(1, "b"), glue(2, "b"))},
		{name: "headless A as cluster b's dnsd sees it", cluster: "b", q: csDB, qtype: dns.TypeA,
			local:  []string{csDB + " 5 IN A 10.2.0.10", csDB + " 5 IN A 10.2.0.11", csDB + " 5 IN A 10.2.0.12"},
			remote: []string{csDB + " 5 IN A 10.1.0.10", csDB + " 5 IN A 10.1.0.11"}},
		{name: "headless SRV as cluster b's dnsd sees it", cluster: "b", q: dbSRV, qtype: dns.TypeSRV,
			local:  []string{srvTo(dbSRV, pet(0, "b"), 20), srvTo(dbSRV, pet(1, "b"), 20), srvTo(dbSRV, pet(2, "b"), 20)},
			remote: []string{srvTo(dbSRV, pet(0, "a"), 20), srvTo(dbSRV, pet(1, "a"), 20)},
			extra:  slices.Concat(glue(0, "b"), glue(1, "b"), glue(2, "b"), glue(0, "a"), glue(1, "a"))},
		// Without a cluster id: one group in key order, rotated whole.
		{name: "headless A without a cluster id", cluster: "", q: csDB, qtype: dns.TypeA,
			remote: []string{csDB + " 5 IN A 10.2.0.10", csDB + " 5 IN A 10.1.0.10", csDB + " 5 IN A 10.2.0.11", csDB + " 5 IN A 10.1.0.11", csDB + " 5 IN A 10.2.0.12"}},
		// A per-cluster name holds one cluster's records only.
		{name: "headless hostname A", cluster: "a", q: pet(0, "b"), qtype: dns.TypeA,
			remote: []string{pet(0, "b") + " 5 IN A 10.2.0.10"}},
		// Both clusters write the ClusterSetIP, its SRV and the version:
		// one record each.
		{name: "ClusterSetIP A from both clusters", cluster: "a", q: csWeb, qtype: dns.TypeA,
			local: []string{csWeb + " 5 IN A 10.100.0.1"}},
		{name: "ClusterSetIP AAAA from both clusters", cluster: "a", q: csWeb, qtype: dns.TypeAAAA,
			local: []string{csWeb + " 5 IN AAAA fd00:100::1"}},
		{name: "ClusterSetIP SRV from both clusters", cluster: "a", q: "_https._tcp." + csWeb, qtype: dns.TypeSRV,
			local: []string{srvTo("_https._tcp."+csWeb, csWeb, 100)},
			extra: []string{csWeb + " 5 IN A 10.100.0.1", csWeb + " 5 IN AAAA fd00:100::1"}},
		{name: "dns-version from both clusters", cluster: "a", q: "dns-version.clusterset.local.", qtype: dns.TypeTXT,
			local: []string{`dns-version.clusterset.local. 5 IN TXT "1.1.0"`}},
		{name: "ClusterSetIP PTR written last by b", cluster: "a", q: "1.0.100.10.in-addr.arpa.", qtype: dns.TypePTR,
			remote: []string{"1.0.100.10.in-addr.arpa. 5 IN PTR " + csWeb}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := clustersetSnap(t, c.cluster)
			req := new(dns.Msg).SetQuestion(c.q, c.qtype)
			// 12 counters cover every pair of offsets of a 2- and a
			// 3-record group.
			for rot := range uint32(12) {
				for _, rotate := range []bool{false, true} {
					o := testOptions
					o.Rotate = rotate
					m := Answer(s, req, &o, rot)
					want := slices.Concat(c.local, c.remote)
					if rotate {
						want = slices.Concat(rotl(c.local, rot), rotl(c.remote, rot))
					}
					if m.Rcode != dns.RcodeSuccess || len(m.Ns) != 0 {
						t.Fatalf("rot %d rotate %v: rcode %s, authority %v", rot, rotate, dns.RcodeToString[m.Rcode], m.Ns)
					}
					section(t, fmt.Sprintf("rot %d rotate %v: answer", rot, rotate), m.Answer, want, true)
					section(t, fmt.Sprintf("rot %d rotate %v: additional", rot, rotate), m.Extra, c.extra, true)
				}
			}
		})
	}
}

// <clusterid>.<svc>.<ns>.svc.clusterset.local must hold no record (spec 001
// sections 2.3.4 and 2.4.4), yet names exist below it for a headless
// service: an empty non-terminal, so NODATA, never NXDOMAIN (RFC 8020).
func TestClusterIDNameIsEmptyNonTerminal(t *testing.T) {
	s := clustersetSnap(t, "a")
	pos := "qr aa rd"
	for _, c := range []testCase{
		{name: "local cluster id A", q: "a." + csDB, qtype: dns.TypeA,
			want: want{flags: pos, ns: []string{csNeg}}},
		{name: "remote cluster id A", q: "b." + csDB, qtype: dns.TypeA,
			want: want{flags: pos, ns: []string{csNeg}}},
		{name: "cluster id AAAA", q: "b." + csDB, qtype: dns.TypeAAAA,
			want: want{flags: pos, ns: []string{csNeg}}},
		{name: "cluster id SRV", q: "a." + csDB, qtype: dns.TypeSRV,
			want: want{flags: pos, ns: []string{csNeg}}},
		{name: "cluster id ANY", q: "a." + csDB, qtype: dns.TypeANY,
			want: want{flags: pos, ns: []string{csNeg}}},
		{name: "cluster id 0x20", q: "B.Db.App.svc.CLUSTERSET.local.", qtype: dns.TypeA,
			want: want{flags: pos, ns: []string{csNeg}}},
		{name: "cluster that exports nothing", q: "c." + csDB, qtype: dns.TypeA,
			want: want{rcode: dns.RcodeNameError, flags: pos, ns: []string{csNeg}}},
		{name: "cluster id under a ClusterSetIP service", q: "a." + csWeb, qtype: dns.TypeA,
			want: want{rcode: dns.RcodeNameError, flags: pos, ns: []string{csNeg}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := testOptions
			o.Rotate = true
			req := new(dns.Msg).SetQuestion(c.q, c.qtype)
			check(t, req, Answer(s, req, &o, 7), c.want)
		})
	}
}

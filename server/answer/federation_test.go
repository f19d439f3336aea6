package answer

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"

	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/keys/kube"
	"github.com/etcdns/etcdns/server/snap"
)

// The federation fixture is spec 003's example: service myservice in
// namespace myns of federation myfederation, with shards in clusters foo,
// bar and baz (external IP, cluster IP), as each cluster's publisher
// writes them. foo and bar are dual-stack load balancers, and only foo has
// an IPv6 cluster IP. web has a cluster IP in foo only, no load balancer
// anywhere. Record ids are replaced so that key order is baz, bar, foo: the
// order of an answer never comes from key order by accident.
const (
	fedSvc = "myservice.myns.myfederation.svc.federation."
	fedWeb = "web.myns.myfederation.svc.federation."
	fedNeg = "federation. 5 IN SOA ns.dns.federation. hostmaster.federation. 42 7200 1800 86400 5"
	// A client inside the cluster and one outside it.
	inside  = "10.244.1.7"
	outside = "198.51.100.9"
)

func fedA(ip string) string    { return fedSvc + " 5 IN A " + ip }
func fedAAAA(ip string) string { return fedSvc + " 5 IN AAAA " + ip }

func federationSnap(t *testing.T, cluster string) *snap.Snapshot {
	t.Helper()
	var kvs []snap.KV
	shard := func(c string, lb []string, clusterIPs ...string) *corev1.Service {
		s := service("myns", "myservice", clusterIPs...)
		s.Annotations = map[string]string{kube.FederatedAnnotation: "true"}
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		for _, ip := range lb {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
		}
		return s
	}
	web := service("myns", "web", "10.0.3.80")
	web.Annotations = map[string]string{kube.FederatedAnnotation: "true"}
	for _, c := range []struct {
		cluster string
		svcs    []*corev1.Service
	}{
		{"baz", []*corev1.Service{shard("baz", []string{"108.120.45.12"}, "10.56.62.6")}},
		{"bar", []*corev1.Service{shard("bar", []string{"104.32.64.130", "2001:db8::130"}, "10.0.4.20")}},
		{"foo", []*corev1.Service{shard("foo", []string{"104.32.64.128", "2001:db8::128"}, "10.0.3.64", "fd00:10:96::40"), web}},
	} {
		f, err := kube.NewFederation(keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: c.cluster, TTL: 5}, "federation", "myfederation")
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range c.svcs {
			recs, problems := f.Federated(s)
			if len(problems) > 0 || len(recs) == 0 {
				t.Fatalf("%s: %d records, %v", c.cluster, len(recs), problems)
			}
			for _, r := range recs {
				if r.Key, err = keys.RecordKey("/skydns", r.Name, fmt.Sprintf("k%03d", len(kvs))); err != nil {
					t.Fatal(err)
				}
				kvs = append(kvs, snap.KV{Key: r.Key, Value: r.Value.Encode()})
			}
		}
	}
	s, errs := snap.Build([]snap.Config{
		{Name: "federation", Prefix: "/skydns", TTL: 5, Cluster: cluster},
		{Name: "cluster.local", Prefix: "/skydns", TTL: 5, Cluster: cluster},
	}, 42, kvs)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return s
}

const sourceOption = 65002

func fedOptions(cluster string) Options {
	o := testOptions
	o.Federation = Federation{Zone: "federation", Cluster: cluster, Option: sourceOption,
		Inside: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/48")}}
	return o
}

// fedQuery asks qname; option, when not nil, is the source-cluster
// option's data.
func fedQuery(qname string, qtype uint16, option []byte, code uint16) *dns.Msg {
	req := new(dns.Msg).SetQuestion(qname, qtype)
	req.SetEdns0(1232, false)
	if option != nil {
		opt := req.IsEdns0()
		opt.Option = append(opt.Option, &dns.EDNS0_LOCAL{Code: code, Data: option})
	}
	return req
}

// TestFederation: the asking cluster's cluster IPs first, then the other
// shards' external IPs; with no asking cluster, the external IPs only.
// dnsd runs in cluster foo unless a case says otherwise.
func TestFederation(t *testing.T) {
	// The plain answer: every external IP, this dnsd's cluster's first as
	// in every multicluster answer.
	fooExternal, otherExternal := []string{fedA("104.32.64.128")}, []string{fedA("108.120.45.12"), fedA("104.32.64.130")}
	for _, c := range []struct {
		name     string
		dnsd     string // this dnsd's cluster id
		client   string
		option   []byte
		code     uint16
		q        string
		qtype    uint16
		own      []string // the leading group
		others   []string // after it, in key order
		personal bool
		rcode    int
		ns       []string
	}{
		{name: "option names bar, outside client", dnsd: "foo", client: outside, option: []byte("bar"), q: fedSvc, qtype: dns.TypeA,
			own: []string{fedA("10.0.4.20")}, others: []string{fedA("108.120.45.12"), fedA("104.32.64.128")}, personal: true},
		{name: "option names bar, inside client: the option wins", dnsd: "foo", client: inside, option: []byte("bar"), q: fedSvc, qtype: dns.TypeA,
			own: []string{fedA("10.0.4.20")}, others: []string{fedA("108.120.45.12"), fedA("104.32.64.128")}, personal: true},
		{name: "option in capitals", dnsd: "foo", client: outside, option: []byte("BAZ"), q: fedSvc, qtype: dns.TypeA,
			own: []string{fedA("10.56.62.6")}, others: []string{fedA("104.32.64.130"), fedA("104.32.64.128")}, personal: true},
		{name: "no option, inside client: this dnsd's cluster", dnsd: "foo", client: inside, q: fedSvc, qtype: dns.TypeA,
			own: []string{fedA("10.0.3.64")}, others: []string{fedA("108.120.45.12"), fedA("104.32.64.130")}, personal: true},
		{name: "no option, inside client over IPv6", dnsd: "foo", client: "fd00:10:244::7", q: fedSvc, qtype: dns.TypeA,
			own: []string{fedA("10.0.3.64")}, others: []string{fedA("108.120.45.12"), fedA("104.32.64.130")}, personal: true},
		{name: "no option, outside client: external IPs only", dnsd: "foo", client: outside, q: fedSvc, qtype: dns.TypeA,
			own: fooExternal, others: otherExternal, personal: true},
		{name: "no option, client unknown: external IPs only", dnsd: "foo", q: fedSvc, qtype: dns.TypeA,
			own: fooExternal, others: otherExternal, personal: true},
		{name: "a cluster without a shard: every external IP", dnsd: "foo", client: outside, option: []byte("qux"), q: fedSvc, qtype: dns.TypeA,
			others: []string{fedA("108.120.45.12"), fedA("104.32.64.130"), fedA("104.32.64.128")}, personal: true},
		{name: "malformed option, outside client: ignored", dnsd: "foo", client: outside, option: []byte("not a label!"), q: fedSvc, qtype: dns.TypeA,
			own: fooExternal, others: otherExternal, personal: true},
		// A client sending the option is another cluster's forwarding
		// server, whatever its address: an option that names no cluster
		// never makes its clients this cluster's.
		{name: "malformed option, inside client: ignored, external IPs only", dnsd: "foo", client: inside, option: []byte("b.a.r"), q: fedSvc, qtype: dns.TypeA,
			own: fooExternal, others: otherExternal, personal: true},
		{name: "empty option (a forwarder without a cluster id), inside client", dnsd: "foo", client: inside, option: []byte{}, q: fedSvc, qtype: dns.TypeA,
			own: fooExternal, others: otherExternal, personal: true},
		{name: "another option code: not read", dnsd: "foo", client: outside, option: []byte("bar"), code: 65003, q: fedSvc, qtype: dns.TypeA,
			own: fooExternal, others: otherExternal, personal: true},
		{name: "AAAA for foo: its IPv6 cluster IP, then bar's external", dnsd: "foo", client: inside, q: fedSvc, qtype: dns.TypeAAAA,
			own: []string{fedAAAA("fd00:10:96::40")}, others: []string{fedAAAA("2001:db8::130")}, personal: true},
		{name: "AAAA for bar, no IPv6 cluster IP: its own load balancer first", dnsd: "foo", client: outside, option: []byte("bar"), q: fedSvc, qtype: dns.TypeAAAA,
			own: []string{fedAAAA("2001:db8::130")}, others: []string{fedAAAA("2001:db8::128")}, personal: true},
		{name: "dnsd without a cluster id, no option: nothing personal", dnsd: "", client: inside, q: fedSvc, qtype: dns.TypeA,
			others: []string{fedA("108.120.45.12"), fedA("104.32.64.130"), fedA("104.32.64.128")}},
		{name: "dnsd without a cluster id, option names foo", dnsd: "", client: outside, option: []byte("foo"), q: fedSvc, qtype: dns.TypeA,
			own: []string{fedA("10.0.3.64")}, others: []string{fedA("108.120.45.12"), fedA("104.32.64.130")}, personal: true},
		{name: "a shard named explicitly (spec 003): its cluster IP, for anyone", dnsd: "foo", client: outside, q: "bar." + fedSvc, qtype: dns.TypeA,
			others: []string{"bar." + fedA("10.0.4.20")}},
		{name: "cluster IP only in foo, asked by foo", dnsd: "foo", client: inside, q: fedWeb, qtype: dns.TypeA,
			own: []string{fedWeb + " 5 IN A 10.0.3.80"}, personal: true},
		{name: "cluster IP only in foo, asked by bar: NODATA", dnsd: "foo", client: outside, option: []byte("bar"), q: fedWeb, qtype: dns.TypeA,
			ns: []string{fedNeg}, personal: true},
		{name: "cluster IP only in foo, outside client: NODATA", dnsd: "foo", client: outside, q: fedWeb, qtype: dns.TypeA,
			ns: []string{fedNeg}, personal: true},
		{name: "no such federated service", dnsd: "foo", client: inside, q: "nothing.myns.myfederation.svc.federation.", qtype: dns.TypeA,
			rcode: dns.RcodeNameError, ns: []string{fedNeg}, personal: true},
		{name: "other types are answered as stored", dnsd: "foo", client: inside, q: fedSvc, qtype: dns.TypeTXT,
			ns: []string{fedNeg}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := federationSnap(t, c.dnsd)
			code := c.code
			if code == 0 {
				code = sourceOption
			}
			req := fedQuery(c.q, c.qtype, c.option, code)
			var client Client
			if c.client != "" {
				client.Addr = netip.MustParseAddr(c.client)
			}
			for rot := range uint32(6) {
				for _, rotate := range []bool{false, true} {
					o := fedOptions(c.dnsd)
					o.Rotate = rotate
					m, personal := AnswerFrom(s, req, &o, rot, client)
					want := slices.Concat(c.own, c.others)
					if rotate {
						want = slices.Concat(rotl(c.own, rot), rotl(c.others, rot))
					}
					if m.Rcode != c.rcode || personal != c.personal {
						t.Fatalf("rot %d: rcode %s personal %v; want %s, %v", rot, dns.RcodeToString[m.Rcode], personal, dns.RcodeToString[c.rcode], c.personal)
					}
					section(t, fmt.Sprintf("rot %d rotate %v: answer", rot, rotate), m.Answer, want, true)
					section(t, "authority", m.Ns, c.ns, true)
				}
			}
		})
	}
}

// One query has one source: the first source-cluster option decides.
func TestFederationFirstOptionDecides(t *testing.T) {
	s := federationSnap(t, "foo")
	o := fedOptions("foo")
	req := fedQuery(fedSvc, dns.TypeA, []byte("bar"), sourceOption)
	opt := req.IsEdns0()
	opt.Option = append(opt.Option, &dns.EDNS0_LOCAL{Code: sourceOption, Data: []byte("baz")})
	m, _ := AnswerFrom(s, req, &o, 0, Client{})
	section(t, "answer", m.Answer, []string{fedA("10.0.4.20"), fedA("108.120.45.12"), fedA("104.32.64.128")}, true)
	opt.Option[0] = &dns.EDNS0_LOCAL{Code: sourceOption, Data: []byte("-?-")}
	m, _ = AnswerFrom(s, req, &o, 0, Client{})
	section(t, "answer", m.Answer, []string{fedA("104.32.64.128"), fedA("108.120.45.12"), fedA("104.32.64.130")}, true)
}

// Without a federation zone configured, the same names are ordinary
// records: every shard's external IPs, cacheable.
func TestFederationOff(t *testing.T) {
	s := federationSnap(t, "foo")
	o := testOptions
	req := fedQuery(fedSvc, dns.TypeA, []byte("bar"), sourceOption)
	m, personal := AnswerFrom(s, req, &o, 0, Client{Addr: netip.MustParseAddr(inside)})
	section(t, "answer", m.Answer, []string{fedA("104.32.64.128"), fedA("108.120.45.12"), fedA("104.32.64.130")}, true)
	if personal {
		t.Error("an answer that does not depend on the client is personal")
	}
}

// Parts of the answer with different TTLs make one RRset with one TTL,
// the smallest (RFC 2181 5.2).
func TestFederationTTL(t *testing.T) {
	l := keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: "foo", TTL: 30}
	lb, _ := l.Address("myservice.myns.myfederation.svc.federation", "service/myns/myservice", netip.MustParseAddr("104.32.64.128"))
	l.Cluster, l.TTL = "bar", 7
	ext, _ := l.Address("myservice.myns.myfederation.svc.federation", "service/myns/myservice", netip.MustParseAddr("104.32.64.130"))
	l.Cluster, l.TTL = "foo", 60
	cip, _ := l.Address("foo.myservice.myns.myfederation.svc.federation", "service/myns/myservice", netip.MustParseAddr("10.0.3.64"))
	var kvs []snap.KV
	for _, r := range []keys.Record{lb, ext, cip} {
		kvs = append(kvs, snap.KV{Key: r.Key, Value: r.Value.Encode()})
	}
	s, errs := snap.Build([]snap.Config{{Name: "federation", Prefix: "/skydns", TTL: 5, Cluster: "foo"}}, 42, kvs)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	o := fedOptions("foo")
	m, _ := AnswerFrom(s, fedQuery(fedSvc, dns.TypeA, nil, 0), &o, 0, Client{Addr: netip.MustParseAddr(inside)})
	section(t, "answer", m.Answer, []string{fedSvc + " 7 IN A 10.0.3.64", fedSvc + " 7 IN A 104.32.64.130"}, true)
}

// The hook search-path expansion uses: nothing at or below the federation
// zone may be a candidate (spec 003's caveat).
func TestInFederation(t *testing.T) {
	o := fedOptions("foo")
	for name, want := range map[string]bool{
		"myservice.myns.myfederation.svc.federation":     true,
		"foo.myservice.myns.myfederation.svc.federation": true,
		"federation":                       true,
		"myservice.myns.svc.cluster.local": false,
		"myfederation":                     false,
		"svc.notfederation":                false,
	} {
		if got := o.InFederation(name); got != want {
			t.Errorf("InFederation(%s) = %v", name, got)
		}
	}
	if (&testOptions).InFederation("myservice.myns.myfederation.svc.federation") {
		t.Error("InFederation without a federation zone")
	}
}

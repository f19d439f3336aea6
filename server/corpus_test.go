package server

import (
	"bufio"
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/etcdns/etcdns/internal/fuzzcorpus"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite the fuzz targets' seed files under testdata/fuzz from fuzzSeeds")

var unsafeFileChars = regexp.MustCompile(`[^a-z0-9]+`)

// seedName makes a description a file name.
func seedName(desc string) string {
	return strings.Trim(unsafeFileChars.ReplaceAllString(strings.ToLower(desc), "-"), "-")
}

// TestFuzzCorpus: the seed files under testdata/fuzz are fuzzSeeds' (go
// test -run TestFuzzCorpus -update-corpus rewrites them).
func TestFuzzCorpus(t *testing.T) {
	seeds := map[string][]fuzzcorpus.Seed{}
	for target, ss := range fuzzSeeds(t) {
		for _, s := range ss {
			seeds[target] = append(seeds[target], fuzzcorpus.Seed{Name: seedName(s.desc), Desc: s.desc, Args: s.args})
		}
	}
	fuzzcorpus.Check(t, seeds, *updateCorpus, "go test ./server -run TestFuzzCorpus -update-corpus")
}

type seed struct {
	desc string
	args []any
}

func fuzzSeeds(t *testing.T) map[string][]seed {
	return map[string][]seed{
		"FuzzServeDNS":  serveSeeds(t),
		"FuzzTCPStream": streamSeeds(t),
		"FuzzRecord":    recordSeeds(t),
	}
}

// stubQuery packs a question as a stub resolver sends it: RD set, an id.
func stubQuery(t *testing.T, name string, qtype uint16, edit func(*dns.Msg)) []byte {
	m := new(dns.Msg).SetQuestion(name, qtype)
	m.Id = 0x1234
	if edit != nil {
		edit(m)
	}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func edns(size uint16, do bool, options ...dns.EDNS0) func(*dns.Msg) {
	return func(m *dns.Msg) {
		m.SetEdns0(size, do)
		m.IsEdns0().Option = options
	}
}

func serveSeeds(t *testing.T) []seed {
	cookie := &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "24a5ac1b0e59c8e4"}
	s := []seed{
		{"A of a service", []any{stubQuery(t, "kubernetes.default.svc.cluster.local.", dns.TypeA, nil)}},
		{"A with EDNS 1232 and a cookie", []any{stubQuery(t, "kubernetes.default.svc.cluster.local.", dns.TypeA, edns(1232, false, cookie))}},
		{"A with EDNS 4096, DO and padding", []any{stubQuery(t, "kubernetes.default.svc.cluster.local.", dns.TypeA, edns(4096, true, &dns.EDNS0_PADDING{Padding: make([]byte, 40)}))}},
		{"AAAA of a service without one", []any{stubQuery(t, "kubernetes.default.svc.cluster.local.", dns.TypeAAAA, nil)}},
		{"SRV of a named port", []any{stubQuery(t, "_https._tcp.kubernetes.default.svc.cluster.local.", dns.TypeSRV, edns(1232, false))}},
		{"PTR of a cluster IP", []any{stubQuery(t, "1.0.96.10.in-addr.arpa.", dns.TypePTR, nil)}},
		{"ANY of 60 endpoints with EDNS 4096", []any{stubQuery(t, "big.default.svc.cluster.local.", dns.TypeANY, edns(4096, true))}},
		{"A of 60 endpoints without EDNS, truncated", []any{stubQuery(t, "big.default.svc.cluster.local.", dns.TypeA, nil)}},
		{"A of 60 endpoints with EDNS 512", []any{stubQuery(t, "big.default.svc.cluster.local.", dns.TypeA, edns(512, false))}},
		{"0x20 mixed case", []any{stubQuery(t, "KuBeRnEtEs.DeFaUlT.sVc.ClUsTeR.lOcAl.", dns.TypeA, nil)}},
		{"pod A from its name", []any{stubQuery(t, "1-2-3-4.default.pod.cluster.local.", dns.TypeA, nil)}},
		{"SOA of the zone", []any{stubQuery(t, "cluster.local.", dns.TypeSOA, nil)}},
		{"NS of the zone in capitals", []any{stubQuery(t, "CLUSTER.LOCAL.", dns.TypeNS, nil)}},
		{"NXDOMAIN with EDNS", []any{stubQuery(t, "nope.default.svc.cluster.local.", dns.TypeA, edns(1232, false))}},
		{"outside the zones, RD: forwarded", []any{stubQuery(t, "www.example.org.", dns.TypeA, edns(1232, false))}},
		{"outside the zones without RD", []any{stubQuery(t, "www.example.org.", dns.TypeA, func(m *dns.Msg) { m.RecursionDesired = false })}},
		{"CH TXT version.bind", []any{stubQuery(t, "version.bind.", dns.TypeTXT, func(m *dns.Msg) { m.Question[0].Qclass = dns.ClassCHAOS })}},
		{"AXFR of the zone", []any{stubQuery(t, "cluster.local.", dns.TypeAXFR, nil)}},
		{"EDNS version 1", []any{stubQuery(t, "kubernetes.default.svc.cluster.local.", dns.TypeA, func(m *dns.Msg) { m.SetEdns0(1232, false); m.IsEdns0().SetVersion(1) })}},
		{"EDNS client subnet", []any{stubQuery(t, "kubernetes.default.svc.cluster.local.", dns.TypeA, edns(1232, false, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: []byte{10, 1, 2, 0}}))}},
		{"EDNS autopath search list option", []any{stubQuery(t, "kubernetes.", dns.TypeA, edns(1232, false, &dns.EDNS0_LOCAL{Code: 65001, Data: []byte("default.svc.cluster.local,svc.cluster.local")}))}},
		{"EDNS source cluster option", []any{stubQuery(t, "kubernetes.default.svc.cluster.local.", dns.TypeA, edns(1232, false, &dns.EDNS0_LOCAL{Code: 65002, Data: []byte("c1")}))}},
		{"name with a space and a dot escaped", []any{stubQuery(t, `a\ b\.c.cluster.local.`, dns.TypeA, nil)}},
		{"additional record compressed against the question", []any{cat(hdr(0x1234, flagRD, 1, 0, 0, 1), kubernetesA, []byte{0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 10, 96, 0, 1})}},
		{"question and OPT cut in the middle", []any{stubQuery(t, "kubernetes.default.svc.cluster.local.", dns.TypeA, edns(1232, false, cookie))[:60]}},
		{"a TCP length prefix sent over UDP", []any{frame(stubQuery(t, "kubernetes.default.svc.cluster.local.", dns.TypeA, nil))}},
		{"empty", []any{[]byte{}}},
	}
	for _, c := range malformed() {
		s = append(s, seed{"malformed " + c.name, []any{c.b}})
	}
	return s
}

func streamSeeds(t *testing.T) []seed {
	a := stubQuery(t, "kubernetes.default.svc.cluster.local.", dns.TypeA, nil)
	big := stubQuery(t, "big.default.svc.cluster.local.", dns.TypeA, edns(1232, false))
	return []seed{
		{"one query", []any{frame(a)}},
		{"three pipelined queries", []any{cat(frame(a), frame(big), frame(a))}},
		{"a query then one cut short", []any{cat(frame(a), frame(big)[:20])}},
		{"a length prefix alone", []any{[]byte{0, 40}}},
		{"half a length prefix", []any{[]byte{0}}},
		{"length 0 then a query", []any{cat([]byte{0, 0}, frame(a))}},
		{"length 11 then a query", []any{cat(frame(a[:11]), frame(a))}},
		{"a response then a query", []any{cat(frame(cat(hdr(1, 0x8000, 1, 0, 0, 0), kubernetesA)), frame(a))}},
		{"a length larger than the message", []any{cat([]byte{0, byte(len(a) + 8)}, a)}},
		{"an oversized message then a query", []any{cat(frame(cat(hdr(0xbeef, flagRD, 1, 0, 0, 0), kubernetesA, make([]byte, maxQuery))), frame(a))}},
		{"65535 octets announced, 20 sent", []any{cat([]byte{0xff, 0xff}, a[:20])}},
	}
}

// recordSeeds are the key and value pairs keys/README.md shows (every
// record of both specs, as the publisher writes them), a stub domain's
// nameserver, and values each typing rule turns away.
func recordSeeds(t *testing.T) []seed {
	f, err := os.Open("../keys/README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var s []seed
	var prev string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "{") && strings.HasPrefix(prev, "/skydns") {
			s = append(s, seed{"readme " + prev, []any{prev, []byte(line)}})
		}
		prev = line
	}
	if len(s) < 20 {
		t.Fatalf("keys/README.md: %d pairs", len(s))
	}
	for _, p := range []struct{ desc, key, value string }{
		{"stub nameserver", "/skydns/local/cluster/dns/stub/com/example/ns1", `{"host":"10.0.0.53","port":53}`},
		{"SRV value off an SRV owner", "/skydns/local/cluster/svc/default/web/x", `{"host":"web.default.svc.cluster.local","port":80}`},
		{"host and text", "/skydns/local/cluster/svc/default/web/x", `{"host":"10.0.0.1","text":"t"}`},
		{"mail value", "/skydns/local/cluster/svc/default/web/x", `{"host":"mx.example.org","mail":true}`},
		{"IPv6 host", "/skydns/local/cluster/svc/default/web/x", `{"host":"fd00::1"}`},
		{"IPv4-mapped host", "/skydns/local/cluster/svc/default/web/x", `{"host":"::ffff:10.0.0.1"}`},
		{"uppercase key", "/skydns/local/cluster/svc/default/Web/x", `{"host":"10.0.0.1"}`},
		{"key with a dot", "/skydns/local/cluster/svc/default/we.b/x", `{"host":"10.0.0.1"}`},
		{"key without id", "/skydns/local/cluster", `{"host":"10.0.0.1"}`},
		{"record at the apex", "/skydns/local/cluster/x", `{"host":"10.0.0.1"}`},
		{"reverse key with an id", "/skydns/arpa/in-addr/10/96/0/1/x", `{"host":"a.b"}`},
		{"external-dns id", "/skydns/local/cluster/svc/default/web/1a2b3c4d", `{"host":"10.0.0.1","ttl":30}`},
		{"value not JSON", "/skydns/local/cluster/svc/default/web/x", `{`},
		{"long TXT", "/skydns/local/cluster/svc/default/web/x", `{"text":"` + strings.Repeat("t", 70000) + `"}`},
	} {
		s = append(s, seed{p.desc, []any{p.key, []byte(p.value)}})
	}
	return s
}

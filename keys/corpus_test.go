package keys

import (
	"bufio"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/etcdns/etcdns/internal/fuzzcorpus"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite the fuzz targets' seed files under testdata/fuzz from the README's records")

var unsafeFileChars = regexp.MustCompile(`[^a-z0-9]+`)

// TestFuzzCorpus: the seed files of FuzzKeyRoundTrip, FuzzParseKey and
// FuzzDecode are the owner names, keys and values README.md shows, every
// record of both specs, and a few hand-picked edges (go test ./keys -run
// TestFuzzCorpus -args -update-corpus rewrites them).
func TestFuzzCorpus(t *testing.T) {
	seeds := map[string][]fuzzcorpus.Seed{}
	for target, byDesc := range keySeeds(t) {
		for desc, arg := range byDesc {
			// Readable, and unique where "." and "" read alike.
			name := fmt.Sprintf("%.60s-%.8x", strings.Trim(unsafeFileChars.ReplaceAllString(strings.ToLower(desc), "-"), "-"), sha256.Sum256([]byte(desc)))
			seeds[target] = append(seeds[target], fuzzcorpus.Seed{Name: name, Desc: desc, Args: []any{arg}})
		}
	}
	fuzzcorpus.Check(t, seeds, *updateCorpus, "go test ./keys -run TestFuzzCorpus -args -update-corpus")
}

// keySeeds maps each target to its seeds by description.
func keySeeds(t *testing.T) map[string]map[string]any {
	names := map[string]any{}
	keys := map[string]any{}
	values := map[string]any{}
	f, err := os.Open("README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var prev string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "{") && strings.HasPrefix(prev, "/skydns") {
			keys["readme "+prev] = prev
			values["readme value of "+prev] = []byte(line)
			var v Value
			if err := json.Unmarshal([]byte(line), &v); err == nil && v.Group != "" {
				names["readme "+v.Group] = v.Group
			}
		}
		prev = line
	}
	if len(keys) < 20 {
		t.Fatalf("README.md: %d records", len(keys))
	}
	for _, n := range []string{
		"kubernetes.default.svc.cluster.local.", "Kubernetes.Default.SVC.cluster.local", "_http._tcp.web.prod.svc.cluster.local",
		"1.0.96.10.in-addr.arpa", "A.b", "a..b", "a/b", "", ".", "-._", "a b.c", strings.Repeat("a", 64) + ".b",
		strings.Repeat("abcdefghi.", 25) + "abc",
	} {
		names[fmt.Sprintf("hand %q", n)] = n
	}
	for _, k := range []string{
		"/skydns", "/skydns/", "/skydns//x", "/skydns/local/cluster/svc/default/web/",
		"/skydns/local/cluster/svc/default/Web/x", "/skydns/local/cluster/svc/we.b/x", "/skydnsx/local/cluster/x",
		"/skydns-c1/local/cluster/svc/default/web/3kb8im9tcf8cfsgq", "/skydns/local/cluster/dns/stub/com/example/ns1",
		"/skydns/local/cluster/dns/stub/ns1", "/skydns/arpa/in-addr/10/96/0/1/x",
	} {
		keys["hand "+k] = k
	}
	for _, v := range []string{
		`{"host":"10.0.0.1"}`, `{"host":"a.b","port":80}`, `{"text":"1.0.1"}`, `{`, `null`, `{"port":-1}`,
		`{"host":"fd00::1"}`, `{"host":"::ffff:10.0.0.1"}`, `{"host":"fe80::1%eth0","port":53}`, `{"host":"10.0.0.53","port":5353}`,
		`{"host":"A.Example.","port":443,"priority":10,"weight":100}`, `{"host":"a","mail":true}`, `{"host":"a","text":"b"}`,
		`{"port":65536,"host":"a"}`, `{"targetstrip":-1}`, `{"ttl":4294967296}`, `{"host":"a","host":"b"}`, `{"host":"10.0.0.1"} x`,
	} {
		values["hand "+v] = []byte(v)
	}
	return map[string]map[string]any{"FuzzKeyRoundTrip": names, "FuzzParseKey": keys, "FuzzDecode": values}
}

package config

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func load(t *testing.T, args []string, sections ...string) (*Config, error) {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	l := NewLoader(fs, sections...)
	// A value that does not parse as its flag's type stops the program at
	// parsing, with an error naming the flag, as Load's errors name the key.
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return l.Load()
}

func all() []string { return []string{"etcd", "cluster", "publisher", "dnsd"} }

func TestDefaults(t *testing.T) {
	c, err := load(t, nil, all()...)
	if err != nil {
		t.Fatal(err)
	}
	if c.Etcd.DialTimeout != 5*time.Second || c.Cluster.Domain != "cluster.local" || c.Dnsd.Listen != "127.0.0.1:1053" ||
		c.Publisher.Prefix != "/skydns" || c.Publisher.MaxTxnOps != 128 || !c.Dnsd.Rotate || c.Cluster.Pods != PodsInsecure {
		t.Errorf("defaults not taken from config.yaml: %+v", c)
	}
	zones, err := c.Dnsd.ParsedZones()
	if err != nil || len(zones) != 4 || zones[0] != (Zone{Name: "cluster.local", Prefix: "/skydns"}) {
		t.Errorf("zones = %v, %v", zones, err)
	}
}

// Forwarding is off unless asked for, and its allow list keeps dnsd from
// being an open resolver even then.
func TestForwardSettings(t *testing.T) {
	c, err := load(t, nil, all()...)
	if err != nil {
		t.Fatal(err)
	}
	d := c.Dnsd
	allow, err := d.ParsedForwardAllow()
	if d.Forward || len(d.Upstreams) != 0 || d.ForwardTimeout != 2*time.Second || d.ForwardCache != 10000 || d.ForwardMaxTTL != 30 ||
		err != nil || len(allow) != 7 || allow[1].String() != "::1/128" || allow[5].String() != "100.64.0.0/10" {
		t.Errorf("forwarding defaults: %+v, allow %v, %v", d, allow, err)
	}
	c, err = load(t, []string{"--dnsd.forward", "--dnsd.upstreams", "10.0.0.1,[fd00::1]:5353"}, all()...)
	if err != nil {
		t.Fatal(err)
	}
	ups, err := c.Dnsd.ParsedUpstreams()
	if err != nil || len(ups) != 2 || ups[0].String() != "10.0.0.1:53" || ups[1].String() != "[fd00::1]:5353" || !c.Dnsd.Forward {
		t.Errorf("upstreams = %v, %v", ups, err)
	}
}

// The query log is off unless classes are named, on the command line or in
// the environment.
func TestQueryLogSetting(t *testing.T) {
	c, err := load(t, nil, all()...)
	if err != nil || len(c.Dnsd.QueryLog) != 0 {
		t.Fatalf("default query log %q, %v; want none", c.Dnsd.QueryLog, err)
	}
	t.Setenv("ETCDNS_DNSD_QUERY_LOG", "denial,error")
	if c, err = load(t, nil, all()...); err != nil || strings.Join(c.Dnsd.QueryLog, " ") != "denial error" {
		t.Errorf("ETCDNS_DNSD_QUERY_LOG=denial,error: %q, %v", c.Dnsd.QueryLog, err)
	}
	if c, err = load(t, []string{"--dnsd.query-log", "all"}, all()...); err != nil || strings.Join(c.Dnsd.QueryLog, " ") != "all" {
		t.Errorf("--dnsd.query-log all: %q, %v", c.Dnsd.QueryLog, err)
	}
}

// Federation is off in the publisher until it is given a federation name;
// dnsd answers a zone as the federation zone only once dnsd.zones lists it.
func TestFederationSettings(t *testing.T) {
	c, err := load(t, nil, all()...)
	if err != nil {
		t.Fatal(err)
	}
	inside, err := c.Dnsd.ParsedInternalClients()
	if c.Publisher.Federation != "" || c.Publisher.FederationPrefix != "/skydns" || c.Cluster.FederationDomain != "federation" ||
		c.Dnsd.SourceClusterOption != 65002 || err != nil || len(inside) != 7 || inside[0].String() != "127.0.0.0/8" {
		t.Errorf("federation defaults: publisher %+v, domain %q, option %d, inside %v, %v",
			c.Publisher, c.Cluster.FederationDomain, c.Dnsd.SourceClusterOption, inside, err)
	}
	c, err = load(t, []string{"--publisher.federation", "myfederation", "--dnsd.source-cluster-option", "65100",
		"--dnsd.internal-clients", "10.244.0.0/16", "--cluster.federation-domain", "Federation.Example.com."}, all()...)
	if err != nil {
		t.Fatal(err)
	}
	if inside, _ := c.Dnsd.ParsedInternalClients(); c.Publisher.Federation != "myfederation" || c.Dnsd.SourceClusterOption != 65100 || len(inside) != 1 {
		t.Errorf("federation settings not read: %+v, option %d, inside %v", c.Publisher, c.Dnsd.SourceClusterOption, inside)
	}
}

// Every leaf of config.yaml has a field, every field a leaf with a comment:
// the file is the documentation, so nothing may be missing from it.
func TestEverySettingIsDocumented(t *testing.T) {
	fields := map[string]bool{}
	var walk func(prefix string, t reflect.Type)
	walk = func(prefix string, typ reflect.Type) {
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			key := prefix + f.Tag.Get("mapstructure")
			if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(time.Duration(0)) {
				walk(key+".", f.Type)
				continue
			}
			fields[key] = true
		}
	}
	walk("", reflect.TypeOf(Config{}))
	for _, s := range Settings() {
		if !fields[s.Key] {
			t.Errorf("config.yaml has %s, which no field reads", s.Key)
		}
		if s.Comment == "" {
			t.Errorf("config.yaml: %s has no comment", s.Key)
		}
		delete(fields, s.Key)
	}
	for k := range fields {
		t.Errorf("field %s is missing from config.yaml", k)
	}
}

func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	os.WriteFile(file, []byte("dnsd:\n  ttl: 7\n  listen: 127.0.0.1:5300\ncluster:\n  id: from-file\n"), 0o644)
	t.Setenv("ETCDNS_DNSD_TTL", "8")
	t.Setenv("ETCDNS_ETCD_DIAL_TIMEOUT", "2s")
	c, err := load(t, []string{"--config", file, "--cluster.id", "from-flag"}, all()...)
	if err != nil {
		t.Fatal(err)
	}
	if c.Dnsd.TTL != 8 || c.Dnsd.Listen != "127.0.0.1:5300" || c.Cluster.ID != "from-flag" || c.Etcd.DialTimeout != 2*time.Second {
		t.Errorf("precedence flag > env > file > default broken: ttl=%d listen=%s id=%s dial=%s",
			c.Dnsd.TTL, c.Dnsd.Listen, c.Cluster.ID, c.Etcd.DialTimeout)
	}
}

func TestRejects(t *testing.T) {
	dir := t.TempDir()
	unknown := filepath.Join(dir, "u.yaml")
	os.WriteFile(unknown, []byte("dnsd:\n  bogus: 1\n"), 0o644)
	noAllow := filepath.Join(dir, "n.yaml")
	os.WriteFile(noAllow, []byte("dnsd:\n  forward: true\n  forward-allow: []\n"), 0o644)
	// A file's number its setting cannot hold as written is refused, as
	// the same value is as a flag: it used to wrap, truncate or, for a
	// duration without a unit, count nanoseconds.
	file := func(name, body string) []string {
		f := filepath.Join(dir, name+".yaml")
		os.WriteFile(f, []byte(body), 0o644)
		return []string{"--config", f}
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{args: []string{"--config", unknown}, want: "bogus"},
		{env: map[string]string{"ETCDNS_DNSD_TTL": "five"}, want: "dnsd.ttl"},
		{args: []string{"--etcd.dial-timeout", "soon"}, want: "etcd.dial-timeout"},
		{args: []string{"--cluster.id", "Not_A_Label!"}, want: "cluster.id"},
		{args: []string{"--cluster.pods", "sometimes"}, want: "cluster.pods"},
		{args: []string{"--publisher.prefix", "/a/b"}, want: "publisher.prefix"},
		{args: []string{"--publisher.source", "ftp:x"}, want: "publisher.source"},
		{args: []string{"--dnsd.zones", "cluster.local=/skydns/x"}, want: "dnsd.zones"},
		{args: []string{"--dnsd.listen", "nowhere"}, want: "dnsd.listen"},
		{args: []string{"--dnsd.upstreams", "dns.google"}, want: "dnsd.upstreams"},
		{args: []string{"--dnsd.upstreams", "10.0.0.1:0"}, want: "dnsd.upstreams"},
		{args: []string{"--dnsd.forward-timeout", "0s"}, want: "dnsd.forward-timeout"},
		{args: []string{"--dnsd.forward-cache", "-1"}, want: "dnsd.forward-cache"},
		{args: []string{"--dnsd.forward-max-ttl", "-1"}, want: "dnsd.forward-max-ttl"},
		{args: []string{"--dnsd.forward-allow", "10.0.0.1"}, want: "dnsd.forward-allow"},
		{args: []string{"--config", noAllow}, want: "dnsd.forward-allow"},
		{args: file("negative", "dnsd:\n  soa-ttl: -1\n"), want: "'dnsd.soa-ttl' -1 is negative"},
		{args: file("wide", "dnsd:\n  soa-ttl: 4294967301\n"), want: "'dnsd.soa-ttl' 4294967301 is out of range"},
		{args: file("option", "dnsd:\n  source-cluster-option: 130538\n"), want: "'dnsd.source-cluster-option' 130538 is out of range"},
		{args: file("code", "dnsd:\n  autopath-option-code: 70000\n"), want: "70000 is out of range"},
		{args: file("fraction", "dnsd:\n  ttl: 2.7\n"), want: "'dnsd.ttl' 2.7 is not a whole number"},
		{args: file("unitless", "dnsd:\n  tcp-idle-timeout: 10\n"), want: "'dnsd.tcp-idle-timeout' 10 has no unit"},
		{args: file("lease", "publisher:\n  lease-ttl: 15\n"), want: "'publisher.lease-ttl' 15 has no unit"},
		{args: []string{"--etcd.endpoints", "127.0.0.1:2379"}, want: "etcd.endpoints"},
		{args: []string{"--etcd.cert-file", "c.pem"}, want: "etcd.cert-file"},
		{args: []string{"--dnsd.source-cluster-option", "12"}, want: "dnsd.source-cluster-option"},
		{args: []string{"--dnsd.source-cluster-option", "70000"}, want: "dnsd.source-cluster-option"},
		{args: []string{"--dnsd.internal-clients", "10.0.0.1"}, want: "dnsd.internal-clients"},
		{args: []string{"--publisher.dns-service", "kube-dns"}, want: "publisher.dns-service"},
		{args: []string{"--publisher.dns-service", "kube-system/Kube_DNS"}, want: "publisher.dns-service"},
		{args: []string{"--publisher.federation", "My.Federation"}, want: "publisher.federation"},
		{args: []string{"--publisher.federation", "fed", "--cluster.federation-domain", ""}, want: "publisher.federation"},
		{args: []string{"--publisher.federation-prefix", "skydns"}, want: "publisher.federation-prefix"},
		{args: []string{"--cluster.federation-domain", "svc.cluster.local"}, want: "cluster.federation-domain"},
		{args: []string{"--cluster.federation-domain", "local"}, want: "cluster.federation-domain"},
		{args: []string{"--dnsd.page-size", "0"}, want: "dnsd.page-size"},
		{args: []string{"--dnsd.watch-proxy-max-lag", "900ms"}, want: "dnsd.watch-proxy-max-lag: 900ms: 0 (off) or at least twice dnsd.watch-progress-interval (500ms)"},
		{args: []string{"--dnsd.query-log", "denial,nxdomain"}, want: `dnsd.query-log: "nxdomain": want some of all, success, denial, error`},
		{args: []string{"--dnsd.page-size", "many"}, want: "dnsd.page-size"},
		{args: []string{"--dnsd.watch-coalesce", "-1ms"}, want: "dnsd.watch-coalesce"},
		{args: []string{"--dnsd.watch-coalesce", "251ms"}, want: "at most half of dnsd.watch-max-lag"},
		{args: []string{"--dnsd.watch-coalesce", "400ms", "--dnsd.watch-max-lag", "1s"}, want: "at most half of dnsd.watch-lag-probe-interval"},
		{args: []string{"--dnsd.watch-coalesce", "600ms", "--dnsd.watch-lag-probe-interval", "0"}, want: "at most half of what a liveness probe is given"},
	} {
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		_, err := load(t, tc.args, all()...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: error %v; want one naming %q", tc.args, tc.env, err, tc.want)
		}
		for k := range tc.env {
			os.Unsetenv(k)
		}
	}
}

func TestProgramsSeeOnlyTheirSettings(t *testing.T) {
	fs := pflag.NewFlagSet("dnsd", pflag.ContinueOnError)
	NewLoader(fs, "etcd", "cluster", "dnsd")
	if fs.Lookup("dnsd.listen") == nil || fs.Lookup("publisher.prefix") != nil {
		t.Error("dnsd's flags should be etcd, cluster and dnsd settings only")
	}
	// A bad publisher setting does not stop dnsd.
	t.Setenv("ETCDNS_PUBLISHER_PREFIX", "bad")
	if _, err := load(t, nil, "etcd", "cluster", "dnsd"); err != nil {
		t.Errorf("dnsd failed on a publisher setting: %v", err)
	}
}

// docs/configuration.md is what the settings' definitions generate; it
// must not drift (go generate ./config, or make docs, rewrites it).
func TestConfigurationDoc(t *testing.T) {
	got, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := Reference(); string(got) != want {
		t.Errorf("docs/configuration.md differs from config.yaml and Config; run go generate ./config (make docs)")
	}
}

// Numbers and durations are typed in --help and parsed by their flag, so
// a user sees "--dnsd.ttl uint32" and "--etcd.dial-timeout duration".
func TestFlagTypes(t *testing.T) {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	NewLoader(fs, all()...)
	for key, want := range map[string]string{
		"etcd.dial-timeout":          "duration",
		"etcd.endpoints":             "strings",
		"dnsd.ttl":                   "uint32",
		"dnsd.tcp-max-connections":   "int",
		"dnsd.page-size":             "int",
		"dnsd.query-log":             "strings",
		"dnsd.source-cluster-option": "uint16",
		"dnsd.rotate":                "", // a bare --dnsd.rotate is true
		"dnsd.listen":                "string",
		"cluster.pods":               "string",
	} {
		f := fs.Lookup(key)
		if f == nil {
			t.Errorf("no flag --%s", key)
			continue
		}
		if typ, _ := pflag.UnquoteUsage(f); typ != want {
			t.Errorf("--%s shows as %q in --help; want %q", key, typ, want)
		}
	}
	if f := fs.Lookup("etcd.dial-timeout"); f.DefValue != "5s" {
		t.Errorf("--etcd.dial-timeout default %q; want config.yaml's 5s", f.DefValue)
	}
	var help strings.Builder
	fs.SetOutput(&help)
	fs.PrintDefaults()
	if !strings.Contains(help.String(), "--dnsd.tcp-max-connections int") {
		t.Errorf("--help does not show tcp-max-connections as an int:\n%s", help.String())
	}
}

// The environment and the file still give numbers and durations as text.
func TestTypedFromEnvironmentAndFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	os.WriteFile(file, []byte("dnsd:\n  tcp-idle-timeout: 3s\n  source-cluster-option: 65100\n  watch-coalesce: 0\n  soa-expire: 600.0\n"), 0o644)
	t.Setenv("ETCDNS_PUBLISHER_MAX_TXN_OPS", "64")
	t.Setenv("ETCDNS_DNSD_SOA_REFRESH", "600")
	c, err := load(t, []string{"--config", file}, all()...)
	if err != nil {
		t.Fatal(err)
	}
	if c.Dnsd.TCPIdleTimeout != 3*time.Second || c.Dnsd.SourceClusterOption != 65100 || c.Publisher.MaxTxnOps != 64 ||
		c.Dnsd.SOAExpire != 600 || c.Dnsd.SOARefresh != 600 || c.Dnsd.WatchCoalesce != 0 {
		t.Errorf("typed settings from file and environment: %+v %+v", c.Dnsd, c.Publisher)
	}
}

func TestAlias(t *testing.T) {
	fs := pflag.NewFlagSet("publisher", pflag.ContinueOnError)
	l := NewLoader(fs, "etcd", "cluster", "publisher")
	l.Alias(fs, map[string]string{"dry-run": "publisher.dry-run", "source": "publisher.source"})
	if err := fs.Parse([]string{"--source", "files:x", "--dry-run"}); err != nil {
		t.Fatal(err)
	}
	c, err := l.Load()
	if err != nil || !c.Publisher.DryRun || c.Publisher.Files() != "x" {
		t.Errorf("aliases not applied: %+v, %v", c.Publisher, err)
	}
}

// The federation endpoint is off by default and never runs without its
// certificates: it would let anyone who reaches it redirect names.
func TestStubAPISettings(t *testing.T) {
	c, err := load(t, nil, all()...)
	if err != nil || c.Publisher.StubAPIListen != "" {
		t.Fatalf("stub API on by default: %q %v", c.Publisher.StubAPIListen, err)
	}
	_, err = load(t, []string{"--publisher.stub-api-listen", "127.0.0.1:8443"}, all()...)
	for _, key := range []string{"publisher.stub-api-cert-file", "publisher.stub-api-key-file", "publisher.stub-api-client-ca-file"} {
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("without %s: %v", key, err)
		}
	}
	files := []string{"--publisher.stub-api-listen", "127.0.0.1:8443", "--publisher.stub-api-cert-file", "s.pem",
		"--publisher.stub-api-key-file", "s.key", "--publisher.stub-api-client-ca-file", "ca.pem"}
	if c, err = load(t, files, all()...); err != nil || c.Publisher.StubAPIClientCAFile != "ca.pem" {
		t.Errorf("complete settings: %v", err)
	}
	if _, err = load(t, append(files, "--cluster.federation-domain", ""), all()...); err == nil || !strings.Contains(err.Error(), "publisher.stub-api-listen") {
		t.Errorf("without a federation domain: %v", err)
	}
	if _, err = load(t, append(files, "--publisher.stub-api-listen", "nowhere"), all()...); err == nil || !strings.Contains(err.Error(), "publisher.stub-api-listen") {
		t.Errorf("a bad address: %v", err)
	}
}

// A ":skydns" after a zone's prefix serves it as CoreDNS's etcd plugin
// does; the older forms keep their meaning and a mode nobody knows is an
// error, not a silent default.
func TestZoneModes(t *testing.T) {
	d := Dnsd{Zones: []string{"cluster.local=/skydns", "example.org=/skydns:skydns", "in-addr.arpa", "example.net=/ext:etcdns"}}
	zones, err := d.ParsedZones()
	want := []Zone{
		{Name: "cluster.local", Prefix: "/skydns"},
		{Name: "example.org", Prefix: "/skydns", SkyDNS: true},
		{Name: "in-addr.arpa", Prefix: "/skydns"},
		{Name: "example.net", Prefix: "/ext"},
	}
	if err != nil || !slices.Equal(zones, want) {
		t.Errorf("zones = %+v, %v; want %+v", zones, err, want)
	}
	for _, bad := range []string{"example.org=/skydns:coredns", "example.org=/a/b:skydns"} {
		if _, err := (Dnsd{Zones: []string{bad}}).ParsedZones(); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// An etcd URL is its scheme, host and port: clientv3 drops the rest
// unseen. A password in it would not be sent, yet be logged and exported
// as a metrics label, so the error shows the URL without it.
func TestEtcdURLs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--etcd.endpoints", "http://root:s3cret@10.0.0.1:2379"}, "etcd.endpoints: \"http://root:xxxxx@10.0.0.1:2379\" has a user or password in it, which is never sent to etcd: give them as etcd.username and ETCDNS_ETCD_PASSWORD"},
		{[]string{"--etcd.endpoints", "https://10.0.0.2:2379,http://root@10.0.0.1:2379"}, "etcd.username"},
		{[]string{"--etcd.endpoints", "root:s3cret@10.0.0.1:2379"}, "etcd.endpoints: \"xxxxx@10.0.0.1:2379\" is not an http(s) URL"},
		{[]string{"--etcd.endpoints", "http://root:s3cret@10.0.0.1:2379/%zz"}, "etcd.endpoints: \"http://xxxxx@10.0.0.1:2379/%zz\" is not an http(s) URL"},
		{[]string{"--etcd.endpoints", "http://10.0.0.1:2379/v3"}, "etcd.endpoints: \"http://10.0.0.1:2379/v3\": etcd reads the scheme, host and port of a URL only"},
		{[]string{"--etcd.endpoints", "http://10.0.0.1:2379?timeout=1s"}, "etcd.endpoints"},
		{[]string{"--etcd.endpoints", "http://10.0.0.1:2379?"}, "etcd.endpoints"},
		{[]string{"--etcd.endpoints", "http://10.0.0.1:2379#a"}, "etcd.endpoints"},
		{[]string{"--etcd.embedded.client-url", "http://root:s3cret@127.0.0.1:2379"}, "etcd.embedded.client-url: \"http://root:xxxxx@127.0.0.1:2379\" has a user or password"},
		{[]string{"--etcd.embedded.peer-url", "https://127.0.0.1:2380"}, "etcd.embedded.peer-url: \"https://127.0.0.1:2380\" is not an http URL"},
	} {
		_, err := load(t, tc.args, all()...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v; want one with %q", tc.args, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%v: the error shows the password: %v", tc.args, err)
		}
	}
	c, err := load(t, []string{"--etcd.endpoints", "http://10.0.0.1:2379/,https://[fd00::1]:2379"}, all()...)
	if err != nil || len(c.Etcd.Endpoints) != 2 {
		t.Errorf("plain endpoints: %v, %v", c, err)
	}
}

// TLS files with an http:// endpoint would be dropped by clientv3 without
// a word: refused, as is the embedded etcd's http URL they would go with.
func TestTLSNeedsHTTPS(t *testing.T) {
	tls := []string{"--etcd.ca-file", "ca.pem"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append([]string{"--etcd.endpoints", "https://10.0.0.2:2379,http://10.0.0.1:2379"}, tls...), `etcd.endpoints: "http://10.0.0.1:2379" is dialled without TLS, yet etcd.ca-file or etcd.cert-file asks for TLS`},
		{[]string{"--etcd.endpoints", "http://10.0.0.1:2379", "--etcd.cert-file", "c.pem", "--etcd.key-file", "c.key"}, "etcd.endpoints"},
		{tls, "etcd.endpoints: empty, so etcd.embedded.client-url http://127.0.0.1:2379 is dialled, without TLS"},
	} {
		_, err := load(t, tc.args, all()...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v; want one with %q", tc.args, err, tc.want)
		}
	}
	if _, err := load(t, append([]string{"--etcd.endpoints", "https://10.0.0.1:2379"}, tls...), all()...); err != nil {
		t.Errorf("https with a CA: %v", err)
	}
}

// The SOA's names are relative to each zone, which server/answer joins on:
// a trailing dot, or a name too long with some zone, made every SOA and
// negative answer of the zone SERVFAIL.
func TestSOANames(t *testing.T) {
	long := strings.Repeat("a", 60) + "." + strings.Repeat("b", 60) + "." + strings.Repeat("c", 60) // 182 characters
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dnsd.soa-mname", "ns.dns."}, `dnsd.soa-mname: "ns.dns." ends in a dot, but it is a name relative to each zone of dnsd.zones (ns.dns is ns.dns.<zone>)`},
		{[]string{"--dnsd.soa-rname", "hostmaster.example.com."}, `dnsd.soa-rname: "hostmaster.example.com." ends in a dot`},
		{[]string{"--dnsd.soa-mname", "."}, "dnsd.soa-mname"},
		{[]string{"--dnsd.soa-rname", long, "--dnsd.zones", "cluster.local," + strings.Repeat("z", 63) + ".example"}, "dnsd.soa-rname: \"" + long + "\" joined to zone " + strings.Repeat("z", 63) + ".example: name"},
	} {
		_, err := load(t, tc.args, all()...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v; want one with %q", tc.args, err, tc.want)
		}
	}
	// 182 characters, and 71 more with ".clusterset.local": 253, the most.
	if _, err := load(t, []string{"--dnsd.soa-rname", long + "." + strings.Repeat("d", 53)}, all()...); err != nil {
		t.Errorf("a name that fits every zone: %v", err)
	}
	if _, err := load(t, []string{"--dnsd.soa-rname", long + "." + strings.Repeat("d", 54)}, all()...); err == nil || !strings.Contains(err.Error(), "joined to zone clusterset.local") {
		t.Errorf("a name one octet too long in clusterset.local: %v", err)
	}
}

// A variable set empty is an empty value: a setting whose empty value is
// off turns off, a list empties, and a number, duration or bool, which
// have none, is refused rather than read as 0 or false.
func TestEmptyEnvironment(t *testing.T) {
	t.Setenv("ETCDNS_DNSD_METRICS_LISTEN", "")
	t.Setenv("ETCDNS_DNSD_INTERNAL_CLIENTS", "")
	t.Setenv("ETCDNS_PUBLISHER_METRICS_LISTEN", "")
	c, err := load(t, nil, all()...)
	if err != nil {
		t.Fatal(err)
	}
	if c.Dnsd.MetricsListen != "" || c.Publisher.MetricsListen != "" || c.Dnsd.InternalClients == nil || len(c.Dnsd.InternalClients) != 0 {
		t.Errorf("empty variables: dnsd.metrics-listen %q, publisher.metrics-listen %q, dnsd.internal-clients %#v; want off, off, empty",
			c.Dnsd.MetricsListen, c.Publisher.MetricsListen, c.Dnsd.InternalClients)
	}
	for key, want := range map[string]string{
		"ETCDNS_DNSD_TTL":              "dnsd.ttl: ETCDNS_DNSD_TTL is set but empty; give a whole number, or unset it for the default (5)",
		"ETCDNS_DNSD_ROTATE":           "dnsd.rotate: ETCDNS_DNSD_ROTATE is set but empty; give true or false",
		"ETCDNS_DNSD_TCP_IDLE_TIMEOUT": "dnsd.tcp-idle-timeout: ETCDNS_DNSD_TCP_IDLE_TIMEOUT is set but empty; give a duration",
		"ETCDNS_PUBLISHER_MAX_TXN_OPS": "publisher.max-txn-ops",
		"ETCDNS_DNSD_SOA_TTL":          "dnsd.soa-ttl",
	} {
		t.Run(key, func(t *testing.T) {
			t.Setenv(key, " ")
			if _, err := load(t, nil, all()...); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s empty: %v; want an error with %q", key, err, want)
			}
		})
	}
	// A flag wins over the variable, and a program does not read another's.
	t.Setenv("ETCDNS_DNSD_ROTATE", "")
	t.Setenv("ETCDNS_PUBLISHER_TTL", "")
	if c, err := load(t, []string{"--dnsd.rotate=false"}, "etcd", "cluster", "dnsd"); err != nil || c.Dnsd.Rotate {
		t.Errorf("--dnsd.rotate=false over an empty ETCDNS_DNSD_ROTATE: rotate %v, %v", c != nil && c.Dnsd.Rotate, err)
	}
}

// A text setting given an unquoted YAML number, bool or date is refused:
// decoded, it was no longer what was written, and the error must not show
// the value, which may be a password.
func TestTextMustBeQuoted(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ body, want string }{
		{"cluster:\n  id: 012\n", "'cluster.id' is text, but the file's unquoted value is a number (012 would be read as 10) in YAML, not read as written: quote it"},
		{"etcd:\n  username: u\n  password: 0123456\n", "'etcd.password' is text"},
		{"etcd:\n  username: u\n  password: 1e3\n", "'etcd.password' is text"},
		{"cluster:\n  id: true\n", "'cluster.id' is text, but the file's unquoted value is a bool"},
		{"cluster:\n  id: 0x1f\n", "'cluster.id' is text"},
		{"cluster:\n  id: 2001-12-14\n", "'cluster.id' is text, but the file's unquoted value is a timestamp"},
		{"publisher:\n  namespaces: [apps, 012]\n", "'publisher.namespaces[1]' is text"},
		{"cluster:\n  pods: false\n", "'cluster.pods' is text"},
	} {
		f := filepath.Join(dir, "c.yaml")
		os.WriteFile(f, []byte(tc.body), 0o644)
		_, err := load(t, []string{"--config", f}, all()...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v; want one with %q", tc.body, err, tc.want)
		}
		if err != nil && (strings.Contains(err.Error(), "123456") || strings.Contains(err.Error(), "1000")) {
			t.Errorf("%q: the error shows the value: %v", tc.body, err)
		}
	}
	f := filepath.Join(dir, "quoted.yaml")
	os.WriteFile(f, []byte("cluster:\n  id: \"012\"\netcd:\n  username: u\n  password: '0123456'\n"), 0o644)
	if c, err := load(t, []string{"--config", f}, all()...); err != nil || c.Cluster.ID != "012" || c.Etcd.Password != "0123456" {
		t.Errorf("quoted: %v", err)
	}
}

// What viper's merge would lose unseen is refused: a section given a
// value (its defaults stayed), and keys that differ only in case (one of
// them was kept, which one by chance).
func TestFileShape(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ body, want string }{
		{"etcd: http://10.1.2.3:2379\n", `etcd (line 1): a section, given a value instead of settings, which would be ignored for the defaults: put its settings on the lines under it, indented, as config.yaml does ("etcd:", then "  endpoints: ...")`},
		{"dnsd: 5\n", "dnsd (line 1): a section"},
		{"dnsd: [a]\n", "dnsd (line 1): a section"},
		{"etcd:\n  embedded: x\n", `etcd.embedded (line 2): a section, given a value instead of settings, which would be ignored for the defaults: put its settings on the lines under it, indented, as config.yaml does ("embedded:", then "  data-dir: ..."`},
		{"cluster:\n  id: a\n  ID: b\n", "cluster.id (line 2) and cluster.ID (line 3) are the same key, as keys ignore case: keep one"},
		{"cluster:\n  id: a\nCluster:\n  domain: b\n", "cluster (line 1) and Cluster (line 3) are the same key"},
		{"- dnsd\n", "line 1: want the sections as keys"},
	} {
		f := filepath.Join(dir, "c.yaml")
		os.WriteFile(f, []byte(tc.body), 0o644)
		_, err := load(t, []string{"--config", f}, all()...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v; want one with %q", tc.body, err, tc.want)
		}
	}
	// A section with every setting commented out is empty, and keys are
	// still read whatever their case.
	for _, body := range []string{"", "# nothing\n", "etcd:\ndnsd:\n  # ttl: 7\n", "Cluster:\n  ID: a\n"} {
		f := filepath.Join(dir, "ok.yaml")
		os.WriteFile(f, []byte(body), 0o644)
		if _, err := load(t, []string{"--config", f}, all()...); err != nil {
			t.Errorf("%q: %v", body, err)
		}
	}
}

// publisher.namespaces entries are trimmed ("apps, shop" from a flag or
// variable published apps only) and must be names a namespace can have.
func TestPublisherNamespaces(t *testing.T) {
	c, err := load(t, []string{"--publisher.namespaces", "apps, shop"}, all()...)
	if err != nil || !slices.Equal(c.Publisher.Namespaces, []string{"apps", "shop"}) {
		t.Errorf("--publisher.namespaces 'apps, shop': %q, %v", c.Publisher.Namespaces, err)
	}
	t.Setenv("ETCDNS_PUBLISHER_NAMESPACES", " kube-system ,apps")
	if c, err = load(t, nil, all()...); err != nil || !slices.Equal(c.Publisher.Namespaces, []string{"kube-system", "apps"}) {
		t.Errorf("ETCDNS_PUBLISHER_NAMESPACES: %q, %v", c.Publisher.Namespaces, err)
	}
	os.Unsetenv("ETCDNS_PUBLISHER_NAMESPACES")
	for _, ns := range []string{"Apps", "apps,", "my_ns", "-apps", "apps.shop", strings.Repeat("a", 64), "apps,apps"} {
		_, err := load(t, []string{"--publisher.namespaces", ns}, all()...)
		if err == nil || !strings.Contains(err.Error(), "publisher.namespaces: ") {
			t.Errorf("--publisher.namespaces %q: error %v; want one naming publisher.namespaces", ns, err)
		}
	}
	// dnsd does not read it.
	t.Setenv("ETCDNS_PUBLISHER_NAMESPACES", "Apps")
	if _, err := load(t, nil, "etcd", "cluster", "dnsd"); err != nil {
		t.Errorf("dnsd with a bad publisher.namespaces: %v", err)
	}
}

// The publisher watches publisher.namespaces only: a dns-service outside
// them was never seen, and ns.dns got no address.
func TestDNSServiceInNamespaces(t *testing.T) {
	_, err := load(t, []string{"--publisher.namespaces", "apps", "--publisher.dns-service", "kube-system/kube-dns"}, all()...)
	if want := `publisher.dns-service: "kube-system/kube-dns" is in namespace kube-system, which publisher.namespaces leaves out`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v; want one with %q", err, want)
	}
	for _, args := range [][]string{
		{"--publisher.namespaces", "apps, kube-system", "--publisher.dns-service", "kube-system/kube-dns"},
		{"--publisher.dns-service", "kube-system/kube-dns"}, // every namespace
	} {
		if _, err := load(t, args, all()...); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// etcd.username and its password go together: either alone made no login
// while the log named the user. The password is read from wherever viper
// finds it, and never shown.
func TestEtcdLoginNeedsBoth(t *testing.T) {
	_, err := load(t, []string{"--etcd.username", "dnsd"}, all()...)
	if want := `etcd.username: "dnsd" has no password, so no login would be made; give it as ETCDNS_ETCD_PASSWORD`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a username alone: %v; want an error with %q", err, want)
	}
	t.Setenv("ETCDNS_ETCD_PASSWORD", "s3cret")
	_, err = load(t, nil, all()...)
	if want := "etcd.password: set (ETCDNS_ETCD_PASSWORD, --etcd.password or the file), but etcd.username is empty"; err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("a password alone: %v; want an error with %q, without the password", err, want)
	}
	if c, err := load(t, []string{"--etcd.username", "dnsd"}, all()...); err != nil || c.Etcd.Password != "s3cret" {
		t.Errorf("username flag, password variable: %v", err)
	}
	os.Unsetenv("ETCDNS_ETCD_PASSWORD")
	dir := t.TempDir()
	f := filepath.Join(dir, "c.yaml")
	os.WriteFile(f, []byte("etcd:\n  password: s3cret\n"), 0o644)
	t.Setenv("ETCDNS_ETCD_USERNAME", "dnsd")
	if _, err := load(t, []string{"--config", f}, all()...); err != nil {
		t.Errorf("username variable, password in the file: %v", err)
	}
	os.Unsetenv("ETCDNS_ETCD_USERNAME")
	// A client certificate logs in without a password.
	if _, err := load(t, []string{"--etcd.username", "dnsd", "--etcd.endpoints", "https://10.0.0.1:2379", "--etcd.cert-file", "c.pem", "--etcd.key-file", "c.key"}, all()...); err != nil {
		t.Errorf("a username with a client certificate: %v", err)
	}
}

// An upstream must be one resolver: 0.0.0.0 on dnsd's own port sent each
// question back to dnsd, and a group or broadcast address names no one.
func TestUpstreamAddresses(t *testing.T) {
	for _, u := range []string{"0.0.0.0", "0.0.0.0:1053", "::", "[::]:53", "::ffff:0.0.0.0", "224.0.0.251", "[ff02::fb]:5353", "255.255.255.255"} {
		_, err := load(t, []string{"--dnsd.forward", "--dnsd.upstreams", u}, all()...)
		if err == nil || !strings.Contains(err.Error(), "dnsd.upstreams: \""+u+"\": ") || !strings.Contains(err.Error(), "is no resolver") {
			t.Errorf("upstream %s: error %v; want one naming dnsd.upstreams", u, err)
		}
	}
	if _, err := (Dnsd{Upstreams: []string{"127.0.0.53", "10.255.255.255", "[fe80::1%eth0]:53"}}).ParsedUpstreams(); err != nil {
		t.Errorf("unicast upstreams: %v", err)
	}
}

// publisher.max-txn-bytes cannot exceed what clientv3 sends, and TTLs
// what RFC 2181 section 8 lets a resolver cache.
func TestUpperBounds(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--publisher.max-txn-bytes", "2097153"}, "publisher.max-txn-bytes: 2097153: 4096 to 2097152"},
		{[]string{"--publisher.max-txn-bytes", "100000000"}, "publisher.max-txn-bytes"},
		{[]string{"--publisher.max-txn-bytes", "4095"}, "publisher.max-txn-bytes"},
		{[]string{"--publisher.ttl", "2147483648"}, "publisher.ttl: 2147483648: at most 2147483647"},
		{[]string{"--dnsd.ttl", "4294967295"}, "dnsd.ttl: 4294967295: at most 2147483647"},
		{[]string{"--dnsd.soa-ttl", "2147483648"}, "dnsd.soa-ttl"},
		{[]string{"--dnsd.soa-minimum", "2147483648"}, "dnsd.soa-minimum"},
		{[]string{"--dnsd.forward-max-ttl", "2147483648"}, "dnsd.forward-max-ttl"},
	} {
		_, err := load(t, tc.args, all()...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v; want one with %q", tc.args, err, tc.want)
		}
	}
	max := []string{"--publisher.max-txn-bytes", "2097152", "--publisher.ttl", "2147483647", "--dnsd.ttl", "2147483647",
		"--dnsd.soa-ttl", "2147483647", "--dnsd.soa-minimum", "2147483647", "--dnsd.forward-max-ttl", "2147483647"}
	if _, err := load(t, max, all()...); err != nil {
		t.Errorf("the largest values: %v", err)
	}
}

// dnsd serves the cluster's names only from a zone named cluster.domain:
// one that serves etcdns zones without it answered none of them. The
// defaults have it, and a dnsd of SkyDNS zones only needs none.
func TestDnsdServesClusterDomain(t *testing.T) {
	dnsd := []string{"etcd", "cluster", "dnsd"}
	for _, args := range [][]string{
		{"--cluster.domain", "k8s.example"},
		{"--dnsd.zones", "clusterset.local,in-addr.arpa"},
		{"--dnsd.zones", "example.org=/skydns:skydns,example.net=/skydns"},
	} {
		_, err := load(t, args, dnsd...)
		if want := "dnsd.zones: no zone is cluster.domain "; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: error %v; want one with %q", args, err, want)
		}
	}
	for _, args := range [][]string{
		nil,
		{"--cluster.domain", "K8s.Example.", "--dnsd.zones", "k8s.example=/skydns,in-addr.arpa"},
		{"--dnsd.zones", "example.org=/skydns:skydns,10.in-addr.arpa=/skydns:skydns"},
	} {
		if _, err := load(t, args, dnsd...); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
	// The publisher does not read dnsd.zones.
	if _, err := load(t, []string{"--cluster.domain", "k8s.example"}, "etcd", "cluster", "publisher"); err != nil {
		t.Errorf("publisher: %v", err)
	}
}

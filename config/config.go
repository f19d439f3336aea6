package config

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/etcdns/etcdns"
	"github.com/etcdns/etcdns/keys"
)

// Config is config.yaml as types. Field tags are the file's keys.
type Config struct {
	Etcd      Etcd      `mapstructure:"etcd"`
	Cluster   Cluster   `mapstructure:"cluster"`
	Publisher Publisher `mapstructure:"publisher"`
	Dnsd      Dnsd      `mapstructure:"dnsd"`
}

type Etcd struct {
	Endpoints      []string      `mapstructure:"endpoints"`
	DialTimeout    time.Duration `mapstructure:"dial-timeout"`
	RequestTimeout time.Duration `mapstructure:"request-timeout"`
	Username       string        `mapstructure:"username"`
	Password       string        `mapstructure:"password"`
	CAFile         string        `mapstructure:"ca-file"`
	CertFile       string        `mapstructure:"cert-file"`
	KeyFile        string        `mapstructure:"key-file"`
	Embedded       Embedded      `mapstructure:"embedded"`
}

type Embedded struct {
	DataDir   string `mapstructure:"data-dir"`
	ClientURL string `mapstructure:"client-url"`
	PeerURL   string `mapstructure:"peer-url"`
}

type Cluster struct {
	ID               string  `mapstructure:"id"`
	Domain           string  `mapstructure:"domain"`
	Pods             PodMode `mapstructure:"pods"`
	FederationDomain string  `mapstructure:"federation-domain"`
}

// PodMode says where a-b-c-d.<ns>.pod.<zone> answers come from.
type PodMode string

const (
	PodsInsecure PodMode = "insecure"
	PodsVerified PodMode = "verified"
	PodsDisabled PodMode = "disabled"
)

type Publisher struct {
	Source           string        `mapstructure:"source"`
	Kubeconfig       string        `mapstructure:"kubeconfig"`
	Namespaces       []string      `mapstructure:"namespaces"`
	LabelSelector    string        `mapstructure:"label-selector"`
	Prefix           string        `mapstructure:"prefix"`
	ReversePrefix    string        `mapstructure:"reverse-prefix"`
	Clusterset       bool          `mapstructure:"clusterset"`
	ClustersetPrefix string        `mapstructure:"clusterset-prefix"`
	Federation       string        `mapstructure:"federation"`
	FederationPrefix string        `mapstructure:"federation-prefix"`
	TTL              uint32        `mapstructure:"ttl"`
	DNSService       string        `mapstructure:"dns-service"`
	DryRun           bool          `mapstructure:"dry-run"`
	MetricsListen    string        `mapstructure:"metrics-listen"`
	LeaderElection   bool          `mapstructure:"leader-election"`
	LeaseTTL         time.Duration `mapstructure:"lease-ttl"`
	WriteTimeout     time.Duration `mapstructure:"write-timeout"`
	MaxTxnOps        int           `mapstructure:"max-txn-ops"`
	MaxTxnBytes      int           `mapstructure:"max-txn-bytes"`

	StubAPIListen       string `mapstructure:"stub-api-listen"`
	StubAPICertFile     string `mapstructure:"stub-api-cert-file"`
	StubAPIKeyFile      string `mapstructure:"stub-api-key-file"`
	StubAPIClientCAFile string `mapstructure:"stub-api-client-ca-file"`
}

type Dnsd struct {
	Listen        string   `mapstructure:"listen"`
	Zones         []string `mapstructure:"zones"`
	TTL           uint32   `mapstructure:"ttl"`
	Rotate        bool     `mapstructure:"rotate"`
	SOAMname      string   `mapstructure:"soa-mname"`
	SOARname      string   `mapstructure:"soa-rname"`
	SOATTL        uint32   `mapstructure:"soa-ttl"`
	SOARefresh    uint32   `mapstructure:"soa-refresh"`
	SOARetry      uint32   `mapstructure:"soa-retry"`
	SOAExpire     uint32   `mapstructure:"soa-expire"`
	SOAMinimum    uint32   `mapstructure:"soa-minimum"`
	MetricsListen string   `mapstructure:"metrics-listen"`
	QueryLog      []string `mapstructure:"query-log"`

	TCPIdleTimeout    time.Duration `mapstructure:"tcp-idle-timeout"`
	TCPMaxConnections int           `mapstructure:"tcp-max-connections"`

	WatchProgressInterval time.Duration `mapstructure:"watch-progress-interval"`
	WatchProgressTimeout  time.Duration `mapstructure:"watch-progress-timeout"`
	WatchLagProbe         time.Duration `mapstructure:"watch-lag-probe-interval"`
	WatchMaxLag           time.Duration `mapstructure:"watch-max-lag"`
	WatchProxyMaxLag      time.Duration `mapstructure:"watch-proxy-max-lag"`
	WatchCoalesce         time.Duration `mapstructure:"watch-coalesce"`
	StartJitter           time.Duration `mapstructure:"start-jitter"`
	PageSize              int           `mapstructure:"page-size"`

	SourceClusterOption uint16   `mapstructure:"source-cluster-option"`
	InternalClients     []string `mapstructure:"internal-clients"`

	Forward        bool          `mapstructure:"forward"`
	Upstreams      []string      `mapstructure:"upstreams"`
	ForwardTimeout time.Duration `mapstructure:"forward-timeout"`
	ForwardCache   int           `mapstructure:"forward-cache"`
	ForwardMaxTTL  uint32        `mapstructure:"forward-max-ttl"`
	ForwardAllow   []string      `mapstructure:"forward-allow"`

	AutopathSuffix     bool   `mapstructure:"autopath-suffix"`
	AutopathOption     bool   `mapstructure:"autopath-option"`
	AutopathOptionCode uint16 `mapstructure:"autopath-option-code"`
	AutopathClient     bool   `mapstructure:"autopath-client"`
}

// ParsedUpstreams reads dnsd.upstreams: IP addresses, with a port or on
// 53. Names are not taken: resolving them would need a resolver.
func (d Dnsd) ParsedUpstreams() ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	for _, u := range d.Upstreams {
		u = strings.TrimSpace(u)
		ap, err := netip.ParseAddrPort(u)
		if err != nil {
			a, aerr := netip.ParseAddr(u)
			if aerr != nil {
				return nil, fmt.Errorf("dnsd.upstreams: %q: want ip or ip:port", u)
			}
			ap = netip.AddrPortFrom(a, 53)
		}
		if ap.Port() == 0 {
			return nil, fmt.Errorf("dnsd.upstreams: %q: port 0", u)
		}
		// None of these is one resolver. The unspecified address reaches
		// this host: on dnsd's own port each question came back to dnsd
		// (forward's loop check knows the listen address, not this one).
		// A group or broadcast address is many hosts, or none.
		switch a := ap.Addr().Unmap(); {
		case a.IsUnspecified():
			return nil, fmt.Errorf("dnsd.upstreams: %q: the unspecified address is no resolver (it reaches this host); give the resolver's own address", u)
		case a.IsMulticast():
			return nil, fmt.Errorf("dnsd.upstreams: %q: a multicast address is no resolver; give the resolver's own address", u)
		case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
			return nil, fmt.Errorf("dnsd.upstreams: %q: the broadcast address is no resolver; give the resolver's own address", u)
		}
		out = append(out, ap)
	}
	return out, nil
}

// ParsedForwardAllow reads dnsd.forward-allow: CIDR prefixes.
func (d Dnsd) ParsedForwardAllow() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, c := range d.ForwardAllow {
		p, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			return nil, fmt.Errorf("dnsd.forward-allow: %q is not a CIDR prefix", c)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// ParsedInternalClients reads dnsd.internal-clients: CIDR prefixes.
func (d Dnsd) ParsedInternalClients() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, c := range d.InternalClients {
		p, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			return nil, fmt.Errorf("dnsd.internal-clients: %q is not a CIDR prefix", c)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// MaxTxnBytes bounds publisher.max-txn-bytes: clientv3 refuses to send a
// request larger (its MaxCallSendMsgSize default, etcdclient.CallOptions),
// so a transaction split to a larger size would fail every time.
const MaxTxnBytes = 2 << 20

// MaxTTL is the largest TTL: RFC 2181 section 8 has a TTL with the top
// bit set read as 0, so a resolver would not cache at all.
const MaxTTL = math.MaxInt32

// Local-use EDNS(0) option codes (RFC 6891 section 9): a code outside the
// range could be one a future standard gives another meaning.
const (
	LocalOptionMin = 65001
	LocalOptionMax = 65534
)

// Zone is one served zone and the etcd prefix its records are under.
type Zone struct {
	Name   string
	Prefix string
	// SkyDNS is set by a ":skydns" after the prefix: the zone is served
	// as CoreDNS's etcd plugin serves it (server/skydns), for data that
	// external-dns, SkyDNS or kube2sky write.
	SkyDNS bool
}

// ParsedZones reads dnsd.zones ("zone=prefix[:mode]", prefix optional;
// mode "skydns" or the default "etcdns").
func (d Dnsd) ParsedZones() ([]Zone, error) {
	var out []Zone
	seen := map[string]bool{}
	for _, z := range d.Zones {
		name, prefix, ok := strings.Cut(z, "=")
		if !ok {
			prefix = keys.DefaultPrefix
		}
		prefix, mode, _ := strings.Cut(prefix, ":")
		if strings.TrimSpace(prefix) == "" {
			prefix = keys.DefaultPrefix
		}
		switch strings.TrimSpace(mode) {
		case "", "etcdns", "skydns":
		default:
			return nil, fmt.Errorf("dnsd.zones: %q: mode %q: want skydns or etcdns", z, mode)
		}
		n, err := keys.CanonicalName(strings.TrimSpace(name))
		if err != nil {
			return nil, fmt.Errorf("dnsd.zones: %q: %w", z, err)
		}
		if err := keys.CheckPrefix(strings.TrimSpace(prefix)); err != nil {
			return nil, fmt.Errorf("dnsd.zones: %q: %w", z, err)
		}
		if seen[n] {
			return nil, fmt.Errorf("dnsd.zones: zone %q listed twice", n)
		}
		seen[n] = true
		out = append(out, Zone{Name: n, Prefix: strings.TrimSpace(prefix), SkyDNS: strings.TrimSpace(mode) == "skydns"})
	}
	if len(out) == 0 {
		return nil, errors.New("dnsd.zones: at least one zone is needed")
	}
	return out, nil
}

// Files is the directory of a files:<dir> source, or "" for kubernetes.
func (p Publisher) Files() string {
	dir, _ := strings.CutPrefix(p.Source, "files:")
	if dir == p.Source {
		return ""
	}
	return dir
}

// Loader binds a program's flags to the settings it uses.
type Loader struct {
	v        *viper.Viper
	sections []string
	file     *string
	fs       *pflag.FlagSet
}

// NewLoader registers --config and one flag per setting of the given
// top-level sections of config.yaml, documented with the file's comments.
func NewLoader(fs *pflag.FlagSet, sections ...string) *Loader {
	l := &Loader{v: viper.New(), sections: sections, fs: fs}
	l.file = fs.String("config", "", "configuration file (YAML, the keys of config.yaml); ETCDNS_CONFIG also works")
	for _, s := range Settings() {
		if !l.uses(s.Key) {
			continue
		}
		addFlag(fs, s)
		_ = l.v.BindPFlag(s.Key, fs.Lookup(s.Key))
	}
	return l
}

// addFlag registers a setting's flag with its field's type, so --help
// shows int, duration or bool and a malformed value fails at parsing,
// naming the flag. Defaults are config.yaml's, compiled in: a default that
// does not parse as its type is a bug a test catches, hence the panic.
func addFlag(fs *pflag.FlagSet, s Setting) {
	bad := func(err error) {
		panic(fmt.Sprintf("config.yaml: %s: default %q: %v", s.Key, s.Default, err))
	}
	switch s.Type {
	case TypeList:
		fs.StringSlice(s.Key, s.List, s.Comment)
	case TypeBool:
		fs.Bool(s.Key, s.Default == "true", s.Comment)
	case TypeDuration:
		d, err := time.ParseDuration(s.Default)
		if err != nil {
			bad(err)
		}
		fs.Duration(s.Key, d, s.Comment)
	case TypeInt:
		n, err := strconv.Atoi(s.Default)
		if err != nil {
			bad(err)
		}
		fs.Int(s.Key, n, s.Comment)
	case TypeUint16:
		n, err := strconv.ParseUint(s.Default, 10, 16)
		if err != nil {
			bad(err)
		}
		fs.Uint16(s.Key, uint16(n), s.Comment)
	case TypeUint32:
		n, err := strconv.ParseUint(s.Default, 10, 32)
		if err != nil {
			bad(err)
		}
		fs.Uint32(s.Key, uint32(n), s.Comment)
	default:
		fs.String(s.Key, s.Default, s.Comment)
	}
}

// Alias lets a short flag name stand for a setting's full one, such as
// --dry-run for --publisher.dry-run. Help lists the full names only.
func (l *Loader) Alias(fs *pflag.FlagSet, aliases map[string]string) {
	fs.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if full, ok := aliases[name]; ok {
			return pflag.NormalizedName(full)
		}
		return pflag.NormalizedName(name)
	})
}

func (l *Loader) uses(key string) bool {
	for _, s := range l.sections {
		if strings.HasPrefix(key, s+".") {
			return true
		}
	}
	return false
}

// Load merges defaults, file, environment and flags, and validates the
// result. Call it after the flags are parsed.
func (l *Loader) Load() (*Config, error) {
	v := l.v
	v.SetConfigType("yaml")
	if err := v.ReadConfig(bytes.NewReader(etcdns.DefaultConfig)); err != nil {
		return nil, fmt.Errorf("built-in defaults: %w", err)
	}
	v.SetEnvPrefix("ETCDNS")
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_", "-", "_"))
	v.AutomaticEnv()
	// A variable set empty is an empty value, not an absent one, so that
	// a setting whose empty value is off (dnsd.metrics-listen) can be
	// turned off from the environment, and a list emptied.
	v.AllowEmptyEnv(true)
	if err := l.emptyEnv(); err != nil {
		return nil, err
	}
	file := *l.file
	if file == "" {
		file = v.GetString("config")
	}
	if file != "" {
		b, err := os.ReadFile(file)
		if err == nil {
			err = checkFile(b)
		}
		if err == nil {
			err = v.MergeConfig(bytes.NewReader(b))
		}
		if err != nil {
			return nil, fmt.Errorf("config file %s: %w", file, err)
		}
	}
	var c Config
	err := v.UnmarshalExact(&c, func(dc *mapstructure.DecoderConfig) {
		dc.DecodeHook = mapstructure.ComposeDecodeHookFunc(
			quotedText,
			exactNumbers,
			mapstructure.StringToTimeDurationHookFunc(),
			mapstructure.StringToSliceHookFunc(","),
		)
	})
	if err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	// A list from a flag or variable is split at commas only: "apps, shop"
	// gave " shop", and no namespace has that name.
	for i, ns := range c.Publisher.Namespaces {
		c.Publisher.Namespaces[i] = strings.TrimSpace(ns)
	}
	if err := c.Validate(l.sections...); err != nil {
		return nil, err
	}
	return &c, nil
}

// emptyEnv refuses an empty variable for a number, duration or bool,
// which have no empty value: decoded, it would be 0 or false (dnsd.ttl
// 0, dnsd.rotate off), not the default a user who cleared it expects. A
// flag given for the setting wins over it, as over any variable.
func (l *Loader) emptyEnv() error {
	var errs []error
	for _, s := range Settings() {
		if !l.uses(s.Key) || s.Type == TypeString || s.Type == TypeList {
			continue
		}
		if f := l.fs.Lookup(s.Key); f != nil && f.Changed {
			continue
		}
		if val, ok := os.LookupEnv(s.Env()); ok && strings.TrimSpace(val) == "" {
			errs = append(errs, fmt.Errorf("%s: %s is set but empty; give %s, or unset it for the default (%s)", s.Key, s.Env(), emptyWant[s.Type], s.Default))
		}
	}
	return errors.Join(errs...)
}

var emptyWant = map[Type]string{
	TypeBool:     "true or false",
	TypeInt:      "a whole number",
	TypeUint16:   "a whole number",
	TypeUint32:   "a whole number",
	TypeDuration: "a duration such as 5s",
}

var durationType = reflect.TypeFor[time.Duration]()

// quotedText refuses a file's unquoted number, bool or date for a text
// setting (a list's entries too). YAML reads it as that type, and what was
// written is gone before it reaches a string: cluster.id 012 became "10",
// an etcd.password 0123456 "42798", 0x1f "31", true "1". The value is not
// shown: the setting may be the password.
func quotedText(_, to reflect.Type, data any) (any, error) {
	if to.Kind() != reflect.String {
		return data, nil
	}
	var what string
	switch data.(type) {
	case bool:
		what = "a bool (true would be read as 1)"
	case int, int64, uint64, float64:
		what = "a number (012 would be read as 10)"
	case time.Time:
		what = "a timestamp"
	default:
		return data, nil
	}
	return nil, fmt.Errorf("is text, but the file's unquoted value is %s in YAML, not read as written: quote it", what)
}

// exactNumbers refuses a number from the file that its setting's type
// cannot hold as written. viper decodes weakly, so that the environment's
// strings convert (and those it range-checks); a file's numbers it bent
// instead: -1 for a uint32 became 4294967295, 70000 for a uint16 4464,
// 2.7 for an integer 2, and a duration without a unit (10) that many
// nanoseconds. 0 is a duration, as time.ParseDuration has it.
func exactNumbers(_, to reflect.Type, data any) (any, error) {
	var n int64
	switch v := data.(type) {
	case int:
		n = int64(v)
	case int64:
		n = v
	case uint64:
		if v > math.MaxInt64 {
			if to.Kind() == reflect.Uint64 {
				return data, nil
			}
			return nil, fmt.Errorf("%d is out of range", v)
		}
		n = int64(v)
	case float64:
		switch to.Kind() {
		case reflect.Float32, reflect.Float64, reflect.String, reflect.Interface:
			return data, nil
		}
		if v != math.Trunc(v) || math.Abs(v) >= math.MaxInt64 {
			return nil, fmt.Errorf("%v is not a whole number", v)
		}
		n = int64(v)
	default:
		return data, nil
	}
	switch {
	case to == durationType:
		if n != 0 {
			return nil, fmt.Errorf("%d has no unit: write a duration such as %ds or %dms", n, n, n)
		}
	case to.Kind() >= reflect.Int && to.Kind() <= reflect.Int64:
		if bits := to.Bits(); bits < 64 && (n < -1<<(bits-1) || n > 1<<(bits-1)-1) {
			return nil, fmt.Errorf("%d is out of range", n)
		}
	case to.Kind() >= reflect.Uint && to.Kind() <= reflect.Uint64:
		if n < 0 {
			return nil, fmt.Errorf("%d is negative", n)
		}
		if bits := to.Bits(); bits < 64 && uint64(n) >= 1<<bits {
			return nil, fmt.Errorf("%d is out of range", n)
		}
	}
	return data, nil
}

// Validate checks the sections a program uses, naming the key at fault.
func (c *Config) Validate(sections ...string) error {
	uses := func(s string) bool {
		for _, x := range sections {
			if x == s {
				return true
			}
		}
		return false
	}
	var errs []error
	bad := func(key string, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, a...)))
	}
	if uses("etcd") {
		for _, e := range c.Etcd.Endpoints {
			checkEtcdURL(bad, "etcd.endpoints", e, "http", "https")
		}
		if c.Etcd.DialTimeout <= 0 {
			bad("etcd.dial-timeout", "must be positive")
		}
		if c.Etcd.RequestTimeout <= 0 {
			bad("etcd.request-timeout", "must be positive")
		}
		if (c.Etcd.CertFile == "") != (c.Etcd.KeyFile == "") {
			bad("etcd.cert-file", "cert-file and key-file go together")
		}
		// A login needs both (etcdclient's tokensFor): either alone was
		// dropped, and the client ran as no user while the log named one.
		// Without a password a client certificate is the login: etcd takes
		// its CN as the user. The password is never shown.
		switch {
		case c.Etcd.Password != "" && c.Etcd.Username == "":
			bad("etcd.password", "set (ETCDNS_ETCD_PASSWORD, --etcd.password or the file), but etcd.username is empty, so no login would be made; set etcd.username (ETCDNS_ETCD_USERNAME)")
		case c.Etcd.Username != "" && c.Etcd.Password == "" && c.Etcd.CertFile == "":
			bad("etcd.username", "%q has no password, so no login would be made; give it as ETCDNS_ETCD_PASSWORD (or etcd.password), or log in with a client certificate (etcd.cert-file), whose CN etcd takes as the user", c.Etcd.Username)
		}
		// clientv3 dials an http:// endpoint in cleartext whatever TLS
		// files it is given: the password and every record would cross
		// unencrypted while the files said otherwise.
		if c.Etcd.CAFile != "" || c.Etcd.CertFile != "" {
			if len(c.Etcd.Endpoints) == 0 {
				bad("etcd.endpoints", "empty, so etcd.embedded.client-url %s is dialled, without TLS, yet etcd.ca-file or etcd.cert-file asks for TLS; list the etcd's https:// URLs", redactURL(c.Etcd.Embedded.ClientURL))
			}
			for _, e := range c.Etcd.Endpoints {
				if u, err := url.Parse(e); err == nil && u.Scheme == "http" {
					bad("etcd.endpoints", "%q is dialled without TLS, yet etcd.ca-file or etcd.cert-file asks for TLS; write https://", redactURL(e))
				}
			}
		}
		checkEtcdURL(bad, "etcd.embedded.client-url", c.Etcd.Embedded.ClientURL, "http")
		checkEtcdURL(bad, "etcd.embedded.peer-url", c.Etcd.Embedded.PeerURL, "http")
	}
	if uses("cluster") {
		if c.Cluster.ID != "" && !keys.IsLabel(c.Cluster.ID) {
			bad("cluster.id", "%q is not a lowercase DNS label", c.Cluster.ID)
		}
		if _, err := keys.CanonicalName(c.Cluster.Domain); err != nil {
			bad("cluster.domain", "%v", err)
		}
		switch c.Cluster.Pods {
		case PodsInsecure, PodsVerified, PodsDisabled:
		default:
			bad("cluster.pods", "%q: want insecure, verified or disabled", c.Cluster.Pods)
		}
		if fd := c.Cluster.FederationDomain; fd != "" {
			n, err := keys.CanonicalName(fd)
			if err != nil {
				bad("cluster.federation-domain", "%v", err)
			}
			// Nested zones would share the publisher's etcd ranges and
			// make federated names look like cluster names.
			cd, _ := keys.CanonicalName(c.Cluster.Domain)
			for _, z := range []string{cd, "clusterset.local"} {
				if err == nil && z != "" && (keys.IsSubdomain(n, z) || keys.IsSubdomain(z, n)) {
					bad("cluster.federation-domain", "%q overlaps %s; pick a zone of its own", fd, z)
				}
			}
		}
	}
	if uses("publisher") {
		p := c.Publisher
		if p.Source != "kubernetes" && p.Files() == "" {
			bad("publisher.source", "%q: want kubernetes or files:<dir>", p.Source)
		}
		if err := keys.CheckPrefix(p.Prefix); err != nil {
			bad("publisher.prefix", "%v", err)
		}
		if err := keys.CheckPrefix(p.ReversePrefix); err != nil {
			bad("publisher.reverse-prefix", "%v", err)
		}
		if err := keys.CheckPrefix(p.ClustersetPrefix); err != nil {
			bad("publisher.clusterset-prefix", "%v", err)
		}
		seen := map[string]bool{}
		for _, ns := range p.Namespaces {
			switch {
			case !isNamespace(ns):
				bad("publisher.namespaces", "%q is not a namespace name (a lowercase RFC 1123 label: a-z, 0-9 and '-', at most 63)", ns)
			case seen[ns]:
				bad("publisher.namespaces", "%q listed twice", ns)
			}
			seen[ns] = true
		}
		if ns, name, ok := strings.Cut(p.DNSService, "/"); p.DNSService != "" && (!ok || !keys.IsLabel(ns) || !keys.IsLabel(name)) {
			bad("publisher.dns-service", "%q is not namespace/name", p.DNSService)
		} else if p.DNSService != "" && len(p.Namespaces) > 0 && !slices.Contains(p.Namespaces, ns) {
			// The publisher watches those namespaces only: it would never
			// see the Service, and write no address for ns.dns.
			bad("publisher.dns-service", "%q is in namespace %s, which publisher.namespaces leaves out; add it there", p.DNSService, ns)
		}
		if p.Federation != "" && !keys.IsLabel(p.Federation) {
			bad("publisher.federation", "%q is not a lowercase DNS label", p.Federation)
		}
		if p.Federation != "" && c.Cluster.FederationDomain == "" {
			bad("publisher.federation", "%q needs cluster.federation-domain", p.Federation)
		}
		if err := keys.CheckPrefix(p.FederationPrefix); err != nil {
			bad("publisher.federation-prefix", "%v", err)
		}
		checkListen(bad, "publisher.metrics-listen", p.MetricsListen)
		if p.StubAPIListen != "" {
			checkListen(bad, "publisher.stub-api-listen", p.StubAPIListen)
			// No TLS, or TLS without client certificates, would let anyone
			// who reaches the port point a cluster's names anywhere.
			for _, f := range []struct{ key, file string }{
				{"publisher.stub-api-cert-file", p.StubAPICertFile},
				{"publisher.stub-api-key-file", p.StubAPIKeyFile},
				{"publisher.stub-api-client-ca-file", p.StubAPIClientCAFile},
			} {
				if f.file == "" {
					bad(f.key, "required with publisher.stub-api-listen")
				}
			}
			if c.Cluster.FederationDomain == "" {
				bad("publisher.stub-api-listen", "needs cluster.federation-domain: stub domains are <name>.svc.<cluster.federation-domain>")
			}
		}
		if p.LeaseTTL < 2*time.Second {
			bad("publisher.lease-ttl", "%s: at least 2s", p.LeaseTTL)
		}
		if p.WriteTimeout <= 0 {
			bad("publisher.write-timeout", "%s: must be positive", p.WriteTimeout)
		}
		if p.MaxTxnOps < 2 {
			bad("publisher.max-txn-ops", "%d: at least 2", p.MaxTxnOps)
		}
		if p.MaxTxnBytes < 4096 || p.MaxTxnBytes > MaxTxnBytes {
			bad("publisher.max-txn-bytes", "%d: 4096 to %d, the largest request clientv3 sends (etcd's default --max-request-bytes is 1572864)", p.MaxTxnBytes, MaxTxnBytes)
		}
		checkTTL(bad, "publisher.ttl", p.TTL)
	}
	if uses("dnsd") {
		d := c.Dnsd
		if _, _, err := net.SplitHostPort(d.Listen); err != nil {
			bad("dnsd.listen", "%q: %v", d.Listen, err)
		}
		if d.TCPIdleTimeout <= 0 {
			bad("dnsd.tcp-idle-timeout", "%s: must be positive", d.TCPIdleTimeout)
		}
		if d.TCPMaxConnections < 1 {
			bad("dnsd.tcp-max-connections", "%d: at least 1", d.TCPMaxConnections)
		}
		if d.WatchProgressInterval <= 0 {
			bad("dnsd.watch-progress-interval", "%s: must be positive", d.WatchProgressInterval)
		}
		// A timeout within one interval would drop a healthy stream before
		// its answer to the progress request had time to come.
		if d.WatchProgressTimeout <= d.WatchProgressInterval {
			bad("dnsd.watch-progress-timeout", "%s: must be longer than dnsd.watch-progress-interval (%s)", d.WatchProgressTimeout, d.WatchProgressInterval)
		}
		if d.WatchLagProbe < 0 {
			bad("dnsd.watch-lag-probe-interval", "%s: must not be negative (0 turns the check off)", d.WatchLagProbe)
		}
		if d.WatchLagProbe > 0 && d.WatchMaxLag <= 0 {
			bad("dnsd.watch-max-lag", "%s: must be positive", d.WatchMaxLag)
		}
		// Checked once a quiet interval, with a read every half of it.
		if d.WatchProxyMaxLag < 0 || d.WatchProxyMaxLag > 0 && d.WatchProxyMaxLag < 2*d.WatchProgressInterval {
			bad("dnsd.watch-proxy-max-lag", "%s: 0 (off) or at least twice dnsd.watch-progress-interval (%s)", d.WatchProxyMaxLag, d.WatchProgressInterval)
		}
		// Coalescing holds back what the watch clients read, the liveness
		// and lag probes' answers too: each check must keep most of its
		// time, or a healthy stream would be dropped.
		if d.WatchCoalesce < 0 {
			bad("dnsd.watch-coalesce", "%s: must not be negative (0 reads each change as it comes)", d.WatchCoalesce)
		} else if d.WatchCoalesce > 0 {
			type limit struct {
				name string
				d    time.Duration
			}
			limits := []limit{{"what a liveness probe is given (dnsd.watch-progress-timeout less dnsd.watch-progress-interval)", d.WatchProgressTimeout - d.WatchProgressInterval}}
			if d.WatchLagProbe > 0 {
				limits = append(limits, limit{"dnsd.watch-max-lag", d.WatchMaxLag}, limit{"dnsd.watch-lag-probe-interval", d.WatchLagProbe})
			}
			for _, l := range limits {
				if l.d > 0 && 2*d.WatchCoalesce > l.d {
					bad("dnsd.watch-coalesce", "%s: at most half of %s, %s", d.WatchCoalesce, l.name, l.d)
					break
				}
			}
		}
		if d.StartJitter < 0 {
			bad("dnsd.start-jitter", "%s: must not be negative", d.StartJitter)
		}
		if d.PageSize < 1 {
			bad("dnsd.page-size", "%d: must be at least 1", d.PageSize)
		}
		if zones, err := d.ParsedZones(); err != nil {
			errs = append(errs, err)
		} else if uses("cluster") {
			checkClusterZone(bad, c.Cluster.Domain, zones)
		}
		checkListen(bad, "dnsd.metrics-listen", d.MetricsListen)
		for _, c := range d.QueryLog {
			if !slices.Contains(QueryLogClasses, strings.ToLower(strings.TrimSpace(c))) {
				bad("dnsd.query-log", "%q: want some of %s", c, strings.Join(QueryLogClasses, ", "))
			}
		}
		checkSOANames(bad, d)
		checkTTL(bad, "dnsd.ttl", d.TTL)
		checkTTL(bad, "dnsd.soa-ttl", d.SOATTL)
		checkTTL(bad, "dnsd.soa-minimum", d.SOAMinimum)
		checkTTL(bad, "dnsd.forward-max-ttl", d.ForwardMaxTTL)
		if _, err := d.ParsedUpstreams(); err != nil {
			errs = append(errs, err)
		}
		if d.ForwardTimeout <= 0 {
			bad("dnsd.forward-timeout", "must be positive")
		}
		if d.ForwardCache < 0 {
			bad("dnsd.forward-cache", "%d: at least 0", d.ForwardCache)
		}
		if d.SourceClusterOption < LocalOptionMin || d.SourceClusterOption > LocalOptionMax {
			bad("dnsd.source-cluster-option", "%d: want a local-use code, %d-%d", d.SourceClusterOption, LocalOptionMin, LocalOptionMax)
		}
		if _, err := d.ParsedInternalClients(); err != nil {
			errs = append(errs, err)
		}
		checkAutopath(bad, d)
		if allow, err := d.ParsedForwardAllow(); err != nil {
			errs = append(errs, err)
		} else if d.Forward && len(allow) == 0 {
			bad("dnsd.forward-allow", "empty: no client could use forwarding; set dnsd.forward to false instead")
		}
	}
	return errors.Join(errs...)
}

// QueryLogClasses are the classes of answers dnsd.query-log may name, as
// CoreDNS's log plugin names them (server.ParseLogClasses reads them).
var QueryLogClasses = []string{"all", "success", "denial", "error"}

// apZone is the autopath pseudo-zone (server/answer.ApZone).
const apZone = "ap.k8s.io"

func checkAutopath(bad func(string, string, ...any), d Dnsd) {
	if c := d.AutopathOptionCode; c < LocalOptionMin || c > LocalOptionMax {
		bad("dnsd.autopath-option-code", "%d: want a local-use code, %d-%d", c, LocalOptionMin, LocalOptionMax)
	}
	if d.AutopathOption && d.AutopathOptionCode == d.SourceClusterOption {
		bad("dnsd.autopath-option-code", "%d is dnsd.source-cluster-option too", d.AutopathOptionCode)
	}
	if !d.AutopathSuffix {
		return
	}
	zones, _ := d.ParsedZones()
	for _, z := range zones {
		// The pseudo-zone would hide the zone's names, or the zone its own.
		if keys.IsSubdomain(z.Name, apZone) || keys.IsSubdomain(apZone, z.Name) {
			bad("dnsd.autopath-suffix", "dnsd.zones serves %s, which overlaps %s", z.Name, apZone)
		}
	}
}

// checkEtcdURL refuses what of an etcd URL would be dropped unseen:
// clientv3 and the embedded etcd take its scheme and host only. A user and
// password in it are never sent (the client runs without auth), yet the
// URL is logged and, as an endpoint, a label of dnsd's metrics; a path, a
// query or a fragment says something etcd never hears. A bare "/" says
// nothing, and an endpoint copied from a browser has one.
func checkEtcdURL(bad func(string, string, ...any), key, raw string, schemes ...string) {
	want := "http"
	if slices.Contains(schemes, "https") {
		want = "http(s)"
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || !slices.Contains(schemes, u.Scheme) || u.Host == "" || u.Opaque != "":
		bad(key, "%q is not an %s URL (scheme://host:port)", redactURL(raw), want)
	case u.User != nil:
		bad(key, "%q has a user or password in it, which is never sent to etcd: give them as etcd.username and ETCDNS_ETCD_PASSWORD (or etcd.password)", redactURL(raw))
	case u.Path != "" && u.Path != "/", u.RawQuery != "" || u.ForceQuery, u.Fragment != "":
		bad(key, "%q: etcd reads the scheme, host and port of a URL only; leave off the path, query and fragment", redactURL(raw))
	}
}

// redactURL is raw for an error message, a password in it replaced, also
// where raw does not parse as a URL (root:pw@host:2379 parses with the
// scheme root).
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Opaque == "" {
		return u.Redacted()
	}
	at := strings.LastIndex(raw, "@")
	if at < 0 {
		return raw
	}
	start := 0
	if i := strings.Index(raw, "://"); i >= 0 && i < at {
		start = i + len("://")
	}
	return raw[:start] + "xxxxx" + raw[at:]
}

// checkClusterZone refuses a dnsd that serves etcdns zones but not the
// cluster domain: the publisher writes the cluster's names under
// cluster.domain, and dnsd would answer none of them (REFUSED, or sent
// upstream). A dnsd of SkyDNS zones only serves another writer's data
// (docs/skydns.md), whatever the cluster domain is.
func checkClusterZone(bad func(string, string, ...any), domain string, zones []Zone) {
	cd, err := keys.CanonicalName(domain)
	if err != nil {
		return // cluster.domain's own error says why
	}
	etcdns := false
	for _, z := range zones {
		if z.Name == cd {
			return
		}
		etcdns = etcdns || !z.SkyDNS
	}
	if etcdns {
		bad("dnsd.zones", "no zone is cluster.domain %s, so dnsd would answer none of the cluster's names the publisher writes there; add %s=<publisher.prefix> to dnsd.zones, or set cluster.domain to the domain the cluster uses", cd, cd)
	}
}

// checkSOANames checks dnsd.soa-mname and dnsd.soa-rname as they are
// used: joined to each zone's name (server/answer, server/skydns). A
// trailing dot would make an empty label there, and a name too long for
// one zone a record that cannot be packed: every SOA and negative answer
// of the zone would be SERVFAIL.
func checkSOANames(bad func(string, string, ...any), d Dnsd) {
	zones, _ := d.ParsedZones() // its errors are reported on their own
	for _, s := range []struct{ key, name string }{{"dnsd.soa-mname", d.SOAMname}, {"dnsd.soa-rname", d.SOARname}} {
		if strings.HasSuffix(s.name, ".") {
			bad(s.key, "%q ends in a dot, but it is a name relative to each zone of dnsd.zones (ns.dns is ns.dns.<zone>); leave the dot off", s.name)
			continue
		}
		if _, err := keys.CanonicalName(s.name); err != nil {
			bad(s.key, "%v", err)
			continue
		}
		for _, z := range zones {
			if _, err := keys.CanonicalName(s.name + "." + z.Name); err != nil {
				bad(s.key, "%q joined to zone %s: %v", s.name, z.Name, err)
			}
		}
	}
}

// isNamespace reports whether s can name a Kubernetes namespace: an RFC
// 1123 label, as the API server requires. One it could not name selects
// nothing, and the publisher would publish nothing of it without a word.
func isNamespace(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if b := s[i]; !(b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '-') {
			return false
		}
	}
	return true
}

func checkTTL(bad func(string, string, ...any), key string, ttl uint32) {
	if ttl > MaxTTL {
		bad(key, "%d: at most %d (RFC 2181 section 8: a larger TTL is read as 0)", ttl, MaxTTL)
	}
}

func checkListen(bad func(string, string, ...any), key, addr string) {
	if addr == "" {
		return
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		bad(key, "%q: %v", addr, err)
	}
}

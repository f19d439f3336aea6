package config

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/etcdns/etcdns"
)

// Kind is how a setting is given on the command line.
type Kind int

const (
	KindScalar Kind = iota
	KindBool
	KindList
)

// Setting is one leaf of config.yaml.
type Setting struct {
	Key     string // dotted path: etcd.dial-timeout
	Kind    Kind
	Default string   // scalar default as written
	List    []string // list default
	Comment string   // the line comment: what the setting does
	Type    Type     // the Config field's type: how the flag parses and --help shows it
}

// Type is a setting's value type, read from its field in Config, so a new
// setting needs no more than its field and its line in config.yaml.
type Type string

const (
	TypeString   Type = "string"
	TypeBool     Type = "bool"
	TypeInt      Type = "int"
	TypeUint16   Type = "uint16"
	TypeUint32   Type = "uint32"
	TypeDuration Type = "duration"
	TypeList     Type = "strings"
)

// fieldTypes maps each dotted key to the type of the Config field that
// reads it.
func fieldTypes() map[string]Type {
	out := map[string]Type{}
	durationType := reflect.TypeOf(time.Duration(0))
	var walk func(prefix string, typ reflect.Type)
	walk = func(prefix string, typ reflect.Type) {
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			key := prefix + f.Tag.Get("mapstructure")
			switch {
			case f.Type == durationType:
				out[key] = TypeDuration
			case f.Type.Kind() == reflect.Struct:
				walk(key+".", f.Type)
			case f.Type.Kind() == reflect.Slice:
				out[key] = TypeList
			case f.Type.Kind() == reflect.Bool:
				out[key] = TypeBool
			case f.Type.Kind() == reflect.Int:
				out[key] = TypeInt
			case f.Type.Kind() == reflect.Uint16:
				out[key] = TypeUint16
			case f.Type.Kind() == reflect.Uint32:
				out[key] = TypeUint32
			default:
				// Strings, and any type without a flag of its own: a
				// string flag, decoded into the field as before.
				out[key] = TypeString
			}
		}
	}
	walk("", reflect.TypeOf(Config{}))
	return out
}

// Env is the environment variable of a setting.
func (s Setting) Env() string {
	return "ETCDNS_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(s.Key))
}

// Settings reads config.yaml's leaves in file order, so flags, --help, the
// configuration reference and the tests all come from the one file.
func Settings() []Setting {
	var root yaml.Node
	if err := yaml.Unmarshal(etcdns.DefaultConfig, &root); err != nil {
		panic(fmt.Sprintf("config.yaml: %v", err)) // compiled in; a test parses it
	}
	types := fieldTypes()
	var out []Setting
	var walk func(prefix string, n *yaml.Node)
	walk = func(prefix string, n *yaml.Node) {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			key := prefix + k.Value
			comment := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(k.LineComment+" "+v.LineComment), "#"))
			switch v.Kind {
			case yaml.MappingNode:
				walk(key+".", v)
			case yaml.SequenceNode:
				s := Setting{Key: key, Kind: KindList, Comment: comment, Type: TypeList}
				for _, e := range v.Content {
					s.List = append(s.List, e.Value)
				}
				out = append(out, s)
			default:
				kind := KindScalar
				if v.Tag == "!!bool" {
					kind = KindBool
				}
				typ := types[key]
				if typ == "" {
					// A leaf no field reads: Load rejects it and a test names it.
					typ = TypeString
				}
				out = append(out, Setting{Key: key, Kind: kind, Default: v.Value, Comment: comment, Type: typ})
			}
		}
	}
	walk("", root.Content[0])
	return out
}

// checkFile refuses what viper's merge of a file over the defaults would
// lose without a word. A section given a value instead of settings (etcd:
// http://10.1.2.3:2379) is skipped, leaving its defaults; two keys that
// differ only in case are one setting to viper, and which of their values
// it keeps depends on a map's order.
func checkFile(b []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return err
	}
	if len(doc.Content) == 0 || isNull(doc.Content[0]) {
		return nil // empty, or comments only: the defaults
	}
	sections := map[string]string{} // dotted section: its first setting, for the example
	for _, s := range Settings() {
		for i := strings.LastIndex(s.Key, "."); i > 0; i = strings.LastIndex(s.Key[:i], ".") {
			if _, ok := sections[s.Key[:i]]; !ok {
				sections[s.Key[:i]] = s.Key[i+1:]
			}
		}
	}
	root := deref(doc.Content[0])
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: want the sections as keys (etcd:, cluster:, publisher:, dnsd:), each with its settings under it", root.Line)
	}
	var errs []error
	var walk func(prefix string, m *yaml.Node)
	walk = func(prefix string, m *yaml.Node) {
		seen := map[string]*yaml.Node{}
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, val := m.Content[i], deref(m.Content[i+1])
			if k.Value == "<<" {
				continue // a merge key: its mapping's keys are checked where it is defined
			}
			lk := strings.ToLower(k.Value)
			if prev, ok := seen[lk]; ok {
				errs = append(errs, fmt.Errorf("%s%s (line %d) and %s%s (line %d) are the same key, as keys ignore case: keep one", prefix, prev.Value, prev.Line, prefix, k.Value, k.Line))
				continue
			}
			seen[lk] = k
			key := prefix + lk
			first, isSection := sections[key]
			switch {
			case !isSection || isNull(val):
			case val.Kind == yaml.MappingNode:
				walk(key+".", val)
			default:
				errs = append(errs, fmt.Errorf("%s (line %d): a section, given a value instead of settings, which would be ignored for the defaults: put its settings on the lines under it, indented, as config.yaml does (%q, then %q)", key, k.Line, k.Value+":", "  "+first+": ..."))
			}
		}
	}
	walk("", root)
	return errors.Join(errs...)
}

// deref follows a YAML alias (*name) to the node it names.
func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// isNull is a key given nothing (dnsd: with every setting commented out),
// which the merge skips as it should: the defaults stand.
func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// sections are config.yaml's top-level keys, the programs that read each
// (cmd/dnsd and cmd/publisher pass them to NewLoader) and what it is about.
var sections = []struct{ name, programs, about string }{
	{"etcd", "dnsd and publisher", "how both programs reach etcd, and the publisher's embedded etcd"},
	{"cluster", "dnsd and publisher", "the cluster the records describe"},
	{"publisher", "publisher", "what the publisher writes into etcd, and how"},
	{"dnsd", "dnsd", "what dnsd serves, and to whom"},
}

// typeNotes say how a value of each type is written.
var typeNotes = []struct {
	typ  Type
	note string
}{
	{TypeString, "text; in the file, quoted where YAML would read it as a number, bool or date (`id: \"012\"`)"},
	{TypeBool, "`true` or `false`; a bare flag (`--dnsd.rotate`) is true, `--dnsd.rotate=false` turns it off"},
	{TypeInt, "a whole number"},
	{TypeUint16, "a whole number, 0 to 65535"},
	{TypeUint32, "a whole number, 0 to 4294967295"},
	{TypeDuration, "a Go duration: `500ms`, `5s`, `1m30s`"},
	{TypeList, "a YAML list in the file; comma-separated in a flag (or a repeated flag) and in the environment"},
}

// Reference renders docs/configuration.md: every setting of config.yaml with
// its type, default, environment variable and comment. go generate ./config
// writes it; TestConfigurationDoc fails when the file differs.
func Reference() string {
	var b strings.Builder
	b.WriteString(`<!-- Generated by go generate ./config (make docs) from config.yaml and config/config.go. Do not edit. -->

# Configuration reference

Every setting is in [config.yaml](../config.yaml) with its default and a comment; this page is
generated from that file and the types of the fields in [config/config.go](../config/config.go)
that read it, so it cannot drift from what the programs accept.

Each setting is also a flag (` + "`--dnsd.listen`" + `) and an environment variable
(` + "`ETCDNS_DNSD_LISTEN`" + `: ETCDNS_, then the key upper-cased with dots and dashes as
underscores). A variable set empty is an empty value: a list empties, and a setting whose
empty value is off turns off; a number, duration or bool has none, and is an error. A flag wins
over the environment, which wins over a file given with ` + "`--config`" + `
(or ` + "`ETCDNS_CONFIG`" + `), which wins over the defaults. An unknown key or an invalid value stops
the program at start with a message that names the key. ` + "`dnsd --help`" + ` and ` + "`publisher --help`" + `
list the settings each program reads, with their types.

| type | how it is written |
|---|---|
`)
	for _, n := range typeNotes {
		fmt.Fprintf(&b, "| `%s` | %s |\n", n.typ, n.note)
	}
	all := Settings()
	for _, sec := range sections {
		fmt.Fprintf(&b, "\n## %s\n\nRead by %s: %s.\n\n", sec.name, sec.programs, sec.about)
		b.WriteString("| setting | type | default | environment | what it does |\n|---|---|---|---|---|\n")
		for _, s := range all {
			if !strings.HasPrefix(s.Key, sec.name+".") {
				continue
			}
			d := s.Default
			if s.Kind == KindList {
				d = strings.Join(s.List, ", ")
			}
			if d == "" {
				d = `""`
			}
			fmt.Fprintf(&b, "| `%s` | %s | `%s` | `%s` | %s |\n", s.Key, s.Type, d, s.Env(), escapeCell(s.Comment))
		}
	}
	return b.String()
}

// escapeCell keeps a comment's text in its table cell: a | would end it,
// and <ns> would read as an HTML tag.
func escapeCell(s string) string {
	return strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;").Replace(s)
}

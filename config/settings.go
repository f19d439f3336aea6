package config

import (
	"fmt"
	"strings"

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
}

// Env is the environment variable of a setting.
func (s Setting) Env() string {
	return "ETCDNS_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(s.Key))
}

// Settings reads config.yaml's leaves in file order, so flags, --help, the
// README table and the tests all come from the one file.
func Settings() []Setting {
	var root yaml.Node
	if err := yaml.Unmarshal(etcdns.DefaultConfig, &root); err != nil {
		panic(fmt.Sprintf("config.yaml: %v", err)) // compiled in; a test parses it
	}
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
				s := Setting{Key: key, Kind: KindList, Comment: comment}
				for _, e := range v.Content {
					s.List = append(s.List, e.Value)
				}
				out = append(out, s)
			default:
				kind := KindScalar
				if v.Tag == "!!bool" {
					kind = KindBool
				}
				out = append(out, Setting{Key: key, Kind: kind, Default: v.Value, Comment: comment})
			}
		}
	}
	walk("", root.Content[0])
	return out
}

// MarkdownTable renders the settings as the README's configuration table.
func MarkdownTable() string {
	var b strings.Builder
	b.WriteString("| setting | default | environment | what it does |\n|---|---|---|---|\n")
	for _, s := range Settings() {
		d := s.Default
		if s.Kind == KindList {
			d = strings.Join(s.List, ", ")
		}
		if d == "" {
			d = `""`
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | `%s` | %s |\n", s.Key, d, s.Env(), s.Comment)
	}
	return b.String()
}

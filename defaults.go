// Package etcdns holds what the whole module shares at its root: the default
// configuration, which is config.yaml itself, so the file a user reads and
// the defaults the programs use can never drift apart.
package etcdns

import _ "embed"

// DefaultConfig is config.yaml: every setting, its default and its comment.
//
//go:embed config.yaml
var DefaultConfig []byte

// Version is set at build time (-ldflags "-X github.com/etcdns/etcdns.Version=v1.2.3").
var Version = "dev"

// Package config loads the settings of both programs: config.yaml's defaults,
// then a --config file, then ETCDNS_ environment variables, then flags. It
// only reads and validates; it must not start anything.
//
// A setting is a leaf of config.yaml (default and comment) and a field of
// Config (its type). docs/configuration.md is generated from both:
// after adding or changing a setting, run go generate ./config (make docs).
package config

//go:generate go run ./gendoc ../docs/configuration.md

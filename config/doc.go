// Package config loads the settings of both programs: config.yaml's defaults,
// then a --config file, then ETCDNS_ environment variables, then flags. It
// only reads and validates; it must not start anything.
package config

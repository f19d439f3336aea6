package main

import (
	"bytes"
	"context"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/etcdns/etcdns/config"
	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/keys/kube"
	"github.com/etcdns/etcdns/publisher"
	"github.com/etcdns/etcdns/publisher/source"
)

var update = flag.Bool("update", false, "rewrite examples/*.records from the current output")

// TestDryRunExamples pins what --dry-run prints for examples/: the records
// `make run` publishes, reviewable line by line in examples/*.records.
func TestDryRunExamples(t *testing.T) {
	for _, c := range []struct {
		golden string
		pods   config.PodMode
	}{
		{"dry-run.records", config.PodsInsecure},
		{"dry-run-verified-pods.records", config.PodsVerified},
	} {
		t.Run(string(c.pods), func(t *testing.T) {
			b, err := kube.NewBuilder(keys.Layout{Prefix: "/skydns", ReversePrefix: "/skydns", Cluster: "local", TTL: 5}, "cluster.local")
			if err != nil {
				t.Fatal(err)
			}
			pods := c.pods == config.PodsVerified
			f, _ := publisher.NewFilter(nil, "", pods)
			src := source.NewFiles("../../examples", pods, slog.Default())
			var out bytes.Buffer
			if err := dryRun(context.Background(), b, src, f, &out, slog.Default()); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("../../examples", c.golden)
			if *update {
				if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test ./cmd/publisher -update writes it)", err)
			}
			if !bytes.Equal(out.Bytes(), want) {
				t.Errorf("--dry-run output differs from %s:\n%s", path, out.String())
			}
		})
	}
}

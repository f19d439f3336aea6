package main

import (
	"bytes"
	"context"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/etcdns/etcdns/config"
	"github.com/etcdns/etcdns/publisher"
	"github.com/etcdns/etcdns/publisher/source"
)

var update = flag.Bool("update", false, "rewrite examples/*.records from the current output")

// TestDryRunExamples pins what --dry-run prints for examples/: the records
// `make run` publishes, reviewable line by line in examples/*.records.
func TestDryRunExamples(t *testing.T) {
	for _, c := range []struct {
		golden     string
		pods       config.PodMode
		clusterset bool
		federation string
	}{
		{"dry-run.records", config.PodsInsecure, false, ""},
		{"dry-run-verified-pods.records", config.PodsVerified, false, ""},
		{"dry-run-clusterset.records", config.PodsInsecure, true, ""},
		{"dry-run-federation.records", config.PodsInsecure, false, "myfederation"},
	} {
		t.Run(c.golden, func(t *testing.T) {
			cfg := defaults(t)
			cfg.Cluster.Pods = c.pods
			cfg.Publisher.Clusterset = c.clusterset
			cfg.Publisher.Federation = c.federation
			pods := c.pods == config.PodsVerified
			f, _ := publisher.NewFilter(nil, "", pods)
			src := source.NewFiles("../../examples", pods, slog.Default())
			// The id comes from examples/cluster.yaml, as in `make run`.
			z, err := buildZones(context.Background(), cfg, src, slog.Default())
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := dryRun(context.Background(), z, src, f, &out, slog.Default()); err != nil {
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

func defaults(t *testing.T) *config.Config {
	t.Helper()
	l := config.NewLoader(pflag.NewFlagSet("t", pflag.ContinueOnError), "etcd", "cluster", "publisher")
	cfg, err := l.Load()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestClusterID: configured wins; without it the files source's
// ClusterProperty; an id that is not a DNS label stops the publisher.
func TestClusterID(t *testing.T) {
	src := source.NewFiles("../../examples", false, slog.Default())
	cfg := defaults(t)
	z, err := buildZones(context.Background(), cfg, src, slog.Default())
	if err != nil || z.Cluster.Cluster != "local" {
		t.Fatalf("from examples/cluster.yaml: %q, %v", z.Cluster.Cluster, err)
	}
	cfg.Cluster.ID = "east"
	if z, _ := buildZones(context.Background(), cfg, src, slog.Default()); z.Cluster.Cluster != "east" {
		t.Errorf("configured id lost to the ClusterProperty: %q", z.Cluster.Cluster)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "p.yaml"), []byte("apiVersion: about.k8s.io/v1alpha1\nkind: ClusterProperty\nmetadata: {name: id.k8s.io}\nspec: {value: Not_A_Label}\n"), 0o644)
	cfg.Cluster.ID = ""
	_, err = buildZones(context.Background(), cfg, source.NewFiles(dir, false, slog.Default()), slog.Default())
	if err == nil || !strings.Contains(err.Error(), `"Not_A_Label" (from ClusterProperty id.k8s.io) is not a lowercase DNS label`) {
		t.Errorf("bad id: %v", err)
	}
	_, err = buildZones(context.Background(), cfg, source.NewFiles(t.TempDir(), false, slog.Default()), slog.Default())
	if err == nil || !strings.Contains(err.Error(), "set cluster.id") {
		t.Errorf("no id anywhere: %v", err)
	}
}

// TestFederationZones: with a federation name the publisher reads and
// writes the shared federation tree too; without one it leaves it alone.
func TestFederationZones(t *testing.T) {
	src := source.NewFiles("../../examples", false, slog.Default())
	cfg := defaults(t)
	z, err := buildZones(context.Background(), cfg, src, slog.Default())
	if err != nil || z.Federation != nil {
		t.Fatalf("federation off by default: %+v, %v", z.Federation, err)
	}
	cfg.Publisher.Federation, cfg.Publisher.FederationPrefix = "myfederation", "/skydns-fed"
	if z, err = buildZones(context.Background(), cfg, src, slog.Default()); err != nil || z.Federation == nil {
		t.Fatalf("federation on: %v", err)
	}
	ranges, err := zoneRanges(z)
	if err != nil || !slices.Contains(ranges, "/skydns-fed/federation/") || !slices.Contains(ranges, "/skydns/local/cluster/") {
		t.Errorf("ranges %v, %v: want the federation tree next to the cluster's", ranges, err)
	}
	if name := z.Federation.ServiceName("shop", "web"); name != "web.shop.myfederation.svc.federation" {
		t.Errorf("federated name %s", name)
	}
}

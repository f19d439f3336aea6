// Command publisher watches Kubernetes (or a directory of manifests) and
// writes the DNS records of its objects into etcd in the keys layout.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/etcdns/etcdns"
	"github.com/etcdns/etcdns/config"
)

func main() {
	cmd := &cobra.Command{
		Use:   "publisher",
		Short: "Publish Kubernetes DNS records into etcd",
		Long: "Publish Kubernetes DNS records into etcd.\n\n" +
			"--source and --dry-run are short for --publisher.source and --publisher.dry-run:\n" +
			"  publisher --source files:examples --dry-run",
		Version:       etcdns.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
	}
	loader := config.NewLoader(cmd.Flags(), "etcd", "cluster", "publisher")
	loader.Alias(cmd.Flags(), map[string]string{"source": "publisher.source", "dry-run": "publisher.dry-run"})
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := loader.Load()
		if err != nil {
			return err
		}
		return run(cmd.Context(), cfg)
	}
	cmd.AddCommand(withdrawCommand())
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "publisher:", err)
		os.Exit(1)
	}
}

func withdrawCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "withdraw",
		Short: "Remove every record this cluster owns from etcd (the cluster leaves the set)",
		Long: "Remove every record cluster.id owns from the shared etcd: its cluster-local and reverse\n" +
			"trees and its shares of clusterset.local and the federation tree. Other clusters'\n" +
			"records are untouched.\n" +
			"Stop the cluster's publisher first; withdraw refuses to run while one leads.\n" +
			"With --dry-run it lists the keys it would remove. For a cluster that is already gone:\n" +
			"  publisher withdraw --cluster.id <id> --etcd.endpoints <url> [--publisher.prefix ...]",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
	}
	loader := config.NewLoader(cmd.Flags(), "etcd", "cluster", "publisher")
	loader.Alias(cmd.Flags(), map[string]string{"dry-run": "publisher.dry-run"})
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := loader.Load()
		if err != nil {
			return err
		}
		return withdraw(cmd.Context(), cfg, os.Stdout)
	}
	return cmd
}

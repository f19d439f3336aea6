// Command dnsd is the etcdns DNS frontend: it loads and watches the record
// prefixes in etcd, holds the records in memory and answers from memory.
package main

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/etcdns/etcdns"
	"github.com/etcdns/etcdns/config"
)

// gcPercent is dnsd's GOGC unless the environment sets one. Its heap is
// mostly one long-lived snapshot and a query allocates nothing, so garbage
// comes only from record changes: collecting at half the live heap, not
// Go's whole, costs little CPU and keeps the RSS of a large zone near its
// snapshot (bench/scale measures both).
const gcPercent = 50

// loadGCPercent is dnsd's GOGC until the first load is complete, under the
// same condition. The load's pages are garbage as soon as they are read,
// and at gcPercent the heap peaks at half the snapshot again by the end:
// collecting sooner keeps the peak RSS (what a node must have free for a
// frontend to start) near the snapshot, for a little more CPU while
// loading (bench/scale measures both).
const loadGCPercent = 25

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(loadGCPercent) // gcPercent once ready (run)
	}
	cmd := &cobra.Command{
		Use:           "dnsd",
		Short:         "Kubernetes DNS answered from memory, kept current by an etcd watch",
		Version:       etcdns.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
	}
	loader := config.NewLoader(cmd.Flags(), "etcd", "cluster", "dnsd")
	cmd.AddCommand(shadowCmd())
	cmd.CompletionOptions.DisableDefaultCmd = true
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := loader.Load()
		if err != nil {
			return err
		}
		return run(cmd.Context(), cfg)
	}
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "dnsd:", err)
		os.Exit(1)
	}
}

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
//
// It holds for the first load too. A load's pages are garbage once read,
// about twice the snapshot they make, and collecting at 25, as dnsd did
// until the load was complete, marked the growing snapshot again at every
// quarter's growth: at a million records bench/scale measured 2.8-3.2 s of
// dnsd CPU to ready against 2.2-2.6 s at 50, for a peak RSS of 290-305 MiB
// against 320-345 (bench/README.md).
const gcPercent = 50

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if err := command().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "dnsd:", err)
		os.Exit(1)
	}
}

// publisherOnly are settings of the etcd section that only the publisher
// reads: it starts the embedded etcd, which dnsd only dials.
var publisherOnly = []string{"etcd.embedded.data-dir", "etcd.embedded.peer-url"}

func command() *cobra.Command {
	cmd := &cobra.Command{
		Use:           "dnsd",
		Short:         "Kubernetes DNS answered from memory, kept current by an etcd watch",
		Version:       etcdns.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
	}
	loader := config.NewLoader(cmd.Flags(), "etcd", "cluster", "dnsd")
	for _, k := range publisherOnly {
		_ = cmd.Flags().MarkHidden(k) // still taken, as a shared config file has them
	}
	cmd.AddCommand(shadowCmd())
	cmd.CompletionOptions.DisableDefaultCmd = true
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := loader.Load()
		if err != nil {
			return err
		}
		return run(cmd.Context(), cfg)
	}
	return cmd
}

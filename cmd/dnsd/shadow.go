package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdns/etcdns/config"
	"github.com/etcdns/etcdns/etcdclient"
	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/shadow"
)

// shadowCmd is dnsd shadow: ask the cluster's current DNS (--a) and dnsd
// beside it (--b) the same questions and report every difference. It
// exits 1 when a difference that matters (rcode, missing or extra record,
// no answer) is found, so it can gate a switch-over.
func shadowCmd() *cobra.Command {
	var a, b, questions string
	var fromEtcd bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "shadow --a <current DNS> --b <dnsd> (--questions <file> | --from-etcd)",
		Short: "Ask two DNS servers the same questions and report every difference",
		Long: `shadow asks a (the DNS the cluster runs now) and b (dnsd beside it) each question and
prints every way b's answer differs from a's, one a line: rcode, missing (a record a
answers and b does not), extra (b answers a record a does not), ttl (the same records,
other TTLs), order (the same records in another order), failed (a server did not
answer). Questions come from a file, one "name [type]" a line ("-": standard input), or
with --from-etcd from the record keys under dnsd.zones in etcd (A and AAAA of each name,
SRV of service ports, PTR of reverse records). It exits 1 when a difference that matters
(anything but ttl and order) is found.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	loader := config.NewLoader(cmd.Flags(), "etcd", "cluster", "dnsd")
	cmd.Flags().StringVar(&a, "a", "", "address (host:port) of the reference server: the cluster's current DNS")
	cmd.Flags().StringVar(&b, "b", "", "address (host:port) of the server compared with it: dnsd")
	cmd.Flags().StringVar(&questions, "questions", "", `file of questions, one "name [type]" a line; "-" reads standard input`)
	cmd.Flags().BoolVar(&fromEtcd, "from-etcd", false, "ask about every name with records under dnsd.zones in etcd (etcd.* settings)")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Second, "how long each server has to answer one question")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if a == "" || b == "" {
			return errors.New("shadow: --a and --b are both needed")
		}
		if (questions == "") == !fromEtcd {
			return errors.New("shadow: give --questions or --from-etcd, one of them")
		}
		var qs []shadow.Question
		var err error
		if fromEtcd {
			cfg, lerr := loader.Load()
			if lerr != nil {
				return lerr
			}
			qs, err = questionsFromEtcd(cmd.Context(), cfg)
		} else {
			qs, err = readQuestions(questions)
		}
		if err != nil {
			return err
		}
		return report(cmd.OutOrStdout(), cmd.ErrOrStderr(), len(qs), shadow.Ask(cmd.Context(), a, b, qs, timeout))
	}
	return cmd
}

func readQuestions(path string) ([]shadow.Question, error) {
	var r io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	qs, err := shadow.ParseQuestions(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return qs, nil
}

// questionsFromEtcd reads the keys (not the values) under each zone's
// range and derives the questions from them.
func questionsFromEtcd(ctx context.Context, cfg *config.Config) ([]shadow.Question, error) {
	zones, err := cfg.Dnsd.ParsedZones()
	if err != nil {
		return nil, err
	}
	cli, err := etcdclient.Dial(ctx, cfg.Etcd, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	var qs []shadow.Question
	for _, z := range zones {
		zoneKey, err := keys.Key(z.Prefix, z.Name)
		if err != nil {
			return nil, err
		}
		rctx, cancel := context.WithTimeout(ctx, cfg.Etcd.RequestTimeout)
		resp, err := cli.Get(rctx, zoneKey+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		cancel()
		if err != nil {
			return nil, fmt.Errorf("reading the keys of %s: %w", z.Name, err)
		}
		ks := make([]string, len(resp.Kvs))
		for i, kv := range resp.Kvs {
			ks[i] = string(kv.Key)
		}
		qs = append(qs, shadow.FromKeys(z.Prefix, ks)...)
	}
	return qs, nil
}

// report prints each difference as "class<TAB>question<TAB>detail" and a
// summary, and returns an error when one matters.
func report(out, errOut io.Writer, asked int, diffs []shadow.Difference) error {
	matter := 0
	for _, d := range diffs {
		fmt.Fprintf(out, "%s\t%s\t%s\n", d.Class, d.Question, d.Detail)
		if d.Class.Matters() {
			matter++
		}
	}
	fmt.Fprintf(errOut, "shadow: %d questions, %d differences, %d that matter\n", asked, len(diffs), matter)
	if matter > 0 {
		return fmt.Errorf("%d differences that matter", matter)
	}
	return nil
}

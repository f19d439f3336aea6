package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcdns/etcdns/config"
	"github.com/etcdns/etcdns/etcdclient"
	"github.com/etcdns/etcdns/publisher"
	"github.com/etcdns/etcdns/publisher/elect"
	"github.com/etcdns/etcdns/publisher/etcdstore"
	"github.com/etcdns/etcdns/publisher/source"
)

// withdraw removes everything cluster.id owns: its cluster-local and
// reverse trees and its shares of clusterset.local and of the federation
// tree. The cluster's publisher must be stopped first (it would publish
// again); the withdrawal holds the cluster's election while it runs so
// none can start meanwhile.
func withdraw(ctx context.Context, cfg *config.Config, out io.Writer) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	p := cfg.Publisher
	if len(cfg.Etcd.Endpoints) == 0 {
		return errors.New("withdraw needs etcd.endpoints: the shared record store to remove the cluster from")
	}
	var src source.Source
	if cfg.Cluster.ID == "" {
		// The cluster may still be there to say who it is.
		s, err := newSource(p, false, log)
		if err != nil {
			return fmt.Errorf("cluster.id is empty and the cluster cannot be asked for its id (%w); set cluster.id", err)
		}
		src = s
	}
	zones, err := buildZones(ctx, cfg, src, log)
	if err != nil {
		return err
	}
	if zones.Clusterset == nil {
		// Whatever publisher.clusterset says now, the cluster may have
		// exported before: leaving the set means leaving it everywhere.
		cfg.Publisher.Clusterset = true
		if zones, err = buildZones(ctx, cfg, src, log); err != nil {
			return err
		}
	}
	ranges, err := zoneRanges(zones)
	if err != nil {
		return err
	}
	var joinedBefore []string
	if zones.Federation == nil && cfg.Cluster.FederationDomain != "" {
		// Likewise for a federation it joined before; whatever its name,
		// the shards are in the one federation tree.
		fr, err := etcdstore.Ranges(p.FederationPrefix, p.ReversePrefix, cfg.Cluster.FederationDomain)
		if err != nil {
			return fmt.Errorf("cluster.federation-domain: %w", err)
		}
		for _, r := range fr {
			if !slices.Contains(ranges, r) {
				joinedBefore = append(joinedBefore, r)
			}
		}
	}
	cli, err := etcdclient.New(ctx, cfg.Etcd, log)
	if err != nil {
		return err
	}
	defer cli.Close()
	for _, r := range joinedBefore {
		// The publisher role of a cluster that never joined a federation
		// has no permission in its tree (docs/security.md), and so never
		// wrote there: nothing to withdraw, where a refused read would
		// stop the whole withdrawal.
		rctx, cancel := context.WithTimeout(ctx, cfg.Etcd.RequestTimeout)
		_, err := cli.Get(rctx, r, clientv3.WithPrefix(), clientv3.WithLimit(1), clientv3.WithKeysOnly())
		cancel()
		switch {
		case etcdclient.IsDenied(err):
			log.Warn("no permission to read the federation tree: not withdrawn from it. A cluster that never joined a federation has nothing there; one whose grant was taken away since may have left shards: withdraw again as a user that may read it",
				"range", r, "user", etcdclient.User(cfg.Etcd))
		case err != nil:
			return fmt.Errorf("etcd: reading %s: %w", r, err)
		default:
			ranges = append(ranges, r)
		}
	}
	id := zones.Cluster.Cluster
	user := etcdclient.User(cfg.Etcd)
	o := publisher.WithdrawOptions{
		Store:       &etcdstore.Store{Client: cli, Timeout: cfg.Etcd.RequestTimeout, User: user, MaxTxnOps: p.MaxTxnOps},
		Ranges:      ranges,
		Cluster:     id,
		MaxTxnOps:   p.MaxTxnOps,
		MaxTxnBytes: p.MaxTxnBytes,
		DryRun:      p.DryRun,
	}
	var w publisher.Withdrawal
	host, _ := os.Hostname()
	err = elect.Exclusive(ctx, cli, id, "withdraw/"+host+"/"+strconv.Itoa(os.Getpid()), user, func(ctx context.Context, term *elect.Term) error {
		o.Term = term
		var err error
		w, err = publisher.Withdraw(ctx, o)
		return err
	})
	if err != nil {
		return err
	}
	verb := "removed"
	if p.DryRun {
		verb = "would remove"
	}
	for _, k := range w.Keys {
		fmt.Fprintln(out, k)
	}
	log.Info("withdrawal done", "cluster", id, verb, len(w.Keys), "sources", w.Sources, "ranges", ranges)
	return nil
}

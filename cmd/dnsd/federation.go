package main

import (
	"log/slog"

	"github.com/etcdns/etcdns/config"
	"github.com/etcdns/etcdns/keys"
	"github.com/etcdns/etcdns/server/answer"
)

// federation settles how the federation zone is answered: only a zone
// dnsd.zones lists can be it, so a dnsd without federation answers as
// before whatever cluster.federation-domain says.
func federation(cfg *config.Config, zones []config.Zone, log *slog.Logger) (answer.Federation, error) {
	domain, err := keys.CanonicalName(cfg.Cluster.FederationDomain)
	if err != nil {
		return answer.Federation{}, nil // "": no federation zone
	}
	served := false
	for _, z := range zones {
		served = served || z.Name == domain
	}
	if !served {
		return answer.Federation{}, nil
	}
	inside, err := cfg.Dnsd.ParsedInternalClients()
	if err != nil {
		return answer.Federation{}, err
	}
	f := answer.Federation{Zone: domain, Cluster: cfg.Cluster.ID, Option: cfg.Dnsd.SourceClusterOption, Inside: inside}
	log.Info("federation zone", "zone", domain, "cluster", f.Cluster, "source_cluster_option", f.Option, "internal_clients", cfg.Dnsd.InternalClients)
	if f.Cluster == "" {
		log.Warn("cluster.id is empty: internal clients get federation answers without their own shard first; only the source-cluster option names one")
	}
	return f, nil
}

#!/usr/bin/env bash
# A fleet of dnsd frontends on etcd, straight or through etcd's grpc-proxy
# (issue 18 item 5; see bench/fleet/fleet_test.go): FRONTENDS real dnsd
# processes with GOMAXPROCS=1, started all at once (the cold-start storm:
# time until all are ready, and the writers' put p99 during it), WRITERS
# writers changing CHANGES records a second in all, and a probe record
# changed once a second, timed from its put to the moment every frontend
# answers it. Prints put-to-answer p50/p99/max over every frontend, the
# slowest frontend, each etcd member's and proxy's CPU seconds per second,
# the bytes a change each frontend reads and the members send, the members'
# bytes a frontend in the cold start, frontend RSS, and the machine.
#
#   bench/fleet/run.sh
#   FRONTENDS=25,50,100 MEMBERS=3 WRITERS=3 DURATION=20 bench/fleet/run.sh
#   FRONTENDS=100 SERVICES=33334 PATHS=proxy bench/fleet/run.sh   # 100k records
#
# FRONTENDS  comma-separated frontend counts, one run each (default 5,10)
# PATHS      a subset of direct,proxy (default both)
# PROXIES    grpc-proxies on the proxy path; frontend i uses proxy i mod K
#            (default 1)
# MEMBERS    etcd members: 1 or 3 (default 1); direct frontends get every
#            member and each watches one at random, proxies get every member
# WRITERS    writers (clusters' publishers), each its own services through
#            its own member (default 1)
# SERVICES   ClusterIP services in etcd, 3 records each (default 1000)
# CHANGES    service readdresses a second in all, one transaction each
#            (default 100)
# DURATION   seconds of probing per run (default 10)
# PIN=1      a core of its own for each etcd member, each proxy and the bench
#            process (writers, prober); the frontends share the rest
# START_JITTER_MS  the frontends' --dnsd.start-jitter in ms (default: dnsd's)
# PROXY_PAGE_SIZE  dnsd.page-size of the frontends on the proxy path (default
#            1000, as overlays/node-local-proxied; the direct ones keep dnsd's).
#            A build from before the setting (ETCDNS_BIN_DIR) ignores it and
#            reads 50,000: set 50000 to compare such a build like for like
# DNSD_ENV   "K=V ..." the frontends' environment besides GOMAXPROCS=1, such
#            as a GOMEMLIMIT
# STORM_LIMIT seconds the cold start may take before the row reports the
#            frontends not ready and the next configuration runs (default 300)
# KILL       proxy (PROXIES=2 or more; each frontend is given every proxy) or
#            member (MEMBERS=3): after each row's probing, proxy 0 or the leader
#            is killed while the writers go on, and a second table says how
#            long the first change after it took to reach every frontend, the
#            later changes' p99, and the watch restarts it caused
#
# Needs hack/tools.sh (etcd).
set -euo pipefail
cd "$(dirname "$0")/../.."
hack/tools.sh >/dev/null
go test -tags bench -run '^TestFleet$' -count=1 -v -timeout 60m ./bench/fleet/ |
  grep -v -E '^(=== RUN|--- PASS|PASS$|ok )'

#!/usr/bin/env bash
# A fleet of dnsd frontends on one etcd, straight or through etcd's
# grpc-proxy (issue 18 item 5; see bench/fleet/fleet_test.go): FRONTENDS
# real dnsd processes with GOMAXPROCS=1, a writer changing CHANGES records
# a second, and a probe record changed once a second, timed from its put
# to the moment every frontend answers it. Prints put-to-answer p50/p99/max
# over every frontend, the slowest frontend, etcd's and each proxy's CPU
# seconds per second, frontend RSS, and the machine.
#
#   bench/fleet/run.sh
#   FRONTENDS=25,50 PATHS=direct,proxy DURATION=20 bench/fleet/run.sh
#
# FRONTENDS  comma-separated frontend counts, one run each (default 5,10)
# PATHS      a subset of direct,proxy (default both)
# PROXIES    grpc-proxies on the proxy path; frontend i uses proxy i mod K
#            (default 1)
# SERVICES   ClusterIP services in etcd, 3 records each (default 1000)
# CHANGES    service readdresses a second, one transaction each (default 100)
# DURATION   seconds of probing per run (default 10)
#
# Needs hack/tools.sh (etcd).
set -euo pipefail
cd "$(dirname "$0")/../.."
hack/tools.sh >/dev/null
go test -tags bench -run '^TestFleet$' -count=1 -v -timeout 60m ./bench/fleet/ |
  grep -v -E '^(=== RUN|--- PASS|PASS$|ok )'

#!/usr/bin/env bash
# dnsd against its peers on the same world, in one run (see
# bench/dnsd/bench_test.go). Builds and starts, one at a time on 127.0.0.1:
# dnsd on the records in a real etcd; Knot DNS on a zone file of the same
# names; CoreDNS's kubernetes plugin with cache 30 and without, on the same
# objects in a real kube-apiserver; CoreDNS's etcd plugin + cache 30 on the
# same keys as dnsd. Runs dnsperf against each in alternation on three
# mixes (positive A/AAAA; ndots:5 search path, ~80% NXDOMAIN/NODATA; SRV
# of a 250-endpoint headless service over TCP) and prints per server and
# mix: QPS, p50/p99 latency at a fixed rate, CPU seconds of the server and
# of its store, peak RSS, lost queries, and dnsd's ratio to each; then
# dnsd's etcd put-to-answer latency, and the search mix's QPS of the servers
# that read etcd while it changes.
#
#   bench/dnsd/run.sh
#   SERVICES=1000 ROUNDS=10 DURATION=3 CLIENTS=4 RATE=5000 SRV_RATE=200 \
#     CHANGES=200 OUT=/tmp/peers.md bench/dnsd/run.sh
#
# SERVICES  ClusterIP services over 20 namespaces (default 1000, 40-60000)
# ROUNDS    rounds of every mix against every server (default 10)
# DURATION  seconds of each dnsperf run (default 3)
# CLIENTS   dnsperf -c (default 4)
# RATE      fixed qps of the latency runs of the UDP mixes (default 5000)
# SRV_RATE  fixed qps of the latency runs of the SRV mix (default 200)
# CHANGES   etcd changes timed for put-to-answer (default 200)
# CHURN_ROUNDS  runs of the search mix per server and change rate (0, 10,
#           100 changes/s) against the servers that read etcd (default 5)
# OUT       if set, the tables are also written to this file as Markdown
# PEERS     a subset of knot,coredns-kube-cache,coredns-kube,coredns-etcd
#           (default all; without the kube ones no kube-apiserver is started)
# MIXES     a subset of positive,search,srv (default all)
# DNSD_ALT  another dnsd binary, measured as a peer "dnsd alt" on the same
#           etcd: an A/B of two builds, e.g. DNSD_ALT=/tmp/dnsd-main
#
# Needs hack/tools.sh (etcd, kube-apiserver, coredns) and dnsperf and knotd
# from the system packages.
set -euo pipefail
cd "$(dirname "$0")/../.."
hack/tools.sh >/dev/null
go test -tags bench -run '^TestPeers$' -count=1 -v -timeout 60m ./bench/dnsd/ |
  grep -v -E '^(=== RUN|--- PASS|PASS$|ok )'

#!/usr/bin/env bash
# dnsd in a SkyDNS zone against CoreDNS's etcd plugin, with and without
# cache 30, on the same etcd holding what external-dns's coredns provider
# writes (TestSkyDNS in bench/dnsd/skydns_test.go, which shares
# TestPeers's servers, rounds and tables). Prints per server: QPS, p50/p99
# latency at a fixed rate, CPU of the server and of etcd, peak RSS, lost
# queries and dnsd's paired ratio to each peer; then dnsd's put-to-answer
# latency for a target external-dns changes.
#
#   bench/skydns/run.sh
#   NAMES=1000 ROUNDS=5 DURATION=3 CLIENTS=4 RATE=2000 CHANGES=200 \
#     OUT=/tmp/skydns.md bench/skydns/run.sh
#
# NAMES     names external-dns manages in example.org (default 1000)
# ROUNDS    rounds of every server in turn (default 5)
# DURATION  seconds of each dnsperf run (default 3)
# CLIENTS   dnsperf -c (default 4)
# RATE      fixed qps of the latency runs (default 2000)
# CHANGES   target changes timed for put-to-answer (default 200)
# OUT       if set, the tables are also written to this file as Markdown
#
# Needs hack/tools.sh (etcd, coredns) and dnsperf.
set -euo pipefail
cd "$(dirname "$0")/../.."
hack/tools.sh >/dev/null
go test -tags bench -run '^TestSkyDNS$' -count=1 -v -timeout 30m ./bench/dnsd/ |
  grep -v -E '^(=== RUN|--- PASS|PASS$|ok )'

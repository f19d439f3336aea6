#!/usr/bin/env bash
# dnsd against its peers on the same 1,000 service names, in one run (see
# bench/dnsd/bench_test.go): dnsd, CoreDNS etcd plugin + cache on the same
# keys, and CoreDNS kubernetes plugin with and without cache on the same
# objects in a real kube-apiserver. Prints QPS and latency per server with
# dnsd's ratio to each, then dnsd's etcd put-to-answer latency.
#
#   bench/dnsd/run.sh
#   SERVICES=1000 ROUNDS=3 DURATION=10 CLIENTS=4 KUBE=0 bench/dnsd/run.sh
#
# KUBE=0 leaves out the kubernetes plugin (and kube-apiserver). Everything
# listens on 127.0.0.1 on ports the harness picks.
set -euo pipefail
cd "$(dirname "$0")/../.."
hack/tools.sh >/dev/null
go test -tags bench -run '^TestPeers$' -count=1 -v -timeout 30m ./bench/dnsd/ |
  grep -v -E '^(=== RUN|--- PASS|PASS$|ok )'

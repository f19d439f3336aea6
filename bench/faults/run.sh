#!/usr/bin/env bash
# How long a dnsd frontend is blind after each etcd fault (issue 23): the
# integration suite's fault tests against real processes (a 3-member etcd
# cluster of each release hack/tools.sh installs, 3.5, 3.6 and 3.7, two
# dnsd frontends given every member under a steady query load; two
# grpc-proxies for the proxy faults, one on a member cut off from its
# peers with dnsd.watch-proxy-max-lag set), run RUNS times. Each fault
# is timed from the put of a change after it until every frontend answers
# that change; the table gives p50/p99/max over the runs, the queries the
# frontends failed to answer, and what the detection costs etcd per idle
# frontend. Default settings throughout but that one (dnsd.watch-progress-*,
# dnsd.watch-lag-probe-interval, dnsd.watch-max-lag).
#
#   bench/faults/run.sh
#   RUNS=10 OUT=/tmp/faults.md bench/faults/run.sh
#
# RUNS  runs of every fault test (default 5)
# OUT   if set, the table is also written to this file as Markdown
#
# Needs hack/tools.sh (etcd).
set -euo pipefail
cd "$(dirname "$0")/../.."
hack/tools.sh >/dev/null
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# One test after the other (-p 1 -parallel 1): the blind times are the
# frontends', not the machine's.
go test -tags integration -count="${RUNS:-5}" -p 1 -parallel 1 -timeout 60m -v \
  -run '^(TestClusterFaultsNeverBlind|TestClusterFaultsPeers|TestGRPCProxyFrozen|TestGRPCProxyMemberCutOff|TestGRPCProxyMemberCutOffBehindOneAddress)$' ./integration/ >"$log" 2>&1 ||
  { grep -E -A12 -- '--- FAIL' "$log" | head -100; tail -50 "$log"
    kept=$(mktemp -t etcdns-faults-XXXXXX.log); cp "$log" "$kept"
    echo "fault tests failed; the whole log (each subtest's lines are above its --- FAIL) is $kept" >&2; exit 1; }
go run ./bench/faults <"$log" | tee ${OUT:+"$OUT"}

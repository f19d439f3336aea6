#!/usr/bin/env bash
# dnsd at scale (issue 8, item 3; see bench/scale/scale_test.go): a real
# etcd holding SERVICES services x ENDPOINTS ready endpoints, dnsd's cold
# start from it (to /readyz and to the first correct answer) and its RSS,
# then RUNS bursts that roll the endpoints of as many services as it takes
# to put BURST new records, each timed to the moment dnsd answers all of
# them, with paced queries meanwhile. Prints a table against the targets:
# cold start <= 10 s, RSS <= 500 MiB, burst visible <= 1 s.
#
#   bench/scale/run.sh
#   SERVICES=1000 bench/scale/run.sh
#   PROFILE=/tmp/prof OUT=/tmp/scale.md bench/scale/run.sh
#
# Environment:
#   SERVICES=10000      services (10,000 x 100 ClusterIP = 1,030,001 keys)
#   ENDPOINTS=100       ready endpoints per service, no hostnames
#   BURST=10000         new records per burst (plus as many deletes)
#   HEADLESS=0          1: headless services, 3 keys per endpoint, not 1
#   RUNS=3              bursts
#   WRITERS=16          parallel transactions of a burst (the world: >= 32)
#   QPS=1000            query rate during the bursts; 0: none
#   BURST_TIMEOUT=300   seconds a burst may take to be visible before failing
#   IDLE=5              seconds between the two RSS readings after load
#   COLD_TIMEOUT=900    seconds the cold start may take before failing
#   FLOOR_PAGES=1000,10000,0  page sizes of the timed plain etcd read of all
#                       keys before dnsd starts (0: one range; none: skip)
#   KNOT=1              0: do not load the same records into Knot for its RSS
#   START_JITTER_MS=0   dnsd's --dnsd.start-jitter: its default (1s) waits up to
#                       that long, at random, before the first read
#   DNSD_ENV="K=V ..."  dnsd's environment besides the bench's (GOGC=100, GOMEMLIMIT=300MiB)
#   OUT=file            also write the table there as Markdown
#   PROFILE=dir         save dnsd's CPU profile of its first PROFILE_SECONDS
#                       (default 60; set it above the cold start to cover it
#                       all) s, its heap after load, a 5 s CPU profile of
#                       burst 1, its heap after the bursts and the binary, and print the top of each
#                       (go tool pprof -top); dnsd serves /debug/pprof on its
#                       --dnsd.metrics-listen address
set -euo pipefail
cd "$(dirname "$0")/../.."
hack/tools.sh >/dev/null
status=0
go test -tags bench -run '^TestScale$' -count=1 -v -timeout 120m ./bench/scale/ |
  grep -v -E '^(=== RUN|--- PASS|PASS$|ok )' || status=$?
if [[ -n "${PROFILE:-}" ]]; then
  for p in cpu-coldstart heap-after-load cpu-burst heap-after-bursts; do
    f="$PROFILE/$p.pprof"
    [[ -s "$f" ]] || continue
    echo
    echo "== $f"
    go tool pprof -top -nodecount=30 "$PROFILE/dnsd" "$f" 2>/dev/null | head -40
  done
fi
exit "$status"

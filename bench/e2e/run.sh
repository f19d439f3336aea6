#!/usr/bin/env bash
# DNS programming latency end to end: an EndpointSlice write through a real
# kube-apiserver until dnsd answers the new address (publisher and dnsd as
# separate processes on a real etcd). CHANGES sets how many changes.
set -euo pipefail
cd "$(dirname "$0")/../.."
CHANGES=${CHANGES:-300}
hack/tools.sh >/dev/null
out=$(go test -tags integration -run '^$' -bench '^BenchmarkProgrammingLatency$' -benchtime "${CHANGES}x" ./integration/ 2>&1) || { echo "$out"; exit 1; }
line=$(grep '^BenchmarkProgrammingLatency' <<<"$out")
field() { awk -v unit="$1" '{for (i = 2; i <= NF; i++) if ($i == unit) print $(i-1)}' <<<"$line"; }
printf '%-40s %10s %10s %10s\n' "DNS programming latency (API -> dnsd)" "p50 ms" "p99 ms" "max ms"
printf '%-40s %10s %10s %10s\n' "$CHANGES EndpointSlice changes" "$(field p50-ms)" "$(field p99-ms)" "$(field max-ms)"

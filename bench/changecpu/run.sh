#!/usr/bin/env bash
# What one changed record costs a dnsd process (issue 18 item 4; see
# bench/changecpu/changecpu_test.go): RECORDS records in a real etcd, RATE
# single-record changes a second for DURATION s, process CPU a change and
# VmRSS (anon / file), each build in turn, ROUNDS times.
#
#   bench/changecpu/run.sh                       # the tree as it is
#   REFS="main HEAD" bench/changecpu/run.sh      # builds of git refs, alternated
#   REFS="main HEAD HEAD:GOMAXPROCS=1" bench/changecpu/run.sh
#   PROFILE=/tmp/prof bench/changecpu/run.sh     # CPU and allocation profiles of round 1's changes
#   SMAPS=/tmp/smaps bench/changecpu/run.sh       # round 1's /proc/<pid>/smaps, after the load and the changes
#
# Environment: RECORDS=10000 SHAPE=endpoints (or services: ClusterIP services
# of an A, a PTR and an SRV, bench/fleet's world) RATE=100 DURATION=20 IDLE=5 ROUNDS=2 REFS
# (git refs, each optionally with :K=V environment for its dnsd) PROFILE SMAPS.
set -euo pipefail
cd "$(dirname "$0")/../.."
bins=$(mktemp -d)
trap 'rm -rf "$bins"' EXIT
variants=()
for spec in ${REFS:-}; do
	ref=${spec%%:*}
	extra=${spec#"$ref"}
	name=$(git rev-parse --short "$ref")
	[[ $spec == "$ref" ]] || name="$name${extra//[:=]/-}"
	if [[ ! -x $bins/$ref.dnsd ]]; then
		src=$bins/src-$(git rev-parse --short "$ref")
		mkdir -p "$src"
		git archive "$ref" | tar -x -C "$src"
		(cd "$src" && CGO_ENABLED=0 go build -o "$bins/$ref.dnsd" ./cmd/dnsd)
	fi
	variants+=("$name=$bins/$ref.dnsd$extra")
done
VARIANTS="${variants[*]:-}" go test -tags bench -run '^TestChangeCPU$' -count=1 -v -timeout 60m ./bench/changecpu/ |
	grep -v -E '^(=== RUN|--- PASS|PASS$|ok )'
if [[ -n "${PROFILE:-}" ]]; then
	for f in "$PROFILE"/*.pprof; do
		echo
		echo "== $f"
		go tool pprof -top -nodecount=40 "${f%.pprof}.bin" "$f" 2>/dev/null | head -50
		echo
		echo "== what the changes allocated (${f%.pprof}.allocs-after less .allocs-before)"
		go tool pprof -top -nodecount=40 -sample_index=alloc_space -base "${f%.pprof}.allocs-before" \
			"${f%.pprof}.bin" "${f%.pprof}.allocs-after" 2>/dev/null | head -50
	done
fi

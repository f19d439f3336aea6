#!/usr/bin/env bash
# The publisher's initial sync, restart and change-to-commit latency against
# a real etcd (bench/publisher/README.md), at the sizes of issues 4 and 8.
# Prints each run's table; with OUT=file, also appends them to it as
# Markdown.
#
#   bench/publisher/run.sh
#   WORLDS="500:10:clusterip" bench/publisher/run.sh    # services:endpoints:kind ...
set -euo pipefail
cd "$(dirname "$0")/../.."
WORLDS=${WORLDS:-"10000:10:clusterip 10000:10:headless 10000:100:clusterip"}
RATE=${RATE:-1000}
DURATION=${DURATION:-10s}
hack/tools.sh >/dev/null
go build -o .cache/bin/bench-publisher ./bench/publisher
for world in $WORLDS; do
	IFS=: read -r services endpoints kind <<<"$world"
	args=(-services "$services" -endpoints "$endpoints" -rate "$RATE" -duration "$DURATION")
	[ "$kind" = headless ] && args+=(-headless)
	echo "go run ./bench/publisher ${args[*]}"
	out=$(.cache/bin/bench-publisher "${args[@]}")
	echo "$out"
	echo
	if [ -n "${OUT:-}" ]; then
		{
			echo "\`go run ./bench/publisher ${args[*]}\`"
			echo
			echo "| phase | figure | value |"
			echo "|---|---|---|"
			tail -n +2 <<<"$out" | sed -E 's/^ +//; s/ {2,}/ | /g; s/^/| /; s/$/ |/'
			echo
		} >>"$OUT"
	fi
done

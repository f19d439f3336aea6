#!/usr/bin/env bash
# What frontends logging in to etcd with a password cost the members
# (bench/logins/logins_test.go): FRONTENDS dnsd at once through PROXIES
# grpc-proxies, then the busiest proxy killed.
#
#   bench/logins/run.sh                        # the tree as it is
#   REFS="1dcae76 HEAD" bench/logins/run.sh    # builds of git refs, alternated
#
# Environment: FRONTENDS=20 PROXIES=2 ROUNDS=1 REFS.
set -euo pipefail
cd "$(dirname "$0")/../.."
hack/tools.sh >/dev/null
bins=$(mktemp -d)
trap 'rm -rf "$bins"' EXIT
variants=()
for ref in ${REFS:-}; do
	src=$bins/src-$ref
	mkdir -p "$src"
	git archive "$ref" | tar -x -C "$src"
	(cd "$src" && CGO_ENABLED=0 go build -o "$bins/$ref.dnsd" ./cmd/dnsd)
	variants+=("$(git rev-parse --short "$ref")=$bins/$ref.dnsd")
done
VARIANTS="${variants[*]:-}" go test -tags bench -run '^TestLogins$' -count=1 -v -timeout 30m ./bench/logins/ |
	grep -v -E '^(=== RUN|--- PASS|PASS$|ok )'

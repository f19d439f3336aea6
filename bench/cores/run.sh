#!/usr/bin/env bash
# Core scaling (issue 20): dnsd and Knot on the same world, each pinned to
# the first C cores (dnsd GOMAXPROCS=C, Knot C UDP workers), dnsperf pinned
# to the remaining cores, for every C of CORES that leaves the generator a
# core of its own (see TestCores in bench/dnsd/cores_test.go). Prints per
# count and UDP mix: median QPS of each, dnsd/Knot as the median of the
# rounds' ratios, and how busy the generator was (well below 100% of its
# cores: it was not the limit). On a 2-CPU machine only C=1 fits.
#
#   bench/cores/run.sh
#   CORES=1,2,4,8 ROUNDS=5 DURATION=3 CLIENTS=16 OUT=/tmp/cores.md bench/cores/run.sh
#
# CORES     server core counts (default 1,2,4,8,16; those >= the CPUs skipped)
# SERVICES  ClusterIP services (default 1000)
# ROUNDS    rounds per count and mix (default 5)
# DURATION  seconds of each dnsperf run (default 3)
# CLIENTS   dnsperf -c, at least one per generator core (default 4)
# OUT       if set, the table is also written to this file as Markdown
# DNSD_ALT  another dnsd binary (absolute path), measured in the same rounds
#           pinned as dnsd is: an A/B of two builds; DNSD_ALT_ENV is its
#           extra environment, e.g. DNSD_ALT_ENV=GOGC=400
#
# Needs hack/tools.sh (etcd), dnsperf, knotd and taskset.
set -euo pipefail
cd "$(dirname "$0")/../.."
hack/tools.sh >/dev/null
go test -tags bench -run '^TestCores$' -count=1 -v -timeout 60m ./bench/dnsd/ |
  grep -v -E '^(=== RUN|--- PASS|PASS$|ok )'

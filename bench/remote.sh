#!/usr/bin/env bash
# The multi-core benches on a machine that has neither Go nor the tools: a
# large machine lent for an hour, with no network. `pack` runs here and
# writes one archive with everything the named benches start (default all):
# the core-scaling bench (cores: bench/dnsd's TestCores, with knotd and
# dnsperf and the shared libraries and the loader they were linked against,
# so that they run whatever that machine's libc is), the fleet bench
# (fleet), the CPU-a-change bench with its watch floor (changecpu), the
# publisher's sync, restart and change-to-commit bench (publisher:
# bench/publisher, 49 MB of it with etcd's embedded server, so name the
# others alone where an archive must stay small), dnsd and etcd. `run` runs
# there, from a checkout of the same commit (the test binaries find the
# repository by its go.mod), and prints their tables; each names its
# machine. A bench that fails does not stop the others; run then exits 1.
#
#   bench/remote.sh pack [ARCHIVE [cores|fleet|changecpu|publisher]...]
#                                         default .cache/remote.tar.xz, all
#   bench/remote.sh run ARCHIVE [cores|fleet|changecpu|publisher]...
#
# run takes the benches' own variables (CORES, ROUNDS, DURATION, CLIENTS,
# CORES_OUT for bench/cores' OUT, DNSD_ALT and DNSD_ALT_ENV;
# FRONTENDS, PATHS, PROXIES, MEMBERS, WRITERS, SERVICES, CHANGES, PIN,
# START_JITTER_MS, STORM_LIMIT; RECORDS, RATE, IDLE; WORLDS as
# bench/publisher/run.sh has it, PUBLISHER_RATE and PUBLISHER_DURATION for
# its -rate and -duration, default 1000 and 10s), and DEADLINE, seconds
# each bench may take (default 900). Needs tar, taskset and xz or python3
# on that machine.
set -euo pipefail
cd "$(dirname "$0")/.."

# benches checks a list of bench names, the whole list when it is empty.
benches() {
  local bench
  [ $# -gt 0 ] || set -- cores fleet changecpu publisher
  for bench in "$@"; do
    case "$bench" in
      cores | fleet | changecpu | publisher) echo "$bench" ;;
      *) echo "unknown bench $bench: cores, fleet, changecpu or publisher" >&2; return 2 ;;
    esac
  done
}

# binary is the file under an archive's bin/ that runs a bench.
binary() {
  case "$1" in
    publisher) echo publisher ;;
    *) echo "$1.test" ;;
  esac
}

pack() {
  local out="${1:-.cache/remote.tar.xz}" bench list
  shift || true
  list="$(benches "$@")"
  hack/tools.sh >/dev/null
  dir="$(mktemp -d)" # global: the trap runs after pack returns
  trap 'rm -rf "$dir"' EXIT
  mkdir -p "$dir/bin" "$dir/tools" "$dir/sys" "$dir/real" "$dir/lib"
  # As the harness builds it (static), less the symbol tables.
  CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$dir/bin/dnsd" ./cmd/dnsd
  cp .cache/tools/bin/etcd "$dir/tools/"
  for bench in $list; do
    case "$bench" in
      cores)
        CGO_ENABLED=0 go test -c -tags bench -trimpath -ldflags='-s -w' -o "$dir/bin/$(binary cores)" ./bench/dnsd
        pack_peers
        ;;
      fleet | changecpu) CGO_ENABLED=0 go test -c -tags bench -trimpath -ldflags='-s -w' -o "$dir/bin/$(binary "$bench")" "./bench/$bench" ;;
      publisher) CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$dir/bin/$(binary publisher)" ./bench/publisher ;;
    esac
  done
  mkdir -p "$(dirname "$out")"
  tar -C "$dir" -cf - . | xz -T0 -6 >"$out"
  ls -l "$out"
}

# pack_peers puts knotd and dnsperf in the archive's directory, for the
# core-scaling bench.
pack_peers() {
  local tool lib
  for tool in knotd dnsperf; do
    cp "$(PATH="$PATH:/usr/sbin:/sbin" command -v "$tool")" "$dir/real/$tool"
    # Every library it loads, the loader included, beside it: the loader
    # is run by hand, so that machine's own libc is never mixed in.
    for lib in $(ldd "$dir/real/$tool" | grep -o '/[^ ]*'); do
      cp -L "$lib" "$dir/lib/"
    done
    cat >"$dir/sys/$tool" <<EOF
#!/bin/sh
d="\$(dirname "\$0")/.."
exec "\$d/lib/ld-linux-x86-64.so.2" --library-path "\$d/lib" "\$d/real/$tool" "\$@"
EOF
    chmod +x "$dir/sys/$tool"
  done
}

run() {
  local archive="$1" dir bench benches sum rc=0
  shift
  local list
  list="$(benches "$@")"
  # shellcheck disable=SC2206 # one name a line, none with spaces
  benches=($list)
  archive="$(cd "$(dirname "$archive")" && pwd)/$(basename "$archive")"
  dir="$archive.d" # unpacked once, for the runs that follow
  # By content, not time: a copy may keep an older archive's mtime.
  sum="$(cksum <"$archive")"
  if [ "$(cat "$dir/.cksum" 2>/dev/null)" != "$sum" ]; then
    rm -rf "$dir" "$dir.tmp"
    mkdir "$dir.tmp"
    if command -v xz >/dev/null; then
      xz -dc "$archive"
    else
      python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' "$archive"
    fi | tar -C "$dir.tmp" -xf -
    echo "$sum" >"$dir.tmp/.cksum"
    mv "$dir.tmp" "$dir"
  fi
  export ETCDNS_BIN_DIR="$dir/bin" ETCDNS_TOOLS_DIR="$dir/tools" PATH="$dir/sys:$PATH"
  # A thousand frontends, each with sockets, watch streams and log files.
  ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
  echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(awk '/MemTotal/ {print int($2 / 1048576)}' /proc/meminfo) GiB; commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  # A bench that fails does not stop the others: the machine may be lent
  # for less time than a second try needs.
  for bench in "${benches[@]}"; do
    if [ ! -x "$dir/bin/$(binary "$bench")" ]; then
      echo "$bench: not in $archive (bench/remote.sh pack ARCHIVE $bench)" >&2
      rc=1
      continue
    fi
    case "$bench" in
      # OUT is bench/cores' file for its table; CORES_OUT here, since a
      # machine lent for benches may use OUT for itself.
      cores) (cd bench/dnsd && OUT="${CORES_OUT:-}" "$dir/bin/cores.test" -test.run '^TestCores$' -test.count=1 -test.v -test.timeout "${DEADLINE:-900}s") ;;
      changecpu) (cd bench/changecpu && "$dir/bin/changecpu.test" -test.run '^(TestChangeCPU|TestWatchFloor)$' -test.count=1 -test.v -test.timeout "${DEADLINE:-900}s") ;;
      fleet) (cd bench/fleet && "$dir/bin/fleet.test" -test.run '^TestFleet$' -test.count=1 -test.v -test.timeout "${DEADLINE:-900}s") ;;
      publisher) publisher "$dir/bin/publisher" ;;
    esac | grep --line-buffered -v -E '^(=== RUN|--- PASS|PASS$|ok )' || rc=1
  done
  return "$rc"
}

# publisher runs the publisher bench over each of WORLDS, as
# bench/publisher/run.sh does, each within DEADLINE.
publisher() {
  local world services endpoints kind args
  for world in ${WORLDS:-10000:100:clusterip}; do
    IFS=: read -r services endpoints kind <<<"$world"
    args=(-services "$services" -endpoints "$endpoints" -rate "${PUBLISHER_RATE:-1000}" -duration "${PUBLISHER_DURATION:-10s}")
    [ "$kind" = headless ] && args+=(-headless)
    echo "bench/publisher ${args[*]}"
    timeout "${DEADLINE:-900}" "$1" "${args[@]}" || return 1
  done
}

case "${1:-}" in
  pack) shift; pack "$@" ;;
  run) shift; [ $# -ge 1 ] || { echo "usage: $0 run ARCHIVE [cores|fleet|changecpu|publisher]..." >&2; exit 2; }; run "$@" ;;
  *) echo "usage: $0 pack [ARCHIVE [cores|fleet|changecpu|publisher]...] | run ARCHIVE [cores|fleet|changecpu|publisher]..." >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# `make run`: publish examples/ into the publisher's embedded etcd, serve them
# with dnsd on 127.0.0.1:1053, show a few answers, and stop both on Ctrl-C.
# RUN_ONCE=1 stops right after the answers (what the smoke test uses).
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=.cache/bin
RUN=.cache/run
DNS_PORT=1053
mkdir -p "$RUN"

if ! command -v dig >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing dig (bind9-dnsutils) with apt-get"
    apt-get update -qq >/dev/null && apt-get install -y -qq bind9-dnsutils >/dev/null
  else
    echo "dig is missing: apt-get install bind9-dnsutils" >&2
    exit 1
  fi
fi

pids=()
stop() {
  trap - INT TERM EXIT
  [ ${#pids[@]} -gt 0 ] && kill -TERM "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  echo "stopped publisher and dnsd; logs in $RUN/"
}
trap stop INT TERM EXIT

# ready URL: wait until an HTTP endpoint answers 200, with bash alone.
ready() {
  local host=${1%:*} port=${1#*:} path=$2 name=$3 line
  for _ in $(seq 1 100); do
    if { exec 3<>"/dev/tcp/$host/$port"; } 2>/dev/null; then
      printf 'GET %s HTTP/1.0\r\n\r\n' "$path" >&3
      read -r line <&3 || true
      exec 3>&-
      case "$line" in *" 200 "*) return 0 ;; esac
    fi
    sleep 0.2
  done
  echo "$name did not become ready; its log:" >&2
  tail -n 30 "$RUN/$name.log" >&2
  return 1
}

"$BIN/publisher" --publisher.source files:examples --publisher.clusterset --etcd.embedded.data-dir "$RUN/etcd" \
  --publisher.metrics-listen 127.0.0.1:9154 >"$RUN/publisher.log" 2>&1 &
pids+=($!)
ready 127.0.0.1:9154 /readyz publisher

"$BIN/dnsd" --dnsd.listen 127.0.0.1:$DNS_PORT --dnsd.metrics-listen 127.0.0.1:9153 >"$RUN/dnsd.log" 2>&1 &
pids+=($!)
ready 127.0.0.1:9153 /readyz dnsd

# show WHAT QUESTION...: one dig, what it demonstrates, and its answer.
show() {
  local what=$1; shift
  printf '%-34s $ dig @127.0.0.1 -p %s +short %s\n' "# $what" "$DNS_PORT" "$*"
  dig @127.0.0.1 -p $DNS_PORT +short +time=2 +tries=1 "$@" | sed 's/^/                                     /'
}
echo
echo "etcdns is serving examples/ on 127.0.0.1:$DNS_PORT (etcd at http://127.0.0.1:2379, metrics at :9153 and :9154)"
echo
show "schema version TXT"        dns-version.cluster.local TXT
show "ClusterIP A"               kubernetes.default.svc.cluster.local A
show "ClusterIP SRV, named port" _https._tcp.kubernetes.default.svc.cluster.local SRV
show "ClusterIP PTR"             -x 10.96.0.1
show "dual-stack AAAA"           api.apps.svc.cluster.local AAAA
show "headless A, ready only"    db.apps.svc.cluster.local A
show "headless SRV, N x M"       _postgres._tcp.db.apps.svc.cluster.local SRV
show "pod hostname.subdomain"    web-0.web.apps.svc.cluster.local A
show "ExternalName CNAME"        search.apps.svc.cluster.local A
show "pod a-b-c-d (insecure)"    10-244-1-20.apps.pod.cluster.local A
show "clusterset ClusterSetIP A"  api.apps.svc.clusterset.local A
show "clusterset headless SRV"   _postgres._tcp.db.apps.svc.clusterset.local SRV
printf '%-34s $ dig @127.0.0.1 -p %s nope.apps.svc.cluster.local A | grep status\n' "# no such service" "$DNS_PORT"
dig @127.0.0.1 -p $DNS_PORT +time=2 +tries=1 nope.apps.svc.cluster.local A | grep -o 'status: [A-Z]*' | sed 's/^/                                     /'
echo
echo "the records behind them: .cache/tools/bin/etcdctl get --prefix /skydns   (after make tools)"

if [ "${RUN_ONCE:-0}" = 1 ]; then
  exit 0
fi
echo "Ctrl-C stops both."
wait -n "${pids[@]}" || true

#!/usr/bin/env bash
# Installs the real components the integration tests and benchmarks run
# against (etcd, etcdctl, kube-apiserver, CoreDNS from source via the Go
# module proxy; external-dns's coredns provider as hack/externaldns;
# helm for the chart's test, kubectl for the manifests' test; dnsperf,
# dig, kdig, knotd, promtool from apt)
# into .cache/tools/bin.
# Besides the pinned etcd, the newer etcd releases the tests run across
# (rolling upgrades) are installed as etcd-<minor>.
#
# A fresh machine needs only Go and apt. Each component is skipped when its
# binary already reports the pinned version, so a second run takes seconds.
#
#   hack/tools.sh           install what is missing
#   hack/tools.sh --check   only report; exit 1 if anything is missing
set -euo pipefail

ETCD_VERSION=v3.5.35
# Newer etcd servers the tests run across, each installed as etcd-<minor>:
# the newest patch of each minor release after the pinned one. etcd
# supports upgrading one minor release at a time, so every minor on the
# road from ETCD_VERSION to the newest release is here.
ETCD_RELEASES=(v3.6.16 v3.7.3)
KUBE_VERSION=v1.31.4
COREDNS_VERSION=v1.11.4
# external-dns: the newest release that builds with the Go of go.mod (v0.23
# wants Go 1.27), and the last one whose TXT registry merges the owner text
# into the coredns provider's values.
EXTERNALDNS_VERSION=v0.22.0
EXTERNALDNS_OLD_VERSION=v0.17.0
# helm v3 (integration/helm_test.go renders deploy/helm/etcdns with it): the
# newest v3 release; it builds with the Go of go.mod.
HELM_VERSION=v3.22.0

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache/tools"
BIN="$CACHE/bin"

CHECK_ONLY=0
case "${1:-}" in
  "") ;;
  --check) CHECK_ONLY=1 ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

mkdir -p "$BIN"
# Two concurrent runs would race on the same output files.
exec 9>"$CACHE/.lock"
if command -v flock >/dev/null; then flock 9; fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

MISSING=()

report() { # name version path status
  printf '%-16s %-20s %-50s %s\n' "$1" "$2" "$3" "$4"
}

# has_version BIN VERSION: the binary exists and reports VERSION, so a
# half-written or outdated binary is rebuilt.
has_version() {
  local bin="$1" version="${2#v}" args=(--version) out
  case "$(basename "$bin")" in
    etcdctl) args=(version) ;;
    coredns|externaldns*) args=(-version) ;;
    helm) args=(version) ;;
    kubectl) args=(version --client) ;;
  esac
  [[ -x "$bin" ]] || return 1
  out="$("$bin" "${args[@]}" 2>&1)" || true
  [[ $out == *"$version"* ]]
}

# Throw-away module so the product's go.mod never sees these dependencies.
new_module() {
  local dir="$WORK/$1"
  mkdir -p "$dir"
  (cd "$dir" && GOWORK=off go mod init "tools.local/$1" >/dev/null 2>&1)
  echo "$dir"
}

in_module() { # dir cmd...
  local dir="$1"; shift
  (cd "$dir" && GOWORK=off GOFLAGS="${GOFLAGS:-} -mod=mod" "$@")
}

# component NAME VERSION BUILD_FUNC BINS...: cached when every binary in
# BINS reports VERSION.
component() {
  local name="$1" version="$2" build="$3"; shift 3
  local ok=1 b
  for b in "$@"; do has_version "$BIN/$b" "$version" || ok=0; done
  if [[ $ok == 1 ]]; then
    report "$name" "$version" "$BIN/$1" cached
    return
  fi
  if [[ $CHECK_ONLY == 1 ]]; then
    report "$name" "$version" "$BIN/$1" missing
    MISSING+=("$name")
    return
  fi
  local start=$SECONDS rc
  # Not "build || fail": bash ignores set -e inside a function called from
  # a || list, so a failing step would go unnoticed.
  set +e
  (set -e; "$build" "$version") >"$WORK/$name.log" 2>&1
  rc=$?
  set -e
  if [[ $rc != 0 ]]; then
    tail -n 50 "$WORK/$name.log" >&2
    echo "tools.sh: building $name failed" >&2
    exit 1
  fi
  for b in "$@"; do
    has_version "$BIN/$b" "$version" || {
      echo "tools.sh: $BIN/$b does not report version $version" >&2
      exit 1
    }
  done
  report "$name" "$version" "$BIN/$1" "built in $((SECONDS - start))s"
}

build_etcd() {
  local mod
  mod="$(new_module etcd)"
  cat >"$mod/tools.go" <<'EOF'
//go:build tools

package tools

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/server/v3"
)
EOF
  # go install refuses these modules because of their replace directives.
  in_module "$mod" go mod edit \
    -require="go.etcd.io/etcd/server/v3@$ETCD_VERSION" \
    -require="go.etcd.io/etcd/etcdctl/v3@$ETCD_VERSION"
  in_module "$mod" go mod tidy
  in_module "$mod" go build -o "$BIN/etcd" go.etcd.io/etcd/server/v3
  in_module "$mod" go build -o "$BIN/etcdctl" go.etcd.io/etcd/etcdctl/v3
}

# build_etcd_release VERSION: only the server, as etcd-<minor>; the pinned
# etcdctl speaks to every 3.x server.
build_etcd_release() {
  local version="$1" minor mod
  minor="${version#v}"; minor="${minor%.*}"
  mod="$(new_module "etcd-$minor")"
  cat >"$mod/tools.go" <<'EOF'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
EOF
  in_module "$mod" go mod edit -require="go.etcd.io/etcd/server/v3@$version"
  in_module "$mod" go mod tidy
  in_module "$mod" go build -o "$BIN/etcd-$minor" go.etcd.io/etcd/server/v3
}

# kube_build NAME PKG: builds PKG of k8s.io/kubernetes at KUBE_VERSION as
# $BIN/NAME, in a throw-away module of its own.
kube_build() {
  local name="$1" pkg="$2" mod gomod staging m
  mod="$(new_module "$name")"
  # k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces
  # them with ./staging paths; a consumer must replace each one with the
  # published tag. Take the list from its own go.mod so it never drifts.
  gomod="$(in_module "$mod" go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
  [[ -f "$gomod" ]] || { echo "no go.mod for k8s.io/kubernetes@$KUBE_VERSION" >&2; return 1; }
  staging="$(sed 's/^replace[[:space:]]*//' "$gomod" |
    awk '$2 == "=>" && $3 ~ /^\.\/staging\// { print $1 }')"
  [[ -n "$staging" ]] || { echo "no staging replaces found in $gomod" >&2; return 1; }
  local args=(-require="k8s.io/kubernetes@$KUBE_VERSION")
  for m in $staging; do
    args+=(-replace="$m=$m@v0.${KUBE_VERSION#v1.}")
  done
  in_module "$mod" go mod edit "${args[@]}"
  printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$pkg" >"$mod/tools.go"
  in_module "$mod" go mod tidy
  # Without these the binary reports v0.0.0-master, which breaks the
  # version check above and anything that reads /version.
  local minor="${KUBE_VERSION#v1.}"; minor="${minor%%.*}"
  local v=k8s.io/component-base/version
  in_module "$mod" go build \
    -ldflags "-X $v.gitVersion=$KUBE_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor" \
    -o "$BIN/$name" "$pkg"
}
build_kube_apiserver() { kube_build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver; }
# kubectl of the same release renders the manifests with its kustomize and
# applies them to the kube-apiserver (integration/deploy_test.go).
build_kubectl() { kube_build kubectl k8s.io/kubernetes/cmd/kubectl; }

build_coredns() {
  if GOWORK=off GOBIN="$BIN" go install "github.com/coredns/coredns@$COREDNS_VERSION"; then
    return
  fi
  echo "go install refused; falling back to a throw-away module"
  local mod
  mod="$(new_module coredns)"
  cat >"$mod/tools.go" <<'EOF'
//go:build tools

package tools

import _ "github.com/coredns/coredns"
EOF
  in_module "$mod" go mod edit -require="github.com/coredns/coredns@$COREDNS_VERSION"
  in_module "$mod" go mod tidy
  in_module "$mod" go build -o "$BIN/coredns" github.com/coredns/coredns
}

# external-dns's coredns provider driven by hack/externaldns (a real writer
# of SkyDNS-layout data for integration/externaldns_test.go). Only the
# packages the program imports are built, with "go build -mod=mod" and no
# "go mod tidy": tidy would also fetch the modules of external-dns's own
# tests, some of which the module proxy does not serve.
externaldns_at() { # version binary
  local mod
  mod="$(new_module "$2")"
  cp "$ROOT/hack/externaldns/main.go.txt" "$mod/main.go"
  cp "$ROOT/hack/externaldns/${1%.*}.go.txt" "$mod/release.go"
  in_module "$mod" go mod edit -require="sigs.k8s.io/external-dns@$1"
  in_module "$mod" go build -o "$BIN/$2" .
}
build_externaldns() { externaldns_at "$EXTERNALDNS_VERSION" externaldns; }
build_externaldns_old() { externaldns_at "$EXTERNALDNS_OLD_VERSION" externaldns-old; }

# helm has no replace directives, so go install builds it at its own go.mod.
# The flags are those of helm's Makefile: without them it reports only its
# minor release (v3.22) and renders for Kubernetes v1.20, not for the
# Kubernetes of the client-go it is built with.
build_helm() {
  local mod gomod minor
  mod="$(new_module helm)"
  gomod="$(in_module "$mod" go mod download -json "helm.sh/helm/v3@$HELM_VERSION" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
  [[ -f "$gomod" ]] || { echo "no go.mod for helm.sh/helm/v3@$HELM_VERSION" >&2; return 1; }
  minor="$(awk '$1 == "k8s.io/client-go" { split($2, v, "."); print v[2] }' "$gomod")"
  [[ -n "$minor" ]] || { echo "no k8s.io/client-go in $gomod" >&2; return 1; }
  local h=helm.sh/helm/v3
  in_module "$mod" env CGO_ENABLED=0 GOBIN="$BIN" go install -trimpath -ldflags "-w -s \
    -X $h/internal/version.version=$HELM_VERSION \
    -X $h/pkg/lint/rules.k8sVersionMajor=1 -X $h/pkg/lint/rules.k8sVersionMinor=$minor \
    -X $h/pkg/chartutil.k8sVersionMajor=1 -X $h/pkg/chartutil.k8sVersionMinor=$minor" \
    "$h/cmd/helm@$HELM_VERSION"
}

component etcd "$ETCD_VERSION" build_etcd etcd etcdctl
for v in "${ETCD_RELEASES[@]}"; do
  m="${v#v}"; m="${m%.*}"
  component "etcd-$m" "$v" build_etcd_release "etcd-$m"
done
component kube-apiserver "$KUBE_VERSION" build_kube_apiserver kube-apiserver
component kubectl "$KUBE_VERSION" build_kubectl kubectl
component coredns "$COREDNS_VERSION" build_coredns coredns
component externaldns "$EXTERNALDNS_VERSION" build_externaldns externaldns
component externaldns-old "$EXTERNALDNS_OLD_VERSION" build_externaldns_old externaldns-old
component helm "$HELM_VERSION" build_helm helm

# System packages: binary -> Debian package. Versions are whatever the
# distribution ships; the tests only need the tools to exist.
APT_BINS=(dnsperf dig kdig knotd promtool)
declare -A APT_PKG=([dnsperf]=dnsperf [dig]=bind9-dnsutils [kdig]=knot-dnsutils [knotd]=knot [promtool]=prometheus)

find_bin() { # knotd lives in /usr/sbin, which is not always on PATH
  PATH="$PATH:/usr/sbin:/sbin" command -v "$1" || true
}

apt_missing=()
for b in "${APT_BINS[@]}"; do
  [[ -n "$(find_bin "$b")" ]] || apt_missing+=("${APT_PKG[$b]}")
done

apt_status=cached
if ((${#apt_missing[@]})) && [[ $CHECK_ONLY == 0 ]]; then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    start=$SECONDS
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >"$WORK/apt.log" 2>&1 &&
      apt-get install -y -qq --no-install-recommends "${apt_missing[@]}" >>"$WORK/apt.log" 2>&1 ||
      { tail -n 30 "$WORK/apt.log" >&2; echo "tools.sh: apt-get install ${apt_missing[*]} failed" >&2; exit 1; }
    # One apt transaction for all of them, so they share its time.
    apt_status="installed in $((SECONDS - start))s"
  else
    echo "WARNING: missing ${apt_missing[*]} (needed by benchmarks); as root on Debian run:" \
      "apt-get install -y ${apt_missing[*]}" >&2
  fi
fi

for b in "${APT_BINS[@]}"; do
  pkg="${APT_PKG[$b]}"
  path="$(find_bin "$b")"
  if [[ -z "$path" ]]; then
    report "$b" - - missing
    # Only --check fails on these: the integration tests do not need them.
    if [[ $CHECK_ONLY == 1 ]]; then MISSING+=("$b"); fi
    continue
  fi
  version="$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || echo '?')"
  if [[ " ${apt_missing[*]} " == *" $pkg "* ]]; then
    report "$b" "$version" "$path" "$apt_status"
  else
    report "$b" "$version" "$path" cached
  fi
done

if ((${#MISSING[@]})); then
  echo "missing: ${MISSING[*]}" >&2
  exit 1
fi

#!/usr/bin/env bash
# Makes the etcd certificates of deploy/etcd and stores them as the Secrets
# the manifests mount, in namespace etcdns (which must exist: apply an
# overlay first; its pods wait for these Secrets).
#
#   deploy/etcd/certs.sh [DIR]
#
# DIR (default ./etcd-pki) keeps the CA and keys: more client certificates
# (a CoreDNS, an etcdctl) are signed with the same CA later. Existing files
# in DIR are reused, so a second run only re-creates the Secrets.
# CLUSTER_DOMAIN (default cluster.local) goes into the member names, and
# NAMESPACE (default etcdns: the overlays' namespace; a Helm release's
# otherwise) into them and the Secrets'.
set -euo pipefail

DIR="${1:-./etcd-pki}"
NS="${NAMESPACE:-etcdns}"
DOMAIN="${CLUSTER_DOMAIN:-cluster.local}"
DAYS=3650
mkdir -p "$DIR"
cd "$DIR"

if [[ ! -f ca.crt ]]; then
  openssl req -x509 -newkey rsa:2048 -nodes -days "$DAYS" -subj /CN=etcdns-etcd-ca \
    -keyout ca.key -out ca.crt 2>/dev/null
fi

# cert NAME SUBJECT EXTENSIONS: a key and a certificate signed by the CA.
# A SUBJECT without a slash is the CN.
cert() {
  local name=$1 subj=$2 ext=$3
  [[ -f $name.crt ]] && return
  [[ $subj == /* ]] || subj="/CN=$subj"
  openssl req -newkey rsa:2048 -nodes -subj "$subj" -keyout "$name.key" -out "$name.csr" 2>/dev/null
  openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days "$DAYS" \
    -extfile <(printf '%s\n' "$ext") -out "$name.crt" 2>/dev/null
  rm "$name.csr"
}

# Members: serving clients and peers, and a client of the other peers.
# etcd checks a peer's names against its address, the wildcard included.
cert member etcd "basicConstraints=CA:FALSE
keyUsage=digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=DNS:*.etcd.$NS.svc,DNS:*.etcd.$NS.svc.$DOMAIN,DNS:etcd.$NS.svc,DNS:etcd.$NS.svc.$DOMAIN,DNS:localhost,IP:127.0.0.1"

# etcd's grpc-proxy (components/etcd-proxy): serving its Service to dnsd,
# and a client of the members. grpc-proxy refuses an upstream certificate
# with a CN (which would make every forwarded request that etcd user), so
# the client one has none: with etcd auth on, the proxy forwards each
# client's own token (password auth, deploy/README.md). The serving one is
# a client certificate too: grpc-proxy (3.5.35) checks itself at start
# through its --advertise-client-url with it, and exits if it cannot.
cert etcd-proxy etcd-proxy "basicConstraints=CA:FALSE
keyUsage=digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=DNS:etcd-proxy.$NS.svc,DNS:etcd-proxy.$NS.svc.$DOMAIN,DNS:localhost,IP:127.0.0.1"
cert etcd-proxy-client /O=etcdns-etcd-proxy "basicConstraints=CA:FALSE
keyUsage=digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"

# Clients: the CN is the etcd user once etcd auth is on (deploy/README.md).
for who in publisher dnsd; do
  cert "$who" "etcdns-$who" "basicConstraints=CA:FALSE
keyUsage=digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
done

# Server-side apply: no last-applied annotation holding a copy of the key.
secret() { # SECRET CERT
  kubectl -n "$NS" create secret generic "$1" \
    --from-file=ca.crt=ca.crt --from-file=tls.crt="$2.crt" --from-file=tls.key="$2.key" \
    --dry-run=client -o yaml | kubectl apply --server-side --field-manager=etcdns-certs -f -
}
secret etcd-member-tls member
secret publisher-etcd-tls publisher
secret dnsd-etcd-tls dnsd
secret etcd-proxy-tls etcd-proxy
secret etcd-proxy-client-tls etcd-proxy-client

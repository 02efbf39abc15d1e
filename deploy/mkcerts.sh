#!/usr/bin/env bash
# mkcerts.sh makes the certificate authority and the per-host certificates of
# a Spillway deployment: control planes prove themselves to gfes, gfes to
# control planes, over mutual TLS (SECURITY.md, internal/mtls).
#
# Usage:
#   deploy/mkcerts.sh [--dir DIR] [--domain DOMAIN] [--days N] ROLE/NAME[=SAN,...] ...
#
#   ROLE/NAME      cp/cp-1 or gfe/gfe-nyc-1: one certificate per host, in
#                  DIR/NAME.crt and DIR/NAME.key (key mode 0600)
#   =SAN,...       extra subject alternative names: IP addresses, DNS names,
#                  or URIs (spiffe://...)
#   --dir DIR      where the CA and the certificates go (default ./pki)
#   --domain D     the deployment's internal DNS domain (default spillway.internal)
#   --days N       validity of new host certificates (default 365; the CA: 10 years)
#
# Every certificate gets CN=NAME and the DNS name NAME.ROLE.DOMAIN:
#   - a control plane's (cp-1.cp.spillway.internal) is what gfes check: they
#     dial --controlplanes cp-1.cp.spillway.internal:7000, or an IP given as an
#     extra SAN, or set --tls-server-name. Key usage: TLS server only.
#   - a gfe's (gfe-nyc-1.gfe.spillway.internal) is what control planes allow
#     with --tls-allowed-clients '*.gfe.spillway.internal'. Key usage: TLS
#     client only, so a gfe's key cannot pose as a control plane.
#
# DIR/ca.crt and DIR/ca.key are made on the first run and reused after, so a
# later run adds hosts or renews one host's certificate (rotation: copy the
# new files over the old ones; the daemons re-read them at every handshake).
# Keep ca.key off the hosts. Files are written to a temporary name and renamed,
# so a daemon never reads half a file.
#
# It uses openssl; without openssl (or with MKCERTS_BACKEND=devpki) it falls
# back to `go run ./cmd/devpki` from this repository, whose certificates carry
# the same names but are valid for both server and client use.
set -euo pipefail

dir=pki
domain=spillway.internal
days=365
usage() { sed -n '/^# Usage:/,/^#   --days/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir=${2:?--dir needs a value}; shift 2 ;;
    --domain) domain=${2:?--domain needs a value}; shift 2 ;;
    --days) days=${2:?--days needs a value}; shift 2 ;;
    -h|--help) usage ;;
    --) shift; break ;;
    -*) echo "mkcerts.sh: unknown flag $1" >&2; usage ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || usage
case "$days" in ''|*[!0-9]*) echo "mkcerts.sh: --days: want a positive number of days, got '$days'" >&2; exit 2 ;; esac
[ "$days" -ge 1 ] || { echo "mkcerts.sh: --days: must be >= 1, got $days" >&2; exit 2; }

backend=${MKCERTS_BACKEND:-}
if [ -z "$backend" ]; then
  if command -v openssl >/dev/null; then backend=openssl; else backend=devpki; fi
fi
case "$backend" in openssl|devpki) ;; *) echo "mkcerts.sh: MKCERTS_BACKEND: want openssl or devpki, got '$backend'" >&2; exit 2 ;; esac

# Check every argument before writing anything.
specs=()
for arg in "$@"; do
  role=${arg%%/*}; rest=${arg#*/}
  name=${rest%%=*}; extra=""
  [ "$rest" != "$name" ] && extra=${rest#*=}
  if [ "$role" = "$arg" ] || [ -z "$name" ] || ! [[ "$name" =~ ^[A-Za-z0-9][A-Za-z0-9-]*$ ]]; then
    echo "mkcerts.sh: '$arg': want cp/NAME or gfe/NAME, NAME of letters, digits and dashes, then optionally =SAN,..." >&2; exit 2
  fi
  case "$role" in cp|gfe) ;; *) echo "mkcerts.sh: '$arg': role must be cp or gfe, got '$role'" >&2; exit 2 ;; esac
  specs+=("$role $name $extra")
done

umask 077
mkdir -p "$dir"

# san_list NAME ROLE EXTRA prints openssl's subjectAltName value.
san_list() {
  local out="DNS:$1.$2.$domain" s
  IFS=, read -r -a more <<<"$3"
  for s in "${more[@]}"; do
    [ -z "$s" ] && continue
    if [[ "$s" =~ ^[0-9.]+$ || "$s" == *:*:* ]]; then out="$out,IP:$s"
    elif [[ "$s" == *://* ]]; then out="$out,URI:$s"
    else out="$out,DNS:$s"; fi
  done
  echo "$out"
}

# install_file TMP DEST MODE renames TMP over DEST with MODE.
install_file() { chmod "$3" "$1"; mv -f "$1" "$2"; }

if [ "$backend" = devpki ]; then
  here=$(cd "$(dirname "$0")/.." && pwd)
  args=()
  for spec in "${specs[@]}"; do
    read -r role name extra <<<"$spec"
    sans=$(san_list "$name" "$role" "$extra" | sed 's/\(DNS\|IP\|URI\)://g')
    args+=("$name=$sans")
  done
  abs=$(cd "$dir" && pwd)
  (cd "$here" && go run ./cmd/devpki --dir "$abs" --days "$days" "${args[@]}")
  exit 0
fi

if [ ! -f "$dir/ca.crt" ] || [ ! -f "$dir/ca.key" ]; then
  if [ -f "$dir/ca.crt" ] || [ -f "$dir/ca.key" ]; then
    echo "mkcerts.sh: $dir: need both ca.crt and ca.key, or neither" >&2; exit 1
  fi
  openssl ecparam -name prime256v1 -genkey -noout -out "$dir/ca.key.tmp"
  openssl req -x509 -new -key "$dir/ca.key.tmp" -sha256 -days 3650 -subj "/CN=spillway CA" \
    -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -addext "subjectKeyIdentifier=hash" -out "$dir/ca.crt.tmp"
  install_file "$dir/ca.key.tmp" "$dir/ca.key" 600
  install_file "$dir/ca.crt.tmp" "$dir/ca.crt" 644
  echo "new CA: $dir/ca.crt"
fi

for spec in "${specs[@]}"; do
  read -r role name extra <<<"$spec"
  if [ "$role" = cp ]; then eku=serverAuth; else eku=clientAuth; fi
  ext="$dir/$name.ext.tmp"
  cat >"$ext" <<EOF
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=$eku
subjectAltName=$(san_list "$name" "$role" "$extra")
authorityKeyIdentifier=keyid
subjectKeyIdentifier=hash
EOF
  openssl ecparam -name prime256v1 -genkey -noout -out "$dir/$name.key.tmp"
  openssl req -new -key "$dir/$name.key.tmp" -subj "/CN=$name" -out "$dir/$name.csr.tmp"
  openssl x509 -req -in "$dir/$name.csr.tmp" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days "$days" -sha256 -extfile "$ext" \
    -out "$dir/$name.crt.tmp" 2>/dev/null
  rm -f "$ext" "$dir/$name.csr.tmp"
  # The key first: a daemon that sees the new certificate with the old key
  # keeps its last good pair until both are in place.
  install_file "$dir/$name.key.tmp" "$dir/$name.key" 600
  install_file "$dir/$name.crt.tmp" "$dir/$name.crt" 644
  echo "$name: $dir/$name.crt $dir/$name.key ($role, $(san_list "$name" "$role" "$extra"))"
done

#!/usr/bin/env bash
# rootfs.sh lays out the file system of Spillway's container image in
# OUTDIR: the static binaries of build.sh and the few files a program
# needs on an otherwise empty (FROM scratch) image. Both images are built
# from it: deploy/Containerfile copies OUTDIR as its build context (podman,
# no registry needed), deploy/Dockerfile runs this script in its build
# stage.
#
# Usage: deploy/rootfs.sh OUTDIR [COMMAND...]   (default: controlplane gfe devpki)
#
#   OUTDIR/usr/local/bin/spillway-<command>   build.sh's binaries (VERSION, REVISION as there)
#   OUTDIR/etc/passwd, OUTDIR/etc/group       the user and group spillway, 65532, no shell
#   OUTDIR/etc/ssl/certs/ca-certificates.crt  this machine's CA bundle (Debian: ca-certificates)
#   OUTDIR/etc/spillway/                       empty: mount the configuration, pki/ and gossip.key here
set -euo pipefail
out=${1:?usage: deploy/rootfs.sh OUTDIR [COMMAND...]}
shift
cd "$(dirname "$0")/.."
bundle=/etc/ssl/certs/ca-certificates.crt
[ -s "$bundle" ] || { echo "rootfs.sh: no CA bundle at $bundle (apt-get install ca-certificates)" >&2; exit 1; }
mkdir -p "$out/usr/local/bin" "$out/etc/ssl/certs" "$out/etc/spillway"
deploy/build.sh "$out/usr/local/bin" "$@" >/dev/null
echo 'spillway:x:65532:65532:Spillway:/nonexistent:/sbin/nologin' > "$out/etc/passwd"
echo 'spillway:x:65532:' > "$out/etc/group"
cp "$bundle" "$out/etc/ssl/certs/ca-certificates.crt"
chmod 0644 "$out/etc/passwd" "$out/etc/group" "$out/etc/ssl/certs/ca-certificates.crt"
chmod 0755 "$out/etc/spillway"
find "$out" -type f | sort

#!/usr/bin/env bash
# build.sh builds Spillway's release binaries: static (CGO_ENABLED=0, no
# dynamic loader or libc needed), reproducible paths (-trimpath), stripped,
# and stamped with their version (internal/version).
#
# Usage: deploy/build.sh OUTDIR [COMMAND...]   (default: controlplane gfe devpki)
#
# Writes OUTDIR/spillway-<command> for each. The version is the module's
# and the revision the commit checked out (`git rev-parse HEAD`, set with
# -ldflags -X as well, since Go's own VCS stamp is off under
# GOFLAGS=-buildvcs=false and in some git worktrees); VERSION and REVISION in
# the environment override them, for builds without .git (the Dockerfile
# passes them as build arguments). GOOS and GOARCH cross-compile.
set -euo pipefail
out=${1:?usage: deploy/build.sh OUTDIR [COMMAND...]}
shift
cmds=("$@")
[ ${#cmds[@]} -gt 0 ] || cmds=(controlplane gfe devpki)
cd "$(dirname "$0")/.."
mkdir -p "$out"
pkg=github.com/spillway-lb/spillway/internal/version
ldflags="-s -w"
buildvcs=auto
if git rev-parse --git-dir >/dev/null 2>&1; then
  REVISION=${REVISION:-$(git rev-parse HEAD)}
else
  buildvcs=false
fi
[ -n "${VERSION:-}" ] && ldflags="$ldflags -X $pkg.version=$VERSION"
[ -n "${REVISION:-}" ] && ldflags="$ldflags -X $pkg.revision=$REVISION"
for c in "${cmds[@]}"; do
  CGO_ENABLED=0 go build -trimpath -buildvcs="$buildvcs" -ldflags="$ldflags" -o "$out/spillway-$c" "./cmd/$c"
  echo "$out/spillway-$c"
done

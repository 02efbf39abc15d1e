#!/usr/bin/env bash
# bench/netpoll-order.sh — the experiment behind BENCHMARKS.md §4's "Where
# the p99 goes": the gfe built with a Go runtime whose network poller hands
# the goroutines it finds ready to the scheduler in the order their sockets
# became ready, against the gfe as Go builds it, side by side in
# bench/proxy.sh's interleaved rounds.
#
# Go's poller (runtime/netpoll_epoll.go, func netpoll) pushes each ready
# goroutine onto the head of a list, so one poll's goroutines run newest
# first: at saturation the request whose bytes arrived first in a round is
# served last. The patch reverses that list before netpoll returns it. It
# changes nothing else, and nothing in this repository ships with it.
#
#   bench/netpoll-order.sh                        # cheap origin, 7 rounds × 5 s
#   ROUNDS=3 DURATION=3s bench/netpoll-order.sh   # quick look
#
# Any bench/proxy.sh variable passes through (ORIGINS, TARGETS, ROUNDS,
# DURATION, OUT, ...). Needs what bench/proxy.sh needs, plus about 300 MB of
# /tmp for the copy of GOROOT, removed on exit.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

TMP=$(mktemp -d /tmp/spillway-netpoll.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

GOROOT_SRC=$(go env GOROOT)
log "copying $GOROOT_SRC and patching runtime/netpoll_epoll.go"
cp -a "$GOROOT_SRC" "$TMP/goroot"
chmod -R u+w "$TMP/goroot"
f=$TMP/goroot/src/runtime/netpoll_epoll.go
# The last "return toRun, delta" in netpoll: return the list reversed.
n=$(grep -c '^	return toRun, delta$' "$f" || true)
[ "$n" = 1 ] || { log "error: $f has $n lines 'return toRun, delta', want 1: this Go version differs from the one the patch was written for"; exit 1; }
awk '
/^\treturn toRun, delta$/ {
	print "\t// bench/netpoll-order.sh: the ready goroutines in the order their"
	print "\t// events came, not reversed."
	print "\tvar inOrder gList"
	print "\tfor !toRun.empty() {"
	print "\t\tinOrder.push(toRun.pop())"
	print "\t}"
	print "\treturn inOrder, delta"
	next
}
{ print }' "$f" >"$f.new"
mv "$f.new" "$f"

log "building the gfe with the patched runtime"
(cd "$ROOT" && GOTOOLCHAIN=local GOROOT="$TMP/goroot" "$TMP/goroot/bin/go" build -o "$TMP/gfe-fifo" ./cmd/gfe)

export ORIGINS=${ORIGINS:-cheap} TARGETS=${TARGETS:-"gfe-fast haproxy"} ROUNDS=${ROUNDS:-7} DURATION=${DURATION:-5s}
ALT=$TMP/gfe-fifo "$HERE/proxy.sh"

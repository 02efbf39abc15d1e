#!/usr/bin/env bash
# core.sh: the planner, picker and hashing micro-benchmarks, run COUNT times
# each and summarised by benchstat (median ± spread). Usage:
#   bench/core.sh            # COUNT=6
#   COUNT=10 bench/core.sh
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT=${COUNT:-6}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "# $(date -u +%FT%TZ)  $(nproc) CPUs  $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)  load: $(cut -d' ' -f1-3 /proc/loadavg)"
go test -run '^$' -bench . -benchmem -count "$COUNT" ./lb/waterfall/ ./lb/backend/ ./lb/hashing/ ./lb/affinity/ | tee "$out" | grep -E '^(Benchmark|ok)' >&2
go run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da "$out"

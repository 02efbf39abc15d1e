#!/usr/bin/env bash
# bench/charts.sh — regenerates every chart of BENCHMARKS.md into docs/bench/.
#
#   bench/charts.sh
#
# Each chart is drawn by cmd/benchchart, which runs the simulation behind
# `lbsim bench` (policybench.Run) in process on a shipped scenario and
# charts its result: no number in a chart is typed in. The simulation is
# deterministic, so a rerun rewrites the same files unless the simulator,
# the scenarios or the chart code changed. Takes a few seconds after the
# build.
set -euo pipefail
cd "$(dirname "$0")/.."

out=docs/bench
mkdir -p "$out"
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/benchchart" ./cmd/benchchart

chart() { # SCENARIO KIND
	local file="$out/$1-$2.svg"
	"$bin/benchchart" --scenario "configs/scenarios/$1.yaml" --kind "$2" --out "$file"
	echo "wrote $file"
}

chart flash-crowd shares
chart flash-crowd utilization
chart global-overload utilization
chart flash-crowd cdf
chart global-overload cdf

#!/bin/sh
# bench/testbackend-usage.sh [RATE] [CPU_PER_REQUEST] [SECONDS]
#
# What the test backend reports as its CPU cores in use and concurrency
# (GET /admin/stats) under an open-loop load of RATE requests/s (loadgen),
# each costing CPU_PER_REQUEST of CPU (--cpu-per-request) plus the default
# 2ms service time: one line per second. Expect cpu_cores near
# RATE x (CPU_PER_REQUEST + the serving overhead) and concurrency near
# RATE x (the wall time of the CPU work + 2ms) (Little's law).
#
# Needs testbackend and loadgen in $BIN (default /tmp/actuation-bin):
#   go build -o /tmp/actuation-bin/ ./cmd/testbackend ./cmd/loadgen
set -eu
BIN=${BIN:-/tmp/actuation-bin}
rate=${1:-100}
cpu=${2:-5ms}
secs=${3:-8}
port=${PORT:-19555}
admin=$((port + 1))
"$BIN/testbackend" --instance "name=m,addr=127.0.0.1:$port,region=r,zone=z,max_concurrency=0" \
	--cpu-per-request "$cpu" --cpus 1 --admin "127.0.0.1:$admin" 2>/dev/null &
tb=$!
trap 'kill $tb 2>/dev/null' EXIT
until curl -sf "127.0.0.1:$admin/admin/stats?instance=m" >/dev/null; do sleep 0.1; done
echo "{\"URL\":\"http://127.0.0.1:$port/work\",\"Rate\":$rate,\"Duration\":${secs}000000000}" |
	"$BIN/loadgen" >/dev/null &
lg=$!
i=0
while [ "$i" -lt "$secs" ]; do
	sleep 1
	i=$((i + 1))
	printf 't=%ss ' "$i"
	curl -s "127.0.0.1:$admin/admin/stats?instance=m" | jq -c '{served, cpu_cores, cpu_utilization, concurrency}'
done
wait "$lg"

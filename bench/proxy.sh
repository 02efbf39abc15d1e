#!/usr/bin/env bash
# bench/proxy.sh — the data-plane benchmark (docs/design.md §8): gfe, HAProxy and
# nginx in front of the same origin, one worker on one core each, driven by
# the same wrk settings, plus wrk straight at the origin as the limit and a
# stock httputil.ReverseProxy (bench/stdproxy, "stdlib") as Go's yardstick.
# "gfe" is the gfe on net/http alone (--fast-path=false, the slow path);
# "gfe-fast" the same binary with its HTTP/1.1 fast path (docs/design.md §4; the
# default); "gfe-la" gfe-fast with the service's load-aware choice on
# (load_aware.enabled, docs/design.md §3), which shows what that choice costs
# per request.
#
#   bench/proxy.sh                      # 5 rounds × 10 s per target, ~9 minutes
#   ROUNDS=1 DURATION=3s bench/proxy.sh # quick check, ~1 minute
#
# Layout: every proxy runs pinned to PROXY_CPU (haproxy nbthread 1, nginx
# worker_processes 1, gfe and stdlib GOMAXPROCS=1); the origin and wrk share
# LOAD_CPU.
# Keep-alive on both sides. Two origins are measured:
#   go     the Go test backend (cmd/testbackend, no service time, no limits);
#   cheap  nginx returning a fixed 200, so that the proxy's core is the
#          bottleneck and the req/s ratio is a per-core ratio.
# Each round runs every target once, in an order rotated per round (the
# machine is shared and its load drifts; rotation spreads that over all
# targets), and the table reports medians over rounds.
#
# Besides wrk's req/s and p50/p99, the script reads the proxy's CPU time
# (user+sys over all its threads and worker processes, /proc/PID/stat)
# before and after each run: "CPU µs/req" is that time divided by the
# requests served, and "per core" in the ratio table compares those. It is
# the per-core figure that holds even when the proxy's core is not saturated
# (when wrk + origin on LOAD_CPU are the bottleneck, req/s compares the
# load side, not the proxies; "proxy CPU" shows how busy the proxy's core
# was).
#
# Environment (defaults in brackets):
#   ROUNDS [5]  DURATION [10s]  WARMUP [0.5s]  CONNS [32]  THREADS [1]
#   ORIGINS ["go cheap"]  TARGETS ["gfe gfe-fast stdlib haproxy nginx direct"; also gfe-la]
#   PROXY_CPU [0]  LOAD_CPU [1]
#   PROFILE [0]  1: after the rounds, take a 5 s CPU profile of the gfe
#                (and of gfe-fast) under load from the cheap origin and
#                print their top entries
#   OUT []       directory to copy the raw runs, table and profile to
#   GFE_ENV []   extra environment for the gfe, e.g. "GOGC=200"
#   ALT []       another gfe, measured in the same interleaved rounds as
#                target gfe-alt (with its fast path): a git revision to build
#                it from (ALT=main compares a change with what it changes,
#                side by side), or the path of a gfe binary built otherwise
#                (e.g. with another Go toolchain)
#   NICE [0]     run proxies, origin and wrk at this nice level (negative
#                values, as root, shield the run from other work on a
#                shared machine at that work's expense)
#
# Needs: go, curl, taskset, ss; installs haproxy, nginx and wrk from Debian's
# packages when they are missing (as root). Every process it starts is
# stopped on exit.
set -euo pipefail

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-0.5s}
CONNS=${CONNS:-32}
THREADS=${THREADS:-1}
ORIGINS=${ORIGINS:-"go cheap"}
TARGETS=${TARGETS:-"gfe gfe-fast stdlib haproxy nginx direct"}
PROXY_CPU=${PROXY_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
PROFILE=${PROFILE:-0}
OUT=${OUT:-}
GFE_ENV=${GFE_ENV:-}
ALT=${ALT:-}
if [ -n "$ALT" ] && [[ " $TARGETS " != *" gfe-alt "* ]]; then TARGETS="$TARGETS gfe-alt"; fi
NICE=${NICE:-0}

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---- prerequisites -------------------------------------------------------

need_pkgs=()
command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || need_pkgs+=(haproxy)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need_pkgs+=(nginx)
command -v wrk >/dev/null || need_pkgs+=(wrk)
if [ ${#need_pkgs[@]} -gt 0 ]; then
	[ "$(id -u)" = 0 ] || die "missing ${need_pkgs[*]}; run as root to install them, or install them first"
	log "installing ${need_pkgs[*]} from Debian's packages"
	# Debian's postinst tries to start the services; in a container without
	# an init that fails harmlessly, and a policy-rc.d may forbid it.
	apt-get update -qq >/dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi
export PATH=$PATH:/usr/sbin:/sbin
for c in go curl taskset ss haproxy nginx wrk awk; do
	command -v "$c" >/dev/null || die "$c not found"
done
[ "$(nproc --all)" -ge 2 ] || die "need at least 2 CPUs"

WORK=$(mktemp -d /tmp/spillway-bench.XXXXXX)
chmod 755 "$WORK" # nginx workers drop to an unprivileged user
RUNS=$WORK/runs.tsv
: >"$RUNS"

# ---- process bookkeeping -------------------------------------------------

PIDS=()
cleanup() {
	local rc=$?
	set +e
	for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
	for pid in "${PIDS[@]}"; do
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null
	done
	wait 2>/dev/null
	if [ -n "$OUT" ]; then mkdir -p "$OUT" && cp -r "$WORK"/. "$OUT"/; fi
	if [ $rc -ne 0 ]; then
		log "failed; logs kept in $WORK"
	else
		rm -rf "$WORK"
	fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# stop_all stops the processes started so far (between origins).
stop_all() {
	for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "${PIDS[@]}"; do
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	PIDS=()
}

# start NAME CPU CMD... runs CMD pinned to CPU in the background, logging to
# $WORK/NAME.log; the pid is left in $LAST_PID. taskset, nice and env exec,
# so the pid is the program's own.
start() {
	local name=$1 cpu=$2
	shift 2
	taskset -c "$cpu" nice -n "$NICE" "$@" >"$WORK/$name.log" 2>&1 &
	LAST_PID=$!
	PIDS+=("$LAST_PID")
}

# free_port prints a loopback TCP+UDP port that nothing uses and that this
# run has not handed out yet.
USED_PORTS=" "
free_port() {
	local p
	for _ in $(seq 200); do
		p=$((20000 + RANDOM % 12000)) # below the usual ephemeral range (32768+)
		case $USED_PORTS in *" $p "*) continue ;; esac
		if [ -z "$(ss -Htuan "( sport = :$p )")" ]; then
			USED_PORTS="$USED_PORTS$p "
			echo "$p"
			return
		fi
	done
	die "no free port found"
}

# wait_200 URL NAME PID waits until URL answers 200 (up to 30 s).
wait_200() {
	local url=$1 name=$2 pid=$3
	for _ in $(seq 300); do
		kill -0 "$pid" 2>/dev/null || { cat "$WORK/$name.log" >&2; die "$name exited"; }
		[ "$(curl -s -o /dev/null -m 1 -w '%{http_code}' "$url" || true)" = 200 ] && return
		sleep 0.1
	done
	cat "$WORK/$name.log" >&2
	die "$name at $url not ready after 30 s"
}

# cpu_ticks PID prints the user and the sys clock ticks of PID and its
# children (nginx's worker), all threads included.
cpu_ticks() {
	local u=0 k=0 p a b
	for p in $1 $(pgrep -P "$1" || true); do
		read -r a b < <(awk '{print $14, $15}' "/proc/$p/stat" 2>/dev/null || echo 0 0)
		u=$((u + a)) k=$((k + b))
	done
	echo "$u $k"
}

render() { # render TEMPLATE OUT KEY=VALUE...
	local tmpl=$1 out=$2 expr=()
	shift 2
	for kv in "$@"; do expr+=(-e "s|@${kv%%=*}@|${kv#*=}|g"); done
	sed "${expr[@]}" "$tmpl" >"$out"
}

# ---- build ---------------------------------------------------------------

log "building gfe, testbackend and stdproxy"
(cd "$ROOT" && go build -o "$WORK/gfe" ./cmd/gfe && go build -o "$WORK/testbackend" ./cmd/testbackend &&
	go build -o "$WORK/stdproxy" ./bench/stdproxy)
ALT_DESC=
if [ -f "$ALT" ] && [ -x "$ALT" ]; then
	cp "$ALT" "$WORK/gfe-alt"
	ALT_DESC="gfe-alt is $ALT"
elif [ -n "$ALT" ]; then
	log "building gfe-alt at $ALT"
	mkdir -p "$WORK/alt-src"
	git -C "$ROOT" archive "$ALT" | tar -x -C "$WORK/alt-src"
	(cd "$WORK/alt-src" && go build -o "$WORK/gfe-alt" ./cmd/gfe)
	rm -rf "$WORK/alt-src"
	ALT_DESC="gfe-alt at $(git -C "$ROOT" rev-parse --short "$ALT")"
fi

HZ=$(getconf CLK_TCK)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- one origin ----------------------------------------------------------

declare -A URL PID ADMIN
start_origin() {
	local origin=$1 port
	port=$(free_port)
	ORIGIN_ADDR=127.0.0.1:$port
	case $origin in
	go)
		start origin "$LOAD_CPU" env GOMAXPROCS=1 "$WORK/testbackend" \
			--instance "name=o1,addr=$ORIGIN_ADDR,region=r1,zone=z1" \
			--max-concurrency 0 --max-rps 0 --service-time 0s --queue 100000
		;;
	cheap)
		mkdir -p "$WORK/nginx-origin"
		render "$HERE/nginx-origin.conf.tmpl" "$WORK/nginx-origin/nginx.conf" \
			LISTEN="$ORIGIN_ADDR" DIR="$WORK/nginx-origin"
		start origin "$LOAD_CPU" nginx -p "$WORK/nginx-origin" -e "$WORK/nginx-origin/error.log" \
			-c "$WORK/nginx-origin/nginx.conf"
		;;
	*) die "unknown origin $origin (want go or cheap)" ;;
	esac
	PID[direct]=$LAST_PID
	URL[direct]=http://$ORIGIN_ADDR/
	wait_200 "${URL[direct]}" origin "$LAST_PID"
}

# start_gfe TARGET BINARY NODE FAST_PATH [LOAD_AWARE] starts BINARY as
# target TARGET, a gfe called NODE with its fast path on (true) or off
# (false), and the service's load-aware choice on (true) or off (false, the
# default), in front of the origin.
start_gfe() {
	local t=$1 bin=$2 node=$3 fast=$4 la=${5:-false} port admin gossip
	port=$(free_port) admin=$(free_port) gossip=$(free_port)
	render "$HERE/gfe.yaml.tmpl" "$WORK/$t.yaml" ORIGIN="$ORIGIN_ADDR" LOAD_AWARE="$la"
	# shellcheck disable=SC2086 # GFE_ENV is a list of VAR=value words
	start "$t" "$PROXY_CPU" env GOMAXPROCS=1 $GFE_ENV "$bin" --node "$node" --site s1 \
		--listen "127.0.0.1:$port" --admin "127.0.0.1:$admin" --config "$WORK/$t.yaml" \
		--gossip-addr "127.0.0.1:$gossip" --log-format json --pprof --fast-path="$fast"
	PID[$t]=$LAST_PID URL[$t]=http://127.0.0.1:$port/ ADMIN[$t]=127.0.0.1:$admin
}

start_proxies() {
	local port
	for t in $TARGETS; do
		case $t in
		direct) ;;
		gfe) start_gfe gfe "$WORK/gfe" b1 false ;;
		gfe-fast) start_gfe gfe-fast "$WORK/gfe" b2 true ;;
		gfe-la) start_gfe gfe-la "$WORK/gfe" b4 true true ;;
		gfe-alt)
			[ -n "$ALT" ] || die "target gfe-alt needs ALT=<git revision or gfe binary>"
			start_gfe gfe-alt "$WORK/gfe-alt" b3 true
			;;
		stdlib)
			port=$(free_port)
			start stdlib "$PROXY_CPU" env GOMAXPROCS=1 "$WORK/stdproxy" --listen "127.0.0.1:$port" --origin "$ORIGIN_ADDR"
			PID[stdlib]=$LAST_PID URL[stdlib]=http://127.0.0.1:$port/
			;;
		haproxy)
			port=$(free_port)
			render "$HERE/haproxy.cfg.tmpl" "$WORK/haproxy.cfg" LISTEN="127.0.0.1:$port" ORIGIN="$ORIGIN_ADDR"
			start haproxy "$PROXY_CPU" haproxy -db -f "$WORK/haproxy.cfg"
			PID[haproxy]=$LAST_PID URL[haproxy]=http://127.0.0.1:$port/
			;;
		nginx)
			port=$(free_port)
			mkdir -p "$WORK/nginx-proxy"
			render "$HERE/nginx-proxy.conf.tmpl" "$WORK/nginx-proxy/nginx.conf" \
				LISTEN="127.0.0.1:$port" ORIGIN="$ORIGIN_ADDR" DIR="$WORK/nginx-proxy"
			start nginx "$PROXY_CPU" nginx -p "$WORK/nginx-proxy" -e "$WORK/nginx-proxy/error.log" \
				-c "$WORK/nginx-proxy/nginx.conf"
			PID[nginx]=$LAST_PID URL[nginx]=http://127.0.0.1:$port/
			;;
		*) die "unknown target $t (want gfe, gfe-fast, gfe-la, gfe-alt, stdlib, haproxy, nginx or direct)" ;;
		esac
	done
	for t in $TARGETS; do
		# The gfe answers 503 until its first plan (it needs one RTT probe).
		[ "$t" = direct ] || wait_200 "${URL[$t]}" "$t" "${PID[$t]}"
	done
}

# gfe_metric TARGET NAME prints the value of a gfe target's metric NAME
# now ("NaN" when it has none), "-" for other targets.
gfe_metric() {
	local admin=${ADMIN[$1]:-}
	if [ -z "$admin" ]; then
		echo -
		return
	fi
	curl -s -m 2 "http://$admin/metrics" | awk -v m="$2" '$1 == m { n = $2 } END { print (n == "" ? "NaN" : n) }'
}

# gc_cycles TARGET prints how many garbage collections a gfe target has
# run so far (its go_gc_duration_seconds count), "-" for other targets.
gc_cycles() { gfe_metric "$1" go_gc_duration_seconds_count; }

# run_one ORIGIN TARGET ROUND: a warm-up, then the measured wrk run; appends
# one line to $RUNS.
run_one() {
	local origin=$1 t=$2 round=$3 url=${URL[$2]} u0 k0 u1 k1 g0 g1 gc poller out line cpu secs load1
	taskset -c "$LOAD_CPU" nice -n "$NICE" wrk -t"$THREADS" -c"$CONNS" -d"$WARMUP" "$url" >/dev/null 2>&1 || true
	g0=$(gc_cycles "$t")
	read -r u0 k0 < <(cpu_ticks "${PID[$t]}")
	out=$(taskset -c "$LOAD_CPU" nice -n "$NICE" wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency "$url" 2>&1) || true
	read -r u1 k1 < <(cpu_ticks "${PID[$t]}")
	g1=$(gc_cycles "$t")
	poller=$(gfe_metric "$t" spillway_gfe_poller_on) # at the run's end: 1 on, 0 off
	echo "$out" >>"$WORK/wrk-$origin-$t.log"
	line=$(echo "$out" | awk -f "$HERE/wrk.awk")
	secs=$(echo "$out" | awk '/ requests in /{ v = $4; sub(/,$/, "", v); n = v + 0; if (v ~ /ms$/) n /= 1000; else if (v ~ /m$/) n *= 60; print n }')
	if [ "$t" = direct ]; then
		cpu="-	-	-	-"
	else
		# CPU µs per request (all, user, sys) and the share of wall time the
		# proxy was on a CPU.
		cpu=$(awk -v u=$((u1 - u0)) -v k=$((k1 - k0)) -v hz="$HZ" -v line="$line" -v secs="${secs:-0}" 'BEGIN {
			split(line, f, "\t"); n = f[4] + 0
			if (n <= 0 || secs <= 0) { print "NaN\tNaN\tNaN\tNaN"; exit }
			printf "%.2f\t%.2f\t%.2f\t%.0f\n", (u + k) / hz * 1e6 / n, u / hz * 1e6 / n, k / hz * 1e6 / n, 100 * (u + k) / hz / secs }')
	fi
	load1=$(cut -d' ' -f1 /proc/loadavg)
	# Garbage collections per 10 000 requests (gfe targets; the count
	# includes the wrk warm-up's last moments, never less than the run's).
	gc=$(awk -v a="$g0" -v b="$g1" -v line="$line" 'BEGIN {
		split(line, f, "\t"); n = f[4] + 0
		if (a == "-" || b == "-") print "-"; else if (a == "NaN" || b == "NaN" || n <= 0) print "NaN"; else printf "%.2f\n", (b - a) * 1e4 / n }')
	# origin target round | rps p50 p99 requests errors | cpu usr sys util | load1 | gc/10k | poller
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$origin" "$t" "$round" "$line" "$cpu" "$load1" "$gc" "$poller" >>"$RUNS"
	tail -1 "$RUNS" | awk -F'\t' '{ printf "%-5s %-8s round %s: %8.0f req/s  p50 %6.0f µs  p99 %7.0f µs  proxy %s µs CPU/req (usr %s sys %s, %s%% busy)  GC/10k req %s  poller %s  errors %s  load %s\n", $1, $2, $3, $4, $5, $6, $9, $10, $11, $12, $14, ($15 == "1" ? "on" : $15 == "0" ? "off" : "-"), $8, $13 }' >&2
}

# profile_gfe TARGET: a 5 s CPU profile of the gfe target TARGET (gfe or
# gfe-fast) under load, its top entries appended to $WORK/gfe-cpu.top.
profile_gfe() {
	local t=$1 url=${URL[$1]}
	log "profiling $t for 5 s under load"
	taskset -c "$LOAD_CPU" nice -n "$NICE" wrk -t"$THREADS" -c"$CONNS" -d7s "$url" >/dev/null 2>&1 &
	local wrk_pid=$!
	sleep 1
	curl -s -o "$WORK/$t-cpu.pprof" "http://${ADMIN[$t]}/debug/pprof/profile?seconds=5"
	wait "$wrk_pid" || true
	{
		echo "== $t"
		(cd "$ROOT" && go tool pprof -top -nodecount=25 "$WORK/gfe" "$WORK/$t-cpu.pprof" 2>/dev/null) || true
		(cd "$ROOT" && go tool pprof -top -cum -nodecount=25 "$WORK/gfe" "$WORK/$t-cpu.pprof" 2>/dev/null) || true
	} >>"$WORK/gfe-cpu.top"
}

# ---- main ----------------------------------------------------------------

read -ra target_list <<<"$TARGETS"
n=${#target_list[@]}
for origin in $ORIGINS; do
	log "origin $origin: starting"
	start_origin "$origin"
	start_proxies
	for r in $(seq "$ROUNDS"); do
		for i in $(seq 0 $((n - 1))); do
			run_one "$origin" "${target_list[$(((i + r - 1) % n))]}" "$r"
		done
	done
	if [ "$PROFILE" = 1 ] && [ "$origin" = cheap ]; then
		for t in gfe gfe-fast; do
			if [ -n "${URL[$t]:-}" ]; then profile_gfe "$t"; fi
		done
	fi
	stop_all
done

LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
{
	echo "Data plane: medians of $ROUNDS round(s); wrk -t$THREADS -c$CONNS -d$DURATION --latency, keep-alive;"
	echo "proxy on CPU $PROXY_CPU (one worker/thread; gfe and stdlib GOMAXPROCS=1), origin + wrk on CPU $LOAD_CPU."
	echo "$(haproxy -v | head -1 | cut -d' ' -f1-3); $(nginx -v 2>&1 | cut -d: -f2 | tr -d ' '); $(wrk --version 2>&1 | head -1 | cut -d' ' -f1-2); $(go version | cut -d' ' -f3); $(nproc --all) CPUs ($(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo))"
	echo "gfe at $(cd "$ROOT" && git rev-parse --short HEAD)$(cd "$ROOT" && git diff --quiet HEAD -- internal cmd lb config || echo '+local changes')${ALT_DESC:+; $ALT_DESC}; nice $NICE"
	echo "load average at start: $LOAD_START; at end: $LOAD_END; 1-min load per run in the raw lines"
	echo
	awk -f "$HERE/report.awk" "$RUNS"
	echo
	echo "CPU µs/req: the proxy's user+sys CPU per request; per core = inverse ratio of it."
	echo "proxy CPU: the proxy's CPU time over the run's wall time (100% = its core was the bottleneck)."
	echo "GC/10k: the gfe's garbage collections per 10 000 requests (its go_gc_duration_seconds count)."
	echo "by round: a pair's ratios in each round (its two runs are adjacent in time), and their median."
	if [ -s "$WORK/gfe-cpu.top" ]; then
		echo
		echo "gfe CPU profile (cheap origin):"
		cat "$WORK/gfe-cpu.top"
	fi
} | tee "$WORK/table.txt"

# wrk.awk reads the output of `wrk --latency` and prints one line:
#   requests/s  p50_us  p99_us  requests  errors
# Latencies are converted to microseconds; errors counts non-2xx/3xx
# responses plus socket errors (connect, read, write, timeout). Fields that
# wrk did not print come out as "NaN", so a failed run is visible, not zero.
# POSIX awk (mawk is Debian's default).

function us(v,    n) {
	n = v + 0
	if (v ~ /us$/) return n
	if (v ~ /ms$/) return n * 1000
	if (v ~ /m$/) return n * 60e6
	if (v ~ /s$/) return n * 1e6
	return n
}

BEGIN { rps = "NaN"; p50 = "NaN"; p99 = "NaN"; reqs = "NaN"; errs = 0 }
/^Requests\/sec:/ { rps = $2 }
/^ +50%/ { p50 = us($2) }
/^ +99%/ { p99 = us($2) }
/ requests in / { reqs = $1 }
/Non-2xx or 3xx responses:/ { errs += $NF }
/Socket errors:/ {
	# Socket errors: connect 0, read 0, write 0, timeout 0
	for (i = 3; i <= NF; i += 2) { v = $(i + 1); sub(/,/, "", v); errs += v }
}
END { printf "%s\t%s\t%s\t%s\t%d\n", rps, p50, p99, reqs, errs }

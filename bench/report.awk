# report.awk turns bench/proxy.sh's per-run lines into the final table:
# the median over rounds of each column, per origin and target, then the
# gfe's ratios to HAProxy and nginx. Input (tab-separated, one run a line):
#   origin target round rps p50_us p99_us requests errors cpu_us usr_us sys_us util_pct load1 gc_10k
# cpu_us is the proxy's CPU time (user+sys, all threads and workers) per
# request, usr_us and sys_us its two parts, util_pct the proxy's CPU time
# over the run's wall time; all "-" for direct runs. gc_10k is a gfe's
# garbage collections per 10 000 requests, "-" for the other targets.
# Because a round runs every target once, one after the other, a pair's
# per-core and p99 ratios are also given round by round. POSIX awk (mawk).

function median(key,    n, i, j, v, t, a) {
	n = cnt[key]
	if (n == 0) return "NaN"
	for (i = 1; i <= n; i++) a[i] = vals[key, i] + 0
	for (i = 2; i <= n; i++) {          # insertion sort; n is the round count
		v = a[i]
		for (j = i - 1; j >= 1 && a[j] > v; j--) a[j + 1] = a[j]
		a[j + 1] = v
	}
	if (n % 2) return a[(n + 1) / 2]
	return (a[n / 2] + a[n / 2 + 1]) / 2
}

function add(o, t, col, v,    key) {
	if (v == "-" || v == "NaN" || v == "") return
	key = o SUBSEP t SUBSEP col
	vals[key, ++cnt[key]] = v
}

function ratio(a, b) {
	if (a == "NaN" || b == "NaN" || b + 0 == 0) return "n/a"
	return sprintf("%.2f", a / b)
}

function fmtlat(v) {
	if (v == "NaN") return "n/a"
	if (v >= 10000) return sprintf("%.1fms", v / 1000)
	if (v >= 1000) return sprintf("%.2fms", v / 1000)
	return sprintf("%dus", v + 0.5)
}

BEGIN { FS = "\t"; norigins = 0 }
{
	o = $1; t = $2
	if (!(o in seenO)) { seenO[o] = 1; origins[++norigins] = o }
	add(o, t, "rps", $4); add(o, t, "p50", $5); add(o, t, "p99", $6)
	add(o, t, "cpu", $9); add(o, t, "usr", $10); add(o, t, "sys", $11); add(o, t, "util", $12)
	add(o, t, "gc", $14)
	if ($6 != "NaN") p99r[o, t, $3] = $6
	if ($9 != "NaN" && $9 != "-") cpur[o, t, $3] = $9
	if ($3 + 0 > maxround) maxround = $3 + 0
	errs[o, t] += $8; runs[o, t]++
	reqs[o, t] += $7
}
END {
	ntargets = split("gfe gfe-fast gfe-la gfe-alt stdlib haproxy nginx direct", targets, " ")
	printf "%-7s %-8s %4s %8s %9s %9s %11s %11s %9s %6s %6s\n", "origin", "target", "runs", "req/s", "p50", "p99", "CPU us/req", "usr+sys", "proxy CPU", "GC/10k", "errors"
	for (i = 1; i <= norigins; i++) {
		o = origins[i]
		for (j = 1; j <= ntargets; j++) {
			t = targets[j]
			if (!((o, t) in runs)) continue
			rps = median(o SUBSEP t SUBSEP "rps"); p50 = median(o SUBSEP t SUBSEP "p50")
			p99 = median(o SUBSEP t SUBSEP "p99"); cpu = median(o SUBSEP t SUBSEP "cpu")
			util = median(o SUBSEP t SUBSEP "util")
			usr = median(o SUBSEP t SUBSEP "usr"); sys = median(o SUBSEP t SUBSEP "sys")
			gc = median(o SUBSEP t SUBSEP "gc")
			printf "%-7s %-8s %4d %8s %9s %9s %11s %11s %9s %6s %6d\n", o, t, runs[o, t],
				(rps == "NaN" ? "n/a" : sprintf("%.0f", rps)), fmtlat(p50), fmtlat(p99),
				(cpu == "NaN" ? "-" : sprintf("%.1f", cpu)),
				(usr == "NaN" ? "-" : sprintf("%.1f+%.1f", usr, sys)),
				(util == "NaN" ? "-" : sprintf("%.0f%%", util)),
				(gc == "NaN" ? "-" : sprintf("%.2f", gc)), errs[o, t]
			M[o, t, "rps"] = rps; M[o, t, "p50"] = p50; M[o, t, "p99"] = p99; M[o, t, "cpu"] = cpu
		}
	}
	printf "\n%-7s %-17s %8s %15s %8s %8s\n", "origin", "ratio", "req/s", "per core (CPU)", "p50", "p99"
	npairs = split("gfe/haproxy gfe-fast/haproxy gfe/nginx gfe-fast/nginx gfe/stdlib gfe-fast/stdlib gfe-fast/gfe gfe-fast/gfe-alt gfe-fast/gfe-la gfe/direct gfe-fast/direct stdlib/haproxy", pairs, " ")
	for (i = 1; i <= norigins; i++) {
		o = origins[i]
		for (j = 1; j <= npairs; j++) {
			split(pairs[j], ab, "/"); a = ab[1]; b = ab[2]
			if (!((o, a) in runs) || !((o, b) in runs)) continue
			# Per core: requests per CPU-second, i.e. the inverse ratio of CPU per request.
			printf "%-7s %-17s %7s× %14s× %7s× %7s×\n", o, pairs[j],
				ratio(M[o, a, "rps"], M[o, b, "rps"]),
				(b == "direct" ? "-" : ratio(M[o, b, "cpu"], M[o, a, "cpu"])),
				ratio(M[o, a, "p50"], M[o, b, "p50"]), ratio(M[o, a, "p99"], M[o, b, "p99"])
		}
	}
	nbr = split("gfe-fast/haproxy gfe-fast/nginx gfe-fast/gfe-alt gfe-fast/gfe-la", byround, " ")
	header = 0
	for (i = 1; i <= norigins; i++) {
		o = origins[i]
		for (j = 1; j <= nbr; j++) {
			split(byround[j], ab, "/"); a = ab[1]; b = ab[2]
			if (!((o, a) in runs) || !((o, b) in runs)) continue
			if (!header) { printf "\n%-7s %-17s %-8s %8s  %s\n", "origin", "by round", "figure", "median", "round 1, 2, ..."; header = 1 }
			# Per core is b's CPU per request over a's, as above.
			byRound(o, byround[j], "per core", cpur, b, a)
			byRound(o, byround[j], "p99", p99r, a, b)
		}
	}
}

# byRound prints, for origin o, the ratio num/den of the values in v
# round by round, and their median.
function byRound(o, pair, figure, v, num, den,    r, key, line, x) {
	key = o SUBSEP pair SUBSEP figure
	for (r = 1; r <= maxround; r++) {
		if (!((o, num, r) in v) || !((o, den, r) in v) || v[o, den, r] + 0 == 0) continue
		x = ratio(v[o, num, r], v[o, den, r])
		vals[key, ++cnt[key]] = x
		line = line " " x
	}
	if (line != "") printf "%-7s %-17s %-8s %7.2f×  %s\n", o, pair, figure, median(key), line
}

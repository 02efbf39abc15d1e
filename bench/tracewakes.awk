# tracewakes.awk: what woke a Go process and what each kind of goroutine
# cost, from a runtime trace (BENCHMARKS.md §8, "15,000 idle connections").
#
#   go run ./cmd/idlebench --trace-dir DIR
#   go tool trace -d=parsed DIR/idle-without.trace | awk -f bench/tracewakes.awk
#
# A goroutine is named by the first frame outside the runtime and standard
# plumbing (runtime., sync., internal/, time., net., context.) of the stack
# it blocks in most often; for each name it prints the share of one core
# its goroutines ran and how often a second they blocked (each block is
# one wake-up later), busiest first, then the total.
function keyof(stk,   n, i, f, parts) {
	n = split(stk, parts, "\n")
	for (i = 1; i <= n; i++) {
		f = parts[i]
		if (f == "") continue
		if (f !~ /^(runtime\.|sync\.|internal\/|time\.|net\.|context\.)/) return f
	}
	return (n > 0 && parts[1] != "") ? parts[1] : "?"
}
function flush() {
	if (pend_g == "") return
	k = keyof(stk)
	if (pend_waiting) { kc[pend_g SUBSEP k]++; blocks[pend_g]++ } else any[pend_g] = k
	gs[pend_g] = 1
	pend_g = ""; stk = ""
}
/StateTransition/ && /GoID=/ {
	flush()
	match($0, /Time=[0-9]+/); t = substr($0, RSTART + 5, RLENGTH - 5) + 0
	if (t0 == 0) t0 = t
	t1 = t
	match($0, /GoID=[0-9]+/); g = substr($0, RSTART + 5, RLENGTH - 5)
	rest = substr($0, RSTART + RLENGTH)
	match(rest, /[A-Za-z]+->[A-Za-z]+/); tr = substr(rest, RSTART, RLENGTH)
	split(tr, ab, "->")
	if (ab[2] == "Running") start[g] = t
	if (ab[1] == "Running") {
		if (g in start) { cpu[g] += t - start[g]; delete start[g] }
		pend_g = g; pend_waiting = (ab[2] == "Waiting"); stk = ""; instk = 0
	}
	next
}
/^TransitionStack=/ { if (pend_g != "") instk = 1; next }
/^\t\t/ { next }
/^\t/ { if (instk) { f = $0; sub(/^\t/, "", f); sub(/ @ .*/, "", f); stk = stk f "\n" }; next }
{ if (instk) { instk = 0; flush() } }
END {
	flush()
	secs = (t1 - t0) / 1e9
	if (secs <= 0) { print "no goroutine transitions"; exit 1 }
	for (g in gs) {
		best = ""; bn = 0
		for (kk in kc) { split(kk, p, SUBSEP); if (p[1] == g && kc[kk] > bn) { bn = kc[kk]; best = p[2] } }
		if (best == "") best = any[g]
		name[g] = best
	}
	for (g in cpu) { n = (g in name) ? name[g] : "?"; acpu[n] += cpu[g]; tot += cpu[g] }
	for (g in blocks) { n = (g in name) ? name[g] : "?"; ablk[n] += blocks[g]; tb += blocks[g] }
	printf "%.2f s of trace: goroutines ran %.2f%% of a core and blocked %.0f times a second\n", secs, 100 * tot / 1e9 / secs, tb / secs
	cmd = "sort -t'\t' -k1,1gr | cut -f2-"
	for (n in acpu) printf "%.3f\t%7.3f%% of a core\t%7.1f blocks/s\t%s\n", acpu[n], 100 * acpu[n] / 1e9 / secs, ablk[n] / secs, n | cmd
	close(cmd)
}

// Package prequal is Prequal's replica selection as published (Wydrowski,
// Kleinberg, Rumble, Archer, "Load is not what you should balance:
// Introducing Prequal", NSDI 2024), in its asynchronous mode: the prequal
// baseline, to compare Spillway's in-group choice against. It is pure: it
// sends no probe itself (the caller does, off the request's path), reads
// no clock and draws no random number (now and rnd are arguments).
//
// # Model
//
// Each client keeps a Pool of at most m probe answers (Config.PoolSize,
// 16). A probe asks one replica for its requests in flight (RIF) and its
// latency estimate. After each query the client sends r_probe probes
// (Config.ProbesPerQuery, 3) to replicas drawn uniformly without
// replacement (Pool.Targets) and hands their answers to Pool.Add.
//
// # Algorithm
//
// Pool.Pick, once per query:
//
//  1. Drop probes older than Config.MaxAge (1s).
//  2. θ is the Q_RIF quantile (Config.QRIF, 2^−0.25 ≈ 0.84) of the RIFs
//     of the last Config.History answers; a probe with RIF > θ is hot,
//     the others cold.
//  3. Hot-cold lexicographic rule: if some probe is cold, take the cold
//     one of least latency; otherwise the one of fewest RIF.
//  4. The probe is used once more and leaves the pool after b_reuse uses,
//     b_reuse = max{1, (1+δ)/((1−m/n)·r_probe − r_remove)} rounded at
//     random (the paper's equation 1: ≈ 1.3 for m = 16, n = 100, r_probe
//     = 3, r_remove = 1, δ = 1).
//  5. r_remove probes (Config.RemovePerQuery, 1) leave the pool,
//     alternately the worst by the same rule and the oldest.
//
// With an empty pool Pick falls back to a uniformly random replica, as
// the paper does, and counts it (Stats.Fallbacks): a pool starved of
// probes degrades to random choice.
//
// # Guarantees
//
//   - Pick's choice follows the rule above (TestPickHotCold,
//     TestPoolLifecycle, TestRemoveAlternates); a replica with a standing
//     queue is avoided (TestPrequalAvoidsLoadedReplica).
//   - Targets sends ⌊r_probe⌋ or ⌈r_probe⌉ probes (mean r_probe) to
//     distinct replicas, each equally often (TestTargets).
//   - Determinism: the same calls with the same now and rnd give the same
//     choices.
//   - Concurrency and allocation: a Pool is safe for concurrent use; its
//     methods hold its mutex for O(PoolSize + History) work and do not
//     allocate (TestAllocs, BenchmarkQuery).
//
// # Wire format
//
// A probe's answer travels as one line, "rif=N latency_us=M" (wire.go):
// AppendAnswer writes it (the test backend), ParseAnswer reads it (the
// gfe's probe sender, internal/gfe/prequalprobe) within MaxAnswerSize
// bytes, refusing anything else and clamping values beyond MaxRIF and
// MaxLatency (TestParseAnswer, FuzzParseAnswer); it does not allocate.
//
// What the paper measured, and a Go re-implementation's regimes (where it
// wins on uneven backends and loses on small CPU-bound fleets), are in
// docs/design.md §4.
package prequal

// Package shed decides which arrivals an edge refuses at once in global
// overload, so that the requests it admits keep their uncongested
// latency instead of queueing at the backends to their limit. It is pure:
// it reads no clock and draws no random number (now and rnd are
// arguments).
//
// # The plan's rule
//
// When a service's global demand D exceeds its capacity C, the waterfall
// plan runs every region at the same relative load λ = D/C
// (docs/design.md §3 rule 6). Config.FromPlan turns that into a Rule that
// refuses the fraction
//
//	f = 1 − Admit/λ   (0 when that is below MinFraction)
//
// of arrivals at every gfe. Because every gfe plans over the same
// gossiped world, f is the same at every site: each site's admitted
// demand is (1 − f) times its demand, the plan's proportions are
// unchanged, and each region receives (1 − f)·λ·capacity = Admit ×
// capacity. With D = 216 and C = 180 (λ = 1.2), f = 1/6: a site sending
// 130 has 108.3 admitted, and every region runs at exactly its capacity
// (TestFromPlanUniform). Rule.Admit refuses an arrival when its random
// value falls below f·2^64, so exactly f of uniformly random arrivals are
// refused (TestRuleAdmit); it does not allocate.
//
// # The cap
//
// λ counts the demand the peers gossip, which a holder of the gossip key
// can inflate up to the plausibility bounds (lb/routing Bounds: twice the
// declared capacity per site), so f alone would let one lying peer have
// every gfe refuse most of its real users. MaxFraction (config
// overload.max_shed, default 0.5) caps f. The cap is the same at every
// gfe, so the admitted proportions still follow rule 6 (uniform); above
// λ = Admit/(1 − MaxFraction) each region admits more than Admit ×
// capacity and the rest queues at the backends (TestShedLyingPeerBounded
// in lb/routing, TestShedStepsEndToEnd in e2e).
//
// # The client-side throttle
//
// Throttle is the alternative that needs no plan: the SRE book's adaptive
// throttling ("Handling Overload"). Over a sliding window (2 minutes by
// default) it counts the requests the client attempted and the ones the
// backends accepted, and refuses a request locally with probability
//
//	p = max(0, (requests − K·accepts)/(requests + 1))
//
// With demand D and a backend that accepts C < D/K, p converges to
// 1 − K·C/D: the client still sends K times what is accepted, enough to
// see capacity come back, and refuses the rest without sending it
// (TestThrottleSteadyState: 100/s attempted, 25/s accepted, K = 2: 50/s
// sent). It reacts to what backends answer rather than to the plan, so
// it is slower to engage (it needs rejections first) and it spends K − 1
// rejected requests for every accepted one.
//
// # Guarantees
//
//   - Fraction is 0 unless demand exceeds Admit × capacity by at least
//     MinFraction of demand, at most MaxFraction, and never NaN
//     (TestFraction); so is
//     FromPlan's, out of overload too, where λ is 1 whatever the demand
//     (TestFromPlanBelowOverload).
//   - Admitted load equals Admit × capacity in every region of a plan in
//     uniform overload (TestFromPlanUniform).
//   - Determinism: the same rnd (and now) give the same decisions.
//   - Concurrency and allocation: a Rule is an immutable value; a
//     Throttle is safe for concurrent use, its window sums staying equal
//     to its buckets' (TestThrottleConcurrent); neither allocates.
package shed

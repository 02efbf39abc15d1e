// Package priority is Envoy's priority-level load model (Envoy's
// documentation, "Priority levels" and "Overprovisioning factor" of the
// load-balancing architecture overview), for the envoy_priority baseline:
// how much of a client's traffic each priority level receives from the
// health of the levels alone. It is pure: no I/O, no clock, no random
// numbers.
//
// # Model
//
// A Level is a set of hosts of one priority, 0 the highest: in the
// envoy_priority baseline one region per level, ordered by the site's RTT
// (the nearest region is priority 0). Health returns a level's health
// score, an integer percent as Envoy computes it:
//
//	health = min(100, overprovisioning × healthy / total)
//
// with the overprovisioning factor in percent (DefaultOverprovisioning,
// 140) and integer division. Loads distributes 100 percent of the traffic
// over the levels in order: with N = min(100, Σ health) (the normalized
// total health), level i receives min(remaining, health_i × 100 / N), and
// what rounding leaves goes to the first level with a non-zero health. So
// with every level fully healthy level 0 takes everything; with 60% of
// level 0 healthy it takes 84% and level 1 (if healthy) 16%.
//
// The load depends on health only: a healthy level keeps its share however
// loaded it is (Envoy has no capacity spill between priorities).
//
// # Differences from Envoy
//
//   - No panic threshold: Envoy, when the normalized total health is below
//     100% and a level's healthy share below its panic threshold (50%),
//     sends that level's share to all of its hosts regardless of health,
//     and with no healthy host anywhere spreads the load over every level
//     by host count. Here a level's share always goes to its healthy hosts,
//     and with no healthy host anywhere Loads gives every level 0 (the
//     caller has no backend to pick).
//   - No degraded hosts: a host is healthy or not.
//   - Host counts, not weights: every host weighs the same.
package priority

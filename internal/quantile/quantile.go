// Package quantile computes quantiles by the nearest-rank rule, the one
// convention of every latency percentile Spillway's tools print (lbbench,
// `lbsim autoscale-bench`, loadgen, quotabench): the q-quantile of n values
// is the value of rank ⌈q·n⌉ in ascending order (the smallest value with at
// least a fraction q of the values at or below it), never an interpolation
// between two. It is gonum's stat.Quantile with stat.Empirical, without its
// float slices and its panics on empty input. It does no I/O.
//
// A float product q·n that lands within a relative 1e-9 of a whole number
// is taken as that number, so that p/100 × n for a percentile p (0.07 × 100
// is 7.000000000000001 in float64) keeps its exact rank.
package quantile

import "math"

// Number is what a quantile is taken of: durations, counts and
// milliseconds.
type Number interface {
	~int64 | ~float64
}

// Rank returns the 1-based nearest rank of the q-quantile among n ordered
// values: ⌈q·n⌉, at least 1 and at most n; 0 when n is 0. q is clamped to
// [0, 1].
func Rank(q float64, n int64) int64 {
	if n <= 0 {
		return 0
	}
	qn := min(max(q, 0), 1) * float64(n)
	if r := math.Round(qn); math.Abs(qn-r) <= 1e-9*max(qn, 1) {
		qn = r
	}
	return min(max(int64(math.Ceil(qn)), 1), n)
}

// Of returns the q-quantile of sorted, which is in ascending order, by the
// nearest-rank rule: sorted[Rank(q, n)−1]. It returns 0 for an empty slice.
func Of[T Number](sorted []T, q float64) T {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[Rank(q, int64(len(sorted)))-1]
}

// OfCounts returns the q-quantile of a histogram by the same rule: values
// are in ascending order and counts[i] ≥ 0 is how many times values[i]
// occurs. It returns 0 when the counts add up to 0.
func OfCounts[T Number](values []T, counts []int64, q float64) T {
	var total int64
	for _, c := range counts {
		total += c
	}
	rank := Rank(q, total)
	if rank == 0 {
		return 0
	}
	var seen int64
	for i, c := range counts {
		if seen += c; seen >= rank {
			return values[i]
		}
	}
	return values[len(values)-1] // not reached: seen ends at total ≥ rank
}

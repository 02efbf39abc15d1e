// Package yardstick is what the planner's benchmarks are measured against
// (lb/waterfall's BenchmarkSortYardstick, lb/routing's
// BenchmarkBuildWorldCompute): sorting every (site, region) RTT pair of a
// World once, by RTT, ties by site and then region, with the standard
// library's sort. A planner whose cost grows like that sort's does not
// scale; the targets are fractions of it. It does no I/O.
package yardstick

import (
	"cmp"
	"slices"
)

type pair struct {
	rtt       float64
	site, reg int32
}

// Pairs holds the (site, region) pairs of one World, to be sorted again
// and again.
type Pairs struct {
	pairs, work []pair
}

// New returns the sites × regions pairs, rtt(s, r) the RTT of site s to
// region r. Reading the RTTs is done here, once, and is not what Sort
// measures.
func New(sites, regions int, rtt func(s, r int) float64) *Pairs {
	p := &Pairs{pairs: make([]pair, 0, sites*regions)}
	for s := range sites {
		for r := range regions {
			p.pairs = append(p.pairs, pair{rtt(s, r), int32(s), int32(r)})
		}
	}
	p.work = make([]pair, len(p.pairs))
	return p
}

// Sort copies the pairs into the slice it sorts (timed too) and sorts it.
// It does not allocate.
func (p *Pairs) Sort() {
	copy(p.work, p.pairs)
	slices.SortFunc(p.work, func(a, b pair) int {
		if c := cmp.Compare(a.rtt, b.rtt); c != 0 {
			return c
		}
		if c := cmp.Compare(a.site, b.site); c != 0 {
			return c
		}
		return cmp.Compare(a.reg, b.reg)
	})
}

package waterfall

import "testing"

// BenchmarkComputeMinRTT plans the worlds of BenchmarkCompute (benchSizes:
// 80 sites × 40 regions × 3 zones, and 1,000 × 100 × 3, RTTs in
// Site.RTTByRegion), so that `go test -bench=Compute` measures both
// planners in one run.
func BenchmarkComputeMinRTT(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(benchName(sz.sites, sz.regions, sz.zones), func(b *testing.B) {
			benchPlanner(b, withRTTByRegion(benchWorldOf(sz.sites, sz.regions, sz.zones)), ComputeMinRTT)
		})
	}
}

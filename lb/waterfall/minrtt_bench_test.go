package waterfall

import "testing"

// BenchmarkComputeMinRTT plans the world of BenchmarkCompute (80 sites × 40
// regions × 3 zones), so that `go test -bench=Compute` measures both
// planners in one run.
func BenchmarkComputeMinRTT(b *testing.B) {
	w := benchWorld()
	cfg := DefaultConfig()
	b.ReportAllocs()
	var p *Plan
	for b.Loop() {
		var err error
		if p, err = ComputeMinRTT(w, cfg); err != nil {
			b.Fatal(err)
		}
	}
	reportMeanRTT(b, w, p)
}

package waterfall

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/spillway-lb/spillway/lb/backend"
	"github.com/spillway-lb/spillway/lb/waterfall/yardstick"
)

// benchWorld is the world of BenchmarkCompute: 80 sites × 40 regions × 3
// zones of benchWorldOf.
func benchWorld() World { return benchWorldOf(80, 40, 3) }

// benchWorldOf is a world of sites × regions × zones: regions and sites on a
// ring, RTT growing with ring distance plus noise, demand at 90% of capacity
// but uneven (so that regions spill), and every fifth region with 40% of its
// instances healthy. benchWorldOf(80, 40, 3) is the world every published
// figure of BenchmarkCompute was measured on.
func benchWorldOf(sites, regions, zones int) World {
	rng := rand.New(rand.NewPCG(80, 40))
	var w World
	var capacity float64
	for r := range regions {
		region := Region{Name: fmt.Sprintf("region-%02d", r)}
		for z := range zones {
			healthy := 10
			if r%5 == 0 {
				healthy = 4
			}
			c := 50 + 100*rng.Float64()
			capacity += c
			region.Groups = append(region.Groups, Group{
				Name: fmt.Sprintf("region-%02d-%c", r, 'a'+z), Zone: string(rune('a' + z)),
				Instances: 10, Healthy: healthy, Capacity: c,
			})
		}
		w.Regions = append(w.Regions, region)
	}
	for s := range sites {
		st := Site{Name: fmt.Sprintf("site-%02d", s), RTT: make(map[string]float64, regions)}
		st.Demand = 0.9 * capacity / float64(sites) * (0.2 + 1.6*rng.Float64())
		for r := range regions {
			d := math.Abs(float64(s)/float64(sites) - float64(r)/float64(regions))
			d = math.Min(d, 1-d)
			st.RTT[w.Regions[r].Name] = 5 + 300*d + 5*rng.Float64()
		}
		w.Sites = append(w.Sites, st)
	}
	return w
}

// benchSizes are the worlds BenchmarkCompute, BenchmarkComputeReference and
// BenchmarkSortYardstick plan: the published 80 × 40 × 3 and the planet
// scale of 1,000 sites × 100 regions × 3 zones.
var benchSizes = []struct{ sites, regions, zones int }{{80, 40, 3}, {1000, 100, 3}}

func benchName(sites, regions, zones int) string {
	return fmt.Sprintf("sites=%d/regions=%d/zones=%d", sites, regions, zones)
}

// BenchmarkCompute plans the worlds of benchSizes, with each site's RTTs in
// Site.RTTByRegion (the form a large World should use). Its first case (80
// × 40 × 3) is the published BenchmarkCompute figure.
func BenchmarkCompute(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(benchName(sz.sites, sz.regions, sz.zones), func(b *testing.B) {
			benchPlanner(b, withRTTByRegion(benchWorldOf(sz.sites, sz.regions, sz.zones)), Compute)
		})
	}
}

// BenchmarkComputeMaps is BenchmarkCompute with the RTTs in the sites' RTT
// maps, as benchWorldOf makes them.
func BenchmarkComputeMaps(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(benchName(sz.sites, sz.regions, sz.zones), func(b *testing.B) {
			benchPlanner(b, benchWorldOf(sz.sites, sz.regions, sz.zones), Compute)
		})
	}
}

// BenchmarkComputeReference plans the same worlds with refCompute, the
// planner before the lazy per-site order, so that one run compares the two.
func BenchmarkComputeReference(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(benchName(sz.sites, sz.regions, sz.zones), func(b *testing.B) {
			benchPlanner(b, benchWorldOf(sz.sites, sz.regions, sz.zones), refCompute)
		})
	}
}

// benchPlanner times plan over w.
func benchPlanner(b *testing.B, w World, plan func(World, Config) (*Plan, error)) {
	cfg := DefaultConfig()
	b.ReportAllocs()
	var p *Plan
	for b.Loop() {
		var err error
		if p, err = plan(w, cfg); err != nil {
			b.Fatal(err)
		}
	}
	reportMeanRTT(b, w, p)
}

// BenchmarkSortYardstick is the yardstick the planner is measured against
// (lb/waterfall/yardstick): sorting every (site, region) RTT pair of the
// same world once, by RTT, ties by site and then region, with the standard
// library's sort. Copying the pairs into the slice it sorts is timed too;
// reading them out of the World's maps is not.
func BenchmarkSortYardstick(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(benchName(sz.sites, sz.regions, sz.zones), func(b *testing.B) {
			w := benchWorldOf(sz.sites, sz.regions, sz.zones)
			pairs := yardstick.New(len(w.Sites), len(w.Regions), func(s, r int) float64 { return w.Sites[s].RTT[w.Regions[r].Name] })
			b.ReportAllocs()
			for b.Loop() {
				pairs.Sort()
			}
		})
	}
}

// reportMeanRTT reports the demand-weighted mean RTT of p, in ms, so that
// the two planners' benchmarks also compare what they plan.
func reportMeanRTT(b *testing.B, w World, p *Plan) {
	var demand float64
	for _, s := range w.Sites {
		demand += s.Demand
	}
	b.ReportMetric(totalRTT(w, p)/demand, "mean-rtt-ms")
}

func BenchmarkDamp(b *testing.B) {
	w := benchWorld()
	prev := mustCompute(b, w)
	for i := range w.Sites {
		w.Sites[i].Demand *= 1.2
	}
	next := mustCompute(b, w)
	b.ReportAllocs()
	for b.Loop() {
		Damp(prev, next, 0.3)
	}
}

// benchPicker is the picker of one bench site: its row of the bench plan,
// 10 backends per group.
func benchPicker(b *testing.B, policy backend.Policy) *Picker {
	p := mustCompute(b, benchWorld())
	row := p.Row("site-07")
	backends := map[string][]*backend.Backend{}
	for _, g := range p.Groups {
		backends[g.Name] = backendsOf(g.Name, 10, 1000)
	}
	return NewPicker(row, backends, policy)
}

func BenchmarkPick(b *testing.B) {
	for _, policy := range []backend.Policy{backend.PolicyRoundRobin, backend.PolicyLeastRequest} {
		b.Run(policy.String(), func(b *testing.B) {
			p := benchPicker(b, policy)
			rng := rand.NewPCG(1, 2)
			b.ReportAllocs()
			for b.Loop() {
				c, err := p.Pick(rng.Uint64())
				if err != nil {
					b.Fatal(err)
				}
				c.Done()
			}
		})
	}
}

func BenchmarkPickParallel(b *testing.B) {
	for _, policy := range []backend.Policy{backend.PolicyRoundRobin, backend.PolicyLeastRequest} {
		b.Run(policy.String(), func(b *testing.B) {
			p := benchPicker(b, policy)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				rng := rand.NewPCG(rand.Uint64(), 3)
				for pb.Next() {
					c, err := p.Pick(rng.Uint64())
					if err != nil {
						panic(err)
					}
					c.Done()
				}
			})
		})
	}
}

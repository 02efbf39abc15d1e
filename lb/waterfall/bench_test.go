package waterfall

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/spillway-lb/spillway/lb/backend"
)

// benchWorld is a world of 80 sites × 40 regions × 3 zones: regions and
// sites on a ring, RTT growing with ring distance plus noise, demand at 90%
// of capacity but uneven (so that regions spill), and every fifth region
// with 40% of its instances healthy.
func benchWorld() World {
	const sites, regions, zones = 80, 40, 3
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
		st.Demand = 0.9 * capacity / sites * (0.2 + 1.6*rng.Float64())
		for r := range regions {
			d := math.Abs(float64(s)/sites - float64(r)/regions)
			d = math.Min(d, 1-d)
			st.RTT[w.Regions[r].Name] = 5 + 300*d + 5*rng.Float64()
		}
		w.Sites = append(w.Sites, st)
	}
	return w
}

func BenchmarkCompute(b *testing.B) {
	w := benchWorld()
	cfg := DefaultConfig()
	b.ReportAllocs()
	var p *Plan
	for b.Loop() {
		var err error
		if p, err = Compute(w, cfg); err != nil {
			b.Fatal(err)
		}
	}
	reportMeanRTT(b, w, p)
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

package routing_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/lb/routing"
	"github.com/spillway-lb/spillway/lb/waterfall"
	"github.com/spillway-lb/spillway/lb/waterfall/yardstick"
)

// planetFleet is what a gfe plans from at planet scale, in the geometry of
// lb/waterfall's benchmark world: 100 regions × 3 zones of 10 instances
// (1,000 req/s each; every fifth region with 6 of each group's 10
// instances down), and 1,000 sites on a ring, one gfe each, with an RTT to
// every region growing with ring distance plus noise and demand at 90% of
// the healthy capacity, uneven. The last peer is me.
func planetFleet(b *testing.B) (*routing.Fleet, *config.Service, []routing.Peer, routing.Peer) {
	const sites, regions, zones, instances = 1000, 100, 3, 10
	rs := make([]gfetest.Region, regions)
	var down []string
	for r := range rs {
		rs[r].Name = fmt.Sprintf("region-%02d", r)
		for z := range zones {
			zone := gfetest.Zone{Name: fmt.Sprintf("%s-%c", rs[r].Name, 'a'+z)}
			for i := range instances {
				addr := fmt.Sprintf("10.%d.%d.%d:80", r, z, i)
				zone.Addrs = append(zone.Addrs, addr)
				if r%5 == 0 && i < 6 {
					down = append(down, addr)
				}
			}
			rs[r].Zones = append(rs[r].Zones, zone)
		}
	}
	cfg := gfetest.SessionConfig(b, "waterfall", rs, "", "")
	fleet := routing.FromConfig("v1", cfg, down...)
	svc, _ := cfg.Service("web")
	capacity := float64(len(rs)*zones*instances-len(down)) * 1000
	rng := rand.New(rand.NewPCG(80, 40))
	peers := make([]routing.Peer, sites)
	for s := range peers {
		rtt := make(map[string]float64, regions)
		for r := range regions {
			d := math.Abs(float64(s)/sites - float64(r)/regions)
			rtt[rs[r].Name] = 5 + 300*math.Min(d, 1-d) + 5*rng.Float64()
		}
		peers[s] = routing.Peer{
			Node: fmt.Sprintf("gfe-%03d", s), Site: fmt.Sprintf("site-%03d", s), RTT: rtt,
			Demand: map[string]float64{"web": 0.9 * capacity / sites * (0.2 + 1.6*rng.Float64())},
		}
	}
	return fleet, svc, peers[:sites-1], peers[sites-1]
}

// BenchmarkBuildWorldCompute times what a gfe does every plan interval at
// planet scale (planetFleet): BuildWorld from its peers' gossiped state,
// then the plan, for the waterfall and for min_rtt, beside the yardstick
// of lb/waterfall's BenchmarkSortYardstick: sorting every (site, region)
// RTT of the same World once; build-only is BuildWorld alone.
func BenchmarkBuildWorldCompute(b *testing.B) {
	fleet, svc, peers, me := planetFleet(b)
	b.Run("sites=1000/regions=100/zones=3/build-only", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			routing.BuildWorld(fleet, svc, peers, me, nil)
		}
	})
	for _, bc := range []struct {
		name    string
		compute func(waterfall.World, waterfall.Config) (*waterfall.Plan, error)
	}{{"waterfall", waterfall.Compute}, {"min_rtt", waterfall.ComputeMinRTT}} {
		b.Run("sites=1000/regions=100/zones=3/plan="+bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				w := routing.BuildWorld(fleet, svc, peers, me, nil)
				if _, err := bc.compute(w, waterfall.DefaultConfig()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("sites=1000/regions=100/zones=3/sort-yardstick", func(b *testing.B) {
		w := routing.BuildWorld(fleet, svc, peers, me, nil)
		pairs := yardstick.New(len(w.Sites), len(w.Regions), func(s, r int) float64 { return w.Sites[s].RTTByRegion[r] })
		b.ReportAllocs()
		for b.Loop() {
			pairs.Sort()
		}
	})
}

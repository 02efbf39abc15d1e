package waterfall

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// twoRegions is site s between region a (10 ms, groups a-a and a-b) and
// region b (20 ms).
func twoRegions(demand, aa, ab, b float64) World {
	return World{
		Regions: []Region{reg("a", grp("a-a", aa), grp("a-b", ab)), reg("b", grp("b-a", b))},
		Sites:   []Site{site("s", demand, "a", 10, "b", 20)},
	}
}

func TestDamp(t *testing.T) {
	tests := []struct {
		name        string
		prev, next  World
		alpha       float64
		want        []Flow
		wantLoadA   float64
		wantLoadB   float64
		wantGroupAA float64
	}{
		{
			name:  "a return toward the nearer region moves halfway, split by next's zones",
			prev:  twoRegions(100, 20, 30, 1000),   // a 50, b 50
			next:  twoRegions(100, 300, 700, 1000), // all 100 in a
			alpha: 0.5,
			want: []Flow{
				flow("s", "a", "a-a", 22.5, 0.225, ReasonNearest),
				flow("s", "a", "a-b", 52.5, 0.525, ReasonNearest),
				flow("s", "b", "b-a", 25, 0.25, ReasonSpillCapacity),
			},
			wantLoadA: 75, wantLoadB: 25, wantGroupAA: 22.5,
		},
		{
			name:  "a spill away from a full region is not damped",
			prev:  twoRegions(100, 500, 500, 1000), // all 100 in a
			next:  twoRegions(100, 20, 30, 1000),   // a 50, b 50
			alpha: 0.1,
			want: []Flow{
				flow("s", "a", "a-a", 20, 0.2, ReasonNearest),
				flow("s", "a", "a-b", 30, 0.3, ReasonNearest),
				flow("s", "b", "b-a", 50, 0.5, ReasonSpillCapacity),
			},
			wantLoadA: 50, wantLoadB: 50, wantGroupAA: 20,
		},
		{
			name:  "shares are damped, demand is next's",
			prev:  twoRegions(100, 25, 25, 1000),   // a 50, b 50
			next:  twoRegions(200, 500, 500, 1000), // all in a
			alpha: 0.5,
			want: []Flow{
				flow("s", "a", "a-a", 75, 0.375, ReasonNearest),
				flow("s", "a", "a-b", 75, 0.375, ReasonNearest),
				flow("s", "b", "b-a", 50, 0.25, ReasonSpillCapacity),
			},
			wantLoadA: 150, wantLoadB: 50, wantGroupAA: 75,
		},
		{
			name:  "alpha 0 keeps prev's shares on a return",
			prev:  twoRegions(100, 25, 25, 1000),
			next:  twoRegions(100, 500, 500, 1000),
			alpha: 0,
			want: []Flow{
				flow("s", "a", "a-a", 25, 0.25, ReasonNearest),
				flow("s", "a", "a-b", 25, 0.25, ReasonNearest),
				flow("s", "b", "b-a", 50, 0.5, ReasonSpillCapacity),
			},
			wantLoadA: 50, wantLoadB: 50, wantGroupAA: 25,
		},
		{
			name:  "a region that lost all capacity is left at once",
			prev:  twoRegions(100, 25, 25, 1000), // a 50, b 50
			next:  twoRegions(100, 0, 0, 1000),   // b 100
			alpha: 0.1,
			want:  []Flow{flow("s", "b", "b-a", 100, 1, ReasonSpillCapacity)},
			// b is farther, so its reason stays spill_capacity
			wantLoadB: 100,
		},
		{
			name: "a region the site no longer reaches is left at once",
			prev: twoRegions(100, 25, 25, 1000), // a 50, b 50
			next: func() World {
				w := twoRegions(100, 500, 500, 1000)
				delete(w.Sites[0].RTT, "b")
				return w
			}(),
			alpha: 0.1,
			want: []Flow{
				flow("s", "a", "a-a", 50, 0.5, ReasonNearest),
				flow("s", "a", "a-b", 50, 0.5, ReasonNearest),
			},
			wantLoadA: 100, wantGroupAA: 50,
		},
		{
			name:  "a site that was idle starts from its idle row, all nearest, and spills from it at once",
			prev:  twoRegions(0, 500, 500, 1000), // idle row: all to a
			next:  twoRegions(100, 10, 40, 1000), // a 50, b 50
			alpha: 0.5,
			want: []Flow{
				flow("s", "a", "a-a", 10, 0.1, ReasonNearest),
				flow("s", "a", "a-b", 40, 0.4, ReasonNearest),
				flow("s", "b", "b-a", 50, 0.5, ReasonSpillCapacity),
			},
			wantLoadA: 50, wantLoadB: 50, wantGroupAA: 10,
		},
		{
			name: "a site new in next takes next's row",
			prev: World{Regions: twoRegions(0, 1, 1, 1).Regions},
			next: twoRegions(100, 25, 25, 1000),
			want: []Flow{
				flow("s", "a", "a-a", 25, 0.25, ReasonNearest),
				flow("s", "a", "a-b", 25, 0.25, ReasonNearest),
				flow("s", "b", "b-a", 50, 0.5, ReasonSpillCapacity),
			},
			alpha:     0.2,
			wantLoadA: 50, wantLoadB: 50, wantGroupAA: 25,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prev, next := mustCompute(t, tt.prev), mustCompute(t, tt.next)
			prevCopy, nextCopy := clonePlan(prev), clonePlan(next)
			d := Damp(prev, next, tt.alpha)
			if diff := cmp.Diff(tt.want, d.Flows, approx); diff != "" {
				t.Errorf("Damp(α=%v) flows (-want +got):\n%s", tt.alpha, diff)
			}
			a, _ := d.Region("a")
			b, _ := d.Region("b")
			if !near(a.Load, tt.wantLoadA) || !near(b.Load, tt.wantLoadB) {
				t.Errorf("Damp(α=%v) loads a=%v b=%v, want %v %v", tt.alpha, a.Load, b.Load, tt.wantLoadA, tt.wantLoadB)
			}
			if g := d.RegionGroups("a")[0]; !near(g.Load, tt.wantGroupAA) {
				t.Errorf("Damp(α=%v) group a-a load %v, want %v", tt.alpha, g.Load, tt.wantGroupAA)
			}
			if diff := cmp.Diff(prevCopy, prev); diff != "" {
				t.Errorf("Damp modified prev:\n%s", diff)
			}
			if diff := cmp.Diff(nextCopy, next); diff != "" {
				t.Errorf("Damp modified next:\n%s", diff)
			}
		})
	}
}

func clonePlan(p *Plan) *Plan {
	c := *p
	c.Flows = slices.Clone(p.Flows)
	c.Regions = slices.Clone(p.Regions)
	c.Groups = slices.Clone(p.Groups)
	c.Sites = slices.Clone(p.Sites)
	c.Idle = slices.Clone(p.Idle)
	return &c
}

func TestDampReturnsNext(t *testing.T) {
	prev := mustCompute(t, twoRegions(100, 500, 500, 1000))
	next := mustCompute(t, twoRegions(100, 25, 25, 1000))
	tests := []struct {
		name  string
		prev  *Plan
		alpha float64
	}{
		{"nil prev", nil, 0.5},
		{"alpha 1", prev, 1},
		{"alpha above 1", prev, 3},
		{"alpha NaN", prev, math.NaN()},
	}
	for _, tt := range tests {
		if got := Damp(tt.prev, next, tt.alpha); got != next {
			t.Errorf("%s: Damp returned %p, want next %p", tt.name, got, next)
		}
	}
	if got := Damp(prev, nil, 0.5); got != nil {
		t.Errorf("Damp(prev, nil) = %v, want nil", got)
	}
	// A negative alpha acts as 0.
	if diff := cmp.Diff(Damp(prev, next, 0).Flows, Damp(prev, next, -2).Flows); diff != "" {
		t.Errorf("Damp(α=-2) differs from Damp(α=0):\n%s", diff)
	}
}

// TestDampConverges: damping a return towards a fixed next closes the gap
// by (1−α) per step and then lands on next exactly.
func TestDampConverges(t *testing.T) {
	prev := mustCompute(t, twoRegions(100, 25, 25, 1000)) // a 50%, b 50%
	next := mustCompute(t, twoRegions(100, 500, 500, 1000))
	const alpha = 0.3
	d := prev
	for n := 1; n <= 100; n++ {
		d = Damp(d, next, alpha)
		gap := math.Abs(siteFlows(d, "s")["b"] / 100)
		want := 0.5 * math.Pow(1-alpha, float64(n))
		if want > 1e-9 && !near(gap, want) {
			t.Fatalf("step %d: gap to next %v, want %v", n, gap, want)
		}
	}
	if diff := cmp.Diff(next.Flows, d.Flows); diff != "" {
		t.Errorf("after 100 steps the damped plan is not next (-next +damped):\n%s", diff)
	}
}

// TestDampProperties damps between random worlds and their perturbed
// successors and checks what Damp guarantees: conservation of next's
// demand, zone split by next's capacities, no flow to a group without
// capacity or a region the site no longer reaches, spill never slowed
// (spillNotSlowed), and determinism.
func TestDampProperties(t *testing.T) {
	cfg := DefaultConfig()
	for seed := range uint64(500) {
		rng := rand.New(rand.NewPCG(seed, 2))
		w1 := randomWorld(rand.New(rand.NewPCG(seed, 0)))
		w2 := perturbed(w1, rng)
		prev, next := mustCompute(t, w1), mustCompute(t, w2)
		alpha := rng.Float64()
		d := Damp(prev, next, alpha)
		o := newOracle(w2, cfg)
		fail := func(what string, err error) {
			t.Errorf("seed %d α=%v: %s: %v\nprev world: %s\nnext world: %s", seed, alpha, what, err, worldJSON(w1), worldJSON(w2))
		}
		for _, prop := range []property{
			{"conservation", propConservation},
			{"zones", propZones},
			{"shape", propShape},
		} {
			if err := prop.check(o, d, rng); err != nil {
				fail(prop.name, err)
			}
		}
		for _, f := range d.Flows {
			g := d.RegionGroups(f.Region)
			i := slices.IndexFunc(g, func(g GroupLoad) bool { return g.Name == f.Group })
			if i < 0 || g[i].Capacity <= 0 || !slices.Contains(o.order[f.Site], f.Region) {
				fail("safety", fmt.Errorf("flow %+v to a group without capacity or an unreachable region", f))
			}
		}
		if err := spillNotSlowed(d, next); err != nil {
			fail("spill not slowed", err)
		}
		if diff := cmp.Diff(d, Damp(prev, next, alpha)); diff != "" {
			fail("determinism", fmt.Errorf("%s", diff))
		}
	}
}

// perturbed returns a copy of w with capacities, health, demand and
// reachability changed at random.
func perturbed(w World, rng *rand.Rand) World {
	out := World{Regions: slices.Clone(w.Regions), Sites: slices.Clone(w.Sites)}
	for i := range out.Regions {
		gs := slices.Clone(out.Regions[i].Groups)
		for j := range gs {
			gs[j].Capacity = math.Round(gs[j].Capacity*(0.5+rng.Float64())*10) / 10
			if rng.IntN(10) == 0 {
				gs[j].Capacity = 0
			}
			if gs[j].Instances > 0 && rng.IntN(5) == 0 {
				gs[j].Healthy = rng.IntN(gs[j].Instances + 1)
			}
		}
		out.Regions[i].Groups = gs
	}
	for i := range out.Sites {
		s := &out.Sites[i]
		s.Demand = math.Round(s.Demand*(0.5+rng.Float64())*10) / 10
		if rng.IntN(10) == 0 {
			s.Demand = 0
		}
		s.RTT = maps.Clone(s.RTT)
		for _, r := range w.Regions {
			if rng.IntN(10) == 0 {
				delete(s.RTT, r.Name)
			}
		}
	}
	return out
}

// spillNotSlowed checks that, for every site of next and every k, the k
// nearest regions of the site get no larger share in d than in next.
func spillNotSlowed(d, next *Plan) error {
	for _, site := range next.Sites {
		var cd, cn float64
		for _, reg := range next.SiteRegions(site.Name) {
			cd += regionShare(d.Row(site.Name), reg)
			cn += regionShare(next.Row(site.Name), reg)
			if cd > cn+1e-9 {
				return fmt.Errorf("site %s: regions up to %s get %v of its traffic, next gives them %v", site.Name, reg, cd, cn)
			}
		}
	}
	return nil
}

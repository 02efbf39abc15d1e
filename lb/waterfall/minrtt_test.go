package waterfall

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func mustComputeMinRTT(t testing.TB, w World) *Plan {
	t.Helper()
	p, err := ComputeMinRTT(w, DefaultConfig())
	if err != nil {
		t.Fatalf("ComputeMinRTT: %v", err)
	}
	return p
}

// totalRTT is Σ demand × RTT over p's flows.
func totalRTT(w World, p *Plan) float64 {
	rtt := make(map[string]map[string]float64, len(w.Sites))
	for _, s := range w.Sites {
		rtt[s.Name] = s.RTT
		if s.RTTByRegion != nil {
			rtt[s.Name] = map[string]float64{}
			for r, v := range s.RTTByRegion {
				rtt[s.Name][w.Regions[r].Name] = v
			}
		}
	}
	var sum float64
	for _, f := range p.Flows {
		sum += f.Demand * rtt[f.Site][f.Region]
	}
	return sum
}

// TestComputeMinRTTScenarios solves small worlds by hand, one named case
// each, with exact numbers.
func TestComputeMinRTTScenarios(t *testing.T) {
	tests := []struct {
		name         string
		world        World
		wantFlows    []Flow
		wantLoads    map[string]float64 // region → load
		wantLambda   float64
		wantIdle     []Flow
		wantUnplaced map[string]float64
		wantRTT      float64 // Σ demand × RTT
	}{
		{
			// Compute: x→a 80, y→a 20, y→b 60: 800 + 400 + 6000 = 7200.
			name: "a site whose second-nearest region is almost as close steps aside",
			world: World{
				Regions: []Region{reg("a", grp("a-a", 100)), reg("b", grp("b-a", 1000))},
				Sites: []Site{
					site("x", 80, "a", 10, "b", 11),
					site("y", 80, "a", 20, "b", 100),
				},
			},
			wantFlows: []Flow{
				flow("x", "a", "a-a", 20, 0.25, ReasonNearest),
				flow("x", "b", "b-a", 60, 0.75, ReasonSpillCapacity),
				flow("y", "a", "a-a", 80, 1, ReasonNearest),
			},
			wantLoads:  map[string]float64{"a": 100, "b": 60},
			wantLambda: 1,
			wantRTT:    20*10 + 60*11 + 80*20,
		},
		{
			name: "chain of step-asides: each site moves one region over",
			world: World{
				Regions: []Region{reg("a", grp("a-a", 100)), reg("b", grp("b-a", 100)), reg("c", grp("c-a", 100))},
				Sites: []Site{
					site("p", 100, "a", 10, "b", 12, "c", 90),
					site("q", 100, "a", 20, "b", 21, "c", 23),
					site("r", 50, "b", 30, "c", 31, "a", 90),
				},
			},
			// p loses most by leaving a (2 ms, q only 1 ms); q then takes
			// b, whose other claimant r has c only 1 ms farther:
			// p→a, q→b, r→c = 1000 + 2100 + 1550 = 4650. Splitting q over
			// b and c costs 4700, q→a with p→b 4750.
			wantFlows: []Flow{
				flow("p", "a", "a-a", 100, 1, ReasonNearest),
				flow("q", "b", "b-a", 100, 1, ReasonSpillCapacity),
				flow("r", "c", "c-a", 50, 1, ReasonSpillCapacity),
			},
			wantLoads:  map[string]float64{"a": 100, "b": 100, "c": 50},
			wantLambda: 1,
			wantRTT:    4650,
		},
		{
			name: "all regions under capacity: everything stays nearest",
			world: World{
				Regions: []Region{reg("us", grp("us-a", 100)), reg("eu", grp("eu-a", 100))},
				Sites: []Site{
					site("nyc", 60, "us", 10, "eu", 80),
					site("ams", 70, "eu", 10, "us", 80),
				},
			},
			wantFlows: []Flow{
				flow("ams", "eu", "eu-a", 70, 1, ReasonNearest),
				flow("nyc", "us", "us-a", 60, 1, ReasonNearest),
			},
			wantLoads:  map[string]float64{"us": 60, "eu": 70},
			wantLambda: 1,
			wantRTT:    1300,
		},
		{
			name: "more than half of a region unhealthy: preemptive spill (h=0.4 keeps 80%), zones split by capacity",
			world: World{
				Regions: []Region{
					reg("a", sickGrp("a-a", 600, 6, 2), sickGrp("a-b", 400, 4, 2)),
					reg("b", grp("b-a", 1000)),
				},
				Sites: []Site{site("s", 100, "a", 10, "b", 30)},
			},
			wantFlows: []Flow{
				flow("s", "a", "a-a", 48, 0.48, ReasonNearest),
				flow("s", "a", "a-b", 32, 0.32, ReasonNearest),
				flow("s", "b", "b-a", 20, 0.2, ReasonSpillHealth),
			},
			wantLoads:  map[string]float64{"a": 80, "b": 20},
			wantLambda: 1,
			wantRTT:    80*10 + 20*30,
		},
		{
			// Compute applies keep to what reaches b (20), sending 16 to b
			// and 4 to c; min_rtt bounds b at 80% of the site's demand.
			name: "two unhealthy regions in a row: keep bounds each at a share of the site's demand",
			world: World{
				Regions: []Region{
					reg("a", sickGrp("a-a", 1000, 10, 4)),
					reg("b", sickGrp("b-a", 1000, 10, 4)),
					reg("c", grp("c-a", 1000)),
				},
				Sites: []Site{site("s", 100, "a", 10, "b", 20, "c", 30)},
			},
			wantFlows: []Flow{
				flow("s", "a", "a-a", 80, 0.8, ReasonNearest),
				flow("s", "b", "b-a", 20, 0.2, ReasonSpillHealth),
			},
			wantLoads:  map[string]float64{"a": 80, "b": 20, "c": 0},
			wantLambda: 1,
			wantRTT:    1200,
		},
		{
			name: "preemptive spill with no room elsewhere returns to the nearest region",
			world: World{
				Regions: []Region{reg("a", sickGrp("a-a", 100, 10, 4)), reg("b", grp("b-a", 10))},
				Sites:   []Site{site("s", 100, "a", 10, "b", 20)},
			},
			wantFlows: []Flow{
				flow("s", "a", "a-a", 90, 0.9, ReasonNearest),
				flow("s", "b", "b-a", 10, 0.1, ReasonSpillHealth),
			},
			wantLoads:  map[string]float64{"a": 90, "b": 10},
			wantLambda: 1,
			wantRTT:    1100,
		},
		{
			// Ignoring health, x→a 100 and y→b 40 would cost 1400; but a
			// keeps at most 80 of x, the 20 that must leave fill b, and y
			// makes room in b by sending 20 to a.
			name: "the keep bound is kept before RTT is minimised",
			world: World{
				Regions: []Region{reg("a", sickGrp("a-a", 100, 10, 4)), reg("b", grp("b-a", 40))},
				Sites: []Site{
					site("x", 100, "a", 10, "b", 50),
					site("y", 40, "b", 10, "a", 11),
				},
			},
			wantFlows: []Flow{
				flow("x", "a", "a-a", 80, 0.8, ReasonNearest),
				flow("x", "b", "b-a", 20, 0.2, ReasonSpillHealth),
				flow("y", "b", "b-a", 20, 0.5, ReasonNearest),
				flow("y", "a", "a-a", 20, 0.5, ReasonSpillCapacity),
			},
			wantLoads:  map[string]float64{"a": 100, "b": 40},
			wantLambda: 1,
			wantRTT:    2220,
		},
		{
			name: "global demand 20% over global capacity: every region at 120%",
			world: World{
				Regions: []Region{
					reg("a", grp("a-a", 60), grp("a-b", 40)),
					reg("b", grp("b-a", 200)),
				},
				Sites: []Site{
					site("sa", 150, "a", 5, "b", 50),
					site("sb", 210, "b", 5, "a", 50),
				},
			},
			wantFlows: []Flow{
				flow("sa", "a", "a-a", 72, 0.48, ReasonNearest),
				flow("sa", "a", "a-b", 48, 0.32, ReasonNearest),
				flow("sa", "b", "b-a", 30, 0.2, ReasonSpillCapacity),
				flow("sb", "b", "b-a", 210, 1, ReasonNearest),
			},
			wantLoads:  map[string]float64{"a": 120, "b": 240},
			wantLambda: 1.2,
			wantRTT:    120*5 + 30*50 + 210*5,
		},
		{
			name: "equal RTT: ties broken by name, deterministically",
			world: World{
				Regions: []Region{reg("y", grp("y-a", 50)), reg("x", grp("x-a", 50)), reg("z", grp("z-a", 100))},
				Sites: []Site{
					site("s2", 50, "x", 10, "y", 10, "z", 40),
					site("s1", 50, "x", 10, "y", 10, "z", 40),
				},
			},
			// Both start in x; the excess leaves through the site with
			// the lower index, s1.
			wantFlows: []Flow{
				flow("s1", "y", "y-a", 50, 1, ReasonSpillCapacity),
				flow("s2", "x", "x-a", 50, 1, ReasonNearest),
			},
			wantLoads:  map[string]float64{"x": 50, "y": 50, "z": 0},
			wantLambda: 1,
			wantRTT:    1000,
		},
		{
			name: "sites reaching only full regions: uniform overload over the set they reach",
			world: World{
				Regions: []Region{reg("a", grp("a-a", 100)), reg("b", grp("b-a", 300)), reg("c", grp("c-a", 1000))},
				Sites: []Site{
					site("ya", 100, "a", 1),
					site("yb", 300, "b", 1),
					site("x", 100, "a", 10, "b", 20),
					site("z", 1, "c", 1),
				},
			},
			wantFlows: []Flow{
				flow("x", "a", "a-a", 25, 0.25, ReasonNearest),
				flow("x", "b", "b-a", 75, 0.75, ReasonOverload),
				flow("ya", "a", "a-a", 100, 1, ReasonNearest),
				flow("yb", "b", "b-a", 300, 1, ReasonNearest),
				flow("z", "c", "c-a", 1, 1, ReasonNearest),
			},
			wantLoads:  map[string]float64{"a": 125, "b": 375, "c": 1},
			wantLambda: 1,
			wantRTT:    25*10 + 75*20 + 100 + 300 + 1,
		},
		{
			// {a, ya, x, b, yb} does not fit at λ = 1; at its level 1.75
			// ya alone overfills a, so {a, ya} runs at 2 and {b, x, yb} at
			// 1.5: x leaves a to ya although a is nearer.
			name: "nested overload: the most overloaded set runs at its own level",
			world: World{
				Regions: []Region{reg("a", grp("a-a", 100)), reg("b", grp("b-a", 100)), reg("c", grp("c-a", 1000))},
				Sites: []Site{
					site("ya", 200, "a", 1),
					site("x", 50, "a", 10, "b", 20),
					site("yb", 100, "b", 1),
					site("z", 1, "c", 1),
				},
			},
			wantFlows: []Flow{
				flow("x", "b", "b-a", 50, 1, ReasonOverload),
				flow("ya", "a", "a-a", 200, 1, ReasonNearest),
				flow("yb", "b", "b-a", 100, 1, ReasonNearest),
				flow("z", "c", "c-a", 1, 1, ReasonNearest),
			},
			wantLoads:  map[string]float64{"a": 200, "b": 150, "c": 1},
			wantLambda: 1,
			wantRTT:    50*20 + 200 + 100 + 1,
		},
		{
			name: "site reaching no capacity: unplaced, the others planned",
			world: World{
				Regions: []Region{reg("a", grp("a-a", 100)), reg("dark", grp("dark-a", 0))},
				Sites: []Site{
					site("ok", 10, "a", 5),
					site("cut", 40, "dark", 5, "gone", 1),
					{Name: "lost", Demand: 7},
				},
			},
			wantFlows:    []Flow{flow("ok", "a", "a-a", 10, 1, ReasonNearest)},
			wantLoads:    map[string]float64{"a": 10, "dark": 0},
			wantLambda:   1,
			wantUnplaced: map[string]float64{"cut": 40, "lost": 7},
			wantRTT:      50,
		},
		{
			name: "site without demand gets an idle row over the final loads",
			world: World{
				Regions: []Region{reg("a", grp("a-a", 50)), reg("b", sickGrp("b-a", 100, 10, 3)), reg("c", grp("c-a", 100))},
				Sites: []Site{
					site("busy", 50, "a", 1),
					site("quiet", 0, "a", 5, "b", 10, "c", 20),
				},
			},
			wantFlows:  []Flow{flow("busy", "a", "a-a", 50, 1, ReasonNearest)},
			wantLoads:  map[string]float64{"a": 50, "b": 0, "c": 0},
			wantLambda: 1,
			// a is full; b (h=0.3) keeps 60%, c takes the rest.
			wantIdle: []Flow{
				flow("quiet", "b", "b-a", 0, 0.6, ReasonSpillCapacity),
				flow("quiet", "c", "c-a", 0, 0.4, ReasonSpillHealth),
			},
			wantRTT: 50,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustComputeMinRTT(t, tt.world)
			checkPlan(t, "ComputeMinRTT", p, tt.wantFlows, tt.wantIdle, tt.wantLoads, tt.wantLambda, tt.wantUnplaced)
			if got := totalRTT(tt.world, p); !near(got, tt.wantRTT) {
				t.Errorf("ComputeMinRTT total RTT = %v, want %v", got, tt.wantRTT)
			}
		})
	}
}

// TestComputeMinRTTBeatsWaterfall: on the step-aside world min_rtt's mean
// RTT is a third of the waterfall's, and on the benchmark world it is lower
// too (the figure is logged).
func TestComputeMinRTTBeatsWaterfall(t *testing.T) {
	for _, tt := range []struct {
		name     string
		world    World
		maxRatio float64 // min_rtt / waterfall total RTT at most
	}{
		{"step aside", World{
			Regions: []Region{reg("a", grp("a-a", 100)), reg("b", grp("b-a", 1000))},
			Sites:   []Site{site("x", 80, "a", 10, "b", 11), site("y", 80, "a", 20, "b", 100)},
		}, 2460.0 / 7200},
		{"benchmark world", benchWorld(), 0.99},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wf, mr := totalRTT(tt.world, mustCompute(t, tt.world)), totalRTT(tt.world, mustComputeMinRTT(t, tt.world))
			t.Logf("total RTT: waterfall %.6g, min_rtt %.6g (%.2f%% lower)", wf, mr, 100*(1-mr/wf))
			if mr > tt.maxRatio*wf*(1+1e-12) {
				t.Errorf("min_rtt total RTT %v, want at most %v × waterfall's %v", mr, tt.maxRatio, wf)
			}
		})
	}
}

// nearestFits returns a copy of w with every group healthy and every
// region's capacity raised, if needed, to hold the demand of all sites whose
// nearest region with capacity it is. Then both planners send every site's
// demand to its nearest region.
func nearestFits(w World, rng *rand.Rand) World {
	out := shuffled(w, rng)
	o := newOracle(out, DefaultConfig())
	need := map[string]float64{}
	for _, s := range out.Sites {
		for _, r := range o.order[s.Name] {
			if o.capacity[r] > 0 {
				need[r] += s.Demand
				break
			}
		}
	}
	for i := range out.Regions {
		r := &out.Regions[i]
		for j := range r.Groups {
			r.Groups[j].Healthy = r.Groups[j].Instances
		}
		if extra := need[r.Name] - o.capacity[r.Name]; extra > 0 && o.capacity[r.Name] > 0 {
			for j := range r.Groups {
				if r.Groups[j].Capacity > 0 {
					r.Groups[j].Capacity += extra + float64(rng.IntN(3))
					break
				}
			}
		}
	}
	return out
}

// TestComputeMinRTTEqualsComputeWhenNearestFits: when every site's nearest
// region has room for it, both planners return the very same Plan.
func TestComputeMinRTTEqualsComputeWhenNearestFits(t *testing.T) {
	for seed := range uint64(500) {
		w := nearestFits(randomWorld(rand.New(rand.NewPCG(seed, 0))), rand.New(rand.NewPCG(seed, 2)))
		want := mustCompute(t, w)
		got := mustComputeMinRTT(t, w)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("seed %d: ComputeMinRTT differs from Compute (-Compute +ComputeMinRTT):\n%s\nworld: %s", seed, diff, worldJSON(w))
		}
	}
}

// minRTTProperties are the guarantees of docs/design.md §3 that min_rtt keeps
// ((b) and (e) are the waterfall's order, which min_rtt trades for RTT),
// the Plan's shape, and min_rtt's own: the keep bound and never doing worse
// than the waterfall when the waterfall respects min_rtt's constraints.
var minRTTProperties = []property{
	{"(a) demand fits ⇒ no region above capacity", propCapacity},
	{"(c) demand exceeds capacity ⇒ equal load/capacity", propUniformOverload},
	{"(d) group load ∝ group capacity", propZones},
	{"(f) identical input ⇒ identical plan", propDeterministicMinRTT},
	{"(g) shares sum to 1, demand conserved", propConservation},
	{"plan shape: order, loads, summaries", propShape},
	{"keep bound: unhealthy regions take ≤ keep·demand while there is room elsewhere", propKeepBound},
	{"total RTT ≤ the waterfall's when the waterfall is feasible", propNoWorseThanWaterfall},
}

// TestComputeMinRTTProperties checks minRTTProperties on propertyWorlds
// random worlds; a failure names the seed of the world, as in
// TestProperties.
func TestComputeMinRTTProperties(t *testing.T) {
	cfg := DefaultConfig()
	for seed := range uint64(propertyWorlds) {
		w := randomWorld(rand.New(rand.NewPCG(seed, 0)))
		p, err := ComputeMinRTT(w, cfg)
		if err != nil {
			t.Fatalf("seed %d: ComputeMinRTT: %v\nworld: %s", seed, err, worldJSON(w))
		}
		o := newOracle(w, cfg)
		for _, prop := range minRTTProperties {
			if err := prop.check(o, p, rand.New(rand.NewPCG(seed, 1))); err != nil {
				t.Errorf("seed %d: property %s: %v\nworld: %s", seed, prop.name, err, worldJSON(w))
			}
		}
	}
}

// TestMinRTTPropertiesCatchBrokenPlans makes sure the min_rtt property
// checks can fail: a plan with one flow moved elsewhere must break one.
func TestMinRTTPropertiesCatchBrokenPlans(t *testing.T) {
	cfg := DefaultConfig()
	tried, caught := 0, 0
	for seed := range uint64(200) {
		w := randomWorld(rand.New(rand.NewPCG(seed, 0)))
		p := mustComputeMinRTT(t, w)
		if len(p.Flows) == 0 {
			continue
		}
		tried++
		broken := *p
		broken.Flows = append([]Flow(nil), p.Flows...)
		broken.Flows[len(broken.Flows)/2].Demand *= 1.01
		o := newOracle(w, cfg)
		for _, prop := range minRTTProperties {
			if prop.check(o, &broken, rand.New(rand.NewPCG(seed, 1))) != nil {
				caught++
				break
			}
		}
	}
	if caught < tried*9/10 {
		t.Errorf("properties caught %d of %d broken plans, want nearly all", caught, tried)
	}
}

func propDeterministicMinRTT(o *oracle, p *Plan, rng *rand.Rand) error {
	for i := range 2 {
		w := o.w
		if i == 1 {
			w = shuffled(o.w, rng)
		}
		q, err := ComputeMinRTT(w, DefaultConfig())
		if err != nil {
			return err
		}
		if diff := cmp.Diff(p, q); diff != "" {
			return fmt.Errorf("plans differ (-first +again):\n%s", diff)
		}
	}
	return nil
}

// propKeepBound: a site sends more than keep·demand to an unhealthy region
// only when every other region it reaches is full at λ·capacity or is
// unhealthy and already holds its keep share (rule 5 as min_rtt reads it).
func propKeepBound(o *oracle, p *Plan, _ *rand.Rand) error {
	for _, s := range o.w.Sites {
		sent := siteFlows(p, s.Name)
		for _, r := range o.order[s.Name] {
			k := o.keep[r]
			if sent[r] <= k*s.Demand+1e-9*s.Demand {
				continue
			}
			for _, other := range o.order[s.Name] {
				if other == r || o.capacity[other] == 0 || o.full(p, other) {
					continue
				}
				if ko := o.keep[other]; ko == 1 || sent[other] < ko*s.Demand-1e-9*s.Demand {
					return fmt.Errorf("site %s sends %v > keep %v × %v to %s while %s has room", s.Name, sent[r], k, s.Demand, r, other)
				}
			}
		}
	}
	return nil
}

// propNoWorseThanWaterfall: the waterfall's plan is a candidate for min_rtt
// whenever it keeps every region within λ·capacity and every unhealthy
// region within keep·demand of each site; then min_rtt's total RTT is no
// higher.
func propNoWorseThanWaterfall(o *oracle, p *Plan, _ *rand.Rand) error {
	wf, err := Compute(o.w, DefaultConfig())
	if err != nil {
		return err
	}
	for _, r := range wf.Regions {
		if lim := o.lambda * r.Capacity; r.Load > lim+1e-9*math.Max(1, lim) {
			return nil
		}
	}
	for _, s := range o.w.Sites {
		for r, x := range siteFlows(wf, s.Name) {
			if x > o.keep[r]*s.Demand+1e-9*s.Demand {
				return nil
			}
		}
	}
	got, want := totalRTT(o.w, p), totalRTT(o.w, wf)
	if got > want+1e-9*math.Max(1, want) {
		return fmt.Errorf("total RTT %v > waterfall's %v", got, want)
	}
	return nil
}

func TestComputeMinRTTInvalid(t *testing.T) {
	tests := []struct {
		name    string
		world   World
		cfg     Config
		wantErr error
	}{
		{"negative demand", World{Sites: []Site{{Name: "s", Demand: -1}}}, DefaultConfig(), ErrInvalidWorld},
		{"duplicate region", World{Regions: []Region{reg("a"), reg("a")}}, DefaultConfig(), ErrInvalidWorld},
		{"threshold above 1", World{}, Config{SpillThreshold: 2}, ErrInvalidConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ComputeMinRTT(tt.world, tt.cfg)
			if !errors.Is(err, tt.wantErr) || p != nil {
				t.Errorf("ComputeMinRTT() = %v, %v; want nil, %v", p, err, tt.wantErr)
			}
		})
	}
}

func TestComputeMinRTTEmpty(t *testing.T) {
	p := mustComputeMinRTT(t, World{})
	want := &Plan{Flows: []Flow{}, Regions: []RegionLoad{}, Groups: []GroupLoad{}, Sites: []SiteLoad{}, Lambda: 1}
	if diff := cmp.Diff(want, p, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("ComputeMinRTT(World{}) (-want +got):\n%s", diff)
	}
}

// ExampleComputeMinRTT is the step-aside example of ComputeMinRTT's
// documentation, next to Compute's plan of the same world.
func ExampleComputeMinRTT() {
	w := World{
		Regions: []Region{
			{Name: "a", Groups: []Group{{Name: "a-1", Instances: 10, Healthy: 10, Capacity: 100}}},
			{Name: "b", Groups: []Group{{Name: "b-1", Instances: 10, Healthy: 10, Capacity: 1000}}},
		},
		Sites: []Site{
			{Name: "x", Demand: 80, RTT: map[string]float64{"a": 10, "b": 11}},
			{Name: "y", Demand: 80, RTT: map[string]float64{"a": 20, "b": 100}},
		},
	}
	for _, planner := range []struct {
		name    string
		compute func(World, Config) (*Plan, error)
	}{{"waterfall", Compute}, {"min_rtt", ComputeMinRTT}} {
		p, err := planner.compute(w, DefaultConfig())
		if err != nil {
			fmt.Println(err)
			return
		}
		var sum float64
		fmt.Printf("%s:\n", planner.name)
		for _, f := range p.Flows {
			rtt := w.Sites[0].RTT[f.Region]
			if f.Site == "y" {
				rtt = w.Sites[1].RTT[f.Region]
			}
			sum += f.Demand * rtt
			fmt.Printf("  %s → %s  %4.1f  %s\n", f.Site, f.Region, f.Demand, f.Reason)
		}
		fmt.Printf("  mean RTT %.3f ms\n", sum/160)
	}
	// Output:
	// waterfall:
	//   x → a  80.0  nearest
	//   y → a  20.0  nearest
	//   y → b  60.0  spill_capacity
	//   mean RTT 45.000 ms
	// min_rtt:
	//   x → a  20.0  nearest
	//   x → b  60.0  spill_capacity
	//   y → a  80.0  nearest
	//   mean RTT 15.375 ms
}

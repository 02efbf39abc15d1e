package waterfall

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// propertyWorlds is how many random worlds TestProperties checks per run.
const propertyWorlds = 2000

// property is one guarantee of docs/design.md §3 checked on a computed plan.
type property struct {
	name  string
	check func(o *oracle, p *Plan, rng *rand.Rand) error
}

// properties are (a)–(g) of docs/design.md §3, plus the Plan's documented
// shape.
var properties = []property{
	{"(a) demand fits ⇒ no region above capacity", propCapacity},
	{"(b) no farther region while a nearer one has room", propWaterfall},
	{"(c) demand exceeds capacity ⇒ equal load/capacity", propUniformOverload},
	{"(d) group load ∝ group capacity", propZones},
	{"(e) unhealthy regions spill their preemptive share", propPreemptive},
	{"(f) identical input ⇒ identical plan", propDeterministic},
	{"(g) shares sum to 1, demand conserved", propConservation},
	{"plan shape: order, loads, summaries", propShape},
}

// TestProperties checks every property on propertyWorlds random worlds. A
// failure names the seed, which reproduces the world alone:
// randomWorld(rand.New(rand.NewPCG(seed, 0))).
func TestProperties(t *testing.T) {
	cfg := DefaultConfig()
	for seed := range uint64(propertyWorlds) {
		w := randomWorld(rand.New(rand.NewPCG(seed, 0)))
		p, err := Compute(w, cfg)
		if err != nil {
			t.Fatalf("seed %d: Compute: %v\nworld: %s", seed, err, worldJSON(w))
		}
		o := newOracle(w, cfg)
		for _, prop := range properties {
			if err := prop.check(o, p, rand.New(rand.NewPCG(seed, 1))); err != nil {
				t.Errorf("seed %d: property %s: %v\nworld: %s", seed, prop.name, err, worldJSON(w))
			}
		}
	}
}

// TestPropertiesCatchBrokenPlans makes sure the property checks can fail: a
// plan with one flow moved elsewhere must break at least one of them.
func TestPropertiesCatchBrokenPlans(t *testing.T) {
	cfg := DefaultConfig()
	caught := 0
	for seed := range uint64(200) {
		w := randomWorld(rand.New(rand.NewPCG(seed, 0)))
		p, _ := Compute(w, cfg)
		if len(p.Flows) == 0 {
			continue
		}
		broken := *p
		broken.Flows = slices.Clone(p.Flows)
		broken.Flows[len(broken.Flows)/2].Demand *= 1.01
		o := newOracle(w, cfg)
		for _, prop := range properties {
			if prop.check(o, &broken, rand.New(rand.NewPCG(seed, 1))) != nil {
				caught++
				break
			}
		}
	}
	if caught < 150 {
		t.Errorf("properties caught %d of ~190 broken plans, want nearly all", caught)
	}
}

func propCapacity(o *oracle, p *Plan, _ *rand.Rand) error {
	for _, r := range p.Regions {
		limit := o.lambda * o.capacity[r.Name]
		if o.demand <= o.total && o.connected {
			limit = o.capacity[r.Name]
		}
		if r.Load <= limit+1e-9*math.Max(1, limit) {
			continue
		}
		if o.demand <= o.total && o.connected {
			return fmt.Errorf("region %s: load %v > capacity %v", r.Name, r.Load, limit)
		}
		// Without full reachability a region may exceed λ·capacity, but
		// only by overload from a site whose every region is full.
		excused := false
		for _, s := range o.w.Sites {
			if siteFlows(p, s.Name)[r.Name] > 0 && !slices.ContainsFunc(o.order[s.Name], func(x string) bool { return !o.full(p, x) }) {
				excused = true
			}
		}
		if !excused {
			return fmt.Errorf("region %s: load %v > λ·capacity %v with no overloaded site", r.Name, r.Load, limit)
		}
	}
	return nil
}

func propWaterfall(o *oracle, p *Plan, _ *rand.Rand) error {
	for _, s := range o.w.Sites {
		sent := siteFlows(p, s.Name)
		for i, r := range o.order[s.Name] {
			if sent[r] <= 0 {
				continue
			}
			for _, nearer := range o.order[s.Name][:i] {
				if !o.full(p, nearer) && o.keep[nearer] == 1 {
					return fmt.Errorf("site %s sends %v to %s while nearer %s has room", s.Name, sent[r], r, nearer)
				}
			}
		}
	}
	return nil
}

func propUniformOverload(o *oracle, p *Plan, _ *rand.Rand) error {
	if !(o.demand > o.total && o.total > 0) {
		return nil
	}
	if !o.connected {
		if p.Lambda < 1 {
			return fmt.Errorf("Lambda %v < 1", p.Lambda)
		}
		return nil
	}
	want := o.demand / o.total
	if !near(p.Lambda, want) {
		return fmt.Errorf("Lambda = %v, want %v", p.Lambda, want)
	}
	for _, r := range p.Regions {
		if !near(r.Load, want*r.Capacity) {
			return fmt.Errorf("region %s: load/capacity = %v/%v, want %v", r.Name, r.Load, r.Capacity, want)
		}
	}
	return nil
}

func propZones(o *oracle, p *Plan, _ *rand.Rand) error {
	for _, rows := range [][]Flow{p.Flows, p.Idle} {
		// per (site, region): the site's total into the region
		into := map[[2]string]float64{}
		for _, f := range rows {
			into[[2]string{f.Site, f.Region}] += f.Share
		}
		for _, f := range rows {
			var gcap float64
			for _, r := range o.w.Regions {
				for _, g := range r.Groups {
					if g.Name == f.Group {
						gcap = g.Capacity
					}
				}
			}
			want := into[[2]string{f.Site, f.Region}] * gcap / o.capacity[f.Region]
			if !near(f.Share, want) {
				return fmt.Errorf("flow %+v: share %v, want %v of the region's", f, f.Share, want)
			}
		}
	}
	for _, g := range p.Groups {
		rl, _ := p.Region(g.Region)
		if rl.Capacity > 0 && !near(g.Load, rl.Load*g.Capacity/rl.Capacity) {
			return fmt.Errorf("group %s: load %v, want %v", g.Name, g.Load, rl.Load*g.Capacity/rl.Capacity)
		}
	}
	return nil
}

func propPreemptive(o *oracle, p *Plan, _ *rand.Rand) error {
	for _, s := range o.w.Sites {
		if s.Demand <= 0 {
			continue
		}
		sent := siteFlows(p, s.Name)
		nowhereElse := !slices.ContainsFunc(o.order[s.Name], func(r string) bool {
			return o.keep[r] == 1 && !o.full(p, r)
		})
		arrived := s.Demand
		for _, r := range o.order[s.Name] {
			if k := o.keep[r]; k < 1 && sent[r] > k*arrived+1e-9*s.Demand && !nowhereElse {
				return fmt.Errorf("site %s: unhealthy %s (keep %v) took %v of the %v reaching it, while a healthy region has room",
					s.Name, r, k, sent[r], arrived)
			}
			arrived -= sent[r]
		}
	}
	return nil
}

func propDeterministic(o *oracle, p *Plan, rng *rand.Rand) error {
	for i := range 2 {
		w := o.w
		if i == 1 {
			w = shuffled(o.w, rng)
		}
		q, err := Compute(w, DefaultConfig())
		if err != nil {
			return err
		}
		if diff := cmp.Diff(p, q); diff != "" {
			return fmt.Errorf("plans differ (-first +again):\n%s", diff)
		}
	}
	return nil
}

func propConservation(o *oracle, p *Plan, _ *rand.Rand) error {
	for _, s := range o.w.Sites {
		sl, ok := p.Site(s.Name)
		if !ok {
			return fmt.Errorf("site %s missing from Sites", s.Name)
		}
		reachesCapacity := slices.ContainsFunc(o.order[s.Name], func(r string) bool { return o.capacity[r] > 0 })
		var demand, share float64
		for _, f := range p.Row(s.Name) {
			demand += f.Demand
			share += f.Share
		}
		switch {
		case !reachesCapacity:
			if sl.Unplaced != s.Demand || len(p.Row(s.Name)) != 0 {
				return fmt.Errorf("site %s reaches no capacity: unplaced %v, %d flows; want %v, 0", s.Name, sl.Unplaced, len(p.Row(s.Name)), s.Demand)
			}
		case sl.Unplaced != 0:
			return fmt.Errorf("site %s reaches capacity but leaves %v unplaced", s.Name, sl.Unplaced)
		case !near(demand, s.Demand) || !near(share, 1):
			return fmt.Errorf("site %s: flows sum to %v (shares %v), want %v (1)", s.Name, demand, share, s.Demand)
		}
	}
	return nil
}

func propShape(o *oracle, p *Plan, _ *rand.Rand) error {
	for _, rows := range []struct {
		name  string
		flows []Flow
		idle  bool
	}{{"Flows", p.Flows, false}, {"Idle", p.Idle, true}} {
		for i, f := range rows.flows {
			if rows.idle != (f.Demand == 0) || !(f.Share > 0) {
				return fmt.Errorf("%s[%d] = %+v: bad demand or share", rows.name, i, f)
			}
			if i == 0 {
				continue
			}
			e := rows.flows[i-1]
			order := o.order[f.Site]
			switch c := strings.Compare(e.Site, f.Site); {
			case c > 0:
				return fmt.Errorf("%s[%d]: site %s after %s", rows.name, i, f.Site, e.Site)
			case c == 0 && slices.Index(order, e.Region) > slices.Index(order, f.Region):
				return fmt.Errorf("%s[%d]: region %s after %s for site %s", rows.name, i, f.Region, e.Region, f.Site)
			case c == 0 && e.Region == f.Region && e.Group >= f.Group:
				return fmt.Errorf("%s[%d]: group %s after %s", rows.name, i, f.Group, e.Group)
			}
		}
	}
	load := map[string]float64{}
	for _, f := range p.Flows {
		load[f.Region] += f.Demand
	}
	if len(p.Regions) != len(o.w.Regions) || !slices.IsSortedFunc(p.Regions, func(a, b RegionLoad) int { return strings.Compare(a.Name, b.Name) }) {
		return fmt.Errorf("Regions not one per region sorted by name: %+v", p.Regions)
	}
	for _, r := range p.Regions {
		if !near(r.Load, load[r.Name]) || r.Capacity != o.capacity[r.Name] || r.Keep != o.keep[r.Name] {
			return fmt.Errorf("region %+v: want load %v capacity %v keep %v", r, load[r.Name], o.capacity[r.Name], o.keep[r.Name])
		}
	}
	for _, s := range p.Sites {
		if got := p.SiteRegions(s.Name); !slices.Equal(got, o.order[s.Name]) {
			return fmt.Errorf("site %s: SiteRegions %v, want %v", s.Name, got, o.order[s.Name])
		}
	}
	for _, s := range o.w.Sites {
		if s.Demand > 0 {
			continue
		}
		var share float64
		for _, f := range p.Row(s.Name) {
			share += f.Share
		}
		if reaches := slices.ContainsFunc(o.order[s.Name], func(r string) bool { return o.capacity[r] > 0 }); reaches && !near(share, 1) {
			return fmt.Errorf("idle site %s: shares sum to %v, want 1", s.Name, share)
		}
	}
	return nil
}

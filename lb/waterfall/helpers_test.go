package waterfall

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// approx compares float64s within 1e-9, absolute or relative.
var approx = cmpopts.EquateApprox(1e-9, 1e-9)

// grp is a healthy group of 10 instances.
func grp(name string, capacity float64) Group {
	return Group{Name: name, Zone: name[len(name)-1:], Instances: 10, Healthy: 10, Capacity: capacity}
}

// sickGrp is a group of instances of which healthy pass health checks.
func sickGrp(name string, capacity float64, instances, healthy int) Group {
	g := grp(name, capacity)
	g.Instances, g.Healthy = instances, healthy
	return g
}

func reg(name string, groups ...Group) Region { return Region{Name: name, Groups: groups} }

// site builds a Site from alternating region names and RTTs.
func site(name string, demand float64, rtt ...any) Site {
	m := make(map[string]float64, len(rtt)/2)
	for i := 0; i < len(rtt); i += 2 {
		switch v := rtt[i+1].(type) {
		case int:
			m[rtt[i].(string)] = float64(v)
		case float64:
			m[rtt[i].(string)] = v
		}
	}
	return Site{Name: name, Demand: demand, RTT: m}
}

func flow(site, region, group string, demand, share float64, r Reason) Flow {
	return Flow{Site: site, Region: region, Group: group, Demand: demand, Share: share, Reason: r}
}

func mustCompute(t testing.TB, w World) *Plan {
	t.Helper()
	p, err := Compute(w, DefaultConfig())
	if err != nil {
		t.Fatalf("Compute: %v", err)
	}
	return p
}

func worldJSON(w World) string {
	b, err := json.Marshal(w)
	if err != nil {
		return fmt.Sprintf("%+v", w)
	}
	return string(b)
}

// randomWorld returns a small World drawn from rng: 1–6 regions of 1–3
// groups, 1–8 sites; RTTs are small integers (so ties happen); some groups
// have no capacity or few healthy instances; some sites have no demand; in
// about 30% of worlds sites reach only some regions; total demand ranges
// from 0.2 to 2 times total capacity.
func randomWorld(rng *rand.Rand) World {
	var w World
	nr := 1 + rng.IntN(6)
	sick := rng.IntN(3) == 0
	for r := range nr {
		region := Region{Name: fmt.Sprintf("r%d", r)}
		for g := range 1 + rng.IntN(3) {
			inst := rng.IntN(11)
			healthy := inst
			if sick && inst > 0 {
				healthy = rng.IntN(inst + 1)
			}
			capacity := math.Round(rng.Float64()*1000) / 10
			if rng.IntN(10) == 0 {
				capacity = 0
			}
			region.Groups = append(region.Groups, Group{
				Name: fmt.Sprintf("r%d-%c", r, 'a'+g), Zone: string(rune('a' + g)),
				Instances: inst, Healthy: healthy, Capacity: capacity,
			})
		}
		w.Regions = append(w.Regions, region)
	}
	var capacity float64
	for _, r := range w.Regions {
		for _, g := range r.Groups {
			capacity += g.Capacity
		}
	}
	ns := 1 + rng.IntN(8)
	ratio := 0.2 + 1.8*rng.Float64()
	partial := rng.IntN(10) < 3
	for s := range ns {
		st := Site{Name: fmt.Sprintf("s%d", s), RTT: map[string]float64{}}
		if rng.IntN(10) != 0 {
			st.Demand = math.Round(rng.Float64()*2*ratio*capacity/float64(ns)*10) / 10
		}
		for _, r := range w.Regions {
			if !partial || rng.IntN(10) < 6 {
				st.RTT[r.Name] = float64(1 + rng.IntN(30))
			}
		}
		w.Sites = append(w.Sites, st)
	}
	return w
}

// shuffled returns a copy of w with every slice permuted and every RTT map
// rebuilt, so that nothing but contents stays the same.
func shuffled(w World, rng *rand.Rand) World {
	out := World{Regions: slices.Clone(w.Regions), Sites: slices.Clone(w.Sites)}
	for i := range out.Regions {
		out.Regions[i].Groups = slices.Clone(out.Regions[i].Groups)
		rng.Shuffle(len(out.Regions[i].Groups), func(a, b int) {
			out.Regions[i].Groups[a], out.Regions[i].Groups[b] = out.Regions[i].Groups[b], out.Regions[i].Groups[a]
		})
	}
	for i := range out.Sites {
		m := make(map[string]float64)
		for _, r := range w.Regions {
			if v, ok := out.Sites[i].RTT[r.Name]; ok {
				m[r.Name] = v
			}
		}
		out.Sites[i].RTT = m
	}
	rng.Shuffle(len(out.Regions), func(a, b int) { out.Regions[a], out.Regions[b] = out.Regions[b], out.Regions[a] })
	rng.Shuffle(len(out.Sites), func(a, b int) { out.Sites[a], out.Sites[b] = out.Sites[b], out.Sites[a] })
	return out
}

// oracle recomputes, straight from a World and Config, the facts the
// property checks need, without the planner's code.
type oracle struct {
	w        World
	capacity map[string]float64 // region → capacity
	keep     map[string]float64 // region → keep factor
	order    map[string][]string
	lambda   float64
	demand   float64 // total
	total    float64 // total capacity of all regions
	// connected: every site with demand reaches every region.
	connected bool
}

func newOracle(w World, cfg Config) *oracle {
	o := &oracle{w: w, capacity: map[string]float64{}, keep: map[string]float64{}, order: map[string][]string{}, connected: true}
	for _, r := range w.Regions {
		var inst, healthy int
		for _, g := range r.Groups {
			o.capacity[r.Name] += g.Capacity
			inst += g.Instances
			healthy += g.Healthy
		}
		o.total += o.capacity[r.Name]
		h := 1.0
		if inst > 0 {
			h = float64(healthy) / float64(inst)
		}
		o.keep[r.Name] = 1
		if h < cfg.SpillThreshold {
			o.keep[r.Name] = math.Min(1, cfg.SpillSlope*h)
		}
	}
	reached := map[string]bool{}
	for _, s := range w.Sites {
		o.demand += s.Demand
		var names []string
		for _, r := range w.Regions {
			if _, ok := s.RTT[r.Name]; ok {
				names = append(names, r.Name)
				if s.Demand > 0 {
					reached[r.Name] = true
				}
			} else if s.Demand > 0 {
				o.connected = false
			}
		}
		slices.SortFunc(names, func(a, b string) int {
			if s.RTT[a] != s.RTT[b] {
				return int(math.Copysign(1, s.RTT[a]-s.RTT[b]))
			}
			return strings.Compare(a, b)
		})
		o.order[s.Name] = names
	}
	var reachable float64
	for r := range reached {
		reachable += o.capacity[r]
	}
	o.lambda = 1
	if reachable > 0 && o.demand > reachable {
		o.lambda = o.demand / reachable
	}
	return o
}

// full reports whether region r has no room left at λ·capacity in p.
func (o *oracle) full(p *Plan, r string) bool {
	rl, _ := p.Region(r)
	room := o.lambda * o.capacity[r]
	return rl.Load >= room-1e-9*math.Max(1, room)
}

// siteFlows sums p's flows from site to each region.
func siteFlows(p *Plan, site string) map[string]float64 {
	m := map[string]float64{}
	for _, f := range p.Row(site) {
		m[f.Region] += f.Demand
	}
	return m
}

func near(a, b float64) bool {
	return math.Abs(a-b) <= 1e-9*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

// checkPlan compares a plan with what a scenario test wants: its flows, idle
// rows, region loads, Lambda and unplaced demand. planner names the function
// under test in failure messages.
func checkPlan(t *testing.T, planner string, p *Plan, wantFlows, wantIdle []Flow, wantLoads map[string]float64, wantLambda float64, wantUnplaced map[string]float64) {
	t.Helper()
	if diff := cmp.Diff(wantFlows, p.Flows, approx); diff != "" {
		t.Errorf("%s flows (-want +got):\n%s", planner, diff)
	}
	if diff := cmp.Diff(wantIdle, p.Idle, approx); diff != "" {
		t.Errorf("%s idle rows (-want +got):\n%s", planner, diff)
	}
	gotLoads := map[string]float64{}
	for _, r := range p.Regions {
		gotLoads[r.Name] = r.Load
	}
	if diff := cmp.Diff(wantLoads, gotLoads, approx); diff != "" {
		t.Errorf("%s region loads (-want +got):\n%s", planner, diff)
	}
	if !near(p.Lambda, wantLambda) {
		t.Errorf("%s Lambda = %v, want %v", planner, p.Lambda, wantLambda)
	}
	gotUnplaced := map[string]float64{}
	for _, s := range p.Sites {
		if s.Unplaced != 0 {
			gotUnplaced[s.Name] = s.Unplaced
		}
	}
	if diff := cmp.Diff(wantUnplaced, gotUnplaced, approx, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("%s unplaced (-want +got):\n%s", planner, diff)
	}
}

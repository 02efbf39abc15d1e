package sim

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/waterfall"
)

// ErrScopeNotApplicable is returned by ExpectedFlows when a scope is given
// with Waterfall, MinRTT or envoy_priority.
var ErrScopeNotApplicable = errors.New("scope applies only to round_robin, least_request and hash policies; waterfall, min_rtt and envoy_priority choose regions themselves")

// ErrUnservable is returned by ExpectedFlows when a site with demand has no
// eligible instance in scope, so its demand cannot be conserved.
var ErrUnservable = errors.New("site has demand but no eligible instance in scope")

// ErrOverflow is returned by ExpectedFlows when a region's load or
// utilization does not fit in a float64 (demand near 1e308, or a huge demand
// on a region of tiny capacity).
var ErrOverflow = errors.New("load or utilization overflows")

// ExpectedFlows returns the steady-state flows of policy p on s (see the
// package doc for each policy's model). scope must be empty for Waterfall
// and MinRTT, and for envoy_priority;
// for the other baselines the empty scope means ScopeGlobal.
//
// After it returns without error: every site's flows add up to its demand
// (up to float rounding); no flow is zero; Flows are sorted by site name,
// then by the site's region order (ascending RTT, ties by name), then by
// group name; Sites and Regions are sorted by name and list every site and
// region, with zero load where nothing arrives; and every number is finite.
func (s *Scenario) ExpectedFlows(p config.Policy, scope config.HashScope) (*Result, error) {
	if _, err := config.ParsePolicy(string(p)); err != nil {
		return nil, err
	}
	var flows []Flow
	if p == config.PolicyEnvoyPriority {
		if scope != "" {
			return nil, fmt.Errorf("scope %q: %w", scope, ErrScopeNotApplicable)
		}
		var err error
		if flows, err = s.priorityFlows(); err != nil {
			return nil, err
		}
		return s.result(p, scope, flows)
	}
	if p.IsPlanned() {
		if scope != "" {
			return nil, fmt.Errorf("scope %q: %w", scope, ErrScopeNotApplicable)
		}
		var err error
		if flows, err = s.plannedFlows(p); err != nil {
			return nil, err
		}
	} else {
		if scope == "" {
			scope = config.HashScopeGlobal
		}
		if _, err := config.ParseHashScope(string(scope)); err != nil {
			return nil, err
		}
		var err error
		if flows, err = s.baselineFlows(scope); err != nil {
			return nil, err
		}
	}
	return s.result(p, scope, flows)
}

// plannedFlows returns the flows of the plan of p, Waterfall
// (waterfall.Compute) or MinRTT (waterfall.ComputeMinRTT), with the
// planner's DefaultConfig.
func (s *Scenario) plannedFlows(p config.Policy) ([]Flow, error) {
	compute := waterfall.Compute
	if p == config.PolicyMinRTT {
		compute = waterfall.ComputeMinRTT
	}
	plan, err := compute(s.ToWorld(), waterfall.DefaultConfig())
	if err != nil {
		return nil, fmt.Errorf("%s plan: %w", p, err)
	}
	regionOf := map[string]string{}
	for _, r := range s.Regions {
		for _, g := range r.Groups {
			regionOf[g.Name] = r.Name
		}
	}
	sites := map[string]bool{}
	for _, st := range s.Sites {
		sites[st.Name] = true
	}
	flows := make([]Flow, 0, len(plan.Flows))
	for _, f := range plan.Flows {
		switch region, ok := regionOf[f.Group]; {
		case !sites[f.Site]:
			return nil, fmt.Errorf("%s plan: flow from unknown site %q", p, f.Site)
		case !ok:
			return nil, fmt.Errorf("%s plan: flow to unknown group %q", p, f.Group)
		case region != f.Region:
			return nil, fmt.Errorf("%s plan: flow to group %q names region %q, want %q", p, f.Group, f.Region, region)
		case math.IsNaN(f.Demand) || math.IsInf(f.Demand, 0) || f.Demand < 0:
			return nil, fmt.Errorf("%s plan: flow %s→%s has demand %v", p, f.Site, f.Group, f.Demand)
		case f.Demand == 0:
			continue
		}
		flows = append(flows, Flow{Site: f.Site, Region: f.Region, Group: f.Group, RPS: f.Demand, Reason: f.Reason.String()})
	}
	return flows, nil
}

// baselineFlows spreads each site's demand evenly over the eligible
// instances in scope: a group with h eligible instances out of H in scope
// receives demand × h/H.
func (s *Scenario) baselineFlows(scope config.HashScope) ([]Flow, error) {
	var flows []Flow
	for _, st := range s.Sites {
		if st.DemandRPS == 0 {
			continue
		}
		var regions []*Region
		for _, name := range s.RegionOrder(st) {
			r := s.region(name)
			if eligible(r) == 0 {
				continue
			}
			regions = append(regions, r)
			if scope == config.HashScopeNearestRegion {
				break
			}
		}
		var total float64
		for _, r := range regions {
			total += float64(eligible(r))
		}
		if total == 0 {
			return nil, fmt.Errorf("site %q, scope %s: %w", st.Name, scope, ErrUnservable)
		}
		for _, r := range regions {
			for _, g := range r.Groups {
				if g.Capacity() > 0 {
					flows = append(flows, Flow{
						Site:   st.Name,
						Region: r.Name,
						Group:  g.Name,
						RPS:    st.DemandRPS * (float64(g.Healthy) / total),
					})
				}
			}
		}
	}
	return flows, nil
}

// eligible returns the number of instances of r that a baseline sends
// traffic to: healthy instances of groups that are not drained.
func eligible(r *Region) int {
	n := 0
	for _, g := range r.Groups {
		if g.Capacity() > 0 {
			n += g.Healthy
		}
	}
	return n
}

func (s *Scenario) region(name string) *Region {
	for i := range s.Regions {
		if s.Regions[i].Name == name {
			return &s.Regions[i]
		}
	}
	return nil
}

// RegionOrder returns the regions reachable from st, nearest first (ties by
// name).
func (s *Scenario) RegionOrder(st Site) []string {
	names := make([]string, 0, len(st.RTTms))
	for name := range st.RTTms {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int {
		if c := compareFloat(st.RTTms[a], st.RTTms[b]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return names
}

func compareFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// conservationTolerance is the relative error allowed between a site's
// demand and the sum of its flows (float rounding in the planner).
const conservationTolerance = 1e-6

// result sorts flows, checks that they conserve every site's demand and sums
// them into the Result's sites and regions.
func (s *Scenario) result(p config.Policy, scope config.HashScope, flows []Flow) (*Result, error) {
	rank := map[[2]string]int{} // (site, region) → position in the site's region order
	for _, st := range s.Sites {
		for i, name := range s.RegionOrder(st) {
			rank[[2]string{st.Name, name}] = i
		}
	}
	slices.SortStableFunc(flows, func(a, b Flow) int {
		if c := strings.Compare(a.Site, b.Site); c != 0 {
			return c
		}
		ra, oka := rank[[2]string{a.Site, a.Region}]
		rb, okb := rank[[2]string{b.Site, b.Region}]
		if !oka {
			ra = math.MaxInt
		}
		if !okb {
			rb = math.MaxInt
		}
		if ra != rb {
			return ra - rb // both in [0, MaxInt]: no overflow
		}
		if c := strings.Compare(a.Region, b.Region); c != 0 {
			return c
		}
		return strings.Compare(a.Group, b.Group)
	})

	res := &Result{Policy: p, Scope: scope, Flows: flows}
	if res.Flows == nil {
		res.Flows = []Flow{}
	}
	for _, st := range s.Sites {
		res.Sites = append(res.Sites, SiteDemand{Name: st.Name, DemandRPS: st.DemandRPS})
	}
	slices.SortFunc(res.Sites, func(a, b SiteDemand) int { return strings.Compare(a.Name, b.Name) })

	load := map[string]float64{}
	sent := map[string]float64{}
	for _, f := range flows {
		load[f.Region] += f.RPS
		sent[f.Site] += f.RPS
	}
	for _, st := range res.Sites {
		if math.Abs(sent[st.Name]-st.DemandRPS) > conservationTolerance*max(st.DemandRPS, 1) {
			return nil, fmt.Errorf("%s: site %q: flows add up to %v rps, demand is %v rps", p, st.Name, sent[st.Name], st.DemandRPS)
		}
	}
	for _, r := range s.Regions {
		rl := RegionLoad{Name: r.Name, LoadRPS: load[r.Name]}
		for _, g := range r.Groups {
			rl.CapacityRPS += g.Capacity()
		}
		switch {
		case rl.CapacityRPS > 0:
			rl.Utilization = rl.LoadRPS / rl.CapacityRPS
		case rl.LoadRPS > 0:
			return nil, fmt.Errorf("%s: region %q receives %v rps but has no capacity", p, r.Name, rl.LoadRPS)
		}
		if math.IsInf(rl.LoadRPS, 0) || math.IsInf(rl.Utilization, 0) {
			return nil, fmt.Errorf("%s: region %q: %w", p, r.Name, ErrOverflow)
		}
		res.Regions = append(res.Regions, rl)
	}
	slices.SortFunc(res.Regions, func(a, b RegionLoad) int { return strings.Compare(a.Name, b.Name) })
	return res, nil
}

func joinNames[T ~string](names []T) string {
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = string(n)
	}
	return strings.Join(parts, ", ")
}

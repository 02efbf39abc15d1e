package waterfall

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Validate reports every problem with c, each naming its field, joined with
// errors.Join; nil if c is usable.
func (c Config) Validate() error {
	var errs []error
	if !(c.SpillThreshold >= 0 && c.SpillThreshold <= 1) {
		errs = append(errs, fmt.Errorf("spill_threshold: must be in [0, 1], got %v", c.SpillThreshold))
	}
	if !finite(c.SpillSlope) {
		errs = append(errs, fmt.Errorf("spill_slope: must be finite and >= 0, got %v", c.SpillSlope))
	}
	return errors.Join(errs...)
}

// validate reports every problem with w, in input order, each with the path
// of the bad value (regions[1].groups[0].healthy, sites[2].rtt["us-east"]),
// wrapped in ErrInvalidWorld. RTT entries for regions that are not in the
// World are ignored, not checked.
func validate(w World) error { return validateWorld(w, true) }

// validateWorld is validate; with rtt false it skips the RTT values, which
// newModel checks as it reads them (and then calls validate for the
// messages).
func validateWorld(w World, rtt bool) error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(format, args...))
	}

	regionAt := make(map[string]int, len(w.Regions))
	type at struct{ r, g int }
	groupAt := make(map[string]at)
	for i, r := range w.Regions {
		switch first, dup := regionAt[r.Name]; {
		case r.Name == "":
			bad("regions[%d].name: must not be empty", i)
		case dup:
			bad("regions[%d].name: %q duplicates regions[%d]", i, r.Name, first)
		default:
			regionAt[r.Name] = i
		}
		for j, g := range r.Groups {
			switch first, dup := groupAt[g.Name]; {
			case g.Name == "":
				bad("regions[%d].groups[%d].name: must not be empty", i, j)
			case dup:
				bad("regions[%d].groups[%d].name: %q duplicates regions[%d].groups[%d]", i, j, g.Name, first.r, first.g)
			default:
				groupAt[g.Name] = at{i, j}
			}
			if g.Instances < 0 {
				bad("regions[%d].groups[%d].instances: must be >= 0, got %d", i, j, g.Instances)
			}
			if g.Healthy < 0 || g.Healthy > max(g.Instances, 0) {
				bad("regions[%d].groups[%d].healthy: must be in [0, instances=%d], got %d", i, j, g.Instances, g.Healthy)
			}
			if !finite(g.Capacity) {
				bad("regions[%d].groups[%d].capacity: must be finite and >= 0, got %v", i, j, g.Capacity)
			}
		}
	}
	siteAt := make(map[string]int, len(w.Sites))
	for i, s := range w.Sites {
		switch first, dup := siteAt[s.Name]; {
		case s.Name == "":
			bad("sites[%d].name: must not be empty", i)
		case dup:
			bad("sites[%d].name: %q duplicates sites[%d]", i, s.Name, first)
		default:
			siteAt[s.Name] = i
		}
		if !finite(s.Demand) {
			bad("sites[%d].demand: must be finite and >= 0, got %v", i, s.Demand)
		}
		if !rtt {
			continue
		}
		// Range over the map (cheaper than a lookup per region) and sort
		// only the rare bad entries, so messages come out in a fixed order.
		var badRTT []string
		for name, v := range s.RTT {
			if !finite(v) {
				if _, known := regionAt[name]; known {
					badRTT = append(badRTT, name)
				}
			}
		}
		slices.Sort(badRTT)
		for _, name := range badRTT {
			bad("sites[%d].rtt[%q]: must be finite and >= 0, got %v", i, name, s.RTT[name])
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidWorld, errors.Join(errs...))
}

// finite reports whether v is a finite number >= 0.
func finite(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }

// model is the indexed view of a validated World that planners work on:
// regions, groups and sites sorted by name and addressed by index, each
// site's reachable regions in its order. It is built once per Compute and
// never changed by the planning passes, which keep their state in their own
// slices. A min_rtt planner fills the same cells and reuses plan().
type model struct {
	regions []mRegion // sorted by name
	groups  []mGroup  // sorted by region, then name; region r owns groups[r.g0:r.g1]
	sites   []mSite   // sorted by name
	// reach holds every site's reachable regions, nearest first (ascending
	// RTT, ties by region index = name): site s owns reach[s.r0:s.r1].
	reach []int32
	// rtt holds the RTT to reach[i] as math.Float64bits: for finite
	// numbers >= 0 the bits order like the numbers, and integers compare
	// faster.
	rtt []uint64
	// lambda is the rule 6 overload factor, >= 1.
	lambda float64
}

type mRegion struct {
	name     string
	g0, g1   int32
	active   int32 // groups with capacity > 0
	capacity float64
	health   float64
	keep     float64
}

type mGroup struct {
	name, zone string
	region     int32
	capacity   float64
}

type mSite struct {
	name   string
	demand float64
	r0, r1 int32
}

// newModel validates cfg and w and indexes w. Its result depends only on the
// contents of w, not on the order of its slices.
func newModel(w World, cfg Config) (*model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	// The RTT values are checked while they are read, below; an error
	// comes from validate, so that it names every bad value in input order.
	if validateWorld(w, false) != nil {
		return nil, validate(w)
	}
	m := &model{
		regions: make([]mRegion, len(w.Regions)),
		sites:   make([]mSite, len(w.Sites)),
	}

	// Regions and their groups, by name.
	regs := make([]*Region, len(w.Regions))
	for i := range w.Regions {
		regs[i] = &w.Regions[i]
	}
	slices.SortFunc(regs, func(a, b *Region) int { return strings.Compare(a.Name, b.Name) })
	ngroups := 0
	for _, r := range regs {
		ngroups += len(r.Groups)
	}
	m.groups = make([]mGroup, 0, ngroups)
	for ri, r := range regs {
		g0 := len(m.groups)
		var inst, healthy int
		for _, g := range r.Groups {
			m.groups = append(m.groups, mGroup{name: g.Name, zone: g.Zone, region: int32(ri), capacity: g.Capacity})
			inst += g.Instances
			healthy += g.Healthy
		}
		gs := m.groups[g0:]
		slices.SortFunc(gs, func(a, b mGroup) int { return strings.Compare(a.name, b.name) })
		// Sum capacity in name order so the total does not depend on input order.
		var capacity float64
		var active int32
		for _, g := range gs {
			capacity += g.capacity
			if g.capacity > 0 {
				active++
			}
		}
		h := 1.0
		if inst > 0 {
			h = float64(healthy) / float64(inst)
		}
		m.regions[ri] = mRegion{
			name: r.Name, g0: int32(g0), g1: int32(len(m.groups)), active: active,
			capacity: capacity, health: h, keep: keepFactor(h, cfg),
		}
	}

	// Sites by name, each with the regions it reaches in its own order:
	// one small sort per site rather than one sort of every pair.
	sites := make([]*Site, len(w.Sites))
	for i := range w.Sites {
		sites[i] = &w.Sites[i]
	}
	slices.SortFunc(sites, func(a, b *Site) int { return strings.Compare(a.Name, b.Name) })
	npairs := 0
	for _, s := range sites {
		if len(s.RTT) > 0 {
			npairs += min(len(s.RTT), len(regs))
		}
	}
	m.reach = make([]int32, 0, npairs)
	m.rtt = make([]uint64, 0, npairs)
	reached := make([]bool, len(regs)) // reached by a site with demand
	o := newSiteOrder(len(regs))
	names := make([]string, len(regs))
	for ri, r := range regs {
		names[ri] = r.Name
	}
	index := newRegionIndex(names)
	badRTT := false
	for si, s := range sites {
		m.sites[si] = mSite{name: s.Name, demand: s.Demand, r0: int32(len(m.reach))}
		if len(s.RTT) > 0 {
			o.reset()
			// The map's order does not matter: siteOrder sorts ties by
			// region index whatever order it is given them in.
			for name, rtt := range s.RTT {
				ri := index.lookup(name)
				if ri < 0 {
					continue
				}
				badRTT = badRTT || !finite(rtt)
				o.add(ri, math.Float64bits(rtt))
				if s.Demand > 0 {
					reached[ri] = true
				}
			}
			m.reach, m.rtt = o.appendSorted(m.reach, m.rtt)
		}
		m.sites[si].r1 = int32(len(m.reach))
	}
	if badRTT {
		// Name every bad value, in input order, as validate does.
		return nil, validate(w)
	}

	// Rule 6. Sums run in name order, so λ does not depend on input order.
	var demand, capacity float64
	for _, s := range m.sites {
		demand += s.demand
	}
	for ri, r := range m.regions {
		if reached[ri] {
			capacity += r.capacity
		}
	}
	m.lambda = 1
	if capacity > 0 && demand > capacity {
		m.lambda = demand / capacity
	}
	return m, nil
}

// keepFactor is rule 5: the fraction of the demand reaching a region with
// healthy fraction h that the region keeps.
func keepFactor(h float64, cfg Config) float64 {
	if h >= cfg.SpillThreshold {
		return 1
	}
	return min(1, cfg.SpillSlope*h)
}

// siteReach returns the regions site s reaches, nearest first.
func (m *model) siteReach(s int) []int32 {
	return m.reach[m.sites[s].r0:m.sites[s].r1]
}

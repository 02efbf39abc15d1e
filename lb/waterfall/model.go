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
// of the bad value (regions[1].groups[0].healthy, sites[2].rtt["us-east"],
// sites[3].rtt_by_region[4]), wrapped in ErrInvalidWorld. RTT entries for
// regions that are not in the World are ignored, not checked.
func validate(w World) error { return validateWorld(w, true) }

// validateWorld is validate; with rtt false it skips the RTT values (not
// the shape of RTTByRegion), which newModel checks as it reads them (and
// then calls validate for the messages).
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
		if s.RTTByRegion != nil {
			switch {
			case s.RTT != nil:
				bad("sites[%d]: rtt and rtt_by_region are both set; set one", i)
			case len(s.RTTByRegion) != len(w.Regions):
				bad("sites[%d].rtt_by_region: has %d entries, want one per region (%d)", i, len(s.RTTByRegion), len(w.Regions))
			case rtt:
				for r, v := range s.RTTByRegion {
					if !(v >= 0) {
						bad("sites[%d].rtt_by_region[%d] (%q): must be >= 0 (+Inf: unreachable), got %v", i, r, w.Regions[r].Name, v)
					}
				}
			}
			continue
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
// regions, groups and sites sorted by name and addressed by index, and every
// site's RTT to every region in one dense table. Each site's regions are put
// in its order (nearest first) lazily, only as far as a planning pass asks
// (order, siteReach). The planning passes keep their state in their own
// slices; the only state the model gains is that order. A min_rtt planner
// fills the same cells and reuses plan().
type model struct {
	regions []mRegion // sorted by name
	groups  []mGroup  // sorted by region, then name; region r owns groups[r.g0:r.g1]
	sites   []mSite   // sorted by name
	// rtt holds the RTT of site s to region r at rtt[s·len(regions)+r] as
	// math.Float64bits (for finite numbers >= 0 the bits order like the
	// numbers, and integers compare faster), or unreachable.
	rtt []uint64
	// ord holds each site's regions in its order, as far as produced:
	// ord[s] is a prefix of the site's order, all of it once full[s].
	ord  [][]int32
	full []bool
	// sort puts a whole site in order; scratch is its spare output.
	sort    *siteOrder
	scratch []uint64
	// lambda is the rule 6 overload factor, >= 1.
	lambda float64
}

// unreachable marks, in model.rtt, a region the site does not reach. No
// valid RTT has these bits (they are a NaN), and they order after all that
// do, so a scan for the least bits never picks them.
const unreachable = ^uint64(0)

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
	reach  int32 // how many regions the site reaches
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
	nr := len(w.Regions)
	m := &model{
		regions: make([]mRegion, nr),
		sites:   make([]mSite, len(w.Sites)),
	}

	// Regions and their groups, by name; byName[r] is the index in
	// w.Regions of the model's region r.
	byName := make([]int, nr)
	for i := range byName {
		byName[i] = i
	}
	slices.SortFunc(byName, func(a, b int) int { return strings.Compare(w.Regions[a].Name, w.Regions[b].Name) })
	ngroups := 0
	for _, r := range w.Regions {
		ngroups += len(r.Groups)
	}
	m.groups = make([]mGroup, 0, ngroups)
	for ri, wi := range byName {
		r := &w.Regions[wi]
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

	// Sites by name, each with its RTT to every region in the dense
	// table; no site is put in order yet.
	sites := make([]*Site, len(w.Sites))
	for i := range w.Sites {
		sites[i] = &w.Sites[i]
	}
	slices.SortFunc(sites, func(a, b *Site) int { return strings.Compare(a.Name, b.Name) })
	m.rtt = make([]uint64, len(sites)*nr)
	reached := make([]bool, nr) // reached by a site with demand
	names := make([]string, nr)
	for ri, r := range m.regions {
		names[ri] = r.name
	}
	var index *regionIndex
	badRTT := false
	for si, s := range sites {
		row := m.rtt[si*nr : (si+1)*nr]
		n := 0
		if s.RTTByRegion != nil {
			// Validated to be one per region of w.Regions.
			for ri, wi := range byName {
				v := s.RTTByRegion[wi]
				if v == inf {
					row[ri] = unreachable
					continue
				}
				badRTT = badRTT || !(v >= 0)
				row[ri] = math.Float64bits(v)
				n++
			}
		} else {
			for ri := range row {
				row[ri] = unreachable
			}
			if len(s.RTT) > 0 && index == nil {
				index = newRegionIndex(names)
			}
			for name, v := range s.RTT {
				ri := index.lookup(name)
				if ri < 0 {
					continue
				}
				badRTT = badRTT || !finite(v)
				row[ri] = math.Float64bits(v)
				n++
			}
		}
		if s.Demand > 0 && n > 0 {
			for ri, b := range row {
				if b != unreachable {
					reached[ri] = true
				}
			}
		}
		m.sites[si] = mSite{name: s.Name, demand: s.Demand, reach: int32(n)}
	}
	if badRTT {
		// Name every bad value, in input order, as validate does.
		return nil, validate(w)
	}
	// Most sites stop at their first or second region: each order starts
	// in a shared arena with room for two.
	const ordCap = 2
	arena := make([]int32, ordCap*len(sites))
	m.ord = make([][]int32, len(sites))
	for s := range m.ord {
		m.ord[s] = arena[ordCap*s : ordCap*s : ordCap*(s+1)]
	}
	m.full = make([]bool, len(sites))

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

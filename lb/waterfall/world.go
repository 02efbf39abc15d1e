package waterfall

import "errors"

// World is the immutable input of the planner: every site's demand and RTT
// vector, and every region's instance groups with their capacity and health.
// It is a value built by the caller (the gfe from gossip, lbsim from a
// scenario file); the planner never changes it.
type World struct {
	// Regions where backends live. Order does not matter: the planner sorts
	// by name wherever order could change the result.
	Regions []Region
	// Sites where demand arrives. Order does not matter.
	Sites []Site
}

// Region is one region and its instance groups (one per zone, usually).
type Region struct {
	// Name is unique in the World.
	Name string
	// Groups are the region's instance groups. Group names are unique in
	// the World.
	Groups []Group
}

// Group is one instance group: a set of instances in one zone of one region.
type Group struct {
	// Name is unique in the World.
	Name string
	// Zone the group lives in (informational; zones split a region's share
	// in proportion to capacity, rule 2).
	Zone string
	// Instances is the number of instances in the group, healthy or not.
	Instances int
	// Healthy is how many of Instances pass health checks (0 ≤ Healthy ≤ Instances).
	Healthy int
	// Capacity is the serving capacity of the healthy instances, already
	// multiplied by capacity_scaler, in demand units (requests/s for RATE,
	// concurrent connections for CONNECTION). Zero drains the group.
	Capacity float64
}

// Site is one edge location and the demand that arrives there.
type Site struct {
	// Name is unique in the World.
	Name string
	// Demand is the arriving load in the same units as Group.Capacity.
	Demand float64
	// RTT maps region name to the measured round trip from this site, in
	// milliseconds. A region missing from the map is unreachable from the
	// site and never receives its traffic. Entries for regions that are not
	// in the World are ignored.
	RTT map[string]float64
	// RTTByRegion is the same as a slice, one RTT per region of
	// World.Regions in that order, +Inf for a region the site does not
	// reach. It is the cheaper form for a large World (no map to build or
	// read); a site sets RTT or RTTByRegion, not both. The Plan does not
	// depend on which form a site uses: a World with RTTByRegion plans
	// exactly like the same World with RTT maps.
	RTTByRegion []float64
}

// Config holds the tunables of the planner. The zero value is not valid; start
// from DefaultConfig.
type Config struct {
	// SpillThreshold is the healthy fraction below which a region spills
	// preemptively (rule 5). Default 0.5. A region with healthy fraction
	// h < SpillThreshold keeps at most min(1, SpillSlope·h) of the demand
	// that reaches it.
	SpillThreshold float64
	// SpillSlope is the slope of preemptive spill (rule 5). Default 2, so
	// h = 0.4 keeps 80% and spills 20%.
	SpillSlope float64
}

// DefaultConfig returns the planner settings of docs/design.md §3.
func DefaultConfig() Config {
	return Config{SpillThreshold: 0.5, SpillSlope: 2}
}

// Flow is one cell of a plan: how much of a site's demand goes to a group.
type Flow struct {
	Site   string
	Region string
	Group  string
	// Demand is the load sent, in the World's demand units.
	Demand float64
	// Share is Demand as a fraction of the site's demand: the weight a
	// picker gives the group. The shares of a site's row sum to 1. In
	// Plan.Idle rows (sites without demand) Demand is 0 and Share is the
	// fraction a small demand arriving at the site would get.
	Share float64
	// Reason says why the demand is in this region: the cause behind the
	// larger part of it (see Reason).
	Reason Reason
}

// RegionLoad summarises one region in a plan.
type RegionLoad struct {
	Name string
	// Capacity is the sum of the region's group capacities.
	Capacity float64
	// Load is the sum of the flows into the region.
	Load float64
	// Health is the region's healthy fraction h: healthy instances over
	// instances, summed over its groups; 1 when the region lists no
	// instances.
	Health float64
	// Keep is the fraction of the demand reaching the region that the region
	// keeps (rule 5): min(1, SpillSlope·h) when h < SpillThreshold, else 1.
	Keep float64
}

// GroupLoad summarises one instance group in a plan.
type GroupLoad struct {
	Name   string
	Region string
	Zone   string
	// Capacity is the group's capacity from the World.
	Capacity float64
	// Load is the sum of the flows into the group. Inside a region, Load is
	// proportional to Capacity (rule 2).
	Load float64
}

// SiteLoad summarises one site in a plan.
type SiteLoad struct {
	Name string
	// Demand is the site's demand from the World.
	Demand float64
	// Unplaced is the part of Demand the plan could not send anywhere: all
	// of it when no region the site reaches has capacity, else 0. The
	// site's flows sum to Demand − Unplaced.
	Unplaced float64
}

// Utilization is Load/Capacity, or 0 when the region has no capacity and no
// load (+Inf if it has load but no capacity, which a plan never produces).
func (r RegionLoad) Utilization() float64 {
	if r.Capacity == 0 {
		if r.Load == 0 {
			return 0
		}
		return inf
	}
	return r.Load / r.Capacity
}

// Plan is the planner's output. Flows with zero demand are omitted. Flows are
// sorted by site name, then by the site's region order (ascending RTT, ties
// by region name), then by group name; Regions are sorted by name.
//
// A Plan is immutable once returned: callers and other goroutines may read
// it concurrently, and nobody may change it (Damp returns a new Plan that can
// share storage with its inputs).
type Plan struct {
	Flows   []Flow
	Regions []RegionLoad
	// Groups lists every group, sorted by region name then group name.
	Groups []GroupLoad
	// Sites lists every site, sorted by name.
	Sites []SiteLoad
	// Idle holds the rows of sites with zero demand, in Flows' order: where
	// a small demand arriving there would go given everyone else's load
	// (Demand 0, Share set). A gfe whose own demand estimate is still 0
	// picks from this row. Sites that reach no region with capacity have no
	// row.
	Idle []Flow
	// Lambda is the uniform overload factor of rule 6: max(1, total demand /
	// total capacity), counting the capacity of regions reached by at least
	// one site with demand. Every region is filled up to Lambda·Capacity.
	Lambda float64

	// Orders is what the plan keeps of its World to put each site's
	// regions in order on demand (SiteRegions, Damp): opaque, set by
	// Compute, ComputeMinRTT and Damp, nil in a Plan made any other way.
	Orders *SiteOrders `json:"-"`
}

// ErrInvalidWorld wraps every problem Compute finds with its input.
var ErrInvalidWorld = errors.New("waterfall: invalid world")

// ErrInvalidConfig wraps every problem Compute finds with its Config.
var ErrInvalidConfig = errors.New("waterfall: invalid config")

// ErrNoCapacity is returned by Picker.Pick when the plan row it was built
// from sends nowhere: the site reaches no region with capacity (its demand
// is reported in SiteLoad.Unplaced), or no group of the row has a healthy
// backend.
var ErrNoCapacity = errors.New("waterfall: no region has capacity")

// ErrAllBusy is returned by Picker.Pick when every backend of every group in
// the row is at its maximum concurrency.
var ErrAllBusy = errors.New("waterfall: all backends busy")

var inf = func() float64 { var z float64; return 1 / z }()

// SiteRTT returns site s's RTTs by region name, whichever form s uses: its
// RTT map as it is, or, for RTTByRegion, a new map with the entry of each
// region of w the site reaches (+Inf entries left out). It is for display
// and tests; the planner reads either form directly. Nil when s has
// neither.
func (w World) SiteRTT(s Site) map[string]float64 {
	if s.RTTByRegion == nil {
		return s.RTT
	}
	m := make(map[string]float64, len(s.RTTByRegion))
	for i, v := range s.RTTByRegion {
		if i < len(w.Regions) && v != inf {
			m[w.Regions[i].Name] = v
		}
	}
	return m
}

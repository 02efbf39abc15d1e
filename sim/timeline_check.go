package sim

import (
	"fmt"
	"math"
	"slices"
)

// timelineProblems lists every violated invariant of s.Timeline (nil: no
// problems) in file order. issues holds problems found while decoding,
// keyed by field path.
func (s *Scenario) timelineProblems(issues map[string]string) []string {
	tl := s.Timeline
	if tl == nil {
		return nil
	}
	c := &timelineCheck{s: s, tl: tl, issues: issues}
	c.checkClock()
	c.checkModel()
	c.checkDemand()
	valid := c.checkEvents()
	_, replay := s.groupActions(valid)
	return append(c.out, replay...)
}

// timelineCheck gathers the problems of one scenario's timeline, section by
// section in file order. It is used by one goroutine.
type timelineCheck struct {
	s      *Scenario
	tl     *Timeline
	issues map[string]string // problems found while decoding, by field path
	out    []string          // the problems so far, in file order
	// durOK is whether timeline.duration_s is valid, so that times can be
	// checked against it; set by checkClock.
	durOK bool
}

// add appends a problem.
func (c *timelineCheck) add(format string, args ...any) {
	c.out = append(c.out, fmt.Sprintf(format, args...))
}

// hasIssue reports the decoding problem at path, if there is one, and
// whether there was.
func (c *timelineCheck) hasIssue(path string) bool {
	msg, ok := c.issues[path]
	if ok {
		c.add("%s: %s", path, msg)
	}
	return ok
}

// check reports whether the value v at path is valid: it has no decoding
// problem and ok holds. Otherwise it adds the problem, saying what the
// value must be (want).
func (c *timelineCheck) check(path string, v float64, ok bool, want string) bool {
	if c.hasIssue(path) {
		return false
	}
	if !ok {
		c.add("%s: must be %s, got %v", path, want, v)
	}
	return ok
}

// nonNeg checks that the value v at path is a finite number >= 0.
func (c *timelineCheck) nonNeg(path string, v float64) {
	c.check(path, v, finite(v) && v >= 0, "a finite number >= 0")
}

// inRun checks that the time at (seconds) at path falls inside the run:
// in [0, duration_s), or >= 0 when the duration is itself invalid.
func (c *timelineCheck) inRun(path string, at float64) {
	if c.hasIssue(path) {
		return
	}
	if !(at >= 0 && (!c.durOK || at < c.tl.DurationS)) { // also NaN
		if c.durOK {
			c.add("%s: must be in [0, duration_s %v), got %v", path, c.tl.DurationS, at)
		} else {
			c.add("%s: must be >= 0, got %v", path, at)
		}
	}
}

// finite reports whether v is neither NaN nor infinite.
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// checkClock checks the run's length, its step and their ratio, the gossip
// delay, the damping and the seed, and sets c.durOK.
func (c *timelineCheck) checkClock() {
	tl := c.tl
	c.durOK = c.check("timeline.duration_s", tl.DurationS, finite(tl.DurationS) && tl.DurationS > 0, "a finite number > 0")
	stepOK := c.check("timeline.step_s", tl.StepS, finite(tl.StepS) && tl.StepS > 0, "a finite number > 0")
	if c.durOK && stepOK && tl.DurationS/tl.StepS > maxSteps {
		c.add("timeline: duration_s / step_s must be at most %d steps, got %.0f", maxSteps, tl.DurationS/tl.StepS)
	}
	c.check("timeline.gossip_delay_s", tl.GossipDelayS, finite(tl.GossipDelayS) && tl.GossipDelayS >= 0, "a finite number >= 0")
	c.check("timeline.demand_smoothing_s", tl.DemandSmoothingS, finite(tl.DemandSmoothingS) && tl.DemandSmoothingS >= 0 && tl.DemandSmoothingS <= maxSmoothingS, "a finite number in [0, 3600]")
	c.check("timeline.damping", tl.Damping, tl.Damping > 0 && tl.Damping <= 1, "in (0,1]")
	c.hasIssue("timeline.seed")
}

// checkModel checks timeline.model: the queue model, the synthetic clients
// and connections per site and their product, and the client skew.
func (c *timelineCheck) checkModel() {
	m := c.tl.Model
	c.check("timeline.model.utilization_at_capacity", m.UtilizationAtCapacity, m.UtilizationAtCapacity > 0 && m.UtilizationAtCapacity <= 1, "in (0,1]")
	c.check("timeline.model.max_queue_ms", m.MaxQueueMs, finite(m.MaxQueueMs) && m.MaxQueueMs > 0, "a finite number > 0")
	clientsOK := c.checkCount("timeline.model.clients_per_site", m.ClientsPerSite, maxClientsPerSite)
	connsOK := c.checkCount("timeline.model.connections_per_client", m.ConnectionsPerClient, maxConnections)
	if clientsOK && connsOK && m.ClientsPerSite*m.ConnectionsPerClient > maxKeysPerSite {
		c.add("timeline.model: clients_per_site × connections_per_client must be at most %d, got %d", maxKeysPerSite, m.ClientsPerSite*m.ConnectionsPerClient)
	}
	c.check("timeline.model.client_skew", m.ClientSkew, m.ClientSkew >= 0 && m.ClientSkew <= maxClientSkew, fmt.Sprintf("in [0,%d]", maxClientSkew))
}

// checkCount reports whether the count n at path is valid: it has no
// decoding problem and lies in [1, most]. Otherwise it adds the problem.
func (c *timelineCheck) checkCount(path string, n, most int) bool {
	if c.hasIssue(path) {
		return false
	}
	if n < 1 || n > most {
		c.add("%s: must be a whole number in [1, %d], got %d", path, most, n)
		return false
	}
	return true
}

// demandState is what the checks of timeline.demand carry from one entry
// to the next.
type demandState struct {
	sites map[string]bool // the scenario's site names
	// Per site: the level changes seen so far (indexes into
	// Timeline.Demand), and per site and kind the diurnal or noise entry
	// that applies already.
	levels      map[string][]int
	multipliers map[[2]string]int
}

// demandFields are the field names of a timeline.demand entry, in file
// order.
var demandFields = []string{"at_s", "rps", "for_s", "rise_s", "hold_s", "fall_s", "period_s", "phase_s", "amplitude"}

// checkDemand checks timeline.demand entry by entry. Level changes are
// checked in file order; they must also be in time order per site, which
// the overlap check enforces.
func (c *timelineCheck) checkDemand() {
	st := &demandState{sites: map[string]bool{}, levels: map[string][]int{}, multipliers: map[[2]string]int{}}
	for _, site := range c.s.Sites {
		st.sites[site.Name] = true
	}
	for i, d := range c.tl.Demand {
		c.checkDemandEntry(i, d, st)
	}
}

// checkDemandEntry checks timeline.demand[i], d: its site, its kind, the
// fields its kind uses, and that it does not clash with the entries before
// it (recorded in st).
func (c *timelineCheck) checkDemandEntry(i int, d DemandChange, st *demandState) {
	path := fmt.Sprintf("timeline.demand[%d]", i)
	siteOK := c.checkDemandSite(path, d.Site, st.sites)
	if !slices.Contains(DemandKinds(), d.Kind) {
		if d.Kind == "" {
			c.add("%s.kind: required (one of %s)", path, joinNames(DemandKinds()))
		} else {
			c.add("%s.kind: unknown kind %q (want one of %s)", path, d.Kind, joinNames(DemandKinds()))
		}
		return
	}
	fieldsOK := true
	for _, f := range demandFields {
		if c.hasIssue(path + "." + f) {
			fieldsOK = false
		}
	}
	switch d.Kind {
	case DemandStep, DemandRamp, DemandFlashCrowd:
		if fieldsOK && c.checkLevelFields(path, d) && siteOK {
			c.checkLevelOverlap(i, d, st)
		}
	case DemandDiurnal:
		if fieldsOK {
			c.check(path+".period_s", d.PeriodS, finite(d.PeriodS) && d.PeriodS > 0, "a finite number > 0")
			c.check(path+".phase_s", d.PhaseS, finite(d.PhaseS), "a finite number")
			c.check(path+".amplitude", d.Amplitude, d.Amplitude >= 0 && d.Amplitude <= 1, "in [0,1]")
		}
	case DemandNoise:
		if fieldsOK {
			c.check(path+".amplitude", d.Amplitude, d.Amplitude >= 0 && d.Amplitude <= 1, "in [0,1]")
		}
	}
	if (d.Kind == DemandDiurnal || d.Kind == DemandNoise) && siteOK {
		c.checkMultiplierOnce(i, d, st)
	}
}

// checkDemandSite reports whether the site of the demand entry at path is
// set and names a scenario site (in sites) or AllSites.
func (c *timelineCheck) checkDemandSite(path, site string, sites map[string]bool) bool {
	switch {
	case site == "":
		c.add("%s.site: required", path)
		return false
	case site != AllSites && !sites[site]:
		c.add("%s.site: unknown site %q", path, site)
		return false
	}
	return true
}

// checkLevelFields checks the fields of the level change d at path (a step,
// ramp or flash crowd) and reports whether they are all valid.
func (c *timelineCheck) checkLevelFields(path string, d DemandChange) bool {
	before := len(c.out)
	c.inRun(path+".at_s", d.AtS)
	c.nonNeg(path+".rps", d.RPS)
	c.nonNeg(path+".for_s", d.ForS)
	c.nonNeg(path+".rise_s", d.RiseS)
	c.nonNeg(path+".hold_s", d.HoldS)
	c.nonNeg(path+".fall_s", d.FallS)
	return len(c.out) == before
}

// checkLevelOverlap checks that the level change timeline.demand[i], d,
// starts no earlier than the previous level change of each of its sites
// ends, and records it in st.levels for those sites up to the first
// overlap.
func (c *timelineCheck) checkLevelOverlap(i int, d DemandChange, st *demandState) {
	for _, name := range c.s.demandSiteNames(d.Site) {
		if prev := st.levels[name]; len(prev) > 0 {
			p := c.tl.Demand[prev[len(prev)-1]]
			if d.AtS < p.end() {
				c.add("timeline.demand[%d]: starts at %v s, before timeline.demand[%d] (%s of site %s) ends at %v s; level changes of a site must not overlap",
					i, d.AtS, prev[len(prev)-1], p.Kind, name, p.end())
				return
			}
		}
		st.levels[name] = append(st.levels[name], i)
	}
}

// checkMultiplierOnce checks that timeline.demand[i], d, a diurnal or
// noise entry, is the only one of its kind for each of its sites, and
// records it in st.multipliers for those sites up to the first duplicate.
func (c *timelineCheck) checkMultiplierOnce(i int, d DemandChange, st *demandState) {
	for _, name := range c.s.demandSiteNames(d.Site) {
		key := [2]string{name, string(d.Kind)}
		if prev, dup := st.multipliers[key]; dup {
			c.add("timeline.demand[%d]: site %s already has a %s entry (timeline.demand[%d])", i, name, d.Kind, prev)
			return
		}
		st.multipliers[key] = i
	}
}

// demandSiteNames returns the sites a demand entry for site applies to:
// site itself, or every site in scenario order for AllSites.
func (s *Scenario) demandSiteNames(site string) []string {
	if site != AllSites {
		return []string{site}
	}
	names := make([]string, len(s.Sites))
	for i, st := range s.Sites {
		names[i] = st.Name
	}
	return names
}

// checkEvents checks timeline.events entry by entry and returns the
// indexes of the events that passed their own checks, for the replay.
func (c *timelineCheck) checkEvents() []int {
	groups := c.s.groupIndex()
	var valid []int
	for i, e := range c.tl.Events {
		if c.checkEvent(i, e, groups) {
			valid = append(valid, i)
		}
	}
	return valid
}

// checkEvent checks timeline.events[i], e: its group (a key of groups), its
// time and the field of its kind. It reports whether the event has no
// problem.
func (c *timelineCheck) checkEvent(i int, e Event, groups map[string]int) bool {
	path := fmt.Sprintf("timeline.events[%d]", i)
	ok := true
	switch _, known := groups[e.Group]; {
	case e.Group == "":
		c.add("%s.group: required", path)
		ok = false
	case !known:
		c.add("%s.group: unknown group %q", path, e.Group)
		ok = false
	}
	before := len(c.out)
	c.inRun(path+".at_s", e.AtS)
	if c.hasIssue(path) {
		ok = false
	}
	switch e.Kind {
	case EventHealth:
		c.hasIssue(path + ".healthy")
	case EventScale:
		c.hasIssue(path + ".instances")
		if !c.hasIssue(path + ".cold_start_s") {
			c.nonNeg(path+".cold_start_s", e.ColdStartS)
		}
	case EventScaler:
		if !(e.CapacityScaler >= 0 && e.CapacityScaler <= 1) {
			c.add("%s.capacity_scaler: must be in [0,1], got %v", path, e.CapacityScaler)
		}
	case EventSlowdown:
		if !(e.Slowdown >= 1) || math.IsInf(e.Slowdown, 1) {
			c.add("%s.slowdown: must be a finite number >= 1, got %v", path, e.Slowdown)
		}
	}
	c.hasIssue(path + ".cold_start_s")
	return ok && len(c.out) == before
}

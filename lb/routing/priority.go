package routing

import (
	"cmp"
	"slices"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/priority"
)

// The envoy_priority baseline (config.PolicyEnvoyPriority): Envoy's
// priority levels over the site's regions. The nearest region (by this
// gfe's RTT; ties by name) is priority 0, the next nearest 1, and so on;
// the regions the gfe has measured no RTT to form one last level together.
// Each level receives the share of requests lb/priority's Loads gives it
// from the levels' health alone (healthy and not ejected instances over all
// instances, overprovisioning factor 1.4): no capacity spill, no panic
// threshold. Inside a level, least request (power of two choices) picks
// among its active members, and among its demoted ones only when every
// active one is full, as the other baselines do.

// PriorityLevel is one priority level of an envoy_priority service at this
// site. Immutable once its table is built.
type PriorityLevel struct {
	// Regions are the level's regions: one, or for the last level every
	// region without a measured RTT (in name order).
	Regions []string
	// Healthy counts the level's instances that may take requests
	// (healthy, not ejected); Total all of the level's instances of groups
	// that are not drained, healthy or not.
	Healthy, Total int
	// Load is the percent of the service's requests the level receives,
	// in [0, 100]; the loads of a service's levels add up to 100, or are
	// all 0 when no level has a healthy instance.
	Load int
	// Members are the level's healthy backends outlier detection had not
	// ejected, the active ones first: Members[:Active] are picked from
	// first, Members[Active:] (demoted) only when those are all full.
	Members []Member
	Active  int

	inflight, dinflight func(int) int64
}

// Priorities returns the priority levels of an envoy_priority service,
// priority 0 first; nil for every other policy. Callers must not modify
// it.
func (s *Service) Priorities() []PriorityLevel { return s.levels }

// setPriorities sets the priority levels of envoy_priority service svc
// from its pool (set by setPool), the fleet's config and this gfe's RTT.
func setPriorities(svc *Service, cs *Fleet, rtt map[string]float64) {
	sc := svc.cfg
	const unmeasured = "" // the key of the level of regions without RTT
	total := map[string]int{}
	var regions []string
	for _, be := range sc.Backends {
		ref, ok := cs.Config.Group(be.Group)
		if !ok || be.CapacityScaler == 0 {
			continue
		}
		r := ref.Region.Name
		if _, ok := total[r]; !ok {
			regions = append(regions, r)
		}
		total[r] += len(ref.Group.Instances)
	}
	slices.SortFunc(regions, func(a, b string) int {
		return cmp.Or(cmp.Compare(rttOf(rtt, a), rttOf(rtt, b)), cmp.Compare(a, b))
	})
	var levels []PriorityLevel
	at := map[string]int{} // region → level index
	for _, r := range regions {
		key := r
		if _, ok := rtt[r]; !ok {
			key = unmeasured
		}
		i, ok := at[key]
		if !ok {
			i = len(levels)
			at[key] = i
			levels = append(levels, PriorityLevel{})
		}
		at[r] = i
		levels[i].Regions = append(levels[i].Regions, r)
		levels[i].Total += total[r]
	}
	for _, m := range svc.pool { // active first: so is each level
		if i, ok := at[m.Region]; ok {
			levels[i].Members = append(levels[i].Members, m)
		}
	}
	counts := make([]priority.Level, len(levels))
	for i := range levels {
		lv := &levels[i]
		lv.Healthy = len(lv.Members)
		lv.Active = len(lv.Members)
		if j := slices.IndexFunc(lv.Members, func(m Member) bool { return m.Demoted }); j > 0 {
			lv.Active = j // when every member is demoted, they are all picked as active
		}
		ms, active := lv.Members, lv.Active
		lv.inflight = func(i int) int64 { return ms[i].B.InFlight() }
		lv.dinflight = func(i int) int64 { return ms[active+i].B.InFlight() }
		counts[i] = priority.Level{Healthy: lv.Healthy, Total: lv.Total}
	}
	for i, load := range priority.Loads(counts, priority.DefaultOverprovisioning) {
		levels[i].Load = load
	}
	svc.levels = levels
}

// priorityPick is one pick of an envoy_priority service: the level by the
// service's Weyl sequence (Meters.groupDraw) mapped through the levels'
// loads, then least request inside the level.
func (s *Service) priorityPick() (Pick, error) {
	x := int((s.meters.groupDraw() >> 32) * 100 >> 32) // in [0, 100)
	var lv *PriorityLevel
	for i, cum := range s.levels {
		x -= cum.Load
		if x < 0 {
			lv = &s.levels[i]
			break
		}
	}
	if lv == nil || len(lv.Members) == 0 {
		return Pick{}, ErrNoBackend
	}
	if i, ok := s.lr.Pick(lv.Active, lv.inflight); ok {
		if m := &lv.Members[i]; m.B.TryAcquire() {
			return pickOf(m, ReasonPolicy), nil
		}
	}
	n := len(lv.Members)
	if lv.Active == n {
		return Pick{}, ErrAllBusy
	}
	for i := range lv.Active {
		if !lv.Members[i].B.Full() {
			return Pick{}, ErrAllBusy
		}
	}
	i, ok := s.lr.Pick(n-lv.Active, lv.dinflight)
	if !ok {
		return Pick{}, ErrAllBusy
	}
	if m := &lv.Members[lv.Active+i]; m.B.TryAcquire() {
		return pickOf(m, ReasonPolicy), nil
	}
	return Pick{}, ErrAllBusy
}

// isPriority reports whether p is the envoy_priority baseline.
func isPriority(p config.Policy) bool { return p == config.PolicyEnvoyPriority }

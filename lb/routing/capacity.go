package routing

import (
	"math"
	"slices"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/backend"
	"github.com/spillway-lb/spillway/lb/capacity"
	"github.com/spillway-lb/spillway/lb/waterfall"
)

// The closed loop (docs/design.md §3 rule 8). Requests count how they ended on
// their backend (backend.Backend.Observe, ObserveLoad); every build takes
// those counts, sums them per group into a capacity.Sample, and updates
// the group's capacity.Estimator in the service. The world of the build
// plans each group with
//
//	declared capacity of its healthy instances × target_utilization × factor
//
// where factor is the lowest of this gfe's own estimate and every peer's
// gossiped one (Peer.Capacity), so that one gfe's shrink applies in its own
// plan at once and in every other gfe's plan once gossip carries it. When
// the sites demand more than the shrunk groups hold in total, every region
// is full and spilling cannot help: the world is planned without factors,
// so that rule 6 spreads the overload evenly over the configured
// capacities rather than over noisy estimates.

// GroupCapacity is what /status and /metrics show about one group of a
// service: its declared and effective capacity and what shrank it.
type GroupCapacity struct {
	// Group and Region name the group; Healthy counts its healthy
	// active instances (demoted ones are not in its capacity).
	Group, Region string
	Healthy       int
	// Declared is the capacity of the group's healthy instances as
	// configured (config.Backend.Capacity), in the service's demand unit.
	Declared float64
	// Planned is what the plan fills the group up to: Declared ×
	// target_utilization × Factor.
	Planned float64
	// Factor is the group's effective-capacity factor the plan used (the
	// lowest of Own and the peers'), and Own this gfe's own estimate.
	Factor, Own float64
	// Signal is the last signal that shrank this gfe's own estimate or
	// holds it down (capacity.SignalNone when Own is 1), and SignalAt when
	// it was seen.
	Signal   capacity.Signal
	SignalAt time.Time
	// Last is what the last judged sample of this gfe's requests showed.
	Last capacity.Judgement
}

// Effective returns Declared × Factor: the capacity local signals leave
// the group, before the service's target utilization.
func (g GroupCapacity) Effective() float64 { return g.Declared * g.Factor }

// groupKey names an estimator: a group of a service.
type groupKey struct{ service, group string }

// estimatorConfig returns the capacity estimator settings of service sc.
func estimatorConfig(sc *config.Service) capacity.Config {
	c := capacity.DefaultConfig()
	f := sc.Feedback
	c.RejectFraction = f.RejectFraction
	c.QueueDelay = f.QueueDelay
	c.Decrease = f.Decrease
	c.Hold = f.Hold
	c.RecoverDelay = f.RecoverDelay
	c.RecoverRate = f.RecoverRate
	c.MinFactor = f.MinFactor
	c.MaxShrink = f.MaxShrink
	c.ConfirmUtilization = f.ConfirmUtilization
	if sc.BalancingMode == config.ModeUtilization {
		// Load reports measure utilization against max_utilization, the
		// limit the operator declared (averaged over the backends).
		var sum float64
		for _, b := range sc.Backends {
			sum += b.MaxUtilization
		}
		if len(sc.Backends) > 0 && sum > 0 {
			c.UtilizationLimit = sum / float64(len(sc.Backends))
		}
	}
	return c
}

// takeSignals takes the signals every backend counted since the last
// build.
func (b *Builder) takeSignals() map[*backend.Backend]backend.Signals {
	out := make(map[*backend.Backend]backend.Signals, len(b.backends))
	for _, be := range b.backends {
		if s := be.TakeSignals(); s != (backend.Signals{}) {
			out[be] = s
		}
	}
	return out
}

// updateCapacity updates the estimators of service sc's groups from the
// signals of the build at in.Now and returns this gfe's own factor per
// group (1 for a service with feedback off), and the groups whose load
// reports show a rise gossip has not carried yet, with the load unexplained
// (see herd.go).
func (b *Builder) updateCapacity(in Input, sc *config.Service, sigs map[*backend.Backend]backend.Signals, dt float64) (own, herd map[string]float64) {
	own = make(map[string]float64, len(sc.Backends))
	prev := b.prev[sc.Name]
	ecfg := estimatorConfig(sc)
	for _, be := range sc.Backends {
		ref, ok := in.Fleet.Config.Group(be.Group)
		if !ok {
			continue
		}
		key := groupKey{sc.Name, be.Group}
		if !sc.Feedback.Enabled {
			delete(b.estimators, key)
			own[be.Group] = 1
			continue
		}
		var s capacity.Sample
		var reported float64
		var responding int
		// Demoted instances' requests count as the group's load (they
		// serve its overflow), but not in its capacity.
		healthy := in.Fleet.HealthyActiveCount(ref.Group.Instances)
		for _, inst := range ref.Group.Instances {
			bk := b.backends[inst.Address]
			if bk == nil {
				continue
			}
			g := sigs[bk]
			s.Answered += g.Answered
			s.Rejected += g.Rejected
			s.Failed += g.Failed
			s.Latency += g.Latency
			s.Reports += g.Reports
			s.Utilization += g.Utilization
			if g.Rates > 0 {
				// What the instance says it receives from every gfe.
				reported += g.Rate / float64(g.Rates)
				responding++
			}
			if !sc.BalancingMode.Concurrent() {
				// A CONNECTION-mode service's capacity is what it holds
				// open: being at the concurrency limits is being full,
				// not overloaded, and long-lived connections pile up
				// without answers by design.
				n := bk.InFlight()
				s.Outstanding += n
				if l := bk.MaxConcurrency(); l > 0 {
					s.InFlight += n
					s.Limit += l
				}
			}
		}
		s.Instances = healthy
		s.Capacity = be.Capacity(sc.BalancingMode, healthy, ref.Group.ActiveInstances()) * sc.TargetUtilization
		if prev != nil {
			for _, gl := range prev.Groups {
				if gl.Name == be.Group {
					s.Load = gl.Load
				}
			}
		}
		if !sc.BalancingMode.Concurrent() {
			// The load is at least what this gfe sent and what the
			// instances report receiving from every gfe (the plan may
			// not know yet what other gfes send).
			if dt > 0 {
				s.Load = max(s.Load, float64(s.Answered+s.Failed)/dt)
			}
			s.Load = max(s.Load, reported)
			if dt > 0 && s.Capacity > 0 {
				sent := float64(s.Answered+s.Rejected) / dt
				if u := unexplained(prev, b.cfg.Site, be.Group, reported, responding, healthy, sent); u > HerdEvidence*s.Capacity {
					if herd == nil {
						herd = map[string]float64{}
					}
					herd[be.Group] = u
				}
			}
		}
		e := b.estimators[key]
		if e == nil {
			e = capacity.New(ecfg)
			b.estimators[key] = e
		}
		e.SetConfig(ecfg)
		f, _ := e.Update(in.Now, s)
		own[be.Group] = f
	}
	return own, herd
}

// capacities returns the GroupCapacity of every group of world w, planned
// for service sc with the factors of BuildWorld.
func (b *Builder) capacities(sc *config.Service, w waterfall.World, own, factor map[string]float64) []GroupCapacity {
	var out []GroupCapacity
	for _, r := range w.Regions {
		for _, g := range r.Groups {
			gc := GroupCapacity{Group: g.Name, Region: r.Name, Healthy: g.Healthy, Planned: g.Capacity, Factor: factorOf(factor, g.Name), Own: factorOf(own, g.Name)}
			if be, ok := sc.Backend(g.Name); ok {
				gc.Declared = be.Capacity(sc.BalancingMode, g.Healthy, g.Instances)
			}
			if e := b.estimators[groupKey{sc.Name, g.Name}]; e != nil {
				gc.Signal, gc.SignalAt = e.Signal()
				gc.Last = e.Last()
			}
			out = append(out, gc)
		}
	}
	return out
}

// overloaded reports whether w's sites demand more than its groups'
// capacity in total.
func overloaded(w waterfall.World) bool {
	var demand, capacity float64
	for _, s := range w.Sites {
		demand += s.Demand
	}
	for _, r := range w.Regions {
		for _, g := range r.Groups {
			capacity += g.Capacity
		}
	}
	return demand > capacity
}

// beyondDeclared reports whether w's sites demand more than its groups'
// declared capacity in total, w being planned without factors at target
// utilization target (each group's Capacity is declared × target): global
// overload, in which soft limits are off (see "Overflow at pick time").
func beyondDeclared(w waterfall.World, target float64) bool {
	var demand, capacity float64
	for _, s := range w.Sites {
		demand += s.Demand
	}
	for _, r := range w.Regions {
		for _, g := range r.Groups {
			capacity += g.Capacity
		}
	}
	if target > 0 {
		capacity /= target
	}
	return demand > capacity
}

// factorOf returns group's factor in m, 1 when it has none.
func factorOf(m map[string]float64, group string) float64 {
	if f, ok := m[group]; ok {
		return f
	}
	return 1
}

// mergeFactors returns, per group of own, the lowest of own's factor and
// every peer's for service svc (peers with this gfe's node name are
// ignored, as BuildWorld ignores them). A peer's factor below minFactor,
// the lowest any gfe's estimator reaches (feedback.min_factor), counts as
// minFactor: one gfe cannot gossip a group's capacity away.
func mergeFactors(svc string, own map[string]float64, peers []Peer, self string, minFactor float64) map[string]float64 {
	out := make(map[string]float64, len(own))
	for g, f := range own {
		out[g] = f
	}
	for _, p := range peers {
		if p.Node == self {
			continue
		}
		for g, f := range p.Capacity[svc] {
			f = max(f, minFactor)
			if cur, ok := out[g]; ok && f > 0 && f < cur {
				out[g] = f
			}
		}
	}
	return out
}

// Factors returns this gfe's own effective-capacity factors below 1, by
// service and group: what it gossips (Peer.Capacity).
func (b *Builder) Factors() map[string]map[string]float64 {
	var out map[string]map[string]float64
	for k, e := range b.estimators {
		if f := e.Factor(); f < 1 {
			if out == nil {
				out = map[string]map[string]float64{}
			}
			if out[k.service] == nil {
				out[k.service] = map[string]float64{}
			}
			out[k.service][k.group] = f
		}
	}
	return out
}

// Overflow at pick time. A plan changes once per build; a step in demand
// or a burst meets it up to a build interval late, and queues at the
// nearest group in the meantime. So every instance of a planned service
// gets a soft concurrency limit (backend.Backend.SetSoftLimit): the
// requests this gfe may have in flight to it without queueing there,
// Little's law over the instance's planned rate,
//
//	soft = max(minSoftLimit, ⌈rate per instance × (baseline + queue_delay)⌉)
//
// where the baseline is the group's unqueued answer time (lb/capacity).
// A pick that finds every instance of its group at its soft limit takes
// the next group of the row, and past the row the groups of the site's
// farther regions, nearest first (withOverflow): the overflow spills to
// the next region at once, and the next build plans it. Overflow groups
// serve first picks only; session affinity and retries keep to the plan
// row (but for a retry after an unreachable backend, which may leave it:
// Service.RetryPick). A group without a baseline yet has no soft limit, and no instance
// has one while the service is in global overload, its demand above the
// declared capacity of every group (rule 6 spreads the overload as the
// plan says; a soft limit would move it to far regions, whose longer
// round trip leaves more requests in flight). Soft limits stay on when
// only the shrunk capacities are short of the demand (the plan then runs
// on the declared ones): slowed instances shrink their groups' factors
// well within the declared capacity, and without a soft limit their
// planned share would queue on them (the uneven story, BENCHMARKS §3). A
// soft limit never refuses a request (waterfall.Picker.Pick).

// minSoftLimit is the lowest soft limit: an instance always takes a few
// requests at once from each gfe, so that a busy gfe's own scheduling
// delays (which hold requests in flight longer) do not overflow traffic
// from an instance that is not queueing.
const minSoftLimit = 4

// setSoftLimits sets the soft limit of every instance of planned service
// sc from caps, its groups' capacities in this build, and each group's
// baseline (see above); none for CONNECTION-mode services or with feedback
// off.
func (b *Builder) setSoftLimits(in Input, sc *config.Service, caps []GroupCapacity) {
	if !sc.Feedback.Enabled || sc.BalancingMode.Concurrent() {
		b.clearSoftLimits(in, sc)
		return
	}
	for _, g := range caps {
		ref, ok := in.Fleet.Config.Group(g.Group)
		if !ok {
			continue
		}
		var soft int64
		if e := b.estimators[groupKey{sc.Name, g.Group}]; e != nil && g.Healthy > 0 {
			if base, ok := e.Baseline(in.Now); ok {
				rate := g.Declared * g.Factor / float64(g.Healthy)
				window := base + sc.Feedback.QueueDelay
				soft = max(minSoftLimit, int64(math.Ceil(rate*window.Seconds())))
			}
		}
		for _, inst := range ref.Group.Instances {
			if bk := b.backends[inst.Address]; bk != nil {
				bk.SetSoftLimit(soft)
			}
		}
	}
}

// clearSoftLimits removes the soft limits of service sc's instances.
func (b *Builder) clearSoftLimits(in Input, sc *config.Service) {
	for _, be := range sc.Backends {
		ref, ok := in.Fleet.Config.Group(be.Group)
		if !ok {
			continue
		}
		for _, inst := range ref.Group.Instances {
			if bk := b.backends[inst.Address]; bk != nil {
				bk.SetSoftLimit(0)
			}
		}
	}
}

// withOverflow returns row followed by a flow of share 0 to every group
// with capacity of the site's regions that row does not reach, in the
// site's region order (nearest first), with reason spill_capacity: where a
// pick goes when every group of the row is at its limit.
func withOverflow(row []waterfall.Flow, plan *waterfall.Plan, site string) []waterfall.Flow {
	order := plan.SiteRegions(site)
	if order == nil {
		return row
	}
	in := map[string]bool{}
	for _, f := range row {
		in[f.Region] = true
	}
	out := slices.Clone(row)
	for _, r := range order {
		if in[r] {
			continue
		}
		for _, g := range plan.RegionGroups(r) {
			if g.Capacity > 0 {
				out = append(out, waterfall.Flow{Site: site, Region: r, Group: g.Name, Reason: waterfall.ReasonSpillCapacity})
			}
		}
	}
	return out
}

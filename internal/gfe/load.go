package gfe

import (
	"sync"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/gfe/pending"
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/lb/routing"
	"github.com/spillway-lb/spillway/lb/waterfall"
)

// loadSamplesPerPlan is how many times per PlanInterval the planner samples
// the requests in flight to each instance group (the step takes one more),
// for gossip.GroupLoad.InFlight.
const loadSamplesPerPlan = 10

// loadMeter accumulates the in-flight samples of each instance group
// between two publishes. Owned by the planner goroutine.
type loadMeter struct {
	// sums adds up, by group, the in-flight count of every sample; n is
	// the number of samples.
	sums map[string]float64
	n    int
}

// sampleLoad adds one sample of the requests this gfe has in flight to each
// instance group of snapshot cs (the sum of its backends' in-flight
// counts). Called from the planner goroutine (it reads the Builder).
func (d *Daemon) sampleLoad(cs *snapshot.Snapshot) {
	if cs == nil {
		return
	}
	m := &d.load
	if m.sums == nil {
		m.sums = map[string]float64{}
	}
	m.n++
	for _, g := range cs.Config.Groups() {
		var sum int64
		for _, in := range g.Group.Instances {
			if be := d.builder.Backend(in.Address); be != nil {
				sum += be.InFlight()
			}
		}
		if sum > 0 {
			m.sums[g.Group.Name] += float64(sum)
		}
	}
}

// groupLoad returns, and starts anew, the load this gfe put on each
// instance group of cs since the last call (gossip.NodeState.Load):
// in flight, the mean of the samples; requests/s, from the requests that
// ended at the group's backends between the last two builds
// (routing.Builder.Ended); pending, the requests waiting now, settled
// (pending.Queue.Lines), for the services whose capacity requests name the
// group (capacityTarget); act, the mean ACT limit of its instances when
// below their ceiling (routing.Builder.ACTLimits). Groups
// spilled, the site's demand the plan sends past the group (spilled); groups
// with all four zero are left out: readers take absence as zero. Called
// from the planner goroutine after the step's Build.
func (d *Daemon) groupLoad(cs *snapshot.Snapshot, now time.Time) map[string]gossip.GroupLoad {
	m := &d.load
	defer func() { clear(m.sums); m.n = 0 }()
	if cs == nil {
		return nil
	}
	out := map[string]gossip.GroupLoad{}
	if m.n > 0 {
		for g, s := range m.sums {
			l := out[g]
			l.InFlight = s / float64(m.n)
			out[g] = l
		}
	}
	if ended, dt := d.builder.Ended(); dt > 0 && len(ended) > 0 {
		for _, g := range cs.Config.Groups() {
			var n int64
			for _, in := range g.Group.Instances {
				n += ended[in.Address]
			}
			if n > 0 {
				l := out[g.Group.Name]
				l.Requests = float64(n) / dt
				out[g.Group.Name] = l
			}
		}
	}
	if t := d.table.Load(); t != nil {
		for g, v := range d.spilled(t, cs) {
			l := out[g]
			l.Spilled = v
			out[g] = l
		}
	}
	for g, v := range d.builder.ACTLimits(cs.Config) {
		l := out[g]
		l.ACT = v
		out[g] = l
	}
	for _, line := range d.pending.Lines(now) {
		if t, ok := d.capacityTarget(line.Service); ok {
			l := out[t.Group]
			l.Pending += float64(line.Waiting)
			out[t.Group] = l
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// capacityTarget returns the instance group that the waiting requests of
// service should go to, and which capacity requests name: of the service's
// autoscaled groups, the one whose region this gfe measures the lowest RTT
// to (groups of regions without an estimate come after, in the service's
// backend order; with no estimate at all, the first autoscaled group). Its
// counts come from the live snapshot: every instance that is not demoted
// (running or starting, healthy or not), and the healthy ones of those. False when the service has no autoscaled
// group or there is no snapshot. Of the instances not healthy, those that
// have never been healthy since they appeared, less than two cold starts
// ago, count as Starting. For a RATE-mode service, RateWant is the
// instances this gfe's demand for it needs by the arrival rate
// (autoscale.Config.RateStarts from zero: demand × the group's mean
// latency here, in flight ÷ requests/s, at the concurrency target), from
// the last published state; 0 before any is known. Safe to call from any
// goroutine.
func (d *Daemon) capacityTarget(service string) (pending.Target, bool) {
	cs := d.control.Load()
	if cs == nil {
		return pending.Target{}, false
	}
	sc, ok := cs.Config.Service(service)
	if !ok {
		return pending.Target{}, false
	}
	rtt, now := d.rtt.Snapshot(), d.clk.Now()
	var best pending.Target
	bestRTT, found, known := 0.0, false, false
	for _, b := range sc.Backends {
		g, ok := cs.Config.Group(b.Group)
		if !ok || !g.Group.Autoscaling.Enabled() {
			continue
		}
		r, has := rtt[g.Region.Name]
		if found && (!has || known && r >= bestRTT) {
			continue
		}
		found, known, bestRTT = true, has, r
		best = pending.Target{Group: g.Group.Name, MaxConcurrency: g.Group.Autoscaling.MaxConcurrencyPerInstance}
		for _, in := range g.Group.Instances {
			if in.Demoted {
				continue
			}
			best.Instances++
			switch {
			case cs.Healthy(in.Address):
				best.Healthy++
			case d.seen.starting(in.Address, now, 2*g.Group.Autoscaling.ColdStart):
				best.Starting++
			}
		}
		best.RateWant = 0
		if st := d.published.Load(); st != nil && sc.BalancingMode == config.ModeRate {
			if l := st.Load[g.Group.Name]; l.Requests > 0 && l.InFlight > 0 {
				reqTime := time.Duration(l.InFlight / l.Requests * float64(time.Second))
				best.RateWant = g.Group.Autoscaling.Rules().RateStarts(st.Demand[service], reqTime, 0)
			}
		}
	}
	return best, found
}

// spilled returns, per autoscaled group, the demand of this gfe's site
// that table t's plans send past it: for each planned service, the part of
// the site's row that goes to regions farther (by this gfe's RTT) than the
// region of the group its capacity requests name (capacityTarget). That
// is load the group would take if it had the capacity, which its
// autoscaler counts (gossip.GroupLoad.Spilled). A group whose region has
// no RTT estimate (no instance to probe: a group at zero) gets none, since
// whether it is nearer than the regions taking the load is unknown; such a
// group leaves zero through the pending queue (when no other region takes
// the requests) or min_instances.
func (d *Daemon) spilled(t *routing.Table, cs *snapshot.Snapshot) map[string]float64 {
	var out map[string]float64
	rtt := d.rtt.Snapshot()
	for name, svc := range t.Services {
		p := svc.Plan()
		if p == nil {
			continue
		}
		target, ok := d.capacityTarget(name)
		if !ok {
			continue
		}
		g, ok := cs.Config.Group(target.Group)
		if !ok {
			continue
		}
		near, ok := rtt[g.Region.Name]
		if !ok {
			continue
		}
		if past := spillPast(p.Row(d.cfg.Site), rtt, g.Region.Name, near); past > 0 {
			if out == nil {
				out = map[string]float64{}
			}
			out[target.Group] += past
		}
	}
	return out
}

// spillPast returns the demand of a plan row that goes to regions farther
// (by rtt) than region, whose RTT is near; regions without an estimate
// are not counted.
func spillPast(row []waterfall.Flow, rtt map[string]float64, region string, near float64) float64 {
	var past float64
	for _, f := range row {
		if r, ok := rtt[f.Region]; ok && r > near && f.Region != region {
			past += f.Demand
		}
	}
	return past
}

// seenInstances records, per instance address, when it first appeared in
// a snapshot and whether it has been healthy since. Safe for concurrent
// use.
type seenInstances struct {
	mu sync.Mutex
	at map[string]seenInstance
}

type seenInstance struct {
	first   time.Time
	healthy bool // healthy in some snapshot since first
}

// update takes in snapshot cs at now: new addresses are first seen now,
// addresses gone are forgotten.
func (s *seenInstances) update(cs *snapshot.Snapshot, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := map[string]seenInstance{}
	for _, g := range cs.Config.Groups() {
		for _, in := range g.Group.Instances {
			si, ok := s.at[in.Address]
			if !ok {
				si.first = now
			}
			si.healthy = si.healthy || cs.Healthy(in.Address)
			next[in.Address] = si
		}
	}
	s.at = next
}

// starting reports whether the instance at addr has never been healthy
// since it appeared, less than within ago.
func (s *seenInstances) starting(addr string, now time.Time, within time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	si, ok := s.at[addr]
	return ok && !si.healthy && now.Sub(si.first) < within
}

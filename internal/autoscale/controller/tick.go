package controller

// The loop's tick (controller.go): leases taken and lost, each held group's
// sample and rules, and capacity requests.

import (
	"fmt"
	"math"
	"time"

	"github.com/spillway-lb/spillway/lb/autoscale"
)

// tick runs every group's rules once.
func (l *loop) tick(now time.Time) {
	l.syncLeases(now)
	for name, spec := range l.specs {
		if r := l.runs[name]; r != nil && r.as != nil && !r.acquiredNow {
			r.spec = spec
			l.step(r, now)
		}
	}
	for name, r := range l.runs {
		if _, ok := l.specs[name]; !ok && r.as != nil {
			l.release(r, now, "group no longer autoscaled")
		}
		l.stopDue(r, now)
		l.forgetIfDone(name, r)
	}
	l.storeStatus()
}

// syncLeases starts acting on the groups whose lease this replica now
// holds and stops acting on those whose lease it lost; the rules of a
// group just acquired first run at the next tick.
func (l *loop) syncLeases(now time.Time) {
	for _, r := range l.runs {
		r.acquiredNow = false
	}
	for name, spec := range l.specs {
		_, held := l.c.opts.Leases.Holds(name)
		r := l.runs[name]
		switch {
		case held && (r == nil || r.as == nil):
			l.acquire(name, spec, r, now)
			l.runs[name].acquiredNow = true
		case !held && r != nil && r.as != nil:
			l.release(r, now, "lease lost")
		}
	}
	l.storeStatus()
}

// forgetIfDone drops a group this replica no longer acts on once nothing
// of it is left.
func (l *loop) forgetIfDone(name string, r *groupRun) {
	if r.as == nil && len(r.instances) == 0 && r.launching == 0 {
		delete(l.runs, name)
	}
}

// acquire starts acting on a group whose lease this replica just took.
func (l *loop) acquire(name string, spec groupSpec, r *groupRun, now time.Time) {
	if r == nil {
		r = &groupRun{}
		l.runs[name] = r
	}
	r.spec = spec
	r.as = autoscale.New(spec.as.Rules(), spec.as.Initial(), now)
	r.lastTick = now
	rec := r.as.Recommended()
	r.last = autoscale.Decision{Recommended: rec, Driver: autoscale.DriverMin, Running: rec}
	l.c.log.Info().Str("group", name).Int("initial", rec).Msg("autoscaler lease acquired; running the group")
	l.reconcile(r, rec, 0, 0, now)
}

// release stops acting on a group and drains the instances it started.
func (l *loop) release(r *groupRun, now time.Time, why string) {
	r.as = nil
	for _, in := range r.instances {
		l.markStopping(in, now)
	}
	l.c.log.Info().Str("group", r.spec.group.Name).Int("instances", len(r.instances)).Msg("autoscaler stops acting on the group (" + why + "); draining its instances")
}

// step samples the group and applies one tick of the rules.
func (l *loop) step(r *groupRun, now time.Time) {
	s := l.sample(r, now)
	r.sample = s
	prev := r.last.Recommended
	d := r.as.Tick(now, s)
	r.last = d
	if m := l.c.opts.Metrics; m != nil {
		m.observe(r.spec.group.Name, d, d.Recommended != prev)
	}
	if d.Recommended != prev || d.Stopped > 0 {
		l.c.log.Info().Str("group", r.spec.group.Name).Int("from", prev).Int("to", d.Recommended).
			Str("driver", string(d.Driver)).Int("cpu", d.Drivers.CPU).Int("concurrency", d.Drivers.Concurrency).
			Int("act", d.Drivers.ACT).Float64("cpu_cores", s.CPUCores).Float64("in_flight", s.Concurrency).
			Int64("requests", s.Requests).Int("start", d.Start).Int("promoted", d.Promoted).
			Int("demoted", d.Demoted).Int("stopped", d.Stopped).Msg("scale decision")
	}
	l.reconcile(r, d.Recommended, d.Demoted, d.Stopped, now)
}

// sample measures the group over the tick that ends at now.
func (l *loop) sample(r *groupRun, now time.Time) autoscale.Sample {
	elapsed := now.Sub(r.lastTick).Seconds()
	r.lastTick = now
	var s autoscale.Sample
	if l.c.opts.CPU != nil {
		for _, in := range r.instances {
			cpu, ok := l.c.opts.CPU(in.inst)
			if ok && in.cpuOK && elapsed > 0 && !in.stopping {
				s.CPUCores += max(0, cpu-in.cpu) / elapsed
			}
			in.cpu, in.cpuOK = cpu, ok
		}
	}
	if l.c.opts.Load != nil {
		ld := l.c.opts.Load(r.spec.group.Name)
		s.Concurrency = ld.Concurrency()
		s.ACT = ld.ACT
		s.Requests = int64(math.Ceil(ld.Requests * elapsed))
		if s.Requests == 0 && ld.Pending > 0 {
			s.Requests = 1
		}
	}
	return s
}

// demand applies a capacity request.
func (l *loop) demand(group string, wanted int, now time.Time) DemandAnswer {
	spec, ok := l.specs[group]
	if !ok {
		return DemandAnswer{Message: fmt.Sprintf("group %q has no autoscaling block", group)}
	}
	r := l.runs[group]
	if _, held := l.c.opts.Leases.Holds(group); !held || r == nil || r.as == nil {
		return DemandAnswer{Message: fmt.Sprintf("the autoscaler of group %q runs on another control-plane replica; the gfes' gossiped load reaches it", group)}
	}
	rec := r.as.Recommended()
	if wanted < 0 { // demand without a count: one more instance
		wanted = rec + 1
	}
	if wanted <= rec {
		return DemandAnswer{Granted: true, Message: fmt.Sprintf("group %q is already recommended %d instances", group, rec)}
	}
	if rec >= spec.as.MaxInstances {
		return DemandAnswer{Message: fmt.Sprintf("group %q is at max_instances=%d", group, spec.as.MaxInstances)}
	}
	d := r.as.OnDemand(now, wanted-rec)
	r.last = d
	if m := l.c.opts.Metrics; m != nil {
		m.observe(group, d, true) // granted above the recommendation: a change
	}
	l.c.log.Info().Str("group", group).Int("from", rec).Int("to", d.Recommended).Int("wanted", wanted).
		Int("start", d.Start).Int("promoted", d.Promoted).Msg("scale decision (capacity request)")
	l.reconcile(r, d.Recommended, d.Demoted, 0, now)
	l.storeStatus()
	return DemandAnswer{Granted: true, Message: fmt.Sprintf("group %q recommended %d instances (from %d)", group, d.Recommended, rec)}
}

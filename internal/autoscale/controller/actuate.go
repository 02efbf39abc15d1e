package controller

// The loop's actuation (controller.go): a decision turned into instances
// started, demoted, promoted and stopped through the Provider, and the
// results taken back in.

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/spillway-lb/spillway/internal/autoscale/provider"
	"github.com/spillway-lb/spillway/internal/gossip"
)

// reconcile makes the group's instances match a decision: rec recommended
// (active) instances and dem demoted ones, after stopping stopped of the
// demoted.
func (l *loop) reconcile(r *groupRun, rec, dem, stopped int, now time.Time) {
	var active, demoted []*instance
	alive := 0
	for _, in := range r.instances {
		alive++
		switch {
		case in.stopping:
		case in.demoted:
			demoted = append(demoted, in)
		default:
			active = append(active, in)
		}
	}
	// The rules stopped some demoted instances: the oldest demoted first
	// (instances in start order; demoted ones keep it).
	for ; stopped > 0 && len(demoted) > 0; stopped-- {
		l.markStopping(demoted[0], now)
		demoted = demoted[1:]
	}
	have := len(active) + r.launching
	switch {
	case have < rec:
		need := rec - have
		for need > 0 && len(demoted) > 0 { // promote the newest demoted first
			in := demoted[len(demoted)-1]
			demoted = demoted[:len(demoted)-1]
			in.demoted = false
			need--
		}
		room := r.spec.as.MaxInstances - alive - r.launching
		if n := min(need, room); n > 0 {
			l.start(r, n)
		}
	case have > rec:
		// Demote the newest active instances (launching ones cannot be:
		// they arrive as active and the next tick demotes them).
		for k := min(have-rec, len(active)); k > 0; k-- {
			in := active[len(active)-1]
			active = active[:len(active)-1]
			in.demoted = true
			demoted = append(demoted, in)
		}
	}
	// More demoted instances than the rules keep: stop the oldest.
	for len(demoted) > dem {
		l.markStopping(demoted[0], now)
		demoted = demoted[1:]
	}
}

func (l *loop) markStopping(in *instance, now time.Time) {
	if !in.stopping {
		in.stopping = true
		in.stopAt = now.Add(l.c.cfg.DrainDelay)
	}
}

// start launches n instances of r's group in the background.
func (l *loop) start(r *groupRun, n int) {
	r.launching += n
	g := r.spec.group
	ctx, timeout := l.ctx, l.c.cfg.StartTimeout
	l.wg.Go(func() {
		sctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		ins, err := l.c.opts.Provider.Start(sctx, g, n)
		l.c.results <- result{group: g.Name, started: ins, asked: n, err: err}
	})
}

// stopDue calls Provider.Stop for the stopping instances whose drain delay
// is over.
func (l *loop) stopDue(r *groupRun, now time.Time) {
	for _, in := range r.instances {
		if in.stopping && !in.stopCalled && !now.Before(in.stopAt) {
			in.stopCalled = true
			l.stop(r.spec.group.Name, in)
		}
	}
}

func (l *loop) stop(group string, in *instance) {
	ctx := l.ctx
	l.wg.Go(func() {
		err := l.c.opts.Provider.Stop(ctx, in.inst)
		l.c.results <- result{group: group, stopped: in, err: err}
	})
}

// drop forgets an instance that exited by itself.
func (l *loop) drop(inst provider.Instance) {
	r := l.runs[inst.Group.Name]
	if r == nil {
		return
	}
	n := len(r.instances)
	r.instances = slices.DeleteFunc(r.instances, func(in *instance) bool { return in.inst.Address == inst.Address && !in.stopCalled })
	if len(r.instances) < n {
		l.c.log.Warn().Str("group", inst.Group.Name).Str("instance", inst.Address).Msg("instance exited by itself; dropped from its group")
		l.forgetIfDone(inst.Group.Name, r)
		l.storeStatus()
	}
}

// apply takes an actuation's result into the loop's state.
func (l *loop) apply(res result, now time.Time) {
	r := l.runs[res.group]
	m := l.c.opts.Metrics
	if res.stopped != nil {
		ok := res.err == nil || errors.Is(res.err, provider.ErrKilled) || errors.Is(res.err, provider.ErrUnknown)
		if m != nil {
			m.stops.WithLabelValues(res.group, stopResult(res.err)).Inc()
		}
		if !ok {
			l.c.log.Error().Err(res.err).Str("group", res.group).Str("instance", res.stopped.inst.Address).Msg("stopping an instance failed; retrying at the next tick")
			res.stopped.stopCalled = false
			return
		}
		l.c.log.Info().Str("group", res.group).Str("instance", res.stopped.inst.Address).AnErr("note", res.err).Msg("instance stopped")
		if r != nil {
			r.instances = slices.DeleteFunc(r.instances, func(in *instance) bool { return in == res.stopped })
			l.forgetIfDone(res.group, r)
		}
		l.storeStatus()
		return
	}
	if m != nil {
		m.starts.WithLabelValues(res.group, "ok").Add(float64(len(res.started)))
		if failed := res.asked - len(res.started); failed > 0 {
			m.starts.WithLabelValues(res.group, "error").Add(float64(failed))
		}
	}
	if r == nil { // cannot happen: a run is kept while it launches
		r = &groupRun{}
		l.runs[res.group] = r
	}
	r.launching -= res.asked
	if res.err != nil {
		r.failures += res.asked - len(res.started)
		r.lastErr = res.err.Error()
		l.c.log.Error().Err(res.err).Str("group", res.group).Int("asked", res.asked).Int("started", len(res.started)).
			Msg("starting instances failed; the next tick tries again")
	}
	for _, inst := range res.started {
		in := &instance{inst: inst}
		r.instances = append(r.instances, in)
		l.c.log.Info().Str("group", res.group).Str("instance", inst.Address).Str("name", inst.Name).Msg("instance started")
		if r.as == nil { // the lease went meanwhile
			l.markStopping(in, now)
		}
	}
	l.storeStatus()
}

func stopResult(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, provider.ErrKilled):
		return "killed"
	case errors.Is(err, provider.ErrUnknown):
		return "unknown"
	}
	return "error"
}

// shutdown stops every instance left, at once (Run's end, when no
// actuation runs any more).
func (l *loop) shutdown() {
	for name, r := range l.runs {
		for _, in := range r.instances {
			if in.stopCalled {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := l.c.opts.Provider.Stop(ctx, in.inst); err != nil && !errors.Is(err, provider.ErrKilled) {
				l.c.log.Warn().Err(err).Str("group", name).Str("instance", in.inst.Address).Msg("stopping an instance at shutdown")
			}
			cancel()
		}
	}
	if len(l.published) > 0 {
		_ = l.c.opts.Publish(map[string][]gossip.AutoscaledInstance{})
	}
}

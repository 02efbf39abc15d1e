package controller

// The loop's publication (controller.go): the instances handed to the
// control plane for gossip, and the state behind Status and Metrics.

import (
	"maps"
	"slices"
	"sort"

	"github.com/spillway-lb/spillway/internal/gossip"
)

// publish hands the control plane the instances of every group, if they
// changed.
func (l *loop) publish() {
	out := map[string][]gossip.AutoscaledInstance{}
	for name, r := range l.runs {
		for _, in := range r.instances {
			if !in.stopping {
				out[name] = append(out[name], gossip.AutoscaledInstance{Address: in.inst.Address, Demoted: in.demoted})
			}
		}
	}
	if maps.EqualFunc(out, l.published, slices.Equal) {
		return
	}
	if err := l.c.opts.Publish(out); err != nil {
		l.c.log.Error().Err(err).Msg("publishing autoscaled instances")
		return
	}
	l.published = out
}

// storeStatus publishes the loop's state for Status.
func (l *loop) storeStatus() {
	out := make([]GroupStatus, 0, len(l.runs))
	for name, r := range l.runs {
		gs := GroupStatus{Group: name, Acting: r.as != nil, Recommended: r.last.Recommended, Driver: r.last.Driver,
			Drivers: r.last.Drivers, Launching: r.launching, CPUCores: r.sample.CPUCores,
			Concurrency: r.sample.Concurrency, Requests: r.sample.Requests, ACT: r.sample.ACT, StartFailures: r.failures, LastError: r.lastErr}
		for _, in := range r.instances {
			switch {
			case in.stopping:
				gs.Stopping++
			case in.demoted:
				gs.Demoted++
			default:
				gs.Active++
			}
			gs.Instances = append(gs.Instances, InstanceStatus{Address: in.inst.Address, Name: in.inst.Name, Demoted: in.demoted, Stopping: in.stopping})
		}
		out = append(out, gs)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	l.c.status.Store(&out)
	if m := l.c.opts.Metrics; m != nil {
		m.setInstances(out)
	}
}

package gfe

import (
	"context"
	"time"

	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/internal/routinginput"
	"github.com/spillway-lb/spillway/lb/routing"
)

// plan re-plans every PlanInterval, and at once when woken (a snapshot
// arrived, a backend was ejected), until ctx ends; in between it samples
// the load on each group loadSamplesPerPlan times per PlanInterval.
func (d *Daemon) plan(ctx context.Context) error {
	t := d.clk.NewTicker(d.cfg.PlanInterval)
	defer t.Stop()
	sample := d.clk.NewTicker(max(d.cfg.PlanInterval/loadSamplesPerPlan, time.Millisecond))
	defer sample.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C():
			d.step(now)
		case <-d.kick:
			d.step(d.clk.Now())
		case <-sample.C():
			d.sampleLoad(d.control.Load())
		}
	}
}

// step samples this node's demand, publishes its state by gossip, and
// builds and stores a new routing table from the current snapshot and
// gossip. Called only from the planner goroutine (and tests).
func (d *Daemon) step(now time.Time) {
	rtt := d.rtt.Snapshot()
	cs := d.control.Load()

	demand := d.builder.Demand(now)
	d.tcp.Demand(now, cs, demand) // tcp listeners' services count open connections
	// Build before publishing, so that a group this build shrank (local
	// signals) is gossiped in the same step.
	var t *routing.Table
	if cs != nil {
		var problems []error
		t, problems = d.builder.Build(routing.Input{
			Fleet: &cs.Fleet,
			Peers: routinginput.Peers(d.gossip.Snapshot()),
			Self:  routing.Peer{Node: d.cfg.Node, Site: d.cfg.Site, RTT: rtt, Demand: demand},
			Now:   now,
		})
		for _, err := range problems {
			d.log.Error().Err(err).Msg("routing table")
		}
		d.reportClamps(now, d.builder.TakeClamps())
		d.table.Store(t)
		d.pending.Kick() // waiting requests try the new table at once
		d.servingOnce.Do(func() { close(d.serving) })
	}
	factors := d.builder.Factors()
	d.logFactors(t, factors)
	d.sampleLoad(cs)
	st := gossip.NodeState{Kind: gossip.KindGFE, Site: d.cfg.Site, Demand: demand, RTT: rtt, Capacity: factors,
		Load: d.groupLoad(cs, now)}
	if _, err := d.gossip.Publish(st); err != nil {
		d.log.Warn().Err(err).Msg("gossip publish")
	}
	d.published.Store(&st)
	if t != nil {
		d.metrics.observeTable(t, d.cfg.Site, demand, d.builder.Ejected(now), d.builder.ACTLimits(t.Config))
	}
}

// logFactors logs every change of this gfe's own effective-capacity factors
// that matters to an operator: a group that shrank (with the signal), and
// one that recovered to its full capacity. Gradual recovery steps are not
// logged. Called from the planner goroutine.
func (d *Daemon) logFactors(t *routing.Table, factors map[string]map[string]float64) {
	last := d.lastFactors
	d.lastFactors = factors
	if t == nil {
		return
	}
	for name, svc := range t.Services {
		for _, g := range svc.Capacity() {
			was, ok := last[name][g.Group]
			if !ok {
				was = 1
			}
			switch {
			case g.Own < was:
				l := g.Last
				d.log.Info().Str("service", name).Str("group", g.Group).Str("signal", g.Signal.String()).
					Float64("factor", g.Own).Float64("was", was).Float64("declared", g.Declared).Float64("planned", g.Planned).
					Int64("requests", l.Requests).Float64("rejected", l.Rejected).Float64("failed", l.Failed).
					Float64("utilization", l.Utilization).Dur("latency", l.Mean).Dur("baseline", l.Baseline).
					Msg("group capacity shrunk by local signals")
			case g.Own == 1 && was < 1:
				d.log.Info().Str("service", name).Str("group", g.Group).Msg("group capacity recovered")
			}
		}
		if herd, was := svc.Herd(), d.lastHerd[name]; herd != was {
			if d.lastHerd == nil {
				d.lastHerd = map[string]bool{}
			}
			d.lastHerd[name] = herd
			if herd {
				d.log.Info().Str("service", name).Interface("unexplained", svc.HerdEvidence()).
					Msg("herd guard on: groups receive load gossip has not explained while this site's demand rises")
			} else {
				d.log.Info().Str("service", name).Msg("herd guard off")
			}
		}
	}
}

package routing

import (
	"maps"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/waterfall"
)

// The herd guard: neighbouring sites whose demand rises at the same time.
//
// Every gfe plans with its own demand as it is now and with the other
// sites' demand as gossip last carried it, up to a gossip delay old. When
// one site's demand rises, that is exactly right: the site fills the room
// of its nearest region and spills the rest. When several sites that share
// a region rise in the same seconds (a flash crowd over a metro area), each
// of their gfes sees only its own rise, finds the whole room of the shared
// region free, and fills it: the region takes every rise at once (in
// lbsim bench on configs/scenarios/large.yaml, four sites took region-03
// to 141% of its capacity for a step before local signals shrank it).
//
// The gfe cannot see the others' rise yet, but it can see its effect: the
// instances of the shared region report (ORCA rps_fractional, the test
// backend's load reports) receiving more than the plan sent them, beyond
// what this gfe itself sent. When a group shows such unexplained load
// (more than HerdEvidence of its planned capacity) while this gfe's own
// demand is rising (more than HerdRise above what it was HerdWindow ago,
// which is what the others still believe), the gfe plans as if every site
// that sends to that group were rising as it is: their gossiped demand
// times its own rise. The sites of the herd then plan the same world and
// share the room by the planner's own rule (nearest pair first), instead
// of each taking all of it; the rest spills at once. The guard lasts as
// long as the evidence: once gossip carries the others' rise, the plan
// explains the load and the gfe plans the world as it is.
//
// A site that rises alone shows no unexplained load anywhere (the other
// sites' load is what gossip said) and plans exactly as before.
//
// The guard serves the waterfall policy only. It relies on the waterfall's
// rule that competing sites are served nearest pair first, which makes the
// herd's estimates of one another settle on the same split; min_rtt's
// global optimum reshuffles every site on such estimates (in large.yaml the
// guard raised min_rtt's OSC_PP from 2.6 to 5.5 and lowered its OVER_CAP
// only from 0.33% to 0.26%).

// HerdEvidence is the unexplained load, as a fraction of a group's
// planned capacity (declared × target utilization), above which the group
// counts as receiving a rise that gossip has not carried yet. It is well
// above what the noise of the other sites' demand over a gossip delay
// leaves (a few percent) and below what one neighbour's flash crowd adds
// in its first second.
const HerdEvidence = 0.10

// HerdRise is how much a gfe's own demand must exceed its demand of
// HerdWindow ago for the herd guard to act: the guard is about sites that
// rise, not about the noise of steady demand.
const HerdRise = 1.10

// HerdTarget is the fraction of every group's planned capacity the herd
// guard's world holds: the herd's gfes estimate one another's rise, each
// from its own, and the estimates differ; this margin keeps what one of
// them underestimates from overfilling the region it spills to.
const HerdTarget = 0.9

// DefaultHerdWindow is the gfe's default Config.HerdWindow: about the time
// gossip takes to carry a demand estimate to every gfe (a publish interval
// and a few gossip rounds).
const DefaultHerdWindow = 2 * time.Second

// ownDemand is one sample of this gfe's own demand for a service.
type ownDemand struct {
	at     time.Time
	demand float64
}

// recordDemand keeps this gfe's own demand for sc at now and returns the
// lowest it was over the last HerdWindow: what the other gfes may still
// believe it is.
func (b *Builder) recordDemand(sc *config.Service, now time.Time, demand float64) float64 {
	h := append(b.ownDemand[sc.Name], ownDemand{now, demand})
	// Keep the newest sample at or before the window's start, so that the
	// window is always covered.
	cut := 0
	for i := range h {
		if !h[i].at.After(now.Add(-b.cfg.HerdWindow)) {
			cut = i
		}
	}
	h = h[cut:]
	b.ownDemand[sc.Name] = h
	low := demand
	for _, s := range h {
		low = min(low, s.demand)
	}
	return low
}

// herdPeers returns the peers to plan service sc with when the herd guard
// acts (see above): in.Peers with the demand of every peer whose site sent
// to a group of herd in the previous plan multiplied by this gfe's own
// rise. It returns false when the guard does not act: it is off
// (HerdWindow 0), the policy is not the waterfall, no group shows
// unexplained load, this gfe's demand is not rising, or no other gfe sends
// to the groups that do.
func (b *Builder) herdPeers(in Input, sc *config.Service, evidence map[string]float64) ([]Peer, bool) {
	if b.cfg.HerdWindow <= 0 || sc.Policy != config.PolicyWaterfall {
		return nil, false
	}
	herd := b.herdGroups(sc, in.Now, evidence)
	now := in.Self.Demand[sc.Name]
	was := b.recordDemand(sc, in.Now, now)
	prev := b.prev[sc.Name]
	if len(herd) == 0 || prev == nil || !(was > 0) || now < was*HerdRise {
		return nil, false
	}
	rise := now / was
	sites := map[string]bool{}
	for _, f := range prev.Flows {
		if herd[f.Group] && f.Demand > 0 {
			sites[f.Site] = true
		}
	}
	out := make([]Peer, len(in.Peers))
	inflated := false
	for i, p := range in.Peers {
		out[i] = p
		if !sites[p.Site] || p.Node == in.Self.Node || !(p.Demand[sc.Name] > 0) {
			continue
		}
		d := maps.Clone(p.Demand)
		v := d[sc.Name]
		d[sc.Name] = max(v*rise, v+now-was)
		out[i].Demand = d
		inflated = true
	}
	// Without another sender to the group there is no herd: the load it
	// reports beyond the plan is this gfe's own, not yet in the plan.
	return out, inflated
}

// herdGroups records the groups of sc that show unexplained load at now
// (evidence) and returns those that showed it in the last HerdWindow: a
// herd's rise takes that long to reach every gfe by gossip, however the
// plan made meanwhile moved the load.
func (b *Builder) herdGroups(sc *config.Service, now time.Time, evidence map[string]float64) map[string]bool {
	seen := b.herdSeen[sc.Name]
	if seen == nil {
		if len(evidence) == 0 {
			return nil
		}
		seen = map[string]time.Time{}
		b.herdSeen[sc.Name] = seen
	}
	for g := range evidence {
		seen[g] = now
	}
	out := map[string]bool{}
	for g, at := range seen {
		if now.Sub(at) > b.cfg.HerdWindow {
			delete(seen, g)
			continue
		}
		out[g] = true
	}
	return out
}

// unexplained returns the load a group's instances report receiving beyond
// what the previous plan put on the group from the other sites and what
// this gfe sent it itself: the load of rises gossip has not carried yet.
// reported is the sum of the rates reported by responding of the group's
// healthy instances; a group from which fewer than half reported is not
// judged (0).
func unexplained(prev *waterfall.Plan, site, group string, reported float64, responding, healthy int, sent float64) float64 {
	if prev == nil || healthy == 0 || 2*responding < healthy {
		return 0
	}
	reported *= float64(healthy) / float64(responding)
	var planned, mine float64
	for _, g := range prev.Groups {
		if g.Name == group {
			planned = g.Load
		}
	}
	for _, f := range prev.Row(site) {
		if f.Group == group {
			mine = f.Demand
		}
	}
	return reported - (planned - mine) - sent
}

package controlplane

// The health manager's (health.go) gossip: what it reads of the cluster, the
// unvouched control planes it warns about, and the verdicts of its owned
// groups that it publishes.

import (
	"reflect"
	"slices"

	"github.com/spillway-lb/spillway/internal/gossip"
)

// gossiper is the part of *gossip.Node the health manager uses.
type gossiper interface {
	// Snapshot returns the current, immutable view of the cluster.
	Snapshot() *gossip.Snapshot
	// Changes receives a value after the view changes (coalesced).
	Changes() <-chan struct{}
	// Publish makes s this node's state.
	Publish(s gossip.NodeState) (uint64, error)
}

// logUnvouched warns, once per change of the set, about gossip members that
// claim to be control planes without being listed in Config.Replicas.
func (h *healthManager) logUnvouched(ls *loopState, snap *gossip.Snapshot) {
	names := unvouched(snap, h.self, h.replicas)
	if slices.Equal(names, ls.unvouched) {
		return
	}
	ls.unvouched = names
	h.m.unvouched.Set(float64(len(names)))
	if len(names) > 0 {
		h.log.Warn().Strs("members", names).
			Msg("gossip members claim to be control planes but are not in --replicas; their health reports and claims to health-check ownership are ignored")
	}
}

// publish gossips the capacity and health of the owned groups, if they
// changed since the last publish. Until every owned instance has a verdict
// (or the settle deadline passed) it publishes no groups, announcing this
// replica as a control plane only.
func (h *healthManager) publish(ls *loopState, hs []InstanceHealth) {
	var groups []gossip.GroupState
	if ls.publishing {
		groups = groupStates(ls.plan, ls.own, h.self, hs)
	}
	if ls.announced && reflect.DeepEqual(groups, ls.published) {
		return
	}
	if _, err := h.gossip.Publish(gossip.NodeState{Kind: gossip.KindControlPlane, Groups: groups}); err != nil {
		// Only an invalid state fails, which groupStates never builds;
		// the next change retries.
		h.log.Error().Err(err).Msg("publishing group health")
		return
	}
	ls.published, ls.announced = groups, true
}

// groupStates returns the GroupStates this replica publishes: one per owned
// group, in file order.
func groupStates(p *healthPlan, own ownership, self string, hs []InstanceHealth) []gossip.GroupState {
	healthy := map[string][]string{}
	for _, ih := range hs {
		if ih.Healthy() {
			healthy[ih.Group] = append(healthy[ih.Group], ih.Address)
		}
	}
	var out []gossip.GroupState
	for _, ref := range p.groups {
		g := ref.Group.Name
		if own.owner[g] != self {
			continue
		}
		addrs := healthy[g] // sorted: hs is
		out = append(out, gossip.GroupState{
			Group:            g,
			Region:           ref.Region.Name,
			Zone:             ref.Zone.Name,
			Instances:        len(ref.Group.Instances),
			Healthy:          len(addrs),
			HealthyInstances: addrs,
		})
	}
	return out
}

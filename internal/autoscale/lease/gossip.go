package lease

import (
	"fmt"
	"slices"

	"github.com/spillway-lb/spillway/internal/gossip"
)

// GossipNode is what GossipMedium uses of a *gossip.Node.
type GossipNode interface {
	Snapshot() *gossip.Snapshot
	Publish(s gossip.NodeState) (uint64, error)
}

// GossipMedium is the Medium of control-plane replicas: their gossip
// (package internal/gossip). A replica's claims are the Leases of the
// NodeState it publishes, renewed by every newer version of that state;
// the members are the alive control planes that Replicas vouches for, as
// for health-check ownership (internal/controlplane).
type GossipMedium struct {
	// Node is the replica's gossip node. Required.
	Node GossipNode
	// Self is the node's name (gossip Config.Name). Required.
	Self string
	// Replicas are the control planes whose claims count (the control
	// plane's Config.Replicas): any gossip member can claim to be a
	// control plane. Nil counts every control plane.
	Replicas map[string]bool
	// State, if set, returns the rest of the state this node publishes
	// (the control plane's Groups); Publish sets its Kind and Leases. In
	// the daemon the health manager publishes the node's state too: it
	// must then carry the Elector's claims, or each would erase the
	// other's fields. Nil publishes a control-plane state with leases
	// only.
	State func() gossip.NodeState
	// ChangesCh, if set, is the channel Changes returns: the node's
	// Changes channel has one receiver, which in the daemon is the health
	// manager, so the Elector then relies on its RenewEvery ticks or on a
	// channel the daemon fans out. Nil never signals.
	ChangesCh <-chan struct{}
}

var _ Medium = (*GossipMedium)(nil)

// View returns the vouched, alive control planes (self included) and
// their claims and versions, from the node's current snapshot.
func (g *GossipMedium) View() View {
	snap := g.Node.Snapshot()
	v := View{Members: []string{g.Self}, Claims: map[string]map[string]uint64{}, Versions: map[string]uint64{}}
	if snap == nil {
		return v
	}
	for name, s := range snap.States {
		if name == g.Self || s.Kind != gossip.KindControlPlane || (g.Replicas != nil && !g.Replicas[name]) {
			continue
		}
		v.Members = append(v.Members, name)
		v.Versions[name] = s.Version
		if len(s.Leases) > 0 {
			v.Claims[name] = s.Leases // shared and read-only, as the snapshot
		}
	}
	slices.Sort(v.Members)
	return v
}

// Changes returns ChangesCh.
func (g *GossipMedium) Changes() <-chan struct{} { return g.ChangesCh }

// Publish publishes the node's state with claims as its Leases. gossip's
// Publish does no I/O: it queues the state for the node's sender.
func (g *GossipMedium) Publish(claims map[string]uint64) error {
	var s gossip.NodeState
	if g.State != nil {
		s = g.State()
	}
	s.Kind = gossip.KindControlPlane
	s.Leases = claims
	if _, err := g.Node.Publish(s); err != nil {
		return fmt.Errorf("lease: publish claims: %w", err)
	}
	return nil
}

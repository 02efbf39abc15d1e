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
	// SetLeases, if set, publishes claims as the Leases of the node's
	// state, keeping the state's other parts: in the daemon, where the
	// health manager and the xDS export publish parts of the same state,
	// it is the control plane's statePublisher.SetLeases, the one place
	// that composes them. It must publish a newer version on every call,
	// changed or not: a newer version is what renews the claims. Nil
	// publishes, on Node, a control-plane state with the leases only.
	SetLeases func(claims map[string]uint64) error
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
	var err error
	if g.SetLeases != nil {
		err = g.SetLeases(claims)
	} else {
		_, err = g.Node.Publish(gossip.NodeState{Kind: gossip.KindControlPlane, Leases: claims})
	}
	if err != nil {
		return fmt.Errorf("lease: publish claims: %w", err)
	}
	return nil
}

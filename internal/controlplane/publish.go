package controlplane

import (
	"errors"
	"fmt"
	"maps"
	"sync"

	"github.com/spillway-lb/spillway/internal/gossip"
)

// statePublisher is the one place that publishes this replica's gossip
// state. Its parts come from different components — the health manager's
// groups (Publish), the xDS export's site demand (SetSiteDemand), the
// autoscaler's lease claims (SetLeases, for lease.GossipMedium) and its
// instances (SetAutoscaled) — and
// gossip carries one NodeState per node, so a publish of one part must
// keep the others. Safe for concurrent use.
type statePublisher struct {
	g gossiper

	mu   sync.Mutex
	last gossip.NodeState // as last published (or attempted)
}

func newStatePublisher(g gossiper) *statePublisher {
	return &statePublisher{g: g, last: gossip.NodeState{Kind: gossip.KindControlPlane}}
}

// Snapshot returns the gossip view, this replica's own state included.
func (p *statePublisher) Snapshot() *gossip.Snapshot { return p.g.Snapshot() }

// Changes receives a value after the view changes.
func (p *statePublisher) Changes() <-chan struct{} { return p.g.Changes() }

// Publish publishes s, the health manager's part of the state, with the
// parts of the other components.
func (p *statePublisher) Publish(s gossip.NodeState) (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s.SiteDemand, s.Leases, s.Autoscaled = p.last.SiteDemand, p.last.Leases, p.last.Autoscaled
	p.last = s
	return p.g.Publish(s)
}

// SetLeases publishes claims as the state's Leases, keeping the other
// parts. It publishes a newer version every time, changed or not: that is
// how a holder renews its claims (lease.GossipMedium.SetLeases).
func (p *statePublisher) SetLeases(claims map[string]uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.last
	s.Leases = claims
	p.last = s
	_, err := p.g.Publish(s)
	return err
}

// SetSiteDemand publishes d as the state's SiteDemand (the xDS clients'
// demand by site and service), keeping the other parts. It does nothing
// when d is what was last published. When the state with d cannot be
// published (gossip refuses it, say as too large), the state is published
// without any SiteDemand instead and the error returned: a bad demand
// never stays in the state, so the other parts (health verdicts, lease
// renewals) keep going out.
func (p *statePublisher) SetSiteDemand(d map[string]map[string]float64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if maps.EqualFunc(d, p.last.SiteDemand, maps.Equal) {
		return nil
	}
	s := p.last
	s.SiteDemand = d
	_, err := p.g.Publish(s)
	if err == nil {
		p.last = s
		return nil
	}
	s.SiteDemand = nil
	p.last = s
	if _, err2 := p.g.Publish(s); err2 != nil {
		return errors.Join(fmt.Errorf("publish the xDS clients' demand: %w", err), fmt.Errorf("publish without it: %w", err2))
	}
	return fmt.Errorf("publish the xDS clients' demand (published without it): %w", err)
}

// SetAutoscaled publishes the instances this replica's autoscaler runs
// (group → instances) as the state's Autoscaled, keeping the other parts.
// The controller calls it only when they changed.
func (p *statePublisher) SetAutoscaled(ins map[string][]gossip.AutoscaledInstance) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.last
	s.Autoscaled = ins
	p.last = s
	_, err := p.g.Publish(s)
	return err
}

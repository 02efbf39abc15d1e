package gfetest

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/internal/splitmix"
	"github.com/spillway-lb/spillway/lb/routing"
)

// Planner stands in for the gfe's planner in the proxies' tests: it holds a
// routing.Builder and builds tables on Step, at the fake clock's time, for
// site nyc (node gfe-nyc) with damping 1, from the snapshot of the
// last Apply, the RTTs of SetRTT (us-east 5 ms and eu-west 80 ms to start
// with) and the peers of SetPeer. It implements httpproxy.Planner and
// tcpproxy.State. Safe for concurrent use, except Step.
type Planner struct {
	// Clock is the fake clock the tables and Step read.
	Clock *clock.Fake
	// Rand is the random source the builder picks with.
	Rand func() uint64
	// Builder builds the tables.
	Builder *routing.Builder
	// Demand, when set, adjusts this node's demand before each build (as
	// the gfe lets its tcp proxy count open connections).
	Demand func(now time.Time, cs *snapshot.Snapshot, demand map[string]float64)
	// Woken receives a value (if there is room) on every Wake.
	Woken chan struct{}

	table   atomic.Pointer[routing.Table]
	control atomic.Pointer[snapshot.Snapshot]
	mu      sync.Mutex
	rtt     map[string]float64      // guarded by mu
	peers   map[string]routing.Peer // guarded by mu
}

// NewPlanner returns a Planner whose builder picks with rnd.
func NewPlanner(rnd func() uint64) *Planner {
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	return &Planner{
		Clock:   clk,
		Rand:    rnd,
		Builder: routing.NewBuilder(routing.Config{Node: "gfe-nyc", Site: "nyc", Damping: 1, DemandSmoothing: time.Second}, routing.Options{Now: clk.Now, Rand: rnd}),
		Woken:   make(chan struct{}, 1),
		rtt:     map[string]float64{"us-east": 5, "eu-west": 80},
		peers:   map[string]routing.Peer{},
	}
}

// Apply makes s the snapshot of the next Step.
func (p *Planner) Apply(s *snapshot.Snapshot) { p.control.Store(s) }

// SetRTT sets this node's RTT to region, in ms.
func (p *Planner) SetRTT(region string, ms float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rtt[region] = ms
}

// SetPeer sets what gossip carries about another gfe.
func (p *Planner) SetPeer(peer routing.Peer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.peers[peer.Node] = peer
}

// Step builds and stores a table at the clock's time, as the gfe's planner
// does every PlanInterval, and returns the build's problems.
func (p *Planner) Step() []error {
	now := p.Clock.Now()
	cs := p.control.Load()
	demand := p.Builder.Demand(now)
	if p.Demand != nil {
		p.Demand(now, cs, demand)
	}
	if cs == nil {
		return nil
	}
	p.mu.Lock()
	var peers []routing.Peer
	for _, peer := range p.peers {
		peers = append(peers, peer)
	}
	rtt := p.rttLocked()
	p.mu.Unlock()
	t, problems := p.Builder.Build(routing.Input{Fleet: &cs.Fleet, Peers: peers, Self: routing.Peer{Node: "gfe-nyc", Site: "nyc", RTT: rtt, Demand: demand}, Now: now})
	p.table.Store(t)
	return problems
}

// Table implements httpproxy.Planner and tcpproxy.State.
func (p *Planner) Table() *routing.Table { return p.table.Load() }

// Wake implements httpproxy.Planner.
func (p *Planner) Wake() {
	select {
	case p.Woken <- struct{}{}:
	default:
	}
}

// Snapshot implements tcpproxy.State.
func (p *Planner) Snapshot() *snapshot.Snapshot { return p.control.Load() }

// RTT implements tcpproxy.State.
func (p *Planner) RTT() map[string]float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rttLocked()
}

// rttLocked returns a copy of the RTTs. Caller must hold p.mu.
func (p *Planner) rttLocked() map[string]float64 {
	out := make(map[string]float64, len(p.rtt))
	for r, v := range p.rtt {
		out[r] = v
	}
	return out
}

// Rand returns a seeded SplitMix64 sequence that is safe for concurrent
// use: the same picks every run.
func Rand() func() uint64 {
	return splitmix.Sequence(0)
}

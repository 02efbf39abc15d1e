package routing

import (
	"slices"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/backend"
	"github.com/spillway-lb/spillway/lb/prequal"
)

// Policy prequal (config.PolicyPrequal): Prequal's asynchronous probing
// over the service's pool, every region of it (global scope, no plan). The
// rule is lb/prequal's; the probes are the Prober's (the gfe's sender,
// internal/gfe/prequalprobe, or the simulator's instantaneous reads). Each
// pick asks the Prober for about three probes of replicas drawn without
// replacement and never waits for them: their answers join the pool for
// later picks. With an empty pool (no Prober, every probe lost, refused or
// aged out) the pick falls back to least request over the pool, and
// lb/prequal counts it (Stats.Fallbacks).

// Prober sends the probes a prequal service's picks ask for.
type Prober interface {
	// Probe asks for one probe of t.Backend. It is called on the
	// request's path and must not block: a probe it cannot send at once
	// (over its rate, too many outstanding) it drops. The answer, if one
	// comes, goes to t.Answer, from any goroutine.
	Probe(t ProbeTarget)
}

// ProbeTarget is one probe a pick asks for: which backend, of which
// service, under which settings, and where the answer goes.
type ProbeTarget struct {
	// Service is the service's name; Config its prequal section.
	Service string
	Config  config.Prequal
	// Backend is the instance to probe (its Addr).
	Backend *backend.Backend

	pool  *prequal.Pool
	index int
}

// Answer puts the probe's answer, received at at (the Builder's clock),
// into the pool it was asked for. A pool replaced since (the service's
// instances changed) takes it and is never read again. Safe for
// concurrent use; it does not allocate.
func (t ProbeTarget) Answer(a prequal.Answer, at time.Time) {
	if t.pool == nil {
		return
	}
	t.pool.Add(prequal.Probe{Index: t.index, RIF: a.RIF, Latency: a.Latency, At: at})
}

// prequalState is what the Builder keeps for a prequal service: its pool
// over the active members, for as long as they stay the same.
type prequalState struct {
	// Immutable after prequalFor made it.
	addrs []string // the pool's replicas, by index
	pool  *prequal.Pool
	// members are the pool's backends, by index (for the probes).
	members []*backend.Backend
}

// prequalFor returns sc's prequal state over active, the pool's active
// members: the previous build's when they are the same instances in the
// same order (the probes in its pool stay), a new one otherwise; nil, with
// the state dropped, for another policy or no member.
func (b *Builder) prequalFor(sc *config.Service, active []Member) *prequalState {
	if sc.Policy != config.PolicyPrequal || len(active) == 0 {
		delete(b.prequal, sc.Name)
		return nil
	}
	addrs := make([]string, len(active))
	members := make([]*backend.Backend, len(active))
	for i, m := range active {
		addrs[i], members[i] = m.B.Addr(), m.B
	}
	if st := b.prequal[sc.Name]; st != nil && slices.Equal(st.addrs, addrs) {
		return st
	}
	pool, err := prequal.New(prequal.DefaultConfig(), len(active))
	if err != nil {
		// DefaultConfig over at least one replica is valid.
		panic("routing: prequal.New: " + err.Error())
	}
	st := &prequalState{addrs: addrs, pool: pool, members: members}
	b.prequal[sc.Name] = st
	return st
}

// PrequalStats returns the counters of the service's probe pool (lb/prequal)
// and true for a service with policy prequal and a pool; false otherwise.
func (s *Service) PrequalStats() (prequal.Stats, bool) {
	if s.pq == nil {
		return prequal.Stats{}, false
	}
	return s.pq.pool.Stats(), true
}

// maxProbesPerPick bounds the probes one pick asks for: lb/prequal's
// Targets sends ⌈ProbesPerQuery⌉ = 3 at most with the published
// parameters.
const maxProbesPerPick = 4

// prequalPick chooses among the pool's active members (pool[:first]) by
// the hot-cold rule at now, then asks the Prober for the next probes. It
// falls back to least request when the probe pool is empty or its choice
// is at its concurrency limit.
func (s *Service) prequalPick(rnd uint64, now time.Time) (int, bool) {
	pq := s.pq
	if pq == nil {
		return s.lr.Pick(s.first, s.inflight)
	}
	i, fromPool := pq.pool.Pick(now, rnd)
	if s.prober != nil {
		var buf [maxProbesPerPick]int
		for _, t := range pq.pool.Targets(rnd*6364136223846793005+1442695040888963407, buf[:0]) {
			s.prober.Probe(ProbeTarget{Service: s.name, Config: s.cfg.Prequal, Backend: pq.members[t], pool: pq.pool, index: t})
		}
	}
	if !fromPool || i >= s.first || s.pool[i].B.Full() {
		return s.lr.Pick(s.first, s.inflight)
	}
	return i, true
}

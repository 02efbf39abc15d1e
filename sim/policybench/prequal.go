package policybench

import (
	"math"
	"time"

	"github.com/spillway-lb/spillway/internal/splitmix"
	"github.com/spillway-lb/spillway/lb/prequal"
	"github.com/spillway-lb/spillway/lb/routing"
	"github.com/spillway-lb/spillway/sim"
)

// Policy prequal in the simulator (config.PolicyPrequal, lb/prequal).
//
// Probes are modelled as instantaneous reads of the simulated instances:
// a probe sent during step k is answered at once, at the step's time,
// from the fluid model's state as the step's picks so far leave it. An
// instance with backlog q (requests waiting at the end of step k−1),
// service rate μ and arrivals λ from this step's earlier picks of every
// site (each pick standing for 1/prequalPicks of its site's demand)
// answers
//
//	in flight = q + λ/μ + max(0, λ−μ)·dt/2
//	latency   = (1 + q + max(0, λ−μ)·dt/2) / μ
//
// (its service time plus the wait of what queues, the backend's own time
// without the network, as the test backend reports it). There is no probe
// round trip, loss or rate cap (probe_rate), which the gfe has: the
// simulator shows the rule with fresh probes, an upper bound of what the
// gfe's probes achieve. Each site's gfe has its own Builder and so its own
// probe pool; its demand is split over prequalPicks picks per step.

// prequalPicks is how many picks a site's demand is split into per step.
const prequalPicks = 64

// simProber answers the probes of one run's prequal tables from the fluid
// model's state; it implements routing.Prober. Used by one goroutine.
type simProber struct {
	topo  *topology
	model sim.Model
	// backlog is the runner's per-slot backlog (requests) at the end of
	// the last step.
	backlog []float64
	// groups and dt are the current step's group states and length; now
	// its time; extra the requests/s this step's picks so far sent each
	// slot.
	groups []sim.GroupState
	dt     float64
	now    time.Time
	extra  []float64
	rnd    func() uint64
}

func newSimProber(topo *topology, tl *sim.Timeline) *simProber {
	return &simProber{topo: topo, model: tl.Model, extra: make([]float64, topo.slots()), rnd: splitmix.Sequence(tl.Seed ^ 0x70726571)}
}

// bind gives the prober the runner's backlog to read.
func (p *simProber) bind(backlog []float64) { p.backlog = backlog }

// Probe implements routing.Prober: the answer of the instance now.
func (p *simProber) Probe(t routing.ProbeTarget) {
	slot, ok := p.topo.slotOf[t.Backend.Addr()]
	if !ok || p.backlog == nil || p.groups == nil {
		return
	}
	g := p.topo.slotGroup[slot]
	mu := p.topo.rate[g] / p.model.UtilizationAtCapacity / p.groups[g].ServiceFactor()
	if !(mu > 0) {
		return
	}
	lam, q := p.extra[slot], p.backlog[slot]
	growth := max(0, lam-mu) * p.dt / 2
	rif := q + lam/mu + growth
	lat := (1 + q + growth) / mu // seconds
	a := prequal.Answer{
		RIF:     int64(math.Round(min(rif, prequal.MaxRIF))),
		Latency: time.Duration(min(lat, prequal.MaxLatency.Seconds()) * float64(time.Second)),
	}
	t.Answer(a, p.now)
}

// split adds to counts (per slot) site si's split as svc, a prequal
// table, picks prequalPicks times at now in step k of tr, each pick's
// probes answered at once, for a site demand of demand requests/s. It
// reports false when a pick fails (an empty pool).
func (p *simProber) split(svc *routing.Service, tr *sim.Trace, k int, demand float64, now time.Time, counts []float64) bool {
	if !now.Equal(p.now) || p.groups == nil {
		// A new step: the earlier steps' picks are in the backlog now.
		p.now, p.groups, p.dt = now, tr.Groups[k], tr.StepS
		clear(p.extra)
	}
	for range prequalPicks {
		pk, err := svc.PickAt(p.rnd(), routing.Flow{}, now)
		if err != nil {
			return false
		}
		slot := p.topo.slotOf[pk.Backend.Addr()]
		counts[slot] += 1.0 / prequalPicks
		p.extra[slot] += demand / prequalPicks
		pk.Done()
	}
	return true
}

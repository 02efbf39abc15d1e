package routing

import (
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/backend"
	"github.com/spillway-lb/spillway/lb/loadaware"
	"github.com/spillway-lb/spillway/lb/shed"
	"github.com/spillway-lb/spillway/lb/waterfall"
)

// The load-aware choice inside a planned policy's groups (config
// load_aware, lb/loadaware) and the shedding of global overload (config
// overload, lb/shed): docs/design.md §3.

// loadAwareState is what the Builder keeps for a service whose planned
// policy chooses inside groups by load: one Endpoint per backend across
// builds (the Registry) and the Chooser of the service's config.
type loadAwareState struct {
	// Owned by the Builder's goroutine.
	reg     *loadaware.Registry
	cfg     config.LoadAware
	chooser *loadaware.Chooser
}

// loadAwareConfig returns lb/loadaware's Config for a service's load_aware
// section: the package defaults with the section's tunables.
func loadAwareConfig(la config.LoadAware) loadaware.Config {
	c := loadaware.DefaultConfig()
	c.SlowStart = la.SlowStart
	c.Decay = la.Decay
	c.ProbeAfter = la.ProbeAfter
	c.UtilizationWeight = la.UtilizationWeight
	return c
}

// loadAwareFor returns sc's load-aware state with its Registry synced to
// the pool's backends at now (new ones get an Endpoint, returning ones
// slow-start), or nil when sc does not choose by load (the state is then
// dropped: turning it on again starts afresh). A load_aware section the
// Chooser refuses is reported and leaves the service on round robin.
func (b *Builder) loadAwareFor(sc *config.Service, pool []Member, now time.Time, report func(string, error)) *loadAwareState {
	if !sc.Policy.IsPlanned() || !sc.LoadAware.Enabled {
		delete(b.loadAware, sc.Name)
		return nil
	}
	st := b.loadAware[sc.Name]
	if st == nil || st.cfg != sc.LoadAware {
		c, err := loadaware.New(loadAwareConfig(sc.LoadAware))
		if err != nil {
			report("load_aware/"+sc.Name, err)
			delete(b.loadAware, sc.Name)
			return nil
		}
		if st == nil {
			st = &loadAwareState{reg: loadaware.NewRegistry()}
			b.loadAware[sc.Name] = st
		}
		st.cfg, st.chooser = sc.LoadAware, c
	}
	bs := make([]*backend.Backend, len(pool))
	for i := range pool {
		bs[i] = pool[i].B
	}
	st.reg.Sync(bs, now)
	return st
}

// endpointsOf returns the Endpoints of the pool's members by group, active
// and demoted apart, for waterfall.NewPickerLoadAware.
func (st *loadAwareState) endpointsOf(pool []Member) (active, demoted map[string][]*loadaware.Endpoint) {
	active, demoted = map[string][]*loadaware.Endpoint{}, map[string][]*loadaware.Endpoint{}
	for _, m := range pool {
		e := st.reg.Endpoint(m.B)
		if m.Demoted {
			demoted[m.Group] = append(demoted[m.Group], e)
		} else {
			active[m.Group] = append(active[m.Group], e)
		}
	}
	return active, demoted
}

// shedRule returns the overload shedding rule of sc's plan: the fraction
// 1 − admit/λ of lb/shed when sc's overload.shed is on, none otherwise.
func shedRule(sc *config.Service, plan *waterfall.Plan) shed.Rule {
	if !sc.Policy.IsPlanned() || !sc.Overload.Shed {
		return shed.Rule{}
	}
	cfg := shed.DefaultConfig()
	cfg.Admit, cfg.MaxFraction = sc.Overload.Admit, sc.Overload.MaxShed
	return cfg.FromPlan(plan)
}

// Shed returns the service's overload shedding rule: which arrivals a gfe
// refuses at once because the plan says global demand exceeds capacity
// (lb/shed.Config.FromPlan, with the service's overload.admit). The zero
// Rule, which admits everything, unless overload.shed is on and the plan
// is in overload. The proxy refuses an arrival whose random value the
// Rule does not Admit, before any pick, with 503 and Retry-After
// (config.Overload.RetryAfter).
func (s *Service) Shed() shed.Rule { return s.shed }

// Chooser returns the load-aware Chooser of the service's planned policy,
// nil when it does not choose by load.
func (s *Service) Chooser() *loadaware.Chooser { return s.chooser }

// ObserveLatency reports that the request of p answered after latency, at
// now: the load-aware choice's latency sample (loadaware.Chooser.Observe).
// It does nothing for a pick that did not come from a load-aware choice.
// It does not allocate.
func (p *Pick) ObserveLatency(now time.Time, latency time.Duration) {
	if p.Endpoint != nil && p.chooser != nil {
		p.chooser.Observe(p.Endpoint, now, latency)
	}
}

// ObserveUtilization reports a load report (ORCA utilization u, 1 =
// fully used) of p's backend that arrived at now to the load-aware
// choice (loadaware.Endpoint.ObserveUtilization). It does nothing for a
// pick that did not come from a load-aware choice. It does not allocate.
func (p *Pick) ObserveUtilization(now time.Time, u float64) {
	if p.Endpoint != nil {
		p.Endpoint.ObserveUtilization(now, u)
	}
}

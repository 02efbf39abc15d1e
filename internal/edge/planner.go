package edge

import (
	"cmp"
	"context"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/ewma"
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/lb/backend"
	"github.com/spillway-lb/spillway/lb/hashing"
	"github.com/spillway-lb/spillway/lb/waterfall"
)

// planner owns everything that outlives one routing table: backends (with
// their in-flight counters), meters and the previous plan of every service.
// Only its run goroutine touches its fields.
type planner struct {
	e        *Edge
	backends map[string]*backend.Backend // by address
	meters   map[string]*serviceMeters   // by service
	prev     map[string]*waterfall.Plan  // by service
	outliers map[string]*serviceOutliers // by service
	lastErr  map[string]string           // by service: last planning error logged
	now      time.Time                   // the time of the current step
}

func newPlanner(e *Edge) *planner {
	return &planner{
		e:        e,
		backends: map[string]*backend.Backend{},
		meters:   map[string]*serviceMeters{},
		prev:     map[string]*waterfall.Plan{},
		outliers: map[string]*serviceOutliers{},
		lastErr:  map[string]string{},
	}
}

// run re-plans every PlanInterval, and at once when a snapshot arrives,
// until ctx ends.
func (p *planner) run(ctx context.Context) error {
	t := p.e.clk.NewTicker(p.e.cfg.PlanInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C():
			p.step(now)
		case <-p.e.kick:
			p.step(p.e.clk.Now())
		}
	}
}

// step samples this node's meters, publishes its state by gossip and builds
// and stores a new routing table from the current control state and gossip.
func (p *planner) step(now time.Time) {
	e := p.e
	rtt := e.rtt.snapshot()
	cs := e.control.Load()

	demand := map[string]float64{}
	for name, m := range p.meters {
		demand[name] = m.demand.Sample(now)
	}
	e.tcp.observe(now, cs, demand) // tcp listeners' services count open connections
	st := gossip.NodeState{Kind: gossip.KindGFE, Site: e.cfg.Site, Demand: demand, RTT: rtt}
	if _, err := e.gossip.Publish(st); err != nil {
		e.log.Warn().Err(err).Msg("gossip publish")
	}
	if cs == nil {
		return
	}

	snap := e.gossip.Snapshot()
	var states map[string]gossip.NodeState
	if snap != nil {
		states = snap.States
	}
	me := self{node: e.cfg.Node, site: e.cfg.Site, rtt: rtt, demand: demand}
	p.now = now
	old := e.table.Load()
	t := &table{version: cs.Version, cfg: cs.Config, services: map[string]*service{}}
	for i := range cs.Config.Services {
		sc := &cs.Config.Services[i]
		svc := p.buildService(cs, sc, states, me, old)
		if svc != nil {
			t.services[sc.Name] = svc
		}
	}
	p.forget(cs.Config)
	e.table.Store(t)
	e.metrics.observeTable(t, e.cfg.Site)
	if e.proxy != nil && e.proxy.sm != nil {
		for name, so := range p.outliers {
			e.proxy.sm.ejected.WithLabelValues(name).Set(float64(so.ejectedCount(now)))
		}
	}
}

// buildService builds the table entry of one service. On a planning error it
// keeps the previous table's entry (or returns an entry without picker).
//
// Backends ejected by outlier detection at p.now are left out of the
// policy's picker and pool, but stay in the service's scope (affinity
// treats them as unavailable, retries skip them).
func (p *planner) buildService(cs *ControlState, sc *config.Service, states map[string]gossip.NodeState, me self, old *table) *service {
	e := p.e
	m := p.meters[sc.Name]
	if m == nil {
		m = &serviceMeters{demand: ewma.Rate{Tau: p.e.cfg.DemandSmoothing}, rr: backend.NewRoundRobin(p.e.rand())}
		p.meters[sc.Name] = m
	}
	svc := &service{name: sc.Name, cfg: sc, meters: m, clk: e.clk, ejected: p.onEjection(sc.Name)}
	so := p.outliersFor(sc)
	defer so.finish(p.now)
	svc.outliers = so.det

	var all []member // every healthy backend, ejected or not
	for _, b := range sc.Backends {
		ref, ok := cs.Config.Group(b.Group)
		if !ok {
			continue
		}
		for _, in := range ref.Group.Instances {
			if cs.Unhealthy[in.Address] {
				continue
			}
			all = append(all, member{b: p.backend(in), group: b.Group, region: ref.Region.Name, zone: ref.Zone.Name, host: so.host(b.Group, in.Address)})
		}
	}

	svc.healthy = len(all)

	// The pool: every healthy backend, or for hashing with scope
	// nearest_region only the nearest region's, less the ejected ones.
	// Baseline policies pick from it; planned policies fall back to round
	// robin over it while their site has no plan row yet (no RTT measured).
	if sc.Policy.IsHash() && sc.HashScope == config.HashScopeNearestRegion {
		has := map[string]bool{}
		for _, m := range all {
			has[m.region] = true
		}
		svc.nearest = nearestRegion(me.rtt, func(r string) bool { return has[r] })
		if svc.nearest != "" {
			all = slices.DeleteFunc(all, func(m member) bool { return m.region != svc.nearest })
		}
	}
	poolReason := reasonPolicy
	if sc.Policy.IsPlanned() {
		poolReason = reasonNoPlan
	}
	for i := range all {
		all[i].reason = poolReason
	}
	pool := slices.DeleteFunc(slices.Clone(all), func(m member) bool { return m.host.Ejected(p.now) })
	svc.pool = pool
	svc.inflight = func(i int) int64 { return pool[i].b.InFlight() }
	svc.free = func(i int) bool { return !pool[i].b.Full() }
	svc.rr = m.rr
	svc.lr = backend.NewLeastRequest(e.rand)
	if sc.Policy.IsHash() && len(pool) > 0 {
		names := make([]string, len(pool))
		for i, m := range pool {
			names[i] = m.b.Addr()
		}
		mg, err := hashing.NewMaglev(hashing.DefaultConfig(), names)
		if err != nil {
			e.log.Error().Err(err).Str("service", sc.Name).Msg("building the hash table")
			svc.pool = nil
			return svc
		}
		svc.maglev = mg
	}
	if !sc.Policy.IsPlanned() {
		p.finishService(svc, byRTT(all, me.rtt))
		return svc
	}

	w := buildWorld(cs.Config, sc, cs.Unhealthy, states, me)
	svc.world = w
	compute := waterfall.Compute
	if sc.Policy == config.PolicyMinRTT {
		compute = waterfall.ComputeMinRTT
	}
	plan, err := compute(w, waterfall.Config{SpillThreshold: sc.Spill.Threshold, SpillSlope: sc.Spill.Slope})
	if err != nil {
		if msg := err.Error(); p.lastErr[sc.Name] != msg {
			e.log.Error().Err(err).Str("service", sc.Name).Msg("planning failed; keeping the previous plan")
			p.lastErr[sc.Name] = msg
		}
		if old != nil {
			if prev := old.services[sc.Name]; prev != nil {
				return prev
			}
		}
		p.finishService(svc, byRTT(all, me.rtt))
		return svc
	}
	delete(p.lastErr, sc.Name)
	plan = waterfall.Damp(p.prev[sc.Name], plan, e.cfg.Damping)
	p.prev[sc.Name] = plan
	svc.plan = plan
	row := plan.Row(e.cfg.Site)
	svc.rowLen = len(row)
	healthy := map[string][]*backend.Backend{}
	for _, m := range pool {
		healthy[m.group] = append(healthy[m.group], m.b)
	}
	svc.picker = waterfall.NewPicker(row, healthy, backend.PolicyRoundRobin)
	if len(row) == 0 {
		p.finishService(svc, byRTT(all, me.rtt))
		return svc
	}
	// The scope of a planned policy: the backends of the row's groups, in
	// row order, each counted under its flow's reason.
	var scope []member
	for _, f := range row {
		for _, m := range all {
			if m.group == f.Group {
				m.reason = reasonOf(f.Reason)
				scope = append(scope, m)
			}
		}
	}
	p.finishService(svc, scope)
	return svc
}

// byRTT returns a copy of ms sorted by the RTT of their region (nearest
// first; regions without an RTT last), keeping their order otherwise.
func byRTT(ms []member, rtt map[string]float64) []member {
	out := slices.Clone(ms)
	key := func(r string) float64 {
		if v, ok := rtt[r]; ok {
			return v
		}
		return math.Inf(1)
	}
	slices.SortStableFunc(out, func(a, b member) int { return cmp.Compare(key(a.region), key(b.region)) })
	return out
}

// finishService sets svc's scope (see service.scope) with its indexes and
// region ranks, and its session affinity over it.
func (p *planner) finishService(svc *service, scope []member) {
	svc.scope = scope
	svc.byAddr = make(map[string]int32, len(scope))
	svc.byBackend = make(map[*backend.Backend]int32, len(scope))
	first := map[string]int{}
	for i := range scope {
		m := &scope[i]
		if _, ok := first[m.region]; !ok {
			first[m.region] = i
		}
		m.rank = first[m.region]
		svc.byAddr[m.b.Addr()] = int32(i)
		svc.byBackend[m.b] = int32(i)
	}
	if len(scope) == 0 {
		return
	}
	names := make([]string, len(scope))
	for i, m := range scope {
		names[i] = m.b.Addr()
	}
	aff, err := newSessionAffinity(svc.cfg, names, svc.affinityFallback(p.e.rand), svc.affinityAvailable())
	if err != nil {
		key := "affinity/" + svc.name
		if msg := err.Error(); p.lastErr[key] != msg {
			p.e.log.Error().Err(err).Str("service", svc.name).Msg("session affinity disabled")
			p.lastErr[key] = msg
		}
		return
	}
	svc.aff = aff
}

// onEjection returns the function a service calls when one of its hosts is
// ejected: it counts the ejection and wakes the planner, so that the next
// table, built at once, leaves the host out. It never blocks.
func (p *planner) onEjection(service string) func() {
	kick := p.e.kick
	var ejections interface{ Inc() }
	if p.e.proxy != nil && p.e.proxy.sm != nil {
		ejections = p.e.proxy.sm.ejections.WithLabelValues(service)
	}
	return func() {
		if ejections != nil {
			ejections.Inc()
		}
		select {
		case kick <- struct{}{}:
		default:
		}
	}
}

// backend returns the persistent Backend for an instance, updating its
// concurrency limit from config.
func (p *planner) backend(in config.Instance) *backend.Backend {
	b := p.backends[in.Address]
	if b == nil {
		b = backend.New(in.Address, int64(in.MaxConcurrency))
		p.backends[in.Address] = b
	} else if b.MaxConcurrency() != int64(in.MaxConcurrency) {
		b.SetMaxConcurrency(int64(in.MaxConcurrency))
	}
	return b
}

// forget drops state of services and instances no longer configured.
func (p *planner) forget(cfg *config.Config) {
	live := map[string]bool{}
	addrs := map[string]bool{}
	for _, s := range cfg.Services {
		live[s.Name] = true
	}
	for _, g := range cfg.Groups() {
		for _, in := range g.Group.Instances {
			addrs[in.Address] = true
		}
	}
	maps.DeleteFunc(p.meters, func(k string, _ *serviceMeters) bool { return !live[k] })
	maps.DeleteFunc(p.prev, func(k string, _ *waterfall.Plan) bool { return !live[k] })
	maps.DeleteFunc(p.outliers, func(k string, _ *serviceOutliers) bool { return !live[k] })
	maps.DeleteFunc(p.backends, func(k string, _ *backend.Backend) bool { return !addrs[k] })
}

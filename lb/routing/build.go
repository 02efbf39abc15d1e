package routing

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/backend"
	"github.com/spillway-lb/spillway/lb/capacity"
	"github.com/spillway-lb/spillway/lb/ewma"
	"github.com/spillway-lb/spillway/lb/hashing"
	"github.com/spillway-lb/spillway/lb/waterfall"
)

// Config is what the table build needs to know about this gfe.
type Config struct {
	// Node is this gfe's gossip name; peers under it are ignored.
	Node string
	// Site is the edge site whose plan row the table's pickers use.
	Site string
	// Damping is the fraction of the way each plan moves toward the
	// planner's newest output per build (waterfall.Damp), in (0, 1].
	Damping float64
	// DemandSmoothing is the time constant of the demand estimates
	// (Demand). Zero follows every sample. A rate's estimate attacks fast
	// (ewma.Rate.FastAttack): a step up in a site's demand shows in full
	// in the first build after one whole build interval of it, and in that
	// build's plan; a step down decays with this time constant.
	DemandSmoothing time.Duration
	// HerdWindow is how far back the herd guard (herd.go) looks for the
	// demand the other gfes may still believe this one has: about the
	// time gossip takes to carry it (DefaultHerdWindow). Zero turns the
	// guard off.
	HerdWindow time.Duration
	// Bounds are the plausibility limits on the peers' gossiped demand and
	// RTT (see Bounds; DefaultBounds for the gfe). The zero value clamps
	// nothing.
	Bounds Bounds
}

// DefaultDemandSmoothing is the gfe's default Config.DemandSmoothing. Two
// seconds halve the swing of a site's spill with the noise of its demand
// against one second (OSC_PP of lbsim bench on configs/scenarios/large.yaml:
// 5.0 at 1 s, 2.7 at 2 s, every other figure unchanged) and cost only
// slower returns after demand falls (95% of a fall is followed after 6 s):
// a rise beyond the noise still shows at once (ewma.Rate.FastAttack).
const DefaultDemandSmoothing = 2 * time.Second

// Options are the Builder's dependencies.
type Options struct {
	// Now returns the time the tables' pickers read (outlier ejections,
	// cookie expiry) when a request gives none: the caller's clock
	// (internal/clock's Now for the daemons, the simulated time for sim).
	// Nil means time.Now. Build itself never calls it: it takes Input.Now.
	Now func() time.Time
	// Rand returns uniform random numbers for picks (least request, the
	// affinity fallback, round-robin cursors' starting points). Required;
	// it must be safe for concurrent use.
	Rand func() uint64
	// Prober sends the probes of services with policy prequal (prequal.go);
	// nil sends none, and such a service picks by least request.
	Prober Prober
}

// Builder builds routing tables. It owns everything that outlives one
// table: backends (with their in-flight counters), meters, outlier state and
// the previous plan of every service. Its methods must be called from one
// goroutine at a time (the gfe's planner); the tables it returns are safe
// for concurrent use by any number of requests.
type Builder struct {
	// Immutable after NewBuilder.
	cfg  Config
	now  func() time.Time
	rand func() uint64

	// Owned by the calling goroutine.
	backends map[string]*backend.Backend // by address
	meters   map[string]*Meters          // by service
	prev     map[string]*waterfall.Plan  // by service
	prevSvc  map[string]*Service         // by service: the last table's entry
	outliers map[string]*serviceOutliers // by service
	lastErr  map[string]string           // by problem key: the last problem reported
	forgot   *config.Config              // the config of the last forget
	// estimators hold every group's effective capacity (capacity.go);
	// lastBuild is the time of the last Build.
	estimators map[groupKey]*capacity.Estimator
	lastBuild  time.Time
	// peerDemand is the demand last taken from each peer per service (the
	// base of Bounds.MaxDemandRise); builds counts Builds; clamps are the
	// values Bounds changed, for TakeClamps.
	peerDemand map[peerDemandKey]acceptedDemand
	// ownDemand is this gfe's own demand per service over the last
	// HerdWindow (herd.go).
	ownDemand map[string][]ownDemand
	// herdSeen is when each group of a service last showed unexplained
	// load (herd.go), by service and group.
	herdSeen map[string]map[string]time.Time
	builds   uint64
	clamps   []Clamp
	// ended counts, by backend address, the requests that ended (answered
	// or failed: Backend.Observe) between the last two Builds, which were
	// endedDT seconds apart (0 for the first); see Ended.
	ended   map[string]int64
	endedDT float64
	// acts is each autoscaled instance's Adaptive Concurrency Tuning, by
	// address (act.go).
	acts map[string]*actState
	// loadAware is each load-aware service's Registry and Chooser, by
	// service (loadaware.go).
	loadAware map[string]*loadAwareState
	// prequal is each prequal service's probe pool, by service
	// (prequal.go); prober sends its probes (Options.Prober).
	prequal map[string]*prequalState
	prober  Prober
}

// NewBuilder returns a Builder for cfg.
func NewBuilder(cfg Config, opts Options) *Builder {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Builder{
		cfg:      cfg,
		now:      opts.Now,
		rand:     opts.Rand,
		backends: map[string]*backend.Backend{},
		meters:   map[string]*Meters{},
		prev:     map[string]*waterfall.Plan{},
		prevSvc:  map[string]*Service{},
		outliers: map[string]*serviceOutliers{},
		lastErr:  map[string]string{},

		estimators: map[groupKey]*capacity.Estimator{},
		peerDemand: map[peerDemandKey]acceptedDemand{},
		ownDemand:  map[string][]ownDemand{},
		herdSeen:   map[string]map[string]time.Time{},
		loadAware:  map[string]*loadAwareState{},
		prequal:    map[string]*prequalState{},
		prober:     opts.Prober,
	}
}

// Build returns a new table for in. A service whose plan cannot be computed
// keeps its entry of the previous table (or gets one without a plan).
//
// Build does no I/O and reads no clock. Problems (a failed plan, affinity
// or hash table that cannot be built) do not fail the build; they are
// returned, each once until it changes or goes away, so that the caller can
// log them without repeating itself every step.
func (b *Builder) Build(in Input) (*Table, []error) {
	cs := in.Fleet
	t := &Table{Version: cs.Version, Config: cs.Config, Services: map[string]*Service{}}
	var problems []error
	seen := map[string]bool{}
	report := func(key string, err error) {
		seen[key] = true
		if msg := err.Error(); b.lastErr[key] != msg {
			b.lastErr[key] = msg
			problems = append(problems, err)
		}
	}
	sigs := b.takeSignals()
	var dt float64
	if !b.lastBuild.IsZero() && in.Now.After(b.lastBuild) {
		dt = in.Now.Sub(b.lastBuild).Seconds()
	}
	b.ended, b.endedDT = make(map[string]int64, len(sigs)), dt
	for be, sg := range sigs {
		if n := sg.Answered + sg.Failed; n > 0 {
			b.ended[be.Addr()] = n
		}
	}
	b.lastBuild = in.Now
	b.builds++
	for i := range cs.Config.Services {
		sc := &cs.Config.Services[i]
		if svc := b.buildService(in, sc, sigs, dt, report); svc != nil {
			t.Services[sc.Name] = svc
		}
	}
	b.tuneACT(cs.Config, in.Now, sigs)
	maps.DeleteFunc(b.lastErr, func(k, _ string) bool { return !seen[k] })
	b.forgetPeerDemand()
	b.forget(cs.Config)
	b.prevSvc = t.Services
	return t, problems
}

// buildService builds the table entry of one service, step by step: its
// members, its pool and baseline pickers, and for a planned policy its
// world, plan, picker and scope. On a planning error it keeps the previous
// table's entry (or returns an entry without picker).
//
// Backends ejected by outlier detection at in.Now are left out of the
// policy's picker and pool, but stay in the service's scope (affinity
// treats them as unavailable, retries skip them).
func (b *Builder) buildService(in Input, sc *config.Service, sigs map[*backend.Backend]backend.Signals, dt float64, report func(string, error)) *Service {
	so := b.outliersFor(sc, report)
	defer so.finish(in.Now)
	svc := &Service{name: sc.Name, cfg: sc, meters: b.metersFor(sc), outliers: so.det, now: b.now, prober: b.prober}

	all := b.members(in.Fleet, sc, so)
	svc.healthy = len(all)
	svc.drained = allDrained(sc)
	all = b.setPool(svc, all, in.Self.RTT, in.Now)
	if err := b.setHashing(svc); err != nil {
		report("hashing/"+sc.Name, fmt.Errorf("service %s: building the hash table: %w", sc.Name, err))
		svc.pool = nil
		return svc
	}
	if isPriority(sc.Policy) {
		setPriorities(svc, in.Fleet, in.Self.RTT)
	}
	svc.pq = b.prequalFor(sc, svc.pool[:svc.first])
	if !sc.Policy.IsPlanned() {
		delete(b.loadAware, sc.Name)
		b.clearSoftLimits(in, sc)
		b.finish(svc, byRTT(all, in.Self.RTT), report)
		return svc
	}

	la := b.loadAwareFor(sc, svc.pool, in.Now, report)
	in.Peers = b.boundPeers(in, sc, dt)
	own, herd := b.updateCapacity(in, sc, sigs, dt)
	factor := mergeFactors(sc.Name, own, in.Peers, in.Self.Node, estimatorConfig(sc).MinFactor)
	svc.world = BuildWorld(in.Fleet, sc, in.Peers, in.Self, factor)
	planWorld := svc.world
	if peers, ok := b.herdPeers(in, sc, herd); ok {
		hw := BuildWorld(in.Fleet, sc, peers, in.Self, factor)
		for _, r := range hw.Regions {
			for i := range r.Groups {
				r.Groups[i].Capacity *= HerdTarget
			}
		}
		if !overloaded(hw) {
			planWorld = hw
			svc.herd = herd
		}
	}
	if overloaded(svc.world) {
		// Shrinking cannot make room when every region is full: plan the
		// uniform overload of rule 6 on the configured capacities. Only
		// when the demand exceeds them too (global overload, rule 6) does
		// no soft limit move requests away from it; below that the
		// shrunk world is full only on paper, and the soft limits keep
		// the requests a slowed instance cannot take off its queue
		// (rule 3: never past an instance's limit; rule 4: the overflow
		// spills to the next region with room).
		factor = nil
		svc.world = BuildWorld(in.Fleet, sc, in.Peers, in.Self, nil)
		planWorld, svc.herd = svc.world, nil
		svc.capacity = b.capacities(sc, svc.world, own, factor)
		if beyondDeclared(svc.world, sc.TargetUtilization) {
			b.clearSoftLimits(in, sc)
		} else {
			b.setSoftLimits(in, sc, svc.capacity)
		}
	} else {
		svc.capacity = b.capacities(sc, svc.world, own, factor)
		b.setSoftLimits(in, sc, svc.capacity)
	}
	plan, err := b.plan(sc, planWorld)
	if err != nil {
		report("plan/"+sc.Name, fmt.Errorf("service %s: planning failed; keeping the previous plan: %w", sc.Name, err))
		if prev := b.prevSvc[sc.Name]; prev != nil {
			return prev
		}
		b.finish(svc, byRTT(all, in.Self.RTT), report)
		return svc
	}
	svc.plan = plan
	svc.shed = shedRule(sc, plan)
	row := plan.Row(b.cfg.Site)
	svc.rowLen = len(row)
	pickRow := row
	if sc.Feedback.Enabled && len(row) > 0 {
		// Overflow groups are for first picks only: the scope (session
		// affinity, retries) stays the plan row; only a retry after an
		// unreachable backend goes past it (Service.reach).
		pickRow = withOverflow(row, plan, b.cfg.Site)
	}
	active, demoted := map[string][]*backend.Backend{}, map[string][]*backend.Backend{}
	for _, m := range svc.pool {
		if m.Demoted {
			demoted[m.Group] = append(demoted[m.Group], m.B)
		} else {
			active[m.Group] = append(active[m.Group], m.B)
		}
	}
	if la != nil {
		ea, ed := la.endpointsOf(svc.pool)
		svc.picker = waterfall.NewPickerLoadAware(pickRow, ea, ed, la.chooser)
		svc.chooser = la.chooser
	} else {
		svc.picker = waterfall.NewPickerDemoted(pickRow, active, demoted, backend.PolicyRoundRobin)
	}
	if len(row) == 0 {
		b.finish(svc, byRTT(all, in.Self.RTT), report)
		return svc
	}
	// Past the row, the groups of the site's farther regions: where a retry
	// goes when the row's region is unreachable (Service.RetryPick).
	farther := withOverflow(row, plan, b.cfg.Site)[len(row):]
	b.finish(svc, rowScope(row, all), report, rowScope(farther, all)...)
	return svc
}

// metersFor returns the persistent meters of service sc, measuring demand
// in the unit of its balancing mode.
func (b *Builder) metersFor(sc *config.Service) *Meters {
	m := b.meters[sc.Name]
	if m == nil {
		m = &Meters{
			arrivals: ewma.Rate{Tau: b.cfg.DemandSmoothing, FastAttack: true},
			level:    ewma.Level{Tau: b.cfg.DemandSmoothing, FastAttack: true},
			rr:       backend.NewRoundRobin(b.rand()),
		}
		b.meters[sc.Name] = m
	}
	m.concurrent = sc.BalancingMode.Concurrent()
	return m
}

// members returns every healthy backend of sc, ejected or not, in config
// order, registering each with sc's outlier detection.
func (b *Builder) members(cs *Fleet, sc *config.Service, so *serviceOutliers) []Member {
	var all []Member
	for _, be := range sc.Backends {
		ref, ok := cs.Config.Group(be.Group)
		if !ok {
			continue
		}
		for _, in := range ref.Group.Instances {
			if !cs.Healthy(in.Address) {
				continue
			}
			all = append(all, Member{B: b.backend(in), Group: be.Group, Region: ref.Region.Name, Zone: ref.Zone.Name, Host: so.host(be.Group, in.Address), Demoted: in.Demoted})
		}
	}
	return all
}

// setPool sets svc's pool and baseline pickers, and returns all, the
// members, restricted to the nearest region for hashing with scope
// nearest_region and marked with the reason of a policy pick.
//
// The pool is every healthy backend in scope less the ejected ones and
// those of drained groups (capacity_scaler 0: no new traffic), the active
// ones first and then, when there is an active one, the demoted ones
// (Service.first). Baseline policies pick from it; planned policies fall
// back to round robin over it while their site has no plan row yet (no RTT
// measured).
func (b *Builder) setPool(svc *Service, all []Member, rtt map[string]float64, now time.Time) []Member {
	sc := svc.cfg
	drained := func(m Member) bool {
		be, ok := sc.Backend(m.Group)
		return ok && be.CapacityScaler == 0
	}
	if sc.Policy.IsHash() && sc.HashScope == config.HashScopeNearestRegion {
		has := map[string]bool{}
		for _, m := range all {
			if !drained(m) {
				has[m.Region] = true
			}
		}
		svc.nearest = NearestRegion(rtt, func(r string) bool { return has[r] })
		if svc.nearest != "" {
			all = slices.DeleteFunc(all, func(m Member) bool { return m.Region != svc.nearest })
		}
	}
	poolReason := ReasonPolicy
	if sc.Policy.IsPlanned() {
		poolReason = ReasonNoPlan
	}
	for i := range all {
		all[i].reason = poolReason
	}
	pool := slices.DeleteFunc(slices.Clone(all), func(m Member) bool { return m.Host.Ejected(now) || drained(m) })
	// Active members first, each part in config order.
	slices.SortStableFunc(pool, func(a, b Member) int {
		switch {
		case a.Demoted == b.Demoted:
			return 0
		case b.Demoted:
			return -1
		}
		return 1
	})
	first := len(pool)
	if i := slices.IndexFunc(pool, func(m Member) bool { return m.Demoted }); i > 0 {
		first = i // when every member is demoted, they are all picked as active
	}
	svc.pool, svc.first = pool, first
	svc.inflight = func(i int) int64 { return pool[i].B.InFlight() }
	svc.free = func(i int) bool { return !pool[i].B.Full() }
	demoted := pool[first:]
	svc.dinflight = func(i int) int64 { return demoted[i].B.InFlight() }
	svc.dfree = func(i int) bool { return !demoted[i].B.Full() }
	svc.rr = svc.meters.rr
	if first < len(pool) {
		// Only with demoted members, so that a config without any draws
		// the same random numbers as before they existed.
		svc.drr = backend.NewRoundRobin(b.rand())
	}
	svc.lr = backend.NewLeastRequest(b.rand)
	return all
}

// allDrained reports whether every backend group of sc is drained
// (capacity_scaler 0); false for a service without backends.
func allDrained(sc *config.Service) bool {
	for _, be := range sc.Backends {
		if be.CapacityScaler != 0 {
			return false
		}
	}
	return len(sc.Backends) > 0
}

// setHashing builds the Maglev table of a hashing policy over svc's pool's
// active members (all of the pool when none is active).
func (b *Builder) setHashing(svc *Service) error {
	if !svc.cfg.Policy.IsHash() || svc.first == 0 {
		return nil
	}
	names := make([]string, svc.first)
	for i, m := range svc.pool[:svc.first] {
		names[i] = m.B.Addr()
	}
	mg, err := hashing.NewMaglev(hashing.DefaultConfig(), names)
	if err != nil {
		return err
	}
	svc.maglev = mg
	return nil
}

// plan computes the plan of planned service sc over w with its policy's
// planner and damps it against the previous one.
func (b *Builder) plan(sc *config.Service, w waterfall.World) (*waterfall.Plan, error) {
	compute := waterfall.Compute
	if sc.Policy == config.PolicyMinRTT {
		compute = waterfall.ComputeMinRTT
	}
	plan, err := compute(w, waterfall.Config{SpillThreshold: sc.Spill.Threshold, SpillSlope: sc.Spill.Slope})
	if err != nil {
		return nil, err
	}
	plan = waterfall.Damp(b.prev[sc.Name], plan, b.cfg.Damping)
	b.prev[sc.Name] = plan
	return plan, nil
}

// rowScope returns the scope of a planned policy: the members of the row's
// groups, in row order, each counted under its flow's reason.
func rowScope(row []waterfall.Flow, all []Member) []Member {
	var scope []Member
	for _, f := range row {
		for _, m := range all {
			if m.Group == f.Group {
				m.reason = ReasonOf(f.Reason)
				scope = append(scope, m)
			}
		}
	}
	return scope
}

// finish sets svc's scope (see Service.scope) and reach (scope, then
// farther) with their indexes and region ranks, and its session affinity
// over the scope.
func (b *Builder) finish(svc *Service, scope []Member, report func(string, error), farther ...Member) {
	svc.reach = append(scope[:len(scope):len(scope)], farther...)
	svc.scope = svc.reach[:len(scope)]
	scope = svc.scope
	svc.byAddr = make(map[string]int32, len(scope))
	svc.byBackend = make(map[*backend.Backend]int32, len(svc.reach))
	first := map[string]int{}
	for i := range svc.reach {
		m := &svc.reach[i]
		if _, ok := first[m.Region]; !ok {
			first[m.Region] = i
		}
		m.rank = first[m.Region]
		svc.byBackend[m.B] = int32(i)
		if i < len(scope) {
			svc.byAddr[m.B.Addr()] = int32(i)
		}
	}
	if len(scope) == 0 {
		return
	}
	// Affinity pins only to active members (all of them when none is):
	// a demoted one takes overflow, never a session.
	names := make([]string, 0, len(scope))
	for _, m := range scope {
		if !m.Demoted {
			names = append(names, m.B.Addr())
		}
	}
	svc.scopeActive = len(names) > 0
	if len(names) == 0 {
		for _, m := range scope {
			names = append(names, m.B.Addr())
		}
	}
	aff, err := newAffinity(svc.cfg, names, svc.affinityFallback(b.rand), svc.affinityAvailable())
	if err != nil {
		report("affinity/"+svc.name, fmt.Errorf("service %s: session affinity disabled: %w", svc.name, err))
		return
	}
	svc.aff = aff
}

// backend returns the persistent Backend for an instance, updating its
// concurrency limit from config.
func (b *Builder) backend(in config.Instance) *backend.Backend {
	be := b.backends[in.Address]
	if be == nil {
		be = backend.New(in.Address, int64(in.MaxConcurrency))
		b.backends[in.Address] = be
	} else if be.MaxConcurrency() != int64(in.MaxConcurrency) {
		be.SetMaxConcurrency(int64(in.MaxConcurrency))
	}
	return be
}

// Backend returns the persistent Backend of address addr, or nil.
func (b *Builder) Backend(addr string) *backend.Backend { return b.backends[addr] }

// Ended returns, by backend address, how many of this gfe's requests to
// the backend ended (answered or failed, as counted by Backend.Observe)
// between the last Build and the one before, and the seconds between those
// two Builds (0 after the first Build: no rate yet). Addresses without a
// request are left out. The map is the Builder's until the next Build:
// callers must not modify it.
func (b *Builder) Ended() (map[string]int64, float64) { return b.ended, b.endedDT }

// Demand samples, at now, the demand of every service in the unit of its
// balancing mode, smoothed with time constant DemandSmoothing: requests in
// flight for a CONNECTION-mode service (its capacity counts concurrent
// requests), requests/s otherwise (Meters.Started and Ended count them).
func (b *Builder) Demand(now time.Time) map[string]float64 {
	out := make(map[string]float64, len(b.meters))
	for name, m := range b.meters {
		out[name] = m.demand(now)
	}
	return out
}

// Ejected returns, by service, how many hosts outlier detection has
// ejected at now.
func (b *Builder) Ejected(now time.Time) map[string]int {
	out := make(map[string]int, len(b.outliers))
	for name, so := range b.outliers {
		out[name] = so.ejectedCount(now)
	}
	return out
}

// forget drops state of services and instances no longer configured. With
// the config of its last call it has nothing to do: since then, state was
// only added for what that config holds.
func (b *Builder) forget(cfg *config.Config) {
	if cfg == b.forgot {
		return
	}
	b.forgot = cfg
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
	maps.DeleteFunc(b.meters, func(k string, _ *Meters) bool { return !live[k] })
	maps.DeleteFunc(b.prev, func(k string, _ *waterfall.Plan) bool { return !live[k] })
	maps.DeleteFunc(b.ownDemand, func(k string, _ []ownDemand) bool { return !live[k] })
	maps.DeleteFunc(b.herdSeen, func(k string, _ map[string]time.Time) bool { return !live[k] })
	maps.DeleteFunc(b.outliers, func(k string, _ *serviceOutliers) bool { return !live[k] })
	maps.DeleteFunc(b.estimators, func(k groupKey, _ *capacity.Estimator) bool { return !live[k.service] })
	maps.DeleteFunc(b.loadAware, func(k string, _ *loadAwareState) bool { return !live[k] })
	maps.DeleteFunc(b.prequal, func(k string, _ *prequalState) bool { return !live[k] })
	maps.DeleteFunc(b.backends, func(k string, be *backend.Backend) bool {
		if addrs[k] {
			return false
		}
		for _, st := range b.loadAware {
			st.reg.Forget(be)
		}
		return true
	})
}

package controlplane

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/lb/health"
	"github.com/spillway-lb/spillway/lb/health/probe"
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

// settleMargin is added to the longest first-probe time when computing the
// startup settle deadline, so that a probe that ends at its timeout has been
// applied.
const settleMargin = 100 * time.Millisecond

// checkSpec is one health check as the daemon runs it: a service's
// health_check block turned into an lb/health Config.
type checkSpec struct {
	cfg   health.Config
	https bool // probe over TLS (health.ProtocolHTTP with an https transport)
	port  int  // 0 = the instance's own port
}

// healthPlan is a configuration prepared for health checking by ApplyConfig.
// Immutable.
type healthPlan struct {
	cfg *LoadedConfig
	// specs and probers by check key: a service name, or "" for the
	// default check of groups no service uses.
	specs   map[string]checkSpec
	probers map[string]health.Prober
	// groupKeys lists, per group, the check keys that cover its instances.
	groupKeys map[string][]string
	groups    []config.GroupRef
	names     []string // group names, file order
	// settleAfter is the longest time any check's first probe can take:
	// Jitter·Interval (first delay) + Timeout.
	settleAfter time.Duration
}

// healthManager runs this replica's share of the active health checks,
// merges them with the other replicas' gossip, publishes its groups'
// capacity and health in gossip, and stores every new State in the hub.
//
// Everything happens on Run's goroutine (STYLE §4): configuration changes
// (ApplyConfig), check results (lb/health Checkers' OnChange), and gossip
// changes only wake it; it recomputes the whole view, which is small, and
// stores a new State when anything served changed.
//
// Sharing: the groups of the configuration are shared out among the alive
// control planes by Maglev (see ownership); each replica checks only its
// own groups, and for every other group serves the owner's gossiped
// verdicts (see merge). When membership changes, each replica recomputes the
// owners and starts or stops checks; a group whose owner died keeps its
// last verdicts until the new owner's checks decide.
//
// Startup: until the view has settled (every instance has a verdict, or
// every check's first probe must have finished) the State is not Ready, and
// until its own groups have settled this replica publishes none of them, so
// that neither gfes nor other replicas see "unknown" for instances that are
// about to be found healthy.
type healthManager struct {
	// Immutable after newHealthManager.
	self string
	// replicas are the control planes this one shares health checks with
	// (Config.Replicas); other members claiming to be control planes are
	// ignored.
	replicas map[string]bool
	gossip   gossiper
	hub      *hub
	clock    clock.Clock
	log      zerolog.Logger
	rand     func() uint64 // safe for concurrent use
	prober   health.Prober // test override; nil = real probers
	m        *metrics

	applied chan struct{} // wakes Run after ApplyConfig; holds at most one
	checked chan struct{} // wakes Run after a check status change; at most one

	mu sync.Mutex
	// Guarded by mu.
	pending *healthPlan // the latest plan Run has not taken yet
	// checks holds the status of every target of every check that has
	// changed from unknown, with the failure that made it unhealthy. It is
	// kept from the Checkers' OnChange calls (not read from
	// Checker.Snapshot) so that a status and its reason change together.
	checks map[checkTarget]ownVerdict

	// Accessed atomically.
	view atomic.Pointer[ownershipView]
}

// checkTarget locates one target of one check.
type checkTarget struct {
	check  string
	target health.Target
}

// ownershipView is what /status shows about sharing. Immutable.
type ownershipView struct {
	Members []string `json:"members"`
	Owned   []string `json:"owned_groups"`
}

func newHealthManager(self string, replicas []string, g gossiper, h *hub, opts Options, m *metrics) *healthManager {
	r := opts.Rand
	if r != nil {
		var mu sync.Mutex
		inner := r
		r = func() uint64 {
			mu.Lock()
			defer mu.Unlock()
			return inner()
		}
	}
	allowed := make(map[string]bool, len(replicas))
	for _, r := range replicas {
		allowed[r] = true
	}
	hm := &healthManager{
		self:     self,
		replicas: allowed,
		gossip:   g,
		hub:      h,
		clock:    clock.OrReal(opts.Clock),
		log:      opts.Logger.With().Str("component", "health").Logger(),
		rand:     r,
		prober:   opts.Prober,
		m:        m,
		applied:  make(chan struct{}, 1),
		checked:  make(chan struct{}, 1),
		checks:   map[checkTarget]ownVerdict{},
	}
	hm.view.Store(&ownershipView{Members: []string{self}})
	return hm
}

// Ownership returns the alive control planes and the groups this replica
// checks, as of the last recomputation.
func (h *healthManager) Ownership() ownershipView { return *h.view.Load() }

// ApplyConfig prepares health checking for l: it converts every service's
// health_check block and builds its prober, and returns an error naming the
// service's path if one cannot run (which rejects the configuration). It
// does not block on Run; Run takes the newest applied configuration on its
// next turn.
func (h *healthManager) ApplyConfig(l *LoadedConfig) error {
	p, err := h.plan(l)
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.pending = p
	h.mu.Unlock()
	notify(h.applied)
	return nil
}

// plan builds the healthPlan of l.
func (h *healthManager) plan(l *LoadedConfig) (*healthPlan, error) {
	c := l.Config
	p := &healthPlan{
		cfg:       l,
		specs:     map[string]checkSpec{},
		probers:   map[string]health.Prober{},
		groupKeys: map[string][]string{},
		groups:    c.Groups(),
	}
	var errs []error
	add := func(key, path string, hc config.HealthCheck) {
		spec := specFor(hc)
		if err := spec.cfg.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
			return
		}
		pr, err := h.newProber(spec)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
			return
		}
		p.specs[key] = spec
		p.probers[key] = countingProber{p: pr,
			pass: h.m.checks.WithLabelValues(key, resultPass),
			fail: h.m.checks.WithLabelValues(key, resultFail)}
		p.settleAfter = max(p.settleAfter,
			time.Duration(spec.cfg.Jitter*float64(spec.cfg.Interval))+spec.cfg.Timeout)
	}
	for i, s := range c.Services {
		add(s.Name, fmt.Sprintf("services[%d].health_check", i), s.HealthCheck)
		for _, b := range s.Backends {
			p.groupKeys[b.Group] = append(p.groupKeys[b.Group], s.Name)
		}
	}
	for _, ref := range p.groups {
		p.names = append(p.names, ref.Group.Name)
		if len(p.groupKeys[ref.Group.Name]) == 0 {
			p.groupKeys[ref.Group.Name] = []string{""}
			if _, ok := p.specs[""]; !ok {
				add("", "default health_check", config.DefaultHealthCheck())
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// specFor converts a service's health_check block to the check it runs.
func specFor(hc config.HealthCheck) checkSpec {
	c := health.DefaultConfig()
	s := checkSpec{port: hc.Port}
	switch hc.Protocol {
	case config.HealthHTTP:
		c.Protocol = health.ProtocolHTTP
	case config.HealthHTTPS:
		c.Protocol, s.https = health.ProtocolHTTP, true
	case config.HealthTCP:
		c.Protocol = health.ProtocolTCP
	case config.HealthGRPC:
		c.Protocol = health.ProtocolGRPC
	default:
		c.Protocol = health.Protocol(hc.Protocol) // Validate reports it
	}
	c.Path = hc.Path
	if c.Path == "" {
		c.Path = "/"
	}
	c.GRPCService = hc.GRPCService
	c.Interval = hc.Interval
	c.Timeout = hc.Timeout
	c.HealthyThreshold = hc.HealthyThreshold
	c.UnhealthyThreshold = hc.UnhealthyThreshold
	c.Jitter = hc.Jitter
	s.cfg = c
	return s
}

// newProber returns the prober for spec: Options.Prober when set, else the
// real one for its protocol (lb/health/probe), over TLS for https.
func (h *healthManager) newProber(spec checkSpec) (health.Prober, error) {
	if h.prober != nil {
		return h.prober, nil
	}
	if spec.https {
		// lb/health/probe speaks plain HTTP; this transport turns its
		// requests into HTTPS ones. Certificates are not verified:
		// backends are addressed by IP (config.HealthHTTPS).
		return probe.NewHTTP(spec.cfg, probe.Options{Transport: httpsTransport{rt: &http.Transport{
			Proxy:                  nil,
			DialContext:            (&net.Dialer{}).DialContext,
			TLSClientConfig:        &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // documented: backends by IP
			DisableKeepAlives:      true,
			MaxResponseHeaderBytes: 64 << 10,
		}}}), nil
	}
	pr, err := probe.New(spec.cfg, probe.Options{})
	if err != nil {
		return nil, fmt.Errorf("health check: %w", err)
	}
	return pr, nil
}

// httpsTransport sends each request over HTTPS whatever its URL scheme.
type httpsTransport struct{ rt http.RoundTripper }

// RoundTrip rewrites the scheme of a copy of r to https and sends it.
func (t httpsTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r2 := r.Clone(r.Context())
	u := *r.URL
	u.Scheme = "https"
	r2.URL = &u
	return t.rt.RoundTrip(r2)
}

// countingProber counts the results of the prober it wraps.
type countingProber struct {
	p          health.Prober
	pass, fail prometheus.Counter
}

// Probe probes t with the wrapped prober and counts the result.
func (c countingProber) Probe(ctx context.Context, t health.Target) health.Result {
	r := c.p.Probe(ctx, t)
	if r.Passed() {
		c.pass.Inc()
	} else {
		c.fail.Inc()
	}
	return r
}

// notify sends a coalesced wake-up on ch (capacity 1) without blocking.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// loopState is owned by Run's goroutine.
type loopState struct {
	ctx context.Context
	// base is the plan of the configuration file; plan is base with the
	// autoscaled instances (autoscaled) added, what is checked and served.
	base        *healthPlan
	plan        *healthPlan
	autoscaled  map[string][]gossip.AutoscaledInstance
	checkers    map[string]*runningChecker
	own         ownership
	known       map[string]InstanceHealth
	settled     bool // the whole view has settled: State is Ready
	publishing  bool // the owned groups have settled: they are gossiped
	settleFired bool
	settleTimer clock.Timer
	published   []gossip.GroupState
	announced   bool // published at least once
	unvouched   []string
	wg          sync.WaitGroup
}

// runningChecker is one check's lb/health Checker and its Run goroutine.
type runningChecker struct {
	c       *health.Checker
	spec    checkSpec
	targets []health.Target // sorted
	cancel  context.CancelFunc
	done    chan struct{}
}

// Run checks, merges and publishes until ctx is done; then it stops every
// check and returns nil.
func (h *healthManager) Run(ctx context.Context) error {
	ls := &loopState{ctx: ctx, checkers: map[string]*runningChecker{}, known: map[string]InstanceHealth{}}
	defer func() {
		for key := range ls.checkers {
			h.stopChecker(ls, key)
		}
		ls.wg.Wait()
		if ls.settleTimer != nil {
			ls.settleTimer.Stop()
		}
	}()
	for {
		h.step(ls)
		var settle <-chan time.Time
		if ls.settleTimer != nil && !ls.settled {
			settle = ls.settleTimer.C()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-h.applied:
		case <-h.checked:
		case <-h.gossip.Changes():
		case <-settle:
			ls.settleFired = true
		}
	}
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

// step recomputes ownership, checks, the merged view, the gossiped groups
// and the State, changing each only if needed.
func (h *healthManager) step(ls *loopState) {
	h.mu.Lock()
	p := h.pending
	h.pending = nil
	h.mu.Unlock()
	cfgChanged := p != nil
	if cfgChanged {
		ls.base = p
		if ls.settleTimer == nil && !ls.settled {
			ls.settleTimer = h.clock.NewTimer(p.settleAfter + settleMargin)
		}
	}
	if ls.base == nil {
		return
	}
	snap := h.gossip.Snapshot()
	if auto := autoscaledFrom(snap, h.self, h.replicas); cfgChanged || !maps.EqualFunc(auto, ls.autoscaled, slices.Equal) {
		ls.autoscaled = auto
		ls.plan = h.withAutoscaled(ls.base, auto)
		cfgChanged = true
	}
	members := controlPlanes(snap, h.self, h.replicas)
	h.logUnvouched(ls, snap)
	if cfgChanged || !slices.Equal(members, ls.own.members) {
		own, err := newOwnership(members, ls.plan.names)
		if err != nil {
			// Names come from memberlist and are unique; cannot happen.
			h.log.Error().Err(err).Msg("computing group owners")
			return
		}
		if !slices.Equal(members, ls.own.members) {
			h.log.Info().Strs("control_planes", members).Int("owned_groups", len(own.owned(h.self))).
				Msg("control-plane membership changed; health checks reassigned")
		}
		ls.own = own
		h.syncCheckers(ls)
		owned := own.owned(h.self)
		h.view.Store(&ownershipView{Members: members, Owned: owned})
		h.m.ownedGroups.Set(float64(len(owned)))
		h.m.members.Set(float64(len(members)))
	}

	now := h.clock.Now()
	hs := merge(mergeInput{
		self:     h.self,
		groups:   ls.plan.groups,
		own:      ls.own,
		verdicts: h.ownVerdicts(ls),
		reports:  reportsFrom(snap, h.self, h.replicas),
		known:    ls.known,
		now:      now,
	})
	known := make(map[string]InstanceHealth, len(hs))
	counts := map[health.Status]int{}
	allDecided, ownDecided := true, true
	for _, ih := range hs {
		counts[ih.Status]++
		if ih.Status == health.StatusUnknown {
			allDecided = false
			if ls.own.owner[ih.Group] == h.self {
				ownDecided = false
			}
			continue
		}
		known[ih.Address] = ih
	}
	ls.known = known
	for _, s := range []health.Status{health.StatusHealthy, health.StatusUnhealthy, health.StatusUnknown} {
		h.m.instances.WithLabelValues(string(s)).Set(float64(counts[s]))
	}
	// Publish the owned groups once they have settled, without waiting
	// for the other replicas' (which wait for ours).
	ls.publishing = ls.publishing || ownDecided || ls.settleFired
	if !ls.settled && (allDecided || ls.settleFired) {
		ls.settled = true
		ls.settleTimer.Stop()
		h.log.Info().Int("healthy", counts[health.StatusHealthy]).Int("unhealthy", counts[health.StatusUnhealthy]).
			Int("unknown", counts[health.StatusUnknown]).Msg("startup health view settled; serving snapshots")
	}
	h.publish(ls, hs)

	cur, _ := h.hub.Load()
	if cur == nil || cur.Config != ls.plan.cfg || cur.Ready != ls.settled || !reflect.DeepEqual(cur.Health, hs) {
		h.hub.Store(newState(ls.plan.cfg, hs, ls.settled, now))
	}
}

// withAutoscaled returns base's plan with the autoscaled instances in
// their groups (see autoscaled.go); base itself when there are none, or
// when they cannot be added (logged: the file's instances keep being
// served).
func (h *healthManager) withAutoscaled(base *healthPlan, auto map[string][]gossip.AutoscaledInstance) *healthPlan {
	l, err := withAutoscaled(base.cfg, auto)
	if err == nil && l != base.cfg {
		var p *healthPlan
		if p, err = h.plan(l); err == nil {
			return p
		}
	}
	if err != nil {
		h.log.Error().Err(err).Msg("adding the autoscaled instances to the served configuration; serving the file's instances only")
	}
	return base
}

// syncCheckers makes the running checks match the plan and the groups this
// replica owns: one lb/health Checker per check key that has owned targets.
func (h *healthManager) syncCheckers(ls *loopState) {
	want := map[string][]health.Target{}
	for _, ref := range ls.plan.groups {
		g := ref.Group.Name
		if ls.own.owner[g] != h.self {
			continue
		}
		for _, key := range ls.plan.groupKeys[g] {
			spec := ls.plan.specs[key]
			for _, inst := range ref.Group.Instances {
				want[key] = append(want[key], health.Target{Addr: checkAddr(inst.Address, spec.port)})
			}
		}
	}
	for key := range ls.checkers {
		if len(want[key]) == 0 {
			h.stopChecker(ls, key)
		}
	}
	for key, ts := range want {
		slices.SortFunc(ts, func(a, b health.Target) int { return cmp.Compare(a.Addr, b.Addr) })
		ts = slices.Compact(ts)
		spec, pr := ls.plan.specs[key], ls.plan.probers[key]
		rc, ok := ls.checkers[key]
		if !ok {
			var err error
			rc, err = h.startChecker(ls, key, spec, pr)
			if err != nil {
				h.log.Error().Err(err).Str("check", key).Msg("starting health check")
				continue
			}
		} else if rc.spec != spec {
			if err := rc.c.SetConfig(spec.cfg, pr); err != nil {
				h.log.Error().Err(err).Str("check", key).Msg("updating health check")
				continue
			}
			rc.spec = spec
		}
		if !slices.Equal(rc.targets, ts) {
			rc.c.SetTargets(ts)
			rc.targets = ts
			h.forgetChecks(key, ts)
		}
	}
}

// startChecker creates the Checker of key and runs it until stopChecker or
// the end of Run.
func (h *healthManager) startChecker(ls *loopState, key string, spec checkSpec, pr health.Prober) (*runningChecker, error) {
	service := key
	c, err := health.NewChecker(spec.cfg, pr, health.Options{
		Clock:  h.clock,
		Logger: h.log.With().Str("service", service).Logger(),
		Rand:   h.rand,
		OnChange: func(ch health.Change) {
			v := ownVerdict{status: ch.To}
			if ch.To == health.StatusUnhealthy && ch.Result.Err != nil {
				v.detail = ch.Result.Err.Error()
			}
			h.mu.Lock()
			h.checks[checkTarget{check: key, target: ch.Target}] = v
			h.mu.Unlock()
			h.m.transitions.WithLabelValues(service, string(ch.To)).Inc()
			notify(h.checked)
		},
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ls.ctx)
	rc := &runningChecker{c: c, spec: spec, cancel: cancel, done: make(chan struct{})}
	ls.checkers[key] = rc
	ls.wg.Add(1)
	go runCheck(c, ctx, rc.done, &ls.wg)
	return rc, nil
}

// runCheck runs one Checker; a named function so stacks say what it is.
func runCheck(c *health.Checker, ctx context.Context, done chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	defer close(done)
	_ = c.Run(ctx) // only fails when run twice, which startChecker never does
}

// stopChecker stops the Checker of key and waits for it.
func (h *healthManager) stopChecker(ls *loopState, key string) {
	rc := ls.checkers[key]
	rc.cancel()
	<-rc.done
	delete(ls.checkers, key)
	h.forgetChecks(key, nil)
}

// forgetChecks drops the statuses of key's targets not in keep. Called after
// SetTargets (or Run) returned, when OnChange no longer reports them.
func (h *healthManager) forgetChecks(key string, keep []health.Target) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ct := range h.checks {
		if ct.check == key && !slices.Contains(keep, ct.target) {
			delete(h.checks, ct)
		}
	}
}

// ownVerdicts combines, for every instance of an owned group, the checks
// that cover it: unhealthy if any check says so, else unknown if any has no
// verdict yet, else healthy.
func (h *healthManager) ownVerdicts(ls *loopState) map[string]ownVerdict {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]ownVerdict{}
	for _, ref := range ls.plan.groups {
		g := ref.Group.Name
		if ls.own.owner[g] != h.self {
			continue
		}
		for _, inst := range ref.Group.Instances {
			v := ownVerdict{status: health.StatusHealthy}
			for _, key := range ls.plan.groupKeys[g] {
				t := health.Target{Addr: checkAddr(inst.Address, ls.plan.specs[key].port)}
				cv, ok := h.checks[checkTarget{check: key, target: t}]
				if !ok {
					cv.status = health.StatusUnknown
				}
				if cv.status == health.StatusUnhealthy {
					v = cv
					if key != "" {
						v.detail = "service " + key + ": " + v.detail
					}
					break
				}
				if cv.status == health.StatusUnknown {
					v.status = health.StatusUnknown
				}
			}
			out[inst.Address] = v
		}
	}
	return out
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

// checkAddr is the address a check probes for an instance: the instance's
// address, with its port replaced by port when port is not 0.
func checkAddr(addr string, port int) string {
	if port == 0 {
		return addr
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr // config validated host:port; unreachable
	}
	return net.JoinHostPort(host, fmt.Sprint(port))
}

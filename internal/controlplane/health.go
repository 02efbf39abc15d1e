package controlplane

import (
	"context"
	"maps"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/lb/clock"
	"github.com/spillway-lb/spillway/lb/health"
)

// settleMargin is added to the longest first-probe time when computing the
// startup settle deadline, so that a probe that ends at its timeout has been
// applied.
const settleMargin = 100 * time.Millisecond

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

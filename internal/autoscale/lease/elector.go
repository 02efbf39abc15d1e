package lease

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/spillway-lb/spillway/lb/clock"
)

// Medium is how an Elector sees the other replicas and shows its own
// claims: gossip (GossipMedium) in the control plane, an in-memory fake in
// tests.
type Medium interface {
	// View returns the replicas and their claims now. It must not block.
	View() View
	// Changes is signalled (closed or sent on, without blocking) whenever
	// View may have changed.
	Changes() <-chan struct{}
	// Publish shows claims (lease name → term) as this replica's, in
	// place of the last ones, with a newer version: it renews them all.
	// It must not block on the network.
	Publish(claims map[string]uint64) error
}

// Config configures an Elector.
type Config struct {
	// Self is this replica's name in the Medium's views (its gossip node
	// name). Required.
	Self string
	// TTL is how long a claim runs after its holder last renewed it, as
	// each replica measures on its own clock from when it saw the renewal;
	// also how long a replica waits after it starts before it takes any
	// lease. Longer survives longer stalls of a holder without a
	// takeover; shorter moves leases faster when a holder dies (a takeover
	// takes from TTL to TTL + RenewEvery after the holder's last renewal).
	// Default 10s.
	TTL time.Duration
	// RenewEvery is how often the Elector publishes its claims (and
	// re-evaluates every lease). Default TTL/3, so that two renewals can
	// be lost before a claim lapses. Must be below TTL.
	RenewEvery time.Duration
}

// Options holds an Elector's dependencies.
type Options struct {
	// Clock is the time source of renewals and lapses. Nil means the real
	// clock.
	Clock clock.Clock
	// Logger receives one line per lease acquired or released.
	Logger zerolog.Logger
}

// Elector holds leases for one replica: it contends for the leases named
// by SetNames, takes those it is the candidate for once no other live
// claim stands, renews them, and releases them (see the package doc). Its
// methods are safe for concurrent use; Run drives it.
type Elector struct {
	// Immutable after New.
	cfg    Config
	medium Medium
	clock  clock.Clock
	logger zerolog.Logger

	// Guarded by mu.
	mu      sync.Mutex
	table   *table
	names   []string
	changed chan struct{} // closed and replaced when held changes
	// published is the last claim set handed to the medium.
	published map[string]uint64
	// implausible maps member and lease to the implausible term last
	// logged, so that a standing claim is logged once.
	implausible map[string]uint64
}

// New returns an Elector that has not started; Run starts it. The startup
// wait (Config.TTL) counts from New.
func New(cfg Config, m Medium, opts Options) (*Elector, error) {
	if cfg.TTL == 0 {
		cfg.TTL = 10 * time.Second
	}
	if cfg.RenewEvery == 0 {
		cfg.RenewEvery = cfg.TTL / 3
	}
	var errs []error
	if cfg.Self == "" {
		errs = append(errs, errors.New("self: required"))
	}
	if cfg.TTL < 0 {
		errs = append(errs, fmt.Errorf("ttl: %v is negative", cfg.TTL))
	}
	if cfg.RenewEvery <= 0 || cfg.RenewEvery >= cfg.TTL {
		errs = append(errs, fmt.Errorf("renew_every: %v, want 0 < renew_every < ttl (%v)", cfg.RenewEvery, cfg.TTL))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("lease: %w", err)
	}
	clk := clock.OrReal(opts.Clock)
	return &Elector{
		cfg: cfg, medium: m, clock: clk,
		logger:      opts.Logger.With().Str("component", "lease").Logger(),
		table:       newTable(cfg.Self, cfg.TTL, cfg.RenewEvery, clk.Now()),
		changed:     make(chan struct{}),
		implausible: map[string]uint64{},
	}, nil
}

// SetNames sets the leases to contend for (for example the names of the
// groups that have an autoscaling block), replacing the last set; leases
// held that are not in it are released at the next step.
func (e *Elector) SetNames(names []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.names = slices.Clone(names)
}

// Holds reports whether this replica holds lease name now, and its term.
// The holder of a lease is the only replica that acts on it, as long as
// the medium delivers (see the package doc); the term grows with every
// change of holder, so an action can carry it as a fencing token.
func (e *Elector) Holds(name string) (term uint64, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.table.claims[name]
	if c == nil || !c.held {
		return 0, false
	}
	return c.term, true
}

// Held returns a copy of the leases held now (name → term).
func (e *Elector) Held() map[string]uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.table.held()
}

// Changes returns a channel that is closed the next time the set of leases
// held changes; call it again for the following change.
func (e *Elector) Changes() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.changed
}

// Run steps the Elector every RenewEvery and whenever the medium's view
// changes, until ctx ends; it then releases every lease (publishes no
// claims), so that the others can take them at once, and returns nil.
func (e *Elector) Run(ctx context.Context) error {
	t := e.clock.NewTicker(e.cfg.RenewEvery)
	defer t.Stop()
	e.step(true)
	for {
		select {
		case <-ctx.Done():
			e.releaseAll()
			return nil
		case <-t.C():
			e.step(true)
		case <-e.medium.Changes():
			e.step(false)
		}
	}
}

// step observes the medium's view, applies the rules, and publishes the
// claims if they changed or renew is set.
func (e *Elector) step(renew bool) {
	v := e.medium.View()
	e.mu.Lock()
	now := e.clock.Now()
	var newlyIgnored []Implausible
	for _, c := range e.table.observe(v, now) {
		if key := c.Member + "\x00" + c.Lease; e.implausible[key] != c.Term {
			e.implausible[key] = c.Term
			newlyIgnored = append(newlyIgnored, c)
		}
	}
	acquired, released, err := e.table.decide(e.names, v.Members, now)
	if err != nil {
		e.mu.Unlock()
		e.logger.Error().Err(err).Msg("leases not evaluated")
		return
	}
	claims := e.table.claimed()
	publish := renew || !maps.Equal(claims, e.published)
	if len(acquired) > 0 || len(released) > 0 {
		close(e.changed)
		e.changed = make(chan struct{})
	}
	e.mu.Unlock()

	for _, c := range newlyIgnored {
		e.logger.Warn().Str("lease", c.Lease).Str("holder", c.Member).Uint64("term", c.Term).Uint64("max_term", MaxTerm).
			Msg("ignored a lease claim with an implausible term")
	}
	// A release took effect above (Holds says no before anyone can see
	// the claim gone); a new claim goes out with this publish and is held
	// RenewEvery later.
	for _, name := range released {
		e.logger.Info().Str("lease", name).Msg("released")
	}
	for name, term := range acquired {
		e.logger.Info().Str("lease", name).Uint64("term", term).Msg("acquired")
	}
	if publish {
		e.publish(claims)
	}
}

// publish hands claims to the medium and remembers them.
func (e *Elector) publish(claims map[string]uint64) {
	if err := e.medium.Publish(claims); err != nil {
		e.logger.Error().Err(err).Msg("claims not published")
		return
	}
	e.mu.Lock()
	e.published = claims
	e.mu.Unlock()
}

// releaseAll drops every lease and publishes that.
func (e *Elector) releaseAll() {
	e.mu.Lock()
	had := len(e.table.held()) > 0
	clear(e.table.claims)
	if had {
		close(e.changed)
		e.changed = make(chan struct{})
	}
	e.mu.Unlock()
	if had {
		e.logger.Info().Msg("released every lease: stopping")
	}
	e.publish(map[string]uint64{})
}

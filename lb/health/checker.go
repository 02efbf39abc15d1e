package health

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/spillway-lb/spillway/lb/clock"
)

// Target is one backend instance to probe. It is comparable and is the key of
// the Checker's state.
type Target struct {
	// Addr is the host:port the probe connects to.
	Addr string
}

// String returns t.Addr.
func (t Target) String() string { return t.Addr }

// Prober probes one target. Implementations must be safe for concurrent use:
// the Checker probes different targets at the same time (never the same
// target twice at once). Probe blocks until it has a result; it must return
// promptly once ctx is done, which happens when the Config's Timeout has
// passed or the target was removed. It reports failure in Result.Err rather
// than panicking; the Checker turns a panic into a failed Result anyway.
//
// Real probers are in lb/health/probe.
type Prober interface {
	Probe(ctx context.Context, t Target) Result
}

// ProberFunc adapts a function to Prober.
type ProberFunc func(ctx context.Context, t Target) Result

// Probe calls f(ctx, t).
func (f ProberFunc) Probe(ctx context.Context, t Target) Result { return f(ctx, t) }

// Change is one status change of one target, as reported to Options.OnChange.
type Change struct {
	Target Target
	// From and To are the status before and after; they differ.
	From, To Status
	// Result is the probe result that caused the change.
	Result Result
	// At is the clock time at which the result was applied.
	At time.Time
}

// Options holds the Checker's dependencies.
type Options struct {
	// Clock drives the probe schedule. Nil means the real clock. (Probe
	// timeouts use wall-clock time whatever the Clock, since they bound real
	// I/O; see Checker.)
	Clock clock.Clock
	// Logger receives status changes (info) and probe failures (debug). The
	// zero value discards everything.
	Logger zerolog.Logger
	// Rand returns uniformly random 64-bit values for jitter. It is called
	// with the Checker's lock held, so it need not be safe for concurrent
	// use (a seeded (*rand.Rand).Uint64 works). Nil means math/rand/v2's
	// Uint64.
	Rand func() uint64
	// OnChange, if not nil, is called for every status change, with the
	// contract in Checker's doc.
	OnChange func(Change)
}

// ErrRunTwice is returned by Run when the Checker has already been run.
var ErrRunTwice = errors.New("health: checker already run")

// Checker runs active health checks for a set of targets with one Config.
//
// Each target gets its own probe loop (a goroutine while Run runs): wait,
// probe with Config.Timeout, apply the result with next, then arm the next
// wait from the Clock (Interval with Jitter; see Config). Probes of one target
// never overlap. A new target's first probe comes within Jitter × Interval.
// The probe timeout is a wall-clock context deadline because it bounds real
// I/O; everything else is timed by Options.Clock.
//
// Threading contract:
//   - All methods are safe for concurrent use.
//   - OnChange is called from the Checker's probe goroutines, one call at a
//     time (never concurrently), in the order the changes were applied; the
//     changes of one target arrive in order. It must not block for long (it
//     holds up every target's next result) and must not call SetTargets or
//     SetConfig (they wait for it: deadlock). It may call Snapshot and
//     Lookup.
//   - Once SetTargets returns, OnChange is never called for a target it
//     removed, and that target's probe is being cancelled. Once Run returns,
//     OnChange is never called again.
//
// A Checker must not be copied.
type Checker struct {
	// Immutable after NewChecker.
	clock    clock.Clock
	log      zerolog.Logger
	rand     func() uint64
	onChange func(Change)

	// notifyMu serialises applying results and calling OnChange, and lets
	// SetTargets and SetConfig wait for a callback under way. It is taken
	// before mu.
	notifyMu sync.Mutex

	mu sync.Mutex
	// Guarded by mu.
	cfg     Config
	prober  Prober
	targets map[Target]*entry
	runCtx  context.Context // set while Run runs
	ran     bool            // Run was called
	stopped bool            // Run is returning: start no more loops
	wg      sync.WaitGroup  // probe loops; Add under mu, only while !stopped
}

// entry is one target's state. Guarded by Checker.mu.
type entry struct {
	state  State
	cancel context.CancelFunc // stops the probe loop; nil until it starts
	done   chan struct{}      // closed when the probe loop returns; nil until it starts
}

// NewChecker returns a Checker that probes with p under cfg. It has no
// targets until SetTargets and probes nothing until Run.
func NewChecker(cfg Config, p Prober, opts Options) (*Checker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("health: invalid config: %w", err)
	}
	if p == nil {
		return nil, errors.New("health: nil prober")
	}
	c := &Checker{
		clock:    clock.OrReal(opts.Clock),
		log:      opts.Logger.With().Str("component", "health").Logger(),
		rand:     opts.Rand,
		onChange: opts.OnChange,
		cfg:      cfg,
		prober:   p,
		targets:  make(map[Target]*entry),
	}
	if c.rand == nil {
		c.rand = rand.Uint64
	}
	return c, nil
}

// SetTargets makes ts the set of checked targets. Targets already checked
// keep their state and schedule; new ones start at Config.InitialStatus;
// missing ones are dropped. Duplicates in ts count once. It may be called
// before, during or after Run.
//
// When SetTargets returns, the probe loops of removed targets have returned
// (their probes under way were cancelled, so this waits at most as long as a
// Prober takes to honour cancellation), and OnChange will never be called
// for them.
func (c *Checker) SetTargets(ts []Target) {
	var removed []chan struct{}
	defer func() {
		// Wait without the locks: a loop may be about to take them to
		// find out it was removed.
		for _, done := range removed {
			<-done
		}
	}()
	c.notifyMu.Lock()
	defer c.notifyMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()

	want := make(map[Target]struct{}, len(ts))
	for _, t := range ts {
		want[t] = struct{}{}
	}
	for t, e := range c.targets {
		if _, ok := want[t]; !ok {
			if e.cancel != nil {
				e.cancel()
				removed = append(removed, e.done)
			}
			delete(c.targets, t)
		}
	}
	for t := range want {
		if _, ok := c.targets[t]; ok {
			continue
		}
		e := &entry{state: initialState(c.cfg)}
		c.targets[t] = e
		if c.runCtx != nil && !c.stopped {
			c.startLocked(t, e)
		}
	}
}

// SetConfig replaces the Config and Prober (which must match the new
// Protocol) without losing target state: the new thresholds apply from each
// target's next result, the new Interval and Jitter from its next wait, and
// InitialStatus to targets added later. It returns an error, and changes
// nothing, if cfg is invalid or p is nil.
func (c *Checker) SetConfig(cfg Config, p Prober) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("health: invalid config: %w", err)
	}
	if p == nil {
		return errors.New("health: nil prober")
	}
	c.notifyMu.Lock()
	defer c.notifyMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cfg, c.prober = cfg, p
	return nil
}

// Snapshot returns the current state of every target. The map is the
// caller's to keep.
func (c *Checker) Snapshot() map[Target]State {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[Target]State, len(c.targets))
	for t, e := range c.targets {
		m[t] = e.state
	}
	return m
}

// Lookup returns the current state of t, and whether t is checked.
func (c *Checker) Lookup(t Target) (State, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.targets[t]
	if !ok {
		return State{}, false
	}
	return e.state, true
}

// Run probes the targets until ctx is done, then stops every probe loop,
// waits for them to return, and returns nil. A Checker runs once: a second
// call returns ErrRunTwice at once.
func (c *Checker) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.ran {
		c.mu.Unlock()
		return ErrRunTwice
	}
	c.ran = true
	c.runCtx = ctx
	for t, e := range c.targets {
		c.startLocked(t, e)
	}
	c.mu.Unlock()

	<-ctx.Done()

	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	c.wg.Wait()
	return nil
}

// startLocked starts t's probe loop. Caller must hold c.mu, with c.runCtx set
// and c.stopped false.
func (c *Checker) startLocked(t Target, e *entry) {
	ctx, cancel := context.WithCancel(c.runCtx)
	e.cancel = cancel
	e.done = make(chan struct{})
	first := c.firstDelayLocked()
	c.wg.Add(1)
	go c.probeLoop(ctx, t, e, first)
}

// probeLoop probes t every interval until ctx is done.
func (c *Checker) probeLoop(ctx context.Context, t Target, e *entry, first time.Duration) {
	defer c.wg.Done()
	defer close(e.done)
	timer := c.clock.NewTimer(first)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
		}
		if ctx.Err() != nil {
			return // both were ready; never probe a removed target
		}
		c.mu.Lock()
		cfg, p := c.cfg, c.prober
		c.mu.Unlock()

		res := c.probe(ctx, p, t, cfg.Timeout)
		if ctx.Err() != nil {
			return // removed or stopping; the probe was cut short
		}
		wait, ok := c.apply(t, e, res)
		if !ok {
			return
		}
		timer.Reset(wait)
	}
}

// probe runs one probe with the timeout, turning a panic into a failure.
func (c *Checker) probe(ctx context.Context, p Prober, t Target, timeout time.Duration) (res Result) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			c.log.Error().Str("backend", t.Addr).Interface("panic", r).
				Bytes("stack", debug.Stack()).Msg("prober panicked")
			res = Result{Err: fmt.Errorf("probe %s: prober panicked: %v", t, r)}
		}
	}()
	return p.Probe(ctx, t)
}

// apply feeds res into t's state, reports a status change, and returns the
// wait before the next probe. It returns ok false if t is no longer checked
// (e is not its current entry).
func (c *Checker) apply(t Target, e *entry, res Result) (wait time.Duration, ok bool) {
	c.notifyMu.Lock()
	defer c.notifyMu.Unlock()

	c.mu.Lock()
	if c.targets[t] != e {
		c.mu.Unlock()
		return 0, false
	}
	prev := e.state
	e.state = next(prev, res, c.cfg)
	cur := e.state
	wait = c.waitLocked()
	c.mu.Unlock()

	if !res.Passed() {
		c.log.Debug().Str("backend", t.Addr).Err(res.Err).Int("fails", cur.Fails).Msg("probe failed")
	}
	if prev.Status == cur.Status {
		return wait, true
	}
	ch := Change{Target: t, From: prev.Status, To: cur.Status, Result: res, At: c.clock.Now()}
	c.log.Info().Str("backend", t.Addr).Str("from", string(ch.From)).Str("to", string(ch.To)).
		AnErr("reason", res.Err).Msg("health status changed")
	if c.onChange != nil {
		c.onChange(ch)
	}
	return wait, true
}

// firstDelayLocked draws the wait before a new target's first probe from
// [0, Jitter × Interval). Caller must hold c.mu.
func (c *Checker) firstDelayLocked() time.Duration {
	return time.Duration(c.cfg.Jitter * float64(c.cfg.Interval) * c.unitLocked())
}

// waitLocked draws the wait between probes from Interval × [1-Jitter,
// 1+Jitter). Caller must hold c.mu.
func (c *Checker) waitLocked() time.Duration {
	f := 1 + c.cfg.Jitter*(2*c.unitLocked()-1)
	return time.Duration(f * float64(c.cfg.Interval))
}

// unitLocked returns a uniform float64 in [0, 1). Caller must hold c.mu.
func (c *Checker) unitLocked() float64 {
	return float64(c.rand()>>11) / (1 << 53)
}

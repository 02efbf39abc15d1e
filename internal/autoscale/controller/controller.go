package controller

import (
	"context"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/autoscale/provider"
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/lb/autoscale"
	"github.com/spillway-lb/spillway/lb/clock"
)

// Leases is the part of a lease.Elector the controller uses.
type Leases interface {
	// SetNames sets the leases to contend for: one per autoscaled group.
	SetNames(names []string)
	// Holds reports whether this replica holds the lease name.
	Holds(name string) (term uint64, ok bool)
	// Changes returns a channel closed the next time the leases held
	// change (call it again for the following change).
	Changes() <-chan struct{}
}

// Config tunes a Controller. The zero value takes every default.
type Config struct {
	// Tick is how often each group's rules run. Default 1s, the tick the
	// rules' windows are made of.
	Tick time.Duration
	// DrainDelay is how long an instance to stop stays up after it was
	// left out of the published instances, before the Provider stops it:
	// time for the next snapshot to reach the gfes and for the requests
	// they sent it to end. Default 5s.
	DrainDelay time.Duration
	// StartTimeout bounds one Provider.Start. Default 2m.
	StartTimeout time.Duration
}

func (c Config) withDefaults() Config {
	if c.Tick <= 0 {
		c.Tick = time.Second
	}
	if c.DrainDelay <= 0 {
		c.DrainDelay = 5 * time.Second
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = 2 * time.Minute
	}
	return c
}

// Options are a Controller's dependencies.
type Options struct {
	// Clock drives ticks and drain delays. Nil means the real clock.
	Clock clock.Clock
	// Logger gets one line per scale decision and per start or stop.
	Logger zerolog.Logger
	// Provider starts and stops instances. Required.
	Provider provider.Provider
	// Leases says which groups this replica acts on. Required.
	Leases Leases
	// Load returns the gfes' load on a group. Nil: no load (the group
	// scales on CPU and capacity requests only).
	Load func(group string) Load
	// CPU returns the cumulative CPU seconds an instance has used, false
	// when unknown (the exec provider's instances). Nil: unknown.
	CPU func(provider.Instance) (float64, bool)
	// Publish makes the instances of every group this replica runs
	// visible to the control plane (group → instances). Required.
	Publish func(map[string][]gossip.AutoscaledInstance) error
	// Metrics receives the controller's figures. Nil: none.
	Metrics *Metrics
}

// groupSpec is one autoscaled group of the configuration.
type groupSpec struct {
	group provider.Group
	as    config.Autoscaling
}

// instance is one instance this controller started.
type instance struct {
	inst    provider.Instance
	demoted bool
	// stopping: left out of what is published; Stop is called at stopAt.
	stopping   bool
	stopAt     time.Time
	stopCalled bool
	// cpu is the instance's cumulative CPU seconds at the last tick.
	cpu   float64
	cpuOK bool
}

// groupRun is the state of one group this replica acts on (or did, while
// its instances drain after the lease was lost).
type groupRun struct {
	spec      groupSpec
	as        *autoscale.Autoscaler // nil once the lease is lost
	instances []*instance
	launching int
	lastTick  time.Time
	last      autoscale.Decision
	sample    autoscale.Sample
	failures  int
	lastErr   string
	// acquiredNow: the lease was taken in this tick's syncLeases, so the
	// rules wait for the next tick (a first sample needs a span).
	acquiredNow bool
}

// result is what an actuation goroutine reports back to the loop.
type result struct {
	group   string
	started []provider.Instance
	asked   int
	stopped *instance
	err     error
}

type demandReq struct {
	group  string
	wanted int
	reply  chan DemandAnswer
}

// DemandAnswer is the controller's answer to a capacity request.
type DemandAnswer struct {
	// Granted is true when the group is (now) recommended at least the
	// wanted instances, or as many as max_instances allows above what it
	// had.
	Granted bool
	// Message says why, for logs.
	Message string
}

// Controller runs the autoscalers of the groups whose lease this replica
// holds (see the package doc). Create it with New, give it the
// configuration with SetConfig, and Run it. Its methods are safe for
// concurrent use.
type Controller struct {
	cfg  Config
	opts Options
	clk  clock.Clock
	log  zerolog.Logger

	configs chan map[string]groupSpec
	demands chan demandReq
	results chan result
	gone    chan provider.Instance
	status  atomic.Pointer[[]GroupStatus]

	mu      sync.Mutex
	running bool
}

// New returns a Controller; nothing runs until Run.
func New(cfg Config, opts Options) (*Controller, error) {
	var errs []error
	if opts.Provider == nil {
		errs = append(errs, errors.New("controller: Options.Provider is required"))
	}
	if opts.Leases == nil {
		errs = append(errs, errors.New("controller: Options.Leases is required"))
	}
	if opts.Publish == nil {
		errs = append(errs, errors.New("controller: Options.Publish is required"))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	c := &Controller{
		cfg:     cfg.withDefaults(),
		opts:    opts,
		clk:     clock.OrReal(opts.Clock),
		log:     opts.Logger.With().Str("component", "autoscaler").Logger(),
		configs: make(chan map[string]groupSpec, 1),
		demands: make(chan demandReq),
		results: make(chan result, 16),
		gone:    make(chan provider.Instance, 64),
	}
	c.status.Store(&[]GroupStatus{})
	return c, nil
}

// SetConfig hands the controller the served configuration: the groups with
// an autoscaling block are the ones it contends for. Groups that left the
// configuration (or lost their block) are scaled in like a lost lease.
func (c *Controller) SetConfig(cfg *config.Config) {
	specs := map[string]groupSpec{}
	for _, ref := range cfg.Groups() {
		if a := ref.Group.Autoscaling; a.Enabled() {
			specs[ref.Group.Name] = groupSpec{
				group: provider.Group{Name: ref.Group.Name, Region: ref.Region.Name, Zone: ref.Zone.Name},
				as:    a,
			}
		}
	}
	names := make([]string, 0, len(specs))
	for n := range specs {
		names = append(names, n)
	}
	sort.Strings(names)
	c.opts.Leases.SetNames(names)
	// Keep only the newest configuration for the loop.
	select {
	case <-c.configs:
	default:
	}
	c.configs <- specs
}

// Demand asks for wanted instances of group (a gfe's capacity request);
// wanted < 0 asks for one more than the group is recommended. It waits for
// Run's loop, as long as ctx allows.
func (c *Controller) Demand(ctx context.Context, group string, wanted int) DemandAnswer {
	req := demandReq{group: group, wanted: wanted, reply: make(chan DemandAnswer, 1)}
	select {
	case c.demands <- req:
	case <-ctx.Done():
		return DemandAnswer{Message: "autoscaler busy: " + ctx.Err().Error()}
	}
	select {
	case a := <-req.reply:
		return a
	case <-ctx.Done():
		return DemandAnswer{Message: "autoscaler busy: " + ctx.Err().Error()}
	}
}

// Gone tells the controller that inst exited by itself (the process
// provider's OnExit): it is dropped from its group, so that it is no longer
// published, and the next tick starts a replacement if the rules still
// want it. It does not block; it may be called from any goroutine.
func (c *Controller) Gone(inst provider.Instance) {
	select {
	case c.gone <- inst:
	default:
		c.log.Warn().Str("instance", inst.Address).Msg("instance exit not recorded: too many at once")
	}
}

// Run runs the loop until ctx ends; then it stops every instance it
// started (without the drain delay: the replica is going away) and returns
// nil. It runs once.
func (c *Controller) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.running {
		c.mu.Unlock()
		return errors.New("controller: Run called twice")
	}
	c.running = true
	c.mu.Unlock()

	l := &loop{c: c, runs: map[string]*groupRun{}, specs: map[string]groupSpec{}}
	t := c.clk.NewTicker(c.cfg.Tick)
	defer t.Stop()
	var wg sync.WaitGroup
	l.wg = &wg
	actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l.ctx = actx
	defer func() {
		// Abort the starts in progress and take in what they started,
		// then stop everything.
		cancel()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		for waiting := true; waiting; {
			select {
			case r := <-c.results:
				l.apply(r, c.clk.Now())
			case <-done:
				waiting = false
			}
		}
		l.shutdown()
	}()
	leases := c.opts.Leases.Changes()
	for {
		select {
		case <-ctx.Done():
			return nil
		case specs := <-c.configs:
			l.specs = specs
		case now := <-t.C():
			l.tick(now)
		case <-leases:
			// A lease taken or lost acts at once, not at the next tick
			// (a takeover, or the first capacity request after a start).
			// The next change's channel first, so that none is missed.
			leases = c.opts.Leases.Changes()
			l.syncLeases(c.clk.Now())
		case d := <-c.demands:
			d.reply <- l.demand(d.group, d.wanted, c.clk.Now())
		case r := <-c.results:
			l.apply(r, c.clk.Now())
		case inst := <-c.gone:
			l.drop(inst)
		}
		l.publish()
	}
}

// loop is the state Run's goroutine owns.
type loop struct {
	c         *Controller
	ctx       context.Context
	wg        *sync.WaitGroup
	specs     map[string]groupSpec
	runs      map[string]*groupRun
	published map[string][]gossip.AutoscaledInstance
}

package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/autoscale/provider"
	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/lb/autoscale"
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

// tick runs every group's rules once.
func (l *loop) tick(now time.Time) {
	l.syncLeases(now)
	for name, spec := range l.specs {
		if r := l.runs[name]; r != nil && r.as != nil && !r.acquiredNow {
			r.spec = spec
			l.step(r, now)
		}
	}
	for name, r := range l.runs {
		if _, ok := l.specs[name]; !ok && r.as != nil {
			l.release(r, now, "group no longer autoscaled")
		}
		l.stopDue(r, now)
		l.forgetIfDone(name, r)
	}
	l.storeStatus()
}

// syncLeases starts acting on the groups whose lease this replica now
// holds and stops acting on those whose lease it lost; the rules of a
// group just acquired first run at the next tick.
func (l *loop) syncLeases(now time.Time) {
	for _, r := range l.runs {
		r.acquiredNow = false
	}
	for name, spec := range l.specs {
		_, held := l.c.opts.Leases.Holds(name)
		r := l.runs[name]
		switch {
		case held && (r == nil || r.as == nil):
			l.acquire(name, spec, r, now)
			l.runs[name].acquiredNow = true
		case !held && r != nil && r.as != nil:
			l.release(r, now, "lease lost")
		}
	}
	l.storeStatus()
}

// forgetIfDone drops a group this replica no longer acts on once nothing
// of it is left.
func (l *loop) forgetIfDone(name string, r *groupRun) {
	if r.as == nil && len(r.instances) == 0 && r.launching == 0 {
		delete(l.runs, name)
	}
}

// acquire starts acting on a group whose lease this replica just took.
func (l *loop) acquire(name string, spec groupSpec, r *groupRun, now time.Time) {
	if r == nil {
		r = &groupRun{}
		l.runs[name] = r
	}
	r.spec = spec
	r.as = autoscale.New(spec.as.Rules(), spec.as.Initial(), now)
	r.lastTick = now
	rec := r.as.Recommended()
	r.last = autoscale.Decision{Recommended: rec, Driver: autoscale.DriverMin, Running: rec}
	l.c.log.Info().Str("group", name).Int("initial", rec).Msg("autoscaler lease acquired; running the group")
	l.reconcile(r, rec, 0, 0, now)
}

// release stops acting on a group and drains the instances it started.
func (l *loop) release(r *groupRun, now time.Time, why string) {
	r.as = nil
	for _, in := range r.instances {
		l.markStopping(in, now)
	}
	l.c.log.Info().Str("group", r.spec.group.Name).Int("instances", len(r.instances)).Msg("autoscaler stops acting on the group (" + why + "); draining its instances")
}

// step samples the group and applies one tick of the rules.
func (l *loop) step(r *groupRun, now time.Time) {
	s := l.sample(r, now)
	r.sample = s
	prev := r.last.Recommended
	d := r.as.Tick(now, s)
	r.last = d
	if m := l.c.opts.Metrics; m != nil {
		m.observe(r.spec.group.Name, d, d.Recommended != prev)
	}
	if d.Recommended != prev || d.Stopped > 0 {
		l.c.log.Info().Str("group", r.spec.group.Name).Int("from", prev).Int("to", d.Recommended).
			Str("driver", string(d.Driver)).Int("cpu", d.Drivers.CPU).Int("concurrency", d.Drivers.Concurrency).
			Int("act", d.Drivers.ACT).Float64("cpu_cores", s.CPUCores).Float64("in_flight", s.Concurrency).
			Int64("requests", s.Requests).Int("start", d.Start).Int("promoted", d.Promoted).
			Int("demoted", d.Demoted).Int("stopped", d.Stopped).Msg("scale decision")
	}
	l.reconcile(r, d.Recommended, d.Demoted, d.Stopped, now)
}

// sample measures the group over the tick that ends at now.
func (l *loop) sample(r *groupRun, now time.Time) autoscale.Sample {
	elapsed := now.Sub(r.lastTick).Seconds()
	r.lastTick = now
	var s autoscale.Sample
	if l.c.opts.CPU != nil {
		for _, in := range r.instances {
			cpu, ok := l.c.opts.CPU(in.inst)
			if ok && in.cpuOK && elapsed > 0 && !in.stopping {
				s.CPUCores += max(0, cpu-in.cpu) / elapsed
			}
			in.cpu, in.cpuOK = cpu, ok
		}
	}
	if l.c.opts.Load != nil {
		ld := l.c.opts.Load(r.spec.group.Name)
		s.Concurrency = ld.Concurrency()
		s.ACT = ld.ACT
		s.Requests = int64(math.Ceil(ld.Requests * elapsed))
		if s.Requests == 0 && ld.Pending > 0 {
			s.Requests = 1
		}
	}
	return s
}

// demand applies a capacity request.
func (l *loop) demand(group string, wanted int, now time.Time) DemandAnswer {
	spec, ok := l.specs[group]
	if !ok {
		return DemandAnswer{Message: fmt.Sprintf("group %q has no autoscaling block", group)}
	}
	r := l.runs[group]
	if _, held := l.c.opts.Leases.Holds(group); !held || r == nil || r.as == nil {
		return DemandAnswer{Message: fmt.Sprintf("the autoscaler of group %q runs on another control-plane replica; the gfes' gossiped load reaches it", group)}
	}
	rec := r.as.Recommended()
	if wanted < 0 { // demand without a count: one more instance
		wanted = rec + 1
	}
	if wanted <= rec {
		return DemandAnswer{Granted: true, Message: fmt.Sprintf("group %q is already recommended %d instances", group, rec)}
	}
	if rec >= spec.as.MaxInstances {
		return DemandAnswer{Message: fmt.Sprintf("group %q is at max_instances=%d", group, spec.as.MaxInstances)}
	}
	d := r.as.OnDemand(now, wanted-rec)
	r.last = d
	if m := l.c.opts.Metrics; m != nil {
		m.observe(group, d, true) // granted above the recommendation: a change
	}
	l.c.log.Info().Str("group", group).Int("from", rec).Int("to", d.Recommended).Int("wanted", wanted).
		Int("start", d.Start).Int("promoted", d.Promoted).Msg("scale decision (capacity request)")
	l.reconcile(r, d.Recommended, d.Demoted, 0, now)
	l.storeStatus()
	return DemandAnswer{Granted: true, Message: fmt.Sprintf("group %q recommended %d instances (from %d)", group, d.Recommended, rec)}
}

// reconcile makes the group's instances match a decision: rec recommended
// (active) instances and dem demoted ones, after stopping stopped of the
// demoted.
func (l *loop) reconcile(r *groupRun, rec, dem, stopped int, now time.Time) {
	var active, demoted []*instance
	alive := 0
	for _, in := range r.instances {
		alive++
		switch {
		case in.stopping:
		case in.demoted:
			demoted = append(demoted, in)
		default:
			active = append(active, in)
		}
	}
	// The rules stopped some demoted instances: the oldest demoted first
	// (instances in start order; demoted ones keep it).
	for ; stopped > 0 && len(demoted) > 0; stopped-- {
		l.markStopping(demoted[0], now)
		demoted = demoted[1:]
	}
	have := len(active) + r.launching
	switch {
	case have < rec:
		need := rec - have
		for need > 0 && len(demoted) > 0 { // promote the newest demoted first
			in := demoted[len(demoted)-1]
			demoted = demoted[:len(demoted)-1]
			in.demoted = false
			need--
		}
		room := r.spec.as.MaxInstances - alive - r.launching
		if n := min(need, room); n > 0 {
			l.start(r, n)
		}
	case have > rec:
		// Demote the newest active instances (launching ones cannot be:
		// they arrive as active and the next tick demotes them).
		for k := min(have-rec, len(active)); k > 0; k-- {
			in := active[len(active)-1]
			active = active[:len(active)-1]
			in.demoted = true
			demoted = append(demoted, in)
		}
	}
	// More demoted instances than the rules keep: stop the oldest.
	for len(demoted) > dem {
		l.markStopping(demoted[0], now)
		demoted = demoted[1:]
	}
}

func (l *loop) markStopping(in *instance, now time.Time) {
	if !in.stopping {
		in.stopping = true
		in.stopAt = now.Add(l.c.cfg.DrainDelay)
	}
}

// start launches n instances of r's group in the background.
func (l *loop) start(r *groupRun, n int) {
	r.launching += n
	g := r.spec.group
	ctx, timeout := l.ctx, l.c.cfg.StartTimeout
	l.wg.Go(func() {
		sctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		ins, err := l.c.opts.Provider.Start(sctx, g, n)
		l.c.results <- result{group: g.Name, started: ins, asked: n, err: err}
	})
}

// stopDue calls Provider.Stop for the stopping instances whose drain delay
// is over.
func (l *loop) stopDue(r *groupRun, now time.Time) {
	for _, in := range r.instances {
		if in.stopping && !in.stopCalled && !now.Before(in.stopAt) {
			in.stopCalled = true
			l.stop(r.spec.group.Name, in)
		}
	}
}

func (l *loop) stop(group string, in *instance) {
	ctx := l.ctx
	l.wg.Go(func() {
		err := l.c.opts.Provider.Stop(ctx, in.inst)
		l.c.results <- result{group: group, stopped: in, err: err}
	})
}

// drop forgets an instance that exited by itself.
func (l *loop) drop(inst provider.Instance) {
	r := l.runs[inst.Group.Name]
	if r == nil {
		return
	}
	n := len(r.instances)
	r.instances = slices.DeleteFunc(r.instances, func(in *instance) bool { return in.inst.Address == inst.Address && !in.stopCalled })
	if len(r.instances) < n {
		l.c.log.Warn().Str("group", inst.Group.Name).Str("instance", inst.Address).Msg("instance exited by itself; dropped from its group")
		l.forgetIfDone(inst.Group.Name, r)
		l.storeStatus()
	}
}

// apply takes an actuation's result into the loop's state.
func (l *loop) apply(res result, now time.Time) {
	r := l.runs[res.group]
	m := l.c.opts.Metrics
	if res.stopped != nil {
		ok := res.err == nil || errors.Is(res.err, provider.ErrKilled) || errors.Is(res.err, provider.ErrUnknown)
		if m != nil {
			m.stops.WithLabelValues(res.group, stopResult(res.err)).Inc()
		}
		if !ok {
			l.c.log.Error().Err(res.err).Str("group", res.group).Str("instance", res.stopped.inst.Address).Msg("stopping an instance failed; retrying at the next tick")
			res.stopped.stopCalled = false
			return
		}
		l.c.log.Info().Str("group", res.group).Str("instance", res.stopped.inst.Address).AnErr("note", res.err).Msg("instance stopped")
		if r != nil {
			r.instances = slices.DeleteFunc(r.instances, func(in *instance) bool { return in == res.stopped })
			l.forgetIfDone(res.group, r)
		}
		l.storeStatus()
		return
	}
	if m != nil {
		m.starts.WithLabelValues(res.group, "ok").Add(float64(len(res.started)))
		if failed := res.asked - len(res.started); failed > 0 {
			m.starts.WithLabelValues(res.group, "error").Add(float64(failed))
		}
	}
	if r == nil { // cannot happen: a run is kept while it launches
		r = &groupRun{}
		l.runs[res.group] = r
	}
	r.launching -= res.asked
	if res.err != nil {
		r.failures += res.asked - len(res.started)
		r.lastErr = res.err.Error()
		l.c.log.Error().Err(res.err).Str("group", res.group).Int("asked", res.asked).Int("started", len(res.started)).
			Msg("starting instances failed; the next tick tries again")
	}
	for _, inst := range res.started {
		in := &instance{inst: inst}
		r.instances = append(r.instances, in)
		l.c.log.Info().Str("group", res.group).Str("instance", inst.Address).Str("name", inst.Name).Msg("instance started")
		if r.as == nil { // the lease went meanwhile
			l.markStopping(in, now)
		}
	}
	l.storeStatus()
}

func stopResult(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, provider.ErrKilled):
		return "killed"
	case errors.Is(err, provider.ErrUnknown):
		return "unknown"
	}
	return "error"
}

// publish hands the control plane the instances of every group, if they
// changed.
func (l *loop) publish() {
	out := map[string][]gossip.AutoscaledInstance{}
	for name, r := range l.runs {
		for _, in := range r.instances {
			if !in.stopping {
				out[name] = append(out[name], gossip.AutoscaledInstance{Address: in.inst.Address, Demoted: in.demoted})
			}
		}
	}
	if maps.EqualFunc(out, l.published, slices.Equal) {
		return
	}
	if err := l.c.opts.Publish(out); err != nil {
		l.c.log.Error().Err(err).Msg("publishing autoscaled instances")
		return
	}
	l.published = out
}

// shutdown stops every instance left, at once (Run's end, when no
// actuation runs any more).
func (l *loop) shutdown() {
	for name, r := range l.runs {
		for _, in := range r.instances {
			if in.stopCalled {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := l.c.opts.Provider.Stop(ctx, in.inst); err != nil && !errors.Is(err, provider.ErrKilled) {
				l.c.log.Warn().Err(err).Str("group", name).Str("instance", in.inst.Address).Msg("stopping an instance at shutdown")
			}
			cancel()
		}
	}
	if len(l.published) > 0 {
		_ = l.c.opts.Publish(map[string][]gossip.AutoscaledInstance{})
	}
}

package health

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/spillway-lb/spillway/internal/clock"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const defaultTestTimeout = 10 * time.Second

var (
	epoch          = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	errBackendDown = errors.New("backend down")
	tA             = Target{Addr: "10.0.0.1:80"}
	tB             = Target{Addr: "10.0.0.2:80"}
	tC             = Target{Addr: "10.0.0.3:80"}
)

type probeCall struct {
	Target Target
	At     time.Duration // clock time since epoch
}

// fakeProber passes or fails each target as told and records every call
// with the fake clock's time. Targets in block wait for ctx to be done and
// fail with ctx.Err().
type fakeProber struct {
	clk *clock.Fake

	mu      sync.Mutex
	fail    map[Target]bool
	block   map[Target]bool
	calls   []probeCall
	started chan Target // receives the target of each blocking probe, if set
	ctxErrs []error     // ctx.Err() seen by each blocking probe when it returned
}

func newFakeProber(clk *clock.Fake) *fakeProber {
	return &fakeProber{clk: clk, fail: map[Target]bool{}, block: map[Target]bool{}}
}

func (p *fakeProber) Probe(ctx context.Context, t Target) Result {
	p.mu.Lock()
	p.calls = append(p.calls, probeCall{t, p.clk.Since(epoch)})
	fail, block, started := p.fail[t], p.block[t], p.started
	p.mu.Unlock()
	if block {
		if started != nil {
			started <- t
		}
		<-ctx.Done()
		p.mu.Lock()
		p.ctxErrs = append(p.ctxErrs, ctx.Err())
		p.mu.Unlock()
		return Result{Err: fmt.Errorf("probe %s: %w", t, ctx.Err())}
	}
	if fail {
		return Result{Err: errBackendDown}
	}
	return Result{}
}

func (p *fakeProber) setFail(t Target, fail bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fail[t] = fail
}

func (p *fakeProber) count(t Target) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.calls {
		if c.Target == t {
			n++
		}
	}
	return n
}

func (p *fakeProber) callTimes() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []time.Duration
	for _, c := range p.calls {
		out = append(out, c.At)
	}
	return out
}

// harness runs a Checker on a fake clock with a fakeProber.
type harness struct {
	t       *testing.T
	ctx     context.Context
	clk     *clock.Fake
	p       *fakeProber
	c       *Checker
	changes chan Change
	stop    func()
}

func testConfig() Config {
	cfg := DefaultConfig()
	cfg.Interval = 5 * time.Second
	cfg.Timeout = time.Second
	cfg.HealthyThreshold = 2
	cfg.UnhealthyThreshold = 3
	cfg.Jitter = 0
	return cfg
}

// newHarness builds a Checker for targets and starts Run.
func newHarness(t *testing.T, cfg Config, targets []Target, opts Options) *harness {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	t.Cleanup(cancel)
	h := &harness{t: t, ctx: ctx, clk: clock.NewFake(epoch), changes: make(chan Change, 1000)}
	h.p = newFakeProber(h.clk)
	opts.Clock = h.clk
	if opts.OnChange == nil {
		opts.OnChange = func(ch Change) { h.changes <- ch }
	}
	c, err := NewChecker(cfg, h.p, opts)
	if err != nil {
		t.Fatalf("NewChecker: %v", err)
	}
	h.c = c
	c.SetTargets(targets)
	runCtx, stopRun := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- c.Run(runCtx) }()
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			stopRun()
			if err := <-errc; err != nil {
				t.Errorf("Run() = %v, want nil", err)
			}
		})
	}
	t.Cleanup(h.stop)
	return h
}

// armed waits until n probe loops wait on their timers: every probe that was
// due has run and its result has been applied.
func (h *harness) armed(n int) {
	h.t.Helper()
	if err := h.clk.BlockUntil(h.ctx, n); err != nil {
		h.t.Fatalf("BlockUntil(%d): %v (Waiters() = %d)", n, err, h.clk.Waiters())
	}
}

// step advances the clock by d and waits for n loops to re-arm.
func (h *harness) step(d time.Duration, n int) {
	h.t.Helper()
	h.clk.Advance(d)
	h.armed(n)
}

// drain returns the changes delivered so far, sorted by target. Changes are
// delivered before their loop re-arms, so after armed() they are all here.
func (h *harness) drain() []Change {
	var out []Change
	for {
		select {
		case ch := <-h.changes:
			out = append(out, ch)
		default:
			sort.Slice(out, func(i, j int) bool { return out[i].Target.Addr < out[j].Target.Addr })
			return out
		}
	}
}

func (h *harness) state(tg Target) State {
	h.t.Helper()
	s, ok := h.c.Lookup(tg)
	if !ok {
		h.t.Fatalf("Lookup(%v): not checked", tg)
	}
	return s
}

// changeKey drops Result so Changes compare with cmp.
type changeKey struct {
	Target   Target
	From, To Status
	At       time.Duration
	Failed   bool
}

func keys(chs []Change) []changeKey {
	var out []changeKey
	for _, ch := range chs {
		out = append(out, changeKey{ch.Target, ch.From, ch.To, ch.At.Sub(epoch), !ch.Result.Passed()})
	}
	return out
}

func TestCheckerThresholds(t *testing.T) {
	h := newHarness(t, testConfig(), []Target{tA, tB}, Options{})
	h.armed(2) // first probes run at once (jitter 0)
	if diff := cmp.Diff([]changeKey{
		{tA, StatusUnknown, StatusHealthy, 0, false},
		{tB, StatusUnknown, StatusHealthy, 0, false},
	}, keys(h.drain())); diff != "" {
		t.Fatalf("first changes (-want +got):\n%s", diff)
	}

	h.p.setFail(tA, true)
	for i := 1; i <= 2; i++ {
		h.step(5*time.Second, 2)
		if got, want := h.state(tA), (State{StatusHealthy, 0, i}); got != want {
			t.Fatalf("after %d failed probes: state %+v, want %+v", i, got, want)
		}
		if chs := h.drain(); len(chs) != 0 {
			t.Fatalf("after %d failed probes: changes %v, want none", i, keys(chs))
		}
	}
	h.step(5*time.Second, 2)
	chs := h.drain()
	if diff := cmp.Diff([]changeKey{{tA, StatusHealthy, StatusUnhealthy, 15 * time.Second, true}}, keys(chs)); diff != "" {
		t.Fatalf("change after 3rd failure (-want +got):\n%s", diff)
	}
	if !errors.Is(chs[0].Result.Err, errBackendDown) {
		t.Errorf("Change.Result.Err = %v, want %v", chs[0].Result.Err, errBackendDown)
	}

	h.p.setFail(tA, false)
	h.step(5*time.Second, 2)
	if got, want := h.state(tA), (State{StatusUnhealthy, 1, 0}); got != want {
		t.Fatalf("after 1 pass: state %+v, want %+v", got, want)
	}
	h.step(5*time.Second, 2)
	if diff := cmp.Diff([]changeKey{{tA, StatusUnhealthy, StatusHealthy, 25 * time.Second, false}}, keys(h.drain())); diff != "" {
		t.Fatalf("change after 2nd pass (-want +got):\n%s", diff)
	}

	want := map[Target]State{tA: {StatusHealthy, 2, 0}, tB: {StatusHealthy, 2, 0}}
	if diff := cmp.Diff(want, h.c.Snapshot()); diff != "" {
		t.Errorf("Snapshot() (-want +got):\n%s", diff)
	}
	for _, tg := range []Target{tA, tB} {
		if got := h.p.count(tg); got != 6 {
			t.Errorf("probes of %v = %d, want 6 (t=0,5,...,25s)", tg, got)
		}
	}
}

func TestCheckerSetTargetsKeepsState(t *testing.T) {
	h := newHarness(t, testConfig(), []Target{tA, tB}, Options{})
	h.armed(2)
	h.drain()
	h.p.setFail(tA, true)
	h.step(5*time.Second, 2)

	bCalls := h.p.count(tB)
	h.c.SetTargets([]Target{tA, tC, tA}) // b out, c in, duplicate a
	h.armed(2)                           // b's loop is gone; c probed at once and re-armed
	want := map[Target]State{tA: {StatusHealthy, 0, 1}, tC: {StatusHealthy, 1, 0}}
	if diff := cmp.Diff(want, h.c.Snapshot()); diff != "" {
		t.Fatalf("Snapshot() after SetTargets (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]changeKey{{tC, StatusUnknown, StatusHealthy, 5 * time.Second, false}}, keys(h.drain())); diff != "" {
		t.Fatalf("changes after SetTargets (-want +got):\n%s", diff)
	}

	// a kept its count: two more failures, not three, flip it.
	h.step(5*time.Second, 2)
	h.step(5*time.Second, 2)
	if got := h.state(tA).Status; got != StatusUnhealthy {
		t.Errorf("a after 3 failures across SetTargets = %v, want unhealthy", got)
	}
	if got := h.p.count(tB); got != bCalls {
		t.Errorf("removed b probed %d more times, want 0", got-bCalls)
	}
	if _, ok := h.c.Lookup(tB); ok {
		t.Errorf("Lookup(b) found a removed target")
	}

	// b comes back fresh, at the initial status.
	h.p.setFail(tB, true)
	h.c.SetTargets([]Target{tA, tB, tC})
	h.armed(3)
	if got, want := h.state(tB), (State{StatusUnknown, 0, 1}); got != want {
		t.Errorf("re-added b = %+v, want %+v", got, want)
	}
}

func TestCheckerSetTargetsCancelsProbeUnderWay(t *testing.T) {
	cfg := testConfig()
	cfg.Interval, cfg.Timeout = time.Hour, time.Minute
	h := newHarness(t, cfg, nil, Options{})
	h.p.block[tA] = true
	h.p.started = make(chan Target, 1)
	h.c.SetTargets([]Target{tA, tB})
	select {
	case <-h.p.started:
	case <-h.ctx.Done():
		t.Fatal("blocking probe never started")
	}
	h.armed(1) // b probed and re-armed

	h.c.SetTargets([]Target{tB})
	// SetTargets waited for a's loop: its probe saw cancellation, not the
	// one-minute timeout, and a's timer is gone.
	h.p.mu.Lock()
	ctxErrs := h.p.ctxErrs
	h.p.mu.Unlock()
	if len(ctxErrs) != 1 || !errors.Is(ctxErrs[0], context.Canceled) {
		t.Errorf("blocking probe saw %v, want [%v]", ctxErrs, context.Canceled)
	}
	if got := h.clk.Waiters(); got != 1 {
		t.Errorf("Waiters() = %d, want 1 (b only)", got)
	}
	chs := h.drain()
	if diff := cmp.Diff([]changeKey{{tB, StatusUnknown, StatusHealthy, 0, false}}, keys(chs)); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
}

func TestCheckerProbeTimeout(t *testing.T) {
	cfg := testConfig()
	cfg.Timeout = 20 * time.Millisecond // wall clock: it bounds real I/O
	cfg.UnhealthyThreshold = 1
	var deadline time.Duration
	h := newHarness(t, cfg, nil, Options{})
	h.p.block[tA] = true
	inner := h.p
	err := h.c.SetConfig(cfg, ProberFunc(func(ctx context.Context, tg Target) Result {
		d, ok := ctx.Deadline()
		if !ok {
			return Result{Err: errors.New("no deadline")}
		}
		deadline = time.Until(d)
		return inner.Probe(ctx, tg)
	}))
	if err != nil {
		t.Fatal(err)
	}
	h.c.SetTargets([]Target{tA})
	h.armed(1)
	chs := h.drain()
	if len(chs) != 1 || chs[0].To != StatusUnhealthy || !errors.Is(chs[0].Result.Err, context.DeadlineExceeded) {
		t.Fatalf("changes = %+v, want one to unhealthy with %v", chs, context.DeadlineExceeded)
	}
	if deadline <= 0 || deadline > cfg.Timeout {
		t.Errorf("probe deadline %v from now, want in (0, %v]", deadline, cfg.Timeout)
	}
}

func TestCheckerPanickingProber(t *testing.T) {
	cfg := testConfig()
	cfg.UnhealthyThreshold = 1
	h := newHarness(t, cfg, nil, Options{})
	if err := h.c.SetConfig(cfg, ProberFunc(func(context.Context, Target) Result { panic("kaboom") })); err != nil {
		t.Fatal(err)
	}
	h.c.SetTargets([]Target{tA})
	h.armed(1)
	chs := h.drain()
	if len(chs) != 1 || chs[0].To != StatusUnhealthy || !strings.Contains(chs[0].Result.Err.Error(), "panicked: kaboom") {
		t.Fatalf("changes = %+v, want one to unhealthy saying the prober panicked", chs)
	}
	h.step(5*time.Second, 1) // the loop survived and keeps probing
}

// TestCheckerJitterSchedule checks the exact probe times for a scripted
// random source: first probe after u·Jitter·Interval, then waits of
// Interval·(1+Jitter·(2u-1)).
func TestCheckerJitterSchedule(t *testing.T) {
	cfg := testConfig()
	cfg.Interval, cfg.Jitter = 10*time.Second, 0.5
	us := []uint64{1 << 63, 0, 3 << 62, 1 << 62} // u = 0.5, 0, 0.75, 0.25
	i := 0
	rnd := func() uint64 { u := us[i%len(us)]; i++; return u }
	h := newHarness(t, cfg, []Target{tA}, Options{Rand: rnd})
	h.armed(1)
	want := []time.Duration{2500 * time.Millisecond, 7500 * time.Millisecond, 20 * time.Second, 27500 * time.Millisecond}
	for n, at := range want {
		h.clk.AdvanceTo(epoch.Add(at - time.Nanosecond))
		h.armed(1) // had the timer fired early, this would wait for the probe
		if got := h.p.count(tA); got != n {
			t.Fatalf("probes by %v = %d, want %d", at-time.Nanosecond, got, n)
		}
		h.clk.AdvanceTo(epoch.Add(at))
		h.armed(1)
	}
	if diff := cmp.Diff(want, h.p.callTimes()); diff != "" {
		t.Errorf("probe times (-want +got):\n%s", diff)
	}
}

func TestCheckerSetConfig(t *testing.T) {
	h := newHarness(t, testConfig(), []Target{tA}, Options{})
	h.armed(1)
	h.drain()

	bad := testConfig()
	bad.UnhealthyThreshold = 0
	if err := h.c.SetConfig(bad, h.p); err == nil || !strings.Contains(err.Error(), "unhealthy_threshold") {
		t.Errorf("SetConfig(invalid) = %v, want an unhealthy_threshold error", err)
	}
	if err := h.c.SetConfig(testConfig(), nil); err == nil {
		t.Errorf("SetConfig(nil prober) = nil, want error")
	}

	h.p.setFail(tA, true)
	h.step(5*time.Second, 1)
	if got := h.state(tA); got != (State{StatusHealthy, 0, 1}) {
		t.Fatalf("state = %+v, want healthy with 1 fail (invalid config ignored)", got)
	}
	cfg := testConfig()
	cfg.UnhealthyThreshold = 2
	cfg.Interval = 7 * time.Second
	if err := h.c.SetConfig(cfg, h.p); err != nil {
		t.Fatalf("SetConfig: %v", err)
	}
	h.step(5*time.Second, 1) // armed before SetConfig: still 5s
	if diff := cmp.Diff([]changeKey{{tA, StatusHealthy, StatusUnhealthy, 10 * time.Second, true}}, keys(h.drain())); diff != "" {
		t.Fatalf("changes with unhealthy_threshold 2 (-want +got):\n%s", diff)
	}
	h.clk.Advance(5 * time.Second) // new interval: not due yet at +5s
	h.armed(1)
	if got := h.p.count(tA); got != 3 {
		t.Errorf("probes after 5s of a 7s interval = %d, want 3", got)
	}
	h.step(2*time.Second, 1)
	if got := h.p.count(tA); got != 4 {
		t.Errorf("probes after 7s = %d, want 4", got)
	}
}

// TestCheckerOnChangeSerialised flips many targets in one step and checks
// that OnChange never runs concurrently and sees every change.
func TestCheckerOnChangeSerialised(t *testing.T) {
	const n = 20
	var inFlight, maxInFlight, calls atomic.Int32
	onChange := func(Change) {
		cur := inFlight.Add(1)
		if cur > maxInFlight.Load() {
			maxInFlight.Store(cur)
		}
		calls.Add(1)
		inFlight.Add(-1)
	}
	var targets []Target
	for i := range n {
		targets = append(targets, Target{Addr: fmt.Sprintf("10.0.1.%d:80", i)})
	}
	cfg := testConfig()
	cfg.UnhealthyThreshold = 1
	h := newHarness(t, cfg, targets, Options{OnChange: onChange})
	h.armed(n)
	for _, tg := range targets {
		h.p.setFail(tg, true)
	}
	h.step(5*time.Second, n)
	if got := calls.Load(); got != 2*n {
		t.Errorf("OnChange calls = %d, want %d", got, 2*n)
	}
	if got := maxInFlight.Load(); got != 1 {
		t.Errorf("OnChange ran %d at once, want 1", got)
	}
	for tg, s := range h.c.Snapshot() {
		if s.Status != StatusUnhealthy {
			t.Errorf("%v = %v, want unhealthy", tg, s.Status)
		}
	}
}

func TestCheckerLifecycle(t *testing.T) {
	clk := clock.NewFake(epoch)
	p := newFakeProber(clk)
	c, err := NewChecker(testConfig(), p, Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	c.SetTargets([]Target{tA})
	if got, ok := c.Lookup(tA); !ok || got != (State{Status: StatusUnknown}) {
		t.Errorf("Lookup before Run = %+v, %v; want unknown, true", got, ok)
	}
	if got := p.count(tA); got != 0 {
		t.Errorf("probes before Run = %d, want 0", got)
	}

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	bctx, bcancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer bcancel()
	if err := clk.BlockUntil(bctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx); !errors.Is(err, ErrRunTwice) {
		t.Errorf("second Run = %v, want %v", err, ErrRunTwice)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	if got := clk.Waiters(); got != 0 {
		t.Errorf("Waiters() after Run returned = %d, want 0", got)
	}
	c.SetTargets([]Target{tA, tB}) // after Run: recorded, not probed
	clk.Advance(time.Hour)
	if got := p.count(tB); got != 0 {
		t.Errorf("probes of b after Run returned = %d, want 0", got)
	}
}

func TestNewCheckerErrors(t *testing.T) {
	bad := DefaultConfig()
	bad.Interval = 0
	tests := []struct {
		name    string
		cfg     Config
		p       Prober
		wantErr string
	}{
		{"invalid config", bad, ProberFunc(func(context.Context, Target) Result { return Result{} }), "interval: must be > 0"},
		{"nil prober", DefaultConfig(), nil, "nil prober"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewChecker(tt.cfg, tt.p, Options{})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("NewChecker() = %v, want error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestWaitDistribution(t *testing.T) {
	cfg := testConfig()
	cfg.Interval, cfg.Jitter = 10*time.Second, 0.2
	tests := []struct {
		name      string
		r         uint64
		wantFirst time.Duration
		wantWait  time.Duration
	}{
		{"u=0", 0, 0, 8 * time.Second},
		{"u=0.5", 1 << 63, time.Second, 10 * time.Second},
		{"u=max", ^uint64(0), 2*time.Second - 1, 12*time.Second - 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewChecker(cfg, newFakeProber(nil), Options{Rand: func() uint64 { return tt.r }})
			if err != nil {
				t.Fatal(err)
			}
			c.mu.Lock()
			first, wait := c.firstDelayLocked(), c.waitLocked()
			c.mu.Unlock()
			if d := first - tt.wantFirst; d < -time.Microsecond || d > time.Microsecond {
				t.Errorf("firstDelay = %v, want %v", first, tt.wantFirst)
			}
			if d := wait - tt.wantWait; d < -time.Microsecond || d > time.Microsecond {
				t.Errorf("wait = %v, want %v", wait, tt.wantWait)
			}
		})
	}
}

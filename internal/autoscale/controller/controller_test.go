package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/autoscale/provider"
	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/lb/autoscale"
)

// fakeProvider starts instances 10.0.0.1:1, :2, ... and records stops.
type fakeProvider struct {
	mu      sync.Mutex
	next    int
	fail    int // the next fail starts fail
	starts  []int
	stopped []string
}

func (p *fakeProvider) Start(_ context.Context, g provider.Group, n int) ([]provider.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.starts = append(p.starts, n)
	if p.fail > 0 {
		p.fail--
		return nil, fmt.Errorf("no room for %d instances of %s", n, g.Name)
	}
	var out []provider.Instance
	for range n {
		p.next++
		out = append(out, provider.Instance{Group: g, Address: fmt.Sprintf("10.0.0.1:%d", p.next), Name: fmt.Sprintf("%s-%d", g.Name, p.next)})
	}
	return out, nil
}

func (p *fakeProvider) Stop(_ context.Context, inst provider.Instance) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = append(p.stopped, inst.Address)
	return nil
}

type fakeLeases struct {
	mu      sync.Mutex
	held    map[string]bool
	names   []string
	changed chan struct{} // nil: never signals
}

func (f *fakeLeases) SetNames(n []string) { f.mu.Lock(); f.names = n; f.mu.Unlock() }
func (f *fakeLeases) Holds(n string) (uint64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return 1, f.held[n]
}
func (f *fakeLeases) set(n string, held bool) { f.mu.Lock(); f.held[n] = held; f.mu.Unlock() }
func (f *fakeLeases) Changes() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

// take holds lease n and signals the change.
func (f *fakeLeases) take(n string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held[n] = true
	close(f.changed)
	f.changed = make(chan struct{})
}

// rig drives a loop synchronously: every call runs on the test's goroutine
// and settle takes in the actuations' results.
type rig struct {
	t       *testing.T
	clk     *clock.Fake
	prov    *fakeProvider
	leases  *fakeLeases
	load    Load
	cpu     map[string]float64
	pub     map[string][]gossip.AutoscaledInstance
	reg     *prometheus.Registry
	c       *Controller
	l       *loop
	wg      sync.WaitGroup
	cfgYAML string
}

const groupYAML = `
regions:
  - name: us-east
    zones:
      - name: us-east-b
        groups:
          - name: web-b
            instances: [{address: "127.0.0.1:9000"}]
            autoscaling:
              max_instances: 3
              max_concurrency_per_instance: 10
              cold_start: 2s
              concurrency_window: 10s
              concurrency_long_window: 10s
              cpu_window: 10s
              demoted_idle_window: 5s
              idle_timeout: 30s
services:
  - name: web
    backends: [{group: web-b, max_rate_per_instance: 100}]
routes:
  - {host: "*", path_prefix: /, service: web}
`

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{t: t, clk: clock.NewFake(time.Unix(1_800_000_000, 0)), prov: &fakeProvider{},
		leases: &fakeLeases{held: map[string]bool{"web-b": true}}, cpu: map[string]float64{}, reg: prometheus.NewRegistry()}
	c, err := New(Config{DrainDelay: 3 * time.Second}, Options{
		Clock: r.clk, Logger: zerolog.Nop(), Provider: r.prov, Leases: r.leases,
		Load:    func(string) Load { return r.load },
		CPU:     func(in provider.Instance) (float64, bool) { v, ok := r.cpu[in.Address]; return v, ok },
		Publish: func(m map[string][]gossip.AutoscaledInstance) error { r.pub = m; return nil },
		Metrics: NewMetrics(r.reg),
	})
	if err != nil {
		t.Fatal(err)
	}
	r.c = c
	r.l = &loop{c: c, ctx: context.Background(), wg: &r.wg, runs: map[string]*groupRun{}, specs: map[string]groupSpec{}}
	cfg, err := config.Parse([]byte(groupYAML), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.SetConfig(cfg)
	r.l.specs = <-c.configs
	if got := r.leases.names; !cmp.Equal(got, []string{"web-b"}) {
		t.Fatalf("leases contended for = %v, want [web-b]", got)
	}
	return r
}

// run runs the real loop (Run) on the rig's configuration; stop ends it
// and fails the test if Run failed.
func (r *rig) run() (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	r.c.SetConfig(mustParse(r.t, groupYAML))
	done := make(chan error, 1)
	go func() { done <- r.c.Run(ctx) }()
	return ctx, func() {
		cancel()
		if err := <-done; err != nil {
			r.t.Fatalf("Run = %v", err)
		}
	}
}

// settle waits for the actuations and applies their results.
func (r *rig) settle() {
	r.wg.Wait()
	for len(r.c.results) > 0 {
		r.l.apply(<-r.c.results, r.clk.Now())
	}
	r.l.publish()
}

// tick advances the clock by one tick and runs it.
func (r *rig) tick() {
	r.clk.Advance(time.Second)
	r.l.tick(r.clk.Now())
	r.settle()
}

// published renders the published instances of web-b: "1 2d" means :1
// active and :2 demoted.
func (r *rig) published() string {
	var parts []string
	for _, in := range r.pub["web-b"] {
		s := in.Address[strings.LastIndexByte(in.Address, ':')+1:]
		if in.Demoted {
			s += "d"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

func TestScaleFromZeroOnDemand(t *testing.T) {
	r := newRig(t)
	r.tick() // lease held: the autoscaler starts with min_instances = 0
	if got := r.published(); got != "" {
		t.Fatalf("published %q before any demand, want nothing", got)
	}
	a := r.c.demandNow(r, 2)
	if !a.Granted || !strings.Contains(a.Message, "recommended 2 instances (from 0)") {
		t.Fatalf("Demand = %+v, want granted, 2 from 0", a)
	}
	r.settle()
	if got := r.published(); got != "1 2" {
		t.Errorf("published %q, want %q", got, "1 2")
	}
	if a := r.c.demandNow(r, 2); !a.Granted || !strings.Contains(a.Message, "already recommended 2") {
		t.Errorf("second Demand = %+v, want granted, already 2", a)
	}
	if a := r.c.demandNow(r, 9); !a.Granted || !strings.Contains(a.Message, "recommended 3 instances (from 2)") {
		t.Errorf("Demand(9) = %+v, want granted up to max_instances 3", a)
	}
	r.settle()
	if a := r.c.demandNow(r, 4); a.Granted || !strings.Contains(a.Message, "max_instances=3") {
		t.Errorf("Demand at max = %+v, want refused at max_instances=3", a)
	}
	if diff := cmp.Diff([]int{2, 1}, r.prov.starts); diff != "" {
		t.Errorf("provider starts (-want +got):\n%s", diff)
	}
	if got := testutil.ToFloat64(r.c.opts.Metrics.starts.WithLabelValues("web-b", "ok")); got != 3 {
		t.Errorf("starts_total{ok} = %v, want 3", got)
	}
}

// demandNow runs Demand on the test's goroutine.
func (c *Controller) demandNow(r *rig, wanted int) DemandAnswer {
	return r.l.demand("web-b", wanted, r.clk.Now())
}

func TestScaleUpDemoteAndStop(t *testing.T) {
	r := newRig(t)
	r.tick()
	r.c.demandNow(r, 1)
	r.settle()
	// 25 requests in flight: concurrency needs 25/10/0.6 = 4.2, clamped to
	// max_instances 3.
	r.load = Load{InFlight: 25, Requests: 100}
	r.tick()
	if got := r.published(); got != "1 2 3" {
		t.Fatalf("published %q under load, want 1 2 3", got)
	}
	st := r.c.Status()
	if len(st) != 1 || st[0].Recommended != 3 || st[0].Driver != "max" || st[0].Active != 3 {
		t.Fatalf("status = %+v, want 3 recommended by max, 3 active", st)
	}
	// The load falls to 6 in flight: the 10s windows still hold the high
	// mean; once it is below the band the rules demote, newest first.
	r.load = Load{InFlight: 6, Requests: 50}
	var demotedAt int
	for i := range 30 {
		r.tick()
		if strings.Contains(r.published(), "d") {
			demotedAt = i + 1
			break
		}
	}
	if demotedAt == 0 {
		t.Fatalf("no instance demoted after 30 ticks at 6 in flight; published %q", r.published())
	}
	if st := r.c.Status()[0]; st.Recommended+st.Demoted != 3 || st.Demoted == 0 {
		t.Fatalf("after demotion: %+v, want recommended+demoted = 3", st)
	}
	// The demoted instances are the newest; the first stays active.
	if !strings.HasPrefix(r.published(), "1 ") {
		t.Errorf("published %q, want instance 1 kept active", r.published())
	}
	// The demoted sets serve nothing at 6 in flight (the recommended ones
	// take it), so the rules stop them: each leaves the published list
	// first and is stopped DrainDelay (3s) later.
	for range 60 {
		r.tick()
		if len(r.prov.stopped) > 0 {
			break
		}
	}
	if len(r.prov.stopped) == 0 {
		t.Fatalf("no instance stopped after 60 more ticks; status %+v", r.c.Status())
	}
	for _, a := range r.prov.stopped {
		for _, in := range r.pub["web-b"] {
			if in.Address == a {
				t.Errorf("stopped %s is still published", a)
			}
		}
	}
	// Idle: no request for the concurrency window ⇒ zero instances, all
	// stopped after the drain delay.
	r.load = Load{}
	for range 60 {
		r.tick()
	}
	if got := r.published(); got != "" {
		t.Errorf("published %q after a minute idle, want nothing", got)
	}
	if len(r.prov.stopped) != 3 {
		t.Errorf("stopped %v, want all 3 instances", r.prov.stopped)
	}
	if st := r.c.Status()[0]; st.Recommended != 0 || st.Driver != "idle" || len(st.Instances) != 0 {
		t.Errorf("idle status = %+v, want 0 recommended by idle, no instances", st)
	}
}

// TestSpilledDemand: demand the plans spill past the group counts as the
// concurrency it would bring, by Little's law.
func TestSpilledDemand(t *testing.T) {
	for _, tt := range []struct {
		load Load
		want float64
	}{
		{Load{InFlight: 3, Requests: 30, Pending: 1}, 4},
		{Load{InFlight: 3, Requests: 30, Spilled: 20}, 5}, // 20/s × 0.1s
		{Load{Spilled: 20}, 0},                            // no latency known yet
	} {
		if got := tt.load.Concurrency(); got != tt.want {
			t.Errorf("%+v.Concurrency() = %v, want %v", tt.load, got, tt.want)
		}
	}
	r := newRig(t)
	r.tick()
	r.c.demandNow(r, 1)
	r.settle()
	// One instance takes 3 in flight at 30/s (0.1s each); 60/s more spill
	// to the next region: 3 + 60 × 0.1 = 9 in flight's worth, which needs
	// 9/10/0.6 = 1.5 ⇒ 2 instances.
	r.load = Load{InFlight: 3, Requests: 30, Spilled: 60}
	for range 12 {
		r.tick()
	}
	if st := r.c.Status()[0]; st.Recommended != 2 || st.Concurrency != 9 {
		t.Errorf("status = %+v, want 2 recommended at concurrency 9", st)
	}
}

func TestCPUDriver(t *testing.T) {
	r := newRig(t)
	r.tick()
	r.c.demandNow(r, 1)
	r.settle()
	r.tick() // first CPU reading
	// The instance burns 0.9 cores with a request in flight: once the
	// 10s CPU window is full, cpu needs 0.9/1/0.6 = 1.5 ⇒ 2 instances,
	// concurrency 1/10/0.6 ⇒ 1.
	r.load = Load{InFlight: 1, Requests: 10}
	for range 12 {
		r.cpu["10.0.0.1:1"] += 0.9
		r.tick()
	}
	st := r.c.Status()[0]
	if st.CPUCores < 0.89 || st.CPUCores > 0.91 {
		t.Errorf("sampled cpu_cores = %v, want 0.9", st.CPUCores)
	}
	if st.Recommended != 2 || st.Driver != "cpu" || st.Drivers.CPU != 2 || st.Drivers.Concurrency != 1 {
		t.Errorf("status = %+v, want 2 recommended by cpu (cpu 2, concurrency 1)", st)
	}
}

func TestLeaseLostDrains(t *testing.T) {
	r := newRig(t)
	r.tick()
	r.c.demandNow(r, 2)
	r.settle()
	r.leases.set("web-b", false)
	r.tick()
	if got := r.published(); got != "" {
		t.Errorf("published %q after the lease was lost, want nothing", got)
	}
	if len(r.prov.stopped) != 0 {
		t.Errorf("stopped %v at once, want the drain delay first", r.prov.stopped)
	}
	if a := r.c.demandNow(r, 3); a.Granted || !strings.Contains(a.Message, "another control-plane replica") {
		t.Errorf("Demand without the lease = %+v, want refused", a)
	}
	for range 3 {
		r.tick()
	}
	if len(r.prov.stopped) != 2 {
		t.Errorf("stopped %v, want both instances after the drain delay", r.prov.stopped)
	}
	if st := r.c.Status(); len(st) != 0 {
		t.Errorf("status = %+v, want no group once drained", st)
	}
	// Taking the lease back starts afresh.
	r.leases.set("web-b", true)
	r.tick()
	if st := r.c.Status(); len(st) != 1 || !st[0].Acting {
		t.Errorf("status after re-acquiring = %+v, want web-b acting", st)
	}
}

func TestStartFailureRetries(t *testing.T) {
	r := newRig(t)
	r.tick()
	r.prov.fail = 1
	r.c.demandNow(r, 1)
	r.settle()
	st := r.c.Status()[0]
	if st.StartFailures != 1 || !strings.Contains(st.LastError, "no room") || st.Active != 0 {
		t.Fatalf("status after a failed start = %+v, want 1 failure, none active", st)
	}
	r.load = Load{InFlight: 1, Requests: 1}
	r.tick() // still recommended 1: the tick reconciles and starts again
	if got := r.published(); got != "1" {
		t.Errorf("published %q after the retry, want 1", got)
	}
	if got := testutil.ToFloat64(r.c.opts.Metrics.starts.WithLabelValues("web-b", "error")); got != 1 {
		t.Errorf("starts_total{error} = %v, want 1", got)
	}
}

func TestGoneInstanceReplaced(t *testing.T) {
	r := newRig(t)
	r.tick()
	r.c.demandNow(r, 2)
	r.settle()
	r.l.drop(provider.Instance{Group: provider.Group{Name: "web-b"}, Address: "10.0.0.1:1"})
	r.l.publish()
	if got := r.published(); got != "2" {
		t.Fatalf("published %q after instance 1 exited, want 2", got)
	}
	r.load = Load{InFlight: 7, Requests: 10} // keeps 2 recommended
	r.tick()
	if got := r.published(); got != "2 3" {
		t.Errorf("published %q after the next tick, want a replacement: 2 3", got)
	}
}

func TestDemandUnknownGroup(t *testing.T) {
	r := newRig(t)
	if a := r.l.demand("nope", 1, r.clk.Now()); a.Granted || !strings.Contains(a.Message, `"nope" has no autoscaling block`) {
		t.Errorf("Demand(nope) = %+v, want refused naming the group", a)
	}
}

// TestRun runs the real loop on the fake clock: a demand starts an
// instance, and the end of Run stops it.
func TestRun(t *testing.T) {
	r := newRig(t)
	ctx, stop := r.run()
	// The first tick takes the lease; demand until the loop acts on it.
	var a DemandAnswer
	for i := 0; i < 1000 && !a.Granted; i++ {
		r.clk.Advance(time.Second)
		a = r.c.Demand(ctx, "web-b", 1)
	}
	if !a.Granted {
		t.Fatalf("Demand = %+v, want granted", a)
	}
	stop()
	if got := len(r.prov.stopped); got != 1 {
		t.Errorf("stopped %d instances at the end of Run, want 1", got)
	}
}

// TestLeaseActsAtOnce: a lease taken between ticks is acted on at once: a
// capacity request right after it is granted with the clock standing
// still.
func TestLeaseActsAtOnce(t *testing.T) {
	r := newRig(t)
	r.leases.set("web-b", false)
	r.leases.changed = make(chan struct{})
	ctx, stop := r.run()
	if a := r.c.Demand(ctx, "web-b", 1); a.Granted {
		t.Fatalf("Demand without the lease = %+v, want refused", a)
	}
	r.leases.take("web-b")
	var a DemandAnswer
	for i := 0; i < 10000 && !a.Granted; i++ { // no clock advance: only the change can act
		a = r.c.Demand(ctx, "web-b", 1)
	}
	if !a.Granted {
		t.Errorf("Demand after the lease was taken = %+v, want granted without a tick", a)
	}
	stop()
}

func mustParse(t *testing.T, y string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(y), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestACTDriver: the gfes' gossiped ACT limit reaches the ACT driver: an
// instance tuned down to 2 slots by its CPU, with 2.4 requests in flight,
// needs 2.4 / 2 / 0.6 = 2 instances where the concurrency driver (10
// slots) needs 1; the group scales out by the act driver, and /status
// shows the limit.
func TestACTDriver(t *testing.T) {
	r := newRig(t)
	r.tick()
	r.c.demandNow(r, 1)
	r.settle()
	r.load = Load{InFlight: 2.4, Requests: 24, ACT: 2}
	for range 12 {
		r.tick()
	}
	st := r.c.Status()[0]
	if st.Recommended != 2 || st.Driver != autoscale.DriverACT || st.Drivers.ACT != 2 || st.Drivers.Concurrency != 1 || st.ACT != 2 {
		t.Errorf("status = %+v, want 2 recommended by act (act 2, concurrency 1), ACT 2", st)
	}
}

package autoscale

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// t0 is the start of every test's injected clock.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// run feeds s once a second for d after *now (advancing *now) and returns
// the last decision.
func run(a *Autoscaler, now *time.Time, d time.Duration, s Sample) Decision {
	var last Decision
	for end := now.Add(d); now.Before(end); {
		*now = now.Add(time.Second)
		last = a.Tick(*now, s)
	}
	return last
}

// testConfig is DefaultConfig(0, 100) with one CPU and 10 requests per
// instance.
func testConfig() Config {
	c := DefaultConfig(0, 100)
	c.MaxConcurrencyPerInstance = 10
	return c
}

// TestCPUDriver: ceil(mean cores over the last minute / CPUs per instance
// / CPU target), from zero instances' history to a steady state.
func TestCPUDriver(t *testing.T) {
	for _, tt := range []struct {
		name   string
		cpus   float64
		target float64
		cores  float64
		want   int
	}{
		{"2.4 cores at 60% of 1 CPU", 1, 0.6, 2.4, 4},
		{"2.46 cores: 4.1 ⇒ 5", 1, 0.6, 2.46, 5},
		{"4 cores on 2-CPU instances at 50%", 2, 0.5, 4, 4},
		{"0.3 cores", 1, 0.6, 0.3, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := testConfig()
			c.CPUsPerInstance, c.CPUTarget = tt.cpus, tt.target
			now := t0
			a := New(c, 1, now)
			d := run(a, &now, 11*time.Minute, Sample{CPUCores: tt.cores, Requests: 1})
			if d.Drivers.CPU != tt.want || d.Recommended != tt.want || d.Driver != DriverCPU {
				t.Errorf("cores %v: Drivers.CPU = %d, Recommended = %d (%s), want %d (cpu)", tt.cores, d.Drivers.CPU, d.Recommended, d.Driver, tt.want)
			}
		})
	}
}

// TestCPUDriverWindow: the CPU driver averages over CPUWindow only: a
// minute after a burst ends it no longer counts.
func TestCPUDriverWindow(t *testing.T) {
	now := t0
	a := New(testConfig(), 1, now)
	run(a, &now, 30*time.Second, Sample{CPUCores: 6, Requests: 1})
	d := run(a, &now, 30*time.Second, Sample{CPUCores: 0, Requests: 1})
	if d.Drivers.CPU != 5 { // mean (30×6 + 30×0)/60 = 3 cores ⇒ 3/0.6 = 5
		t.Errorf("after 30s at 6 cores and 30s at 0: Drivers.CPU = %d, want 5", d.Drivers.CPU)
	}
	d = run(a, &now, 30*time.Second, Sample{CPUCores: 0, Requests: 1})
	if d.Drivers.CPU != 0 {
		t.Errorf("a minute after the burst: Drivers.CPU = %d, want 0", d.Drivers.CPU)
	}
}

// TestConcurrencyDriverLongWindow: the concurrency driver takes the larger
// of the 1-minute and 10-minute means, so a drop shows only as the long
// mean decays.
func TestConcurrencyDriverLongWindow(t *testing.T) {
	now := t0
	a := New(testConfig(), 1, now)
	d := run(a, &now, 10*time.Minute, Sample{Concurrency: 60, Requests: 10})
	if d.Drivers.Concurrency != 10 { // 60 / 10 / 0.6
		t.Fatalf("steady 60 in flight: Drivers.Concurrency = %d, want 10", d.Drivers.Concurrency)
	}
	// Then 12 in flight: the 1-minute mean is 12 after a minute, the
	// 10-minute mean (600−s)/600·60 + s/600·12 after s seconds.
	d = run(a, &now, time.Minute, Sample{Concurrency: 12, Requests: 10})
	if d.Drivers.Concurrency != 10 { // long mean 55.2 ⇒ 55.2/10/0.6 = 9.2 ⇒ 10
		t.Errorf("1m after the drop: Drivers.Concurrency = %d, want 10 (10-minute mean 55.2)", d.Drivers.Concurrency)
	}
	d = run(a, &now, 4*time.Minute, Sample{Concurrency: 12, Requests: 10})
	if d.Drivers.Concurrency != 6 { // long (300·60+300·12)/600 = 36 ⇒ 6
		t.Errorf("5m after the drop: Drivers.Concurrency = %d, want 6 (10-minute mean 36)", d.Drivers.Concurrency)
	}
	d = run(a, &now, 5*time.Minute, Sample{Concurrency: 12, Requests: 10})
	if d.Drivers.Concurrency != 2 { // 12/10/0.6 = 2
		t.Errorf("10m after the drop: Drivers.Concurrency = %d, want 2", d.Drivers.Concurrency)
	}
}

// TestACTDriver: concurrency over 1 minute with the mean ACT limit as each
// instance's capacity; ACT 0 means the configured maximum.
func TestACTDriver(t *testing.T) {
	for _, tt := range []struct {
		name       string
		act        float64
		want       int
		wantDriver Driver
	}{
		{"ACT at the maximum", 0, 5, DriverCPU}, // ties: cpu first (cpu 5, concurrency 5, act 5)
		{"ACT 5 of 10", 5, 10, DriverACT},       // 30 / 5 / 0.6
		{"ACT 4 of 10", 4, 13, DriverACT},       // 12.5 ⇒ 13
		// What a lying gfe may gossip is held to ACT's own range [1, 10].
		{"ACT NaN", math.NaN(), 5, DriverCPU},
		{"ACT +Inf", math.Inf(1), 5, DriverCPU},
		{"ACT above the maximum", 1e9, 5, DriverCPU},
		{"ACT below one", 1e-300, 50, DriverACT}, // as ACT 1: 30 / 1 / 0.6
	} {
		t.Run(tt.name, func(t *testing.T) {
			now := t0
			a := New(testConfig(), 1, now)
			d := run(a, &now, 10*time.Minute, Sample{CPUCores: 3, Concurrency: 30, Requests: 10, ACT: tt.act})
			if d.Drivers.ACT != tt.want || d.Recommended != tt.want || d.Driver != tt.wantDriver {
				t.Errorf("Drivers = %+v, Recommended = %d (%s), want act %d, recommended %d (%s)", d.Drivers, d.Recommended, d.Driver, tt.want, tt.want, tt.wantDriver)
			}
		})
	}
}

// TestMaxOverDriversClamped: the recommendation is the largest driver,
// clamped to [min, max], and Driver names what decided.
func TestMaxOverDriversClamped(t *testing.T) {
	for _, tt := range []struct {
		name     string
		min, max int
		s        Sample
		want     int
		driver   Driver
		drivers  Drivers
	}{
		{"concurrency wins", 0, 100, Sample{CPUCores: 1.2, Concurrency: 42, Requests: 1}, 7, DriverConcurrency, Drivers{2, 7, 7}},
		{"cpu wins", 0, 100, Sample{CPUCores: 4.8, Concurrency: 6, Requests: 1}, 8, DriverCPU, Drivers{8, 1, 1}},
		{"act wins", 0, 100, Sample{CPUCores: 1.2, Concurrency: 24, Requests: 1, ACT: 2}, 20, DriverACT, Drivers{2, 4, 20}},
		{"clamped to max", 0, 6, Sample{CPUCores: 4.8, Requests: 1}, 6, DriverMax, Drivers{8, 0, 0}},
		{"clamped to min", 3, 10, Sample{CPUCores: 0.6, Requests: 1}, 3, DriverMin, Drivers{1, 0, 0}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := testConfig()
			c.MinInstances, c.MaxInstances = tt.min, tt.max
			now := t0
			a := New(c, 1, now)
			d := run(a, &now, 10*time.Minute, tt.s)
			if d.Recommended != tt.want || d.Driver != tt.driver {
				t.Errorf("Recommended = %d (%s), want %d (%s)", d.Recommended, d.Driver, tt.want, tt.driver)
			}
			if diff := cmp.Diff(tt.drivers, d.Drivers); diff != "" {
				t.Errorf("Drivers (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHoldBand: with 10 instances recommended at a 60% CPU target, the
// count holds while utilization stays within 54–66% and is recomputed
// from usage (rounding up) outside it.
func TestHoldBand(t *testing.T) {
	for _, tt := range []struct {
		name  string
		cores float64 // steady, on 10 recommended instances
		want  int
		held  bool
	}{
		{"60%", 6.0, 10, true},
		{"66% (edge)", 6.6, 10, true},
		{"54% (edge)", 5.4, 10, true},
		{"67%: up, 6.7/0.6 = 11.2 ⇒ 12", 6.7, 12, false},
		{"53%: down, 5.3/0.6 = 8.8 ⇒ 9", 5.3, 9, false},
		{"90%: 9/0.6 = 15", 9, 15, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			now := t0
			a := New(testConfig(), 10, now)
			d := run(a, &now, 2*time.Minute, Sample{CPUCores: tt.cores, Requests: 1})
			if d.Recommended != tt.want {
				t.Errorf("cores %v on 10: Recommended = %d, want %d", tt.cores, d.Recommended, tt.want)
			}
			if tt.held && !d.Held {
				t.Errorf("cores %v on 10: Held = false, want true", tt.cores)
			}
		})
	}
}

// TestRecomputeFromUsage: outside the band the count comes from usage and
// target, not from the running count: 3 instances whose usage needs 4.1
// at target go to 5 (not 3 × 1.1 or 3 + 1).
func TestRecomputeFromUsage(t *testing.T) {
	now := t0
	a := New(testConfig(), 3, now)
	d := a.Tick(now.Add(time.Second), Sample{CPUCores: 2.46, Requests: 1}) // 2.46/0.6 = 4.1
	if d.Recommended != 5 || d.Start != 2 || d.Held {
		t.Errorf("need 4.1 on 3: Recommended = %d, Start = %d, Held = %v, want 5, 2, false", d.Recommended, d.Start, d.Held)
	}
}

// TestScaleDownOnlyBelowBand: a scale-down needs every driver more than
// 10% below its target; one driver inside the band holds the count.
func TestScaleDownOnlyBelowBand(t *testing.T) {
	for _, tt := range []struct {
		name string
		s    Sample
		want int
	}{
		// 10 recommended, 10 requests each at most.
		{"cpu 30%, concurrency 30%: down to 5", Sample{CPUCores: 3, Concurrency: 30, Requests: 1}, 5},
		{"cpu 30%, concurrency 60%: hold", Sample{CPUCores: 3, Concurrency: 60, Requests: 1}, 10},
		{"cpu 55%, concurrency 10%: hold", Sample{CPUCores: 5.5, Concurrency: 10, Requests: 1}, 10},
		{"cpu 53%, concurrency 53%: down to 9", Sample{CPUCores: 5.3, Concurrency: 53, Requests: 1}, 9},
	} {
		t.Run(tt.name, func(t *testing.T) {
			now := t0
			a := New(testConfig(), 10, now)
			d := a.Tick(now.Add(time.Second), tt.s)
			if d.Recommended != tt.want {
				t.Errorf("Recommended = %d, want %d (drivers %+v)", d.Recommended, tt.want, d.Drivers)
			}
		})
	}
}

// TestDemotion: a decrease demotes the difference: floor(k/2) into the
// kept set, the rest into the first set; Running counts both.
func TestDemotion(t *testing.T) {
	now := t0
	a := New(testConfig(), 10, now)
	d := a.Tick(now.Add(time.Second), Sample{CPUCores: 3, Concurrency: 30, Requests: 1}) // ⇒ 5
	if d.Recommended != 5 || d.Demoted != 5 || d.Running != 10 || d.Stopped != 0 {
		t.Errorf("10 → 5: %+v, want Recommended 5, Demoted 5, Running 10, Stopped 0", d)
	}
	if got := []demotedSet{a.sets[0], a.sets[1]}; got[0].n != 3 || got[0].keep || got[1].n != 2 || !got[1].keep {
		t.Errorf("sets = %d (keep %v), %d (keep %v), want 3 first, 2 kept", got[0].n, got[0].keep, got[1].n, got[1].keep)
	}
}

// TestDemotedSetStopped: the first demoted set is stopped once its
// utilization over the last minute is under 10%; the second stays.
func TestDemotedSetStopped(t *testing.T) {
	now := t0
	a := New(testConfig(), 10, now)
	s := Sample{CPUCores: 3, Concurrency: 30, Requests: 1} // recommended 5 take all 30
	run(a, &now, time.Second, s)
	d := run(a, &now, 59*time.Second, s)
	if d.Stopped != 0 || d.Demoted != 5 {
		t.Fatalf("59s after demotion: Stopped %d, Demoted %d, want 0, 5", d.Stopped, d.Demoted)
	}
	d = run(a, &now, time.Second, s)
	if d.Stopped != 3 || d.Demoted != 2 || d.Running != 7 {
		t.Errorf("60s after demotion: Stopped %d, Demoted %d, Running %d, want 3, 2, 7", d.Stopped, d.Demoted, d.Running)
	}
}

// TestDemotedSetBusyNotStopped: demoted instances that take overflow at
// 10% or more are not stopped; once the overflow ends, a minute later they
// are.
func TestDemotedSetBusyNotStopped(t *testing.T) {
	c := testConfig()
	// Hold 3 while the demoted set is busy: 40 in flight need 40/10/0.95
	// = 4.2 instances, inside 3·(1 ± 0.5).
	c.Tolerance, c.ConcurrencyTarget = 0.5, 0.95
	now := t0
	a := New(c, 10, now)
	run(a, &now, time.Second, Sample{CPUCores: 1.5, Concurrency: 15, Requests: 1}) // ⇒ 3 (cpu 1.5/0.6 = 2.5)
	if a.Recommended() != 3 {
		t.Fatalf("Recommended = %d, want 3", a.Recommended())
	}
	// 3 recommended take 30 at their limit; 36 in flight leave 6 for the 7
	// demoted: 6/70 = 8.6% < 10%. 40 leaves 10: 14.3%.
	d := run(a, &now, 2*time.Minute, Sample{CPUCores: 1.5, Concurrency: 40, Requests: 1})
	if a.Demoted() != 7 {
		t.Fatalf("busy demoted: Demoted = %d, want 7", a.Demoted())
	}
	if a.Recommended() != 3 {
		t.Fatalf("Recommended = %d, want 3 held (tolerance 0.5)", a.Recommended())
	}
	stoppedAt := time.Duration(0)
	for i := 1; i <= 120; i++ {
		d = run(a, &now, time.Second, Sample{CPUCores: 1.5, Concurrency: 15, Requests: 1})
		if d.Stopped > 0 {
			stoppedAt = time.Duration(i) * time.Second
			break
		}
	}
	// The mean over the last minute falls under 10% once fewer than
	// 60·0.1/0.143 = 42 of its 60 samples are busy: after 19 idle seconds.
	if stoppedAt != 19*time.Second || d.Stopped != 4 {
		t.Errorf("first set stopped after %v (%d), want 19s (4)", stoppedAt, d.Stopped)
	}
}

// TestSecondSetIdleTimeout: the kept set is stopped 15 minutes after it
// last served, not before.
func TestSecondSetIdleTimeout(t *testing.T) {
	now := t0
	a := New(testConfig(), 10, now)
	s := Sample{CPUCores: 3, Concurrency: 30, Requests: 1}
	run(a, &now, time.Second, s) // demoted at t0+1s: 3 first, 2 kept
	d := run(a, &now, 15*time.Minute-time.Second, s)
	if a.Demoted() != 2 {
		t.Fatalf("15m−1s after demotion: Demoted = %d, want 2 (last: %+v)", a.Demoted(), d)
	}
	d = run(a, &now, time.Second, s)
	if d.Stopped != 2 || d.Demoted != 0 || d.Running != 5 {
		t.Errorf("15m after demotion: Stopped %d, Demoted %d, Running %d, want 2, 0, 5", d.Stopped, d.Demoted, d.Running)
	}
}

// TestPromoteBeforeStart: a rise takes demoted instances back before it
// starts new ones.
func TestPromoteBeforeStart(t *testing.T) {
	now := t0
	a := New(testConfig(), 10, now)
	run(a, &now, time.Second, Sample{CPUCores: 3, Concurrency: 30, Requests: 1}) // ⇒ 5, 5 demoted
	d := run(a, &now, time.Second, Sample{CPUCores: 72, Concurrency: 30, Requests: 1})
	// CPU mean over the minute: (3 + 72)/2 = 37.5 ⇒ 62.5 ⇒ 63.
	if d.Recommended != 63 || d.Promoted != 5 || d.Start != 53 || d.Demoted != 0 || d.Running != 63 {
		t.Errorf("rise: %+v, want Recommended 63, Promoted 5, Start 53, Demoted 0, Running 63", d)
	}
}

// TestScaleToZeroOnlyWithoutRequests: a group with requests never goes to
// zero, however low its CPU; a group without requests goes to zero after a
// minute, however high its CPU, if min_instances is 0. With min_instances
// ≥ 1 being idle is no rule: the drivers decide (CPU alone can keep it up).
func TestScaleToZeroOnlyWithoutRequests(t *testing.T) {
	for _, tt := range []struct {
		name   string
		min    int
		s      Sample
		want   int
		driver Driver
	}{
		{"requests, no CPU", 0, Sample{Requests: 1}, 1, DriverCPU},
		{"in flight only", 0, Sample{Concurrency: 0.1}, 1, DriverConcurrency},
		{"no requests, busy CPU", 0, Sample{CPUCores: 5}, 0, DriverIdle},
		{"no requests, busy CPU, min 2", 2, Sample{CPUCores: 5}, 9, DriverCPU},
		{"no requests, idle CPU, min 2", 2, Sample{CPUCores: 0.1}, 2, DriverMin},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := testConfig()
			c.MinInstances = tt.min
			now := t0
			a := New(c, 4, now)
			d := run(a, &now, 59*time.Second, tt.s)
			if tt.want == 0 && d.Recommended == 0 {
				t.Fatalf("idle for 59s: Recommended = 0, want > 0 until a whole minute")
			}
			d = run(a, &now, 10*time.Minute, tt.s)
			if d.Recommended != tt.want || d.Driver != tt.driver {
				t.Errorf("Recommended = %d (%s), want %d (%s)", d.Recommended, d.Driver, tt.want, tt.driver)
			}
		})
	}
}

// TestScaleFromZeroOnlyOnDemand: at zero, CPU alone does not start an
// instance; the first request does, at once.
func TestScaleFromZeroOnlyOnDemand(t *testing.T) {
	now := t0
	a := New(testConfig(), 0, now)
	d := run(a, &now, 5*time.Minute, Sample{CPUCores: 2})
	if d.Recommended != 0 || d.Start != 0 || d.Driver != DriverIdle {
		t.Fatalf("CPU without requests at zero: %+v, want 0 (idle)", d)
	}
	d = a.Tick(now.Add(time.Second), Sample{Requests: 3, Concurrency: 3})
	if d.Recommended != 4 || d.Start != 4 || d.Driver != DriverDemand {
		// CPU mean over the minute ≈ 2 cores ⇒ 4 (the drivers size the
		// start once demand has opened the door).
		t.Errorf("first request at zero: Recommended %d, Start %d, Driver %s, want 4, 4, demand", d.Recommended, d.Start, d.Driver)
	}
	b := New(testConfig(), 0, t0)
	d = b.Tick(t0.Add(time.Second), Sample{Requests: 1})
	if d.Recommended != 1 || d.Start != 1 || d.Driver != DriverDemand {
		t.Errorf("one request at zero: %+v, want Recommended 1, Start 1 (demand)", d)
	}
}

// TestOnDemand: requests without a free instance raise the
// recommendation at once, promoting demoted instances before starting
// any, and never past max instances.
func TestOnDemand(t *testing.T) {
	c := testConfig()
	c.MaxInstances = 12
	now := t0
	a := New(c, 10, now)
	run(a, &now, time.Second, Sample{CPUCores: 3, Concurrency: 30, Requests: 1}) // 5, 5 demoted
	for _, tt := range []struct {
		n    int
		want Decision
	}{
		{3, Decision{Recommended: 8, Driver: DriverDemand, Promoted: 3, Demoted: 2, Running: 10}},
		{3, Decision{Recommended: 11, Driver: DriverDemand, Promoted: 2, Start: 1, Running: 11}},
		{5, Decision{Recommended: 12, Driver: DriverDemand, Start: 1, Running: 12}},
		{5, Decision{Recommended: 12, Driver: DriverDemand, Running: 12}},
	} {
		if diff := cmp.Diff(tt.want, a.OnDemand(now, tt.n)); diff != "" {
			t.Errorf("OnDemand(%d) (-want +got):\n%s", tt.n, diff)
		}
	}
}

// TestDemandHold: after OnDemand, no scale-down for a cold start (the
// started instances cannot have served), then the metric rules again.
func TestDemandHold(t *testing.T) {
	c := testConfig()
	c.ColdStart = 10 * time.Second
	now := t0
	a := New(c, 0, now)
	if d := a.OnDemand(now, 4); d.Recommended != 4 || d.Start != 4 {
		t.Fatalf("OnDemand(4) = %+v, want 4 started", d)
	}
	// One request in flight: concurrency needs 1/10/0.6 ⇒ 1, far below
	// the band of 4, but within the cold start the count holds.
	one := Sample{Concurrency: 1, Requests: 1}
	if d := run(a, &now, 9*time.Second, one); d.Recommended != 4 || d.Driver != DriverDemand || !d.Held || d.Demoted != 0 {
		t.Fatalf("at 9s (within the cold start): %+v, want 4 held by demand", d)
	}
	if d := run(a, &now, time.Second, one); d.Recommended != 1 || d.Driver != DriverCPU && d.Driver != DriverConcurrency || d.Demoted != 3 {
		t.Fatalf("at 10s (the cold start over): %+v, want 1 recommended, 3 demoted", d)
	}
	// A rise is never held back: 600 in flight for a tick makes the
	// minute's mean (10·1 + 600)/11 = 55.5, which needs 55.5/10/0.6 ⇒ 10.
	a.OnDemand(now, 1)
	if d := run(a, &now, time.Second, Sample{Concurrency: 600, Requests: 9}); d.Recommended != 10 || d.Driver != DriverConcurrency {
		t.Errorf("a rise within the hold: %+v, want 10 by concurrency", d)
	}
}

// TestMemoryNeverADriver documents by construction that Sample has no
// memory figure: the drivers are CPU, concurrency and ACT only.
func TestMemoryNeverADriver(t *testing.T) {
	if n := len(cmp.Diff(Drivers{}, Drivers{CPU: 1})); n == 0 {
		t.Fatal("cmp broken")
	}
	got := []Driver{DriverCPU, DriverConcurrency, DriverACT}
	if diff := cmp.Diff([]Driver{"cpu", "concurrency", "act"}, got); diff != "" {
		t.Errorf("metric drivers (-want +got):\n%s", diff)
	}
}

// BenchmarkTick: one decision on full 10-minute windows at 1s ticks.
func BenchmarkTick(b *testing.B) {
	now := t0
	a := New(testConfig(), 10, now)
	run(a, &now, 10*time.Minute, Sample{CPUCores: 6, Concurrency: 60, Requests: 100})
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Second)
		a.Tick(now, Sample{CPUCores: 6, Concurrency: 60, Requests: 100})
	}
}

// TestNoFlapWithoutLoad: with min_instances 1, a group whose load stops
// keeps what its drivers ask for (the concurrency driver's 10-minute
// average) and falls by demotion as that average decays; a lone request
// after a quiet minute changes nothing. An "idle ⇒ min_instances" rule
// gave 3 → 1 (idle) → 3 (the request, with the 10-minute average) → 2 → 1.
func TestNoFlapWithoutLoad(t *testing.T) {
	c := testConfig()
	c.MinInstances = 1
	now := t0
	a := New(c, 1, now)
	// 15 in flight on 10-slot instances at 60%: 2.5 ⇒ 3 (CPU agrees).
	d := run(a, &now, 10*time.Minute, Sample{CPUCores: 1.5, Concurrency: 15, Requests: 30})
	if d.Recommended != 3 {
		t.Fatalf("under load: Recommended %d (%s), want 3", d.Recommended, d.Driver)
	}
	counts := []int{d.Recommended}
	running := d.Running
	step := func(s Sample) {
		now = now.Add(time.Second)
		d := a.Tick(now, s)
		if d.Recommended != counts[len(counts)-1] {
			counts = append(counts, d.Recommended)
			if d.Recommended < counts[len(counts)-2] && d.Running+d.Stopped < running {
				t.Errorf("t=%v: %d → %d removed instances at once (Running %d, was %d), want demotion", now.Sub(t0), counts[len(counts)-2], d.Recommended, d.Running, running)
			}
		}
		running = d.Running
	}
	for range 90 { // a quiet minute and a half
		step(Sample{})
	}
	step(Sample{Requests: 1, Concurrency: 0.05, CPUCores: 0.005}) // one request
	for range 20 * 60 {
		step(Sample{})
	}
	if want := []int{3, 2, 1}; !cmp.Equal(counts, want) {
		t.Errorf("recommended counts without load = %v, want %v", counts, want)
	}
}

// TestWorkedExample: the package doc's worked example, number by number.
func TestWorkedExample(t *testing.T) {
	c := testConfig()
	c.MinInstances = 0
	now := t0
	a := New(c, 10, now)
	tick := func(s Sample) Decision {
		now = now.Add(time.Minute)
		return a.Tick(now, s)
	}
	// 5.7 cores, 30 in flight: cpu 9.5 (in [9, 11]), concurrency 5, act 5.
	d := tick(Sample{CPUCores: 5.7, Concurrency: 30, Requests: 600})
	want := Decision{Recommended: 10, Driver: DriverCPU, Drivers: Drivers{CPU: 10, Concurrency: 5, ACT: 5}, Held: true, Running: 10}
	if diff := cmp.Diff(want, d); diff != "" {
		t.Fatalf("5.7 cores (-want +got):\n%s", diff)
	}
	// 3 cores, 30 in flight: every need 5 < 9 ⇒ 5; 3 + 2 demoted.
	d = tick(Sample{CPUCores: 3, Concurrency: 30, Requests: 600})
	want = Decision{Recommended: 5, Driver: DriverCPU, Drivers: Drivers{CPU: 5, Concurrency: 5, ACT: 5}, Demoted: 5, Running: 10}
	if diff := cmp.Diff(want, d); diff != "" {
		t.Fatalf("3 cores (-want +got):\n%s", diff)
	}
	if len(a.sets) != 2 || a.sets[0].n != 3 || a.sets[1].n != 2 || !a.sets[1].keep {
		t.Fatalf("demoted sets %+v, want 3 (first) and 2 (second)", a.sets)
	}
	// A minute later the first set served nothing: its 3 stop.
	d = tick(Sample{CPUCores: 3, Concurrency: 30, Requests: 600})
	if d.Recommended != 5 || d.Stopped != 3 || d.Running != 7 {
		t.Fatalf("a minute after the demotion: %+v, want Recommended 5, Stopped 3, Running 7", d)
	}
	// The second set's 2 stop 15 minutes after the demotion, not before.
	for range 13 {
		if d = tick(Sample{CPUCores: 3, Concurrency: 30, Requests: 600}); d.Stopped != 0 {
			t.Fatalf("t=%v: second set stopped early: %+v", now.Sub(t0), d)
		}
	}
	if d = tick(Sample{CPUCores: 3, Concurrency: 30, Requests: 600}); d.Stopped != 2 || d.Running != 5 {
		t.Fatalf("15 minutes after the demotion: %+v, want Stopped 2, Running 5", d)
	}

	// With ticks every second the fall walks down to the same 5.
	now = t0
	b := New(c, 10, now)
	run(b, &now, time.Minute, Sample{CPUCores: 5.7, Concurrency: 30, Requests: 10})
	if d := run(b, &now, time.Minute, Sample{CPUCores: 3, Concurrency: 30, Requests: 10}); d.Recommended != 5 || d.Running != 10 {
		t.Errorf("per-second ticks: %+v, want Recommended 5, Running 10", d)
	}
}

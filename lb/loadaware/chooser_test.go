package loadaware

import (
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/lb/backend"
)

func ms(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }

func at(d time.Duration) time.Time { return simEpoch.Add(d) }

func mustNew(t testing.TB, cfg Config) *Chooser {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCost checks Cost's formula on hand-computed cases.
func TestCost(t *testing.T) {
	linear := DefaultConfig()
	aggr2 := DefaultConfig()
	aggr2.Aggression = 2
	noUtil := DefaultConfig()
	noUtil.UtilizationWeight = 0
	tests := []struct {
		name     string
		cfg      Config
		start    time.Duration // slow-start window began at; <0: none
		samples  []time.Duration
		sampleAt time.Duration // the samples' time
		util     float64       // <0: no report
		inflight int
		now      time.Duration
		want     float64 // Cost
		wantW    float64 // Weight
	}{
		{name: "no sample, idle: probe it", cfg: linear, start: -1, util: -1, now: time.Second, want: 0, wantW: 1},
		{name: "no sample, probe in flight", cfg: linear, start: -1, util: -1, inflight: 2, now: time.Second, want: probingCost + 2, wantW: 1},
		{name: "10ms, idle", cfg: linear, start: -1, samples: []time.Duration{ms(10)}, sampleAt: time.Second, util: -1, now: time.Second, want: 0.010, wantW: 1},
		{name: "10ms, 2 in flight", cfg: linear, start: -1, samples: []time.Duration{ms(10)}, sampleAt: time.Second, util: -1, inflight: 2, now: time.Second, want: 0.030, wantW: 1},
		{name: "10ms faded 500ms", cfg: linear, start: -1, samples: []time.Duration{ms(10)}, sampleAt: time.Second, util: -1, now: 1500 * time.Millisecond, want: 0.010 * math.Exp(-0.5), wantW: 1},
		{name: "forgotten after probe_after", cfg: linear, start: -1, samples: []time.Duration{ms(10)}, sampleAt: time.Second, util: -1, inflight: 1, now: 3 * time.Second, want: probingCost + 1, wantW: 1},
		{name: "utilization 0.5 doubles", cfg: linear, start: -1, samples: []time.Duration{ms(10)}, sampleAt: time.Second, util: 0.5, now: time.Second, want: 0.020, wantW: 1},
		{name: "utilization capped at 0.95", cfg: linear, start: -1, samples: []time.Duration{ms(10)}, sampleAt: time.Second, util: 3, now: time.Second, want: 0.200, wantW: 1},
		{name: "utilization ignored", cfg: noUtil, start: -1, samples: []time.Duration{ms(10)}, sampleAt: time.Second, util: 0.5, now: time.Second, want: 0.010, wantW: 1},
		{name: "slow start, halfway", cfg: linear, start: 0, samples: []time.Duration{ms(10)}, sampleAt: 15 * time.Second, util: -1, now: 15 * time.Second, want: 0.010, wantW: 0.5},
		{name: "slow start, at its beginning", cfg: linear, start: 0, samples: []time.Duration{ms(10)}, sampleAt: time.Second, util: -1, now: time.Second, want: 0.010, wantW: 0.1},
		{name: "slow start over", cfg: linear, start: 0, samples: []time.Duration{ms(10)}, sampleAt: 30 * time.Second, util: -1, now: 30 * time.Second, want: 0.010, wantW: 1},
		{name: "aggression 2, a quarter in", cfg: aggr2, start: 0, samples: []time.Duration{ms(10)}, sampleAt: 7500 * time.Millisecond, util: -1, now: 7500 * time.Millisecond, want: 0.010, wantW: 0.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustNew(t, tt.cfg)
			var st time.Time
			if tt.start >= 0 {
				st = at(tt.start)
			}
			e := NewEndpoint(backend.New("a:1", 0), st)
			for _, l := range tt.samples {
				c.Observe(e, at(tt.sampleAt), l)
			}
			if tt.util >= 0 {
				e.ObserveUtilization(at(tt.sampleAt), tt.util)
			}
			for range tt.inflight {
				e.Backend().TryAcquire()
			}
			if got := c.Cost(e, at(tt.now)); math.Abs(got-tt.want) > 1e-9*max(1, tt.want) {
				t.Errorf("Cost = %.9g, want %.9g", got, tt.want)
			}
			if got := c.Weight(e, at(tt.now)); math.Abs(got-tt.wantW) > 1e-9 {
				t.Errorf("Weight = %v, want %v", got, tt.wantW)
			}
		})
	}
}

// TestObservePeakEWMA checks the estimate after a sequence of samples
// (the cost of an idle Endpoint right after the last one).
func TestObservePeakEWMA(t *testing.T) {
	type sample struct {
		at time.Duration
		l  time.Duration
	}
	d := math.Exp(-0.5) // 500ms at τ = 1s
	tests := []struct {
		name    string
		samples []sample
		want    float64 // seconds
	}{
		{"first sample", []sample{{0, ms(20)}}, 0.020},
		{"a peak replaces", []sample{{0, ms(20)}, {500 * time.Millisecond, ms(100)}}, 0.100},
		{"a peak above the faded estimate replaces", []sample{{0, ms(20)}, {500 * time.Millisecond, ms(15)}}, 0.015},
		{"below: blend", []sample{{0, ms(20)}, {500 * time.Millisecond, ms(5)}}, 0.020*d + 0.005*(1-d)},
		{"same instant: the peak is kept", []sample{{0, ms(20)}, {0, ms(5)}}, 0.020},
		{"older than probe_after: replaced", []sample{{0, ms(200)}, {2 * time.Second, ms(10)}}, 0.010},
		{"late sample of the past raises the peak", []sample{{time.Second, ms(20)}, {500 * time.Millisecond, ms(50)}}, 0.050},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustNew(t, DefaultConfig())
			e := NewEndpoint(backend.New("a:1", 0), time.Time{})
			var last time.Duration
			for _, s := range tt.samples {
				c.Observe(e, at(s.at), s.l)
				last = max(last, s.at)
			}
			if got := c.Cost(e, at(last)); math.Abs(got-tt.want) > 1e-12 {
				t.Errorf("estimate = %.9g, want %.9g", got, tt.want)
			}
		})
	}
}

// TestRestart: a returning instance forgets its estimate (it is probed
// again) and begins a new slow-start window.
func TestRestart(t *testing.T) {
	c := mustNew(t, DefaultConfig())
	e := NewEndpoint(backend.New("a:1", 0), time.Time{})
	c.Observe(e, at(0), ms(500))
	e.ObserveUtilization(at(0), 0.9)
	e.Restart(at(time.Second))
	if got := c.Cost(e, at(time.Second)); got != 0 {
		t.Errorf("Cost after Restart = %v, want 0 (unknown, probe it)", got)
	}
	c.Observe(e, at(time.Second), ms(10))
	if got := c.Cost(e, at(time.Second)); math.Abs(got-0.010) > 1e-12 {
		t.Errorf("Cost after the probe = %v, want 0.010 (no old peak, no old utilization)", got)
	}
	if got := c.Weight(e, at(16*time.Second)); math.Abs(got-0.5) > 1e-12 {
		t.Errorf("Weight 15s after Restart = %v, want 0.5", got)
	}
}

// TestAcquire checks the choice and the skipping of full backends.
func TestAcquire(t *testing.T) {
	c := mustNew(t, DefaultConfig())
	now := at(time.Second)
	mk := func(lat []float64, limit int64) []*Endpoint {
		es := make([]*Endpoint, len(lat))
		for i, l := range lat {
			es[i] = NewEndpoint(backend.New("a:1", limit), time.Time{})
			c.Observe(es[i], now, ms(l))
		}
		return es
	}
	// rnd draws: high half 0 → index 0, low half 0 → index 1.
	const draw01 = 0
	t.Run("empty", func(t *testing.T) {
		if i, ok := c.Acquire(nil, now, 0); ok || i != -1 {
			t.Errorf("Acquire(nil) = %d, %v, want -1, false", i, ok)
		}
	})
	t.Run("cheaper of the two", func(t *testing.T) {
		es := mk([]float64{30, 10, 1}, 0)
		if i, ok := c.Acquire(es, now, draw01); !ok || i != 1 {
			t.Errorf("Acquire = %d, %v, want 1 (10ms against 30ms)", i, ok)
		}
	})
	t.Run("tie: first draw", func(t *testing.T) {
		es := mk([]float64{10, 10}, 0)
		if i, ok := c.Acquire(es, now, draw01); !ok || i != 0 {
			t.Errorf("Acquire = %d, %v, want 0", i, ok)
		}
	})
	t.Run("cheaper full: the other", func(t *testing.T) {
		es := mk([]float64{30, 10, 1}, 1)
		es[1].Backend().TryAcquire()
		if i, ok := c.Acquire(es, now, draw01); !ok || i != 0 {
			t.Errorf("Acquire = %d, %v, want 0", i, ok)
		}
	})
	t.Run("both full: the next with room", func(t *testing.T) {
		es := mk([]float64{30, 10, 1}, 1)
		es[0].Backend().TryAcquire()
		es[1].Backend().TryAcquire()
		if i, ok := c.Acquire(es, now, draw01); !ok || i != 2 {
			t.Errorf("Acquire = %d, %v, want 2", i, ok)
		}
		if i, ok := c.Acquire(es, now, draw01); ok {
			t.Errorf("Acquire with every backend full = %d, %v, want -1, false", i, ok)
		}
	})
	t.Run("soft limit: AcquireHard ignores it", func(t *testing.T) {
		es := mk([]float64{10}, 0)
		es[0].Backend().SetSoftLimit(1)
		es[0].Backend().TryAcquire()
		if _, ok := c.Acquire(es, now, 0); ok {
			t.Error("Acquire past the soft limit succeeded")
		}
		if i, ok := c.AcquireHard(es, now, 0); !ok || i != 0 {
			t.Errorf("AcquireHard = %d, %v, want 0, true", i, ok)
		}
	})
}

// TestAcquireConcurrent: concurrent picks and observations never exceed a
// limit and leave every slot released (run with -race).
func TestAcquireConcurrent(t *testing.T) {
	c := mustNew(t, DefaultConfig())
	es := make([]*Endpoint, 4)
	for i := range es {
		es[i] = NewEndpoint(backend.New("a:1", 3), at(0))
	}
	var wg sync.WaitGroup
	var over sync.Map
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := uint64(g) + 1
			for k := range 2000 {
				now := at(time.Duration(k) * time.Millisecond)
				i, ok := c.Acquire(es, now, splitmix(&s))
				if !ok {
					continue
				}
				if n := es[i].Backend().InFlight(); n > 3 {
					over.Store(i, n)
				}
				es[i].ObserveUtilization(now, 0.5)
				c.Observe(es[i], now, ms(float64(1+i)))
				es[i].Backend().Release()
			}
		}()
	}
	wg.Wait()
	over.Range(func(k, v any) bool { t.Errorf("backend %v had %v in flight, limit 3", k, v); return true })
	for i, e := range es {
		if n := e.Backend().InFlight(); n != 0 {
			t.Errorf("backend %d: %d in flight after every release, want 0", i, n)
		}
	}
}

// TestAcquireAllocs: a pick allocates nothing, in and out of slow start.
func TestAcquireAllocs(t *testing.T) {
	c := mustNew(t, DefaultConfig())
	es := []*Endpoint{NewEndpoint(backend.New("a:1", 0), at(0)), NewEndpoint(backend.New("b:1", 0), time.Time{}), NewEndpoint(backend.New("c:1", 0), time.Time{})}
	for _, e := range es {
		c.Observe(e, at(0), ms(5))
	}
	now := at(time.Second)
	var s uint64
	if n := testing.AllocsPerRun(1000, func() {
		if i, ok := c.Acquire(es, now, splitmix(&s)); ok {
			c.Observe(es[i], now, ms(5))
			es[i].Backend().Release()
		}
	}); n != 0 {
		t.Errorf("Acquire + Observe allocate %v times per pick, want 0", n)
	}
}

// TestConfigValidate: every bad field is named, all at once.
func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	bad := Config{Decay: -1, ProbeAfter: 2 * time.Hour, UtilizationWeight: math.NaN(), MaxUtilization: 1, SlowStart: -1, Aggression: 0, MinWeight: 0}
	err := bad.Validate()
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Validate() = %v, want ErrInvalidConfig", err)
	}
	for _, f := range []string{"decay", "probe_after", "utilization_weight", "max_utilization", "slow_start", "aggression", "min_weight"} {
		if !strings.Contains(err.Error(), f+":") {
			t.Errorf("Validate() = %q, does not name %s", err, f)
		}
	}
	if _, err := New(bad); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("New(bad) error = %v, want ErrInvalidConfig", err)
	}
}

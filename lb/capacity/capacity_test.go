package capacity

import (
	"math"
	"strings"
	"testing"
	"time"
)

var t0 = time.Unix(1_000_000, 0)

// testConfig is DefaultConfig with MaxShrink 1 (one shrink may take the
// whole way: the tests below check how far each signal asks to go),
// RecoverRate 0.05, Decrease 0.9 and QueueDelay 25ms, the figures the
// tests below compute with; TestMaxShrink checks the default bound.
func testConfig() Config {
	c := DefaultConfig()
	c.MaxShrink, c.RecoverRate, c.Decrease, c.QueueDelay = 1, 0.05, 0.9, 25*time.Millisecond
	return c
}

// TestMaxShrink: with the default MaxShrink (0.25) one shrink takes at
// most a quarter of the factor, a second one after Hold another quarter,
// and a group that stopped answering drops to MinFactor at once.
func TestMaxShrink(t *testing.T) {
	e := New(DefaultConfig())
	deep := Sample{Answered: 100, Rejected: 90, Latency: time.Second, Load: 100, Capacity: 100}
	if f, _ := e.Update(t0, deep); f != 0.75 {
		t.Errorf("first shrink: %v, want 0.75", f)
	}
	if f, _ := e.Update(t0.Add(time.Second), deep); f != 0.75*0.75 {
		t.Errorf("second shrink: %v, want %v", f, 0.75*0.75)
	}
	e = New(DefaultConfig())
	if f, sig := e.Update(t0, Sample{Outstanding: 20, Load: 100, Capacity: 100}); f != 0.1 || sig != SignalInFlight {
		t.Errorf("stopped answering: %v %v, want 0.1 in_flight", f, sig)
	}
}

// ok is a clean sample of n requests of latency lat each, the group
// carrying load of capacity 100.
func ok(n int64, lat time.Duration, load float64) Sample {
	return Sample{Answered: n, Latency: time.Duration(n) * lat, Load: load, Capacity: 100}
}

// TestSignals: each kind of overload shrinks the factor in the very Update
// that sees it, by the amount the package doc promises, and names itself.
func TestSignals(t *testing.T) {
	const lat = 40 * time.Millisecond
	tests := []struct {
		name       string
		s          Sample
		wantSignal Signal
		wantFactor float64
	}{
		{"clean", ok(100, lat, 80), SignalNone, 1},
		{"a backend that rejects: 10% refused at load 80",
			Sample{Answered: 100, Rejected: 10, Latency: 90 * lat, Load: 80, Capacity: 100},
			SignalRejections, 0.8 * 0.9 * 0.9},
		{"1% refused is within the limit", Sample{Answered: 100, Rejected: 1, Latency: 99 * lat, Load: 80, Capacity: 100}, SignalNone, 1},
		{"a backend that stops answering: 20 of 100 fail",
			Sample{Answered: 80, Failed: 20, Latency: 80 * lat, Load: 90, Capacity: 100},
			SignalConnectErrors, 0.9 * 0.9 * 0.8},
		{"a backend that reports high utilization: 1.5 at load 90",
			Sample{Answered: 100, Latency: 100 * lat, Reports: 100, Utilization: 150, Load: 90, Capacity: 100},
			SignalLoadReport, 0.9 / 1.5},
		{"utilization 1.05 shrinks by Decrease, the larger step",
			Sample{Answered: 100, Latency: 100 * lat, Reports: 10, Utilization: 10.5, Load: 90, Capacity: 100},
			SignalLoadReport, 0.9 * 0.9},
		{"utilization at the limit is fine", Sample{Answered: 100, Latency: 100 * lat, Reports: 10, Utilization: 10, Load: 90, Capacity: 100}, SignalNone, 1},
		{"in flight at the concurrency limits",
			Sample{Answered: 20, Latency: 20 * lat, InFlight: 16, Limit: 16, Load: 50, Capacity: 100},
			SignalInFlight, 0.5 * 0.9},
		{"no plan load: the factor itself shrinks",
			Sample{Answered: 100, Rejected: 50, Latency: 50 * lat, Capacity: 100},
			SignalRejections, 0.9 * 0.5},
		{"never below MinFactor",
			Sample{Answered: 100, Rejected: 99, Latency: lat, Load: 5, Capacity: 100},
			SignalRejections, 0.1},
		{"a shrink never raises the factor: load 150 over capacity 100",
			Sample{Answered: 100, Rejected: 2, Latency: 98 * lat, Load: 150, Capacity: 100},
			SignalRejections, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := New(testConfig())
			f, sig := e.Update(t0, tt.s)
			if sig != tt.wantSignal || math.Abs(f-tt.wantFactor) > 1e-9 {
				t.Errorf("Update = %v, %v; want %v, %v", f, sig, tt.wantFactor, tt.wantSignal)
			}
		})
	}
}

// TestQueueing: a backend that queues. Latency 40 ms is the baseline;
// a mean 30 ms above it shrinks the factor, 20 ms above does not.
func TestQueueing(t *testing.T) {
	e := New(testConfig())
	now := t0
	step := func(s Sample) (float64, Signal) {
		now = now.Add(250 * time.Millisecond)
		return e.Update(now, s)
	}
	for range 8 {
		if f, sig := step(ok(50, 40*time.Millisecond, 90)); f != 1 || sig != SignalNone {
			t.Fatalf("baseline: %v %v", f, sig)
		}
	}
	for range 2 {
		if f, sig := step(ok(50, 60*time.Millisecond, 90)); f != 1 || sig != SignalNone {
			t.Errorf("20 ms above the baseline: %v %v, want 1 none", f, sig)
		}
	}
	// One sample 30 ms above is a pause; the second in a row a queue.
	if f, sig := step(ok(50, 70*time.Millisecond, 90)); f != 1 || sig != SignalNone {
		t.Errorf("30 ms above the baseline once: %v %v, want 1 none", f, sig)
	}
	if f, sig := step(ok(50, 40*time.Millisecond, 90)); f != 1 || sig != SignalNone {
		t.Errorf("back at the baseline: %v %v, want 1 none", f, sig)
	}
	step(ok(50, 70*time.Millisecond, 90))
	if f, sig := step(ok(50, 70*time.Millisecond, 90)); sig != SignalQueueing || math.Abs(f-0.81) > 1e-9 {
		t.Errorf("30 ms above the baseline twice: %v %v, want 0.81 queueing", f, sig)
	}
	// The baseline is forgotten after BaselineWindow (60 s, in 5 s
	// buckets): a backend that got slower for good stops counting as
	// queueing about a minute later.
	for range 4 * 65 {
		step(ok(50, 70*time.Millisecond, 90))
	}
	if _, sig := step(ok(50, 70*time.Millisecond, 90)); sig != SignalNone {
		t.Errorf("65 s at a new latency: signal %v, want none (baseline moved)", sig)
	}
}

// TestQueueingDepth: the deeper the queue, the more the group sheds (a
// wait of w seconds keeps 1 − w of the load, at most Decrease, at least
// half), and a far group's baseline allows it a quarter more of jitter.
func TestQueueingDepth(t *testing.T) {
	tests := []struct {
		name      string
		base, now time.Duration
		want      float64
		wantSig   Signal
	}{
		{"30 ms over 40 keeps Decrease", 40 * time.Millisecond, 70 * time.Millisecond, 0.9 * 0.9, SignalQueueing},
		{"300 ms over 40 keeps 70%", 40 * time.Millisecond, 340 * time.Millisecond, 0.9 * 0.7, SignalQueueing},
		{"900 ms over 40 keeps half", 40 * time.Millisecond, 940 * time.Millisecond, 0.9 * 0.5, SignalQueueing},
		{"40 ms over a 200 ms baseline is jitter", 200 * time.Millisecond, 240 * time.Millisecond, 1, SignalNone},
		{"60 ms over a 200 ms baseline is queueing", 200 * time.Millisecond, 260 * time.Millisecond, 0.81, SignalQueueing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := New(testConfig())
			e.Update(t0, ok(50, tt.base, 90))
			e.Update(t0.Add(250*time.Millisecond), ok(50, tt.now, 90))
			f, sig := e.Update(t0.Add(500*time.Millisecond), ok(50, tt.now, 90))
			if sig != tt.wantSig || math.Abs(f-tt.want) > 1e-9 {
				t.Errorf("Update = %v %v, want %v %v", f, sig, tt.want, tt.wantSig)
			}
		})
	}
}

// TestHoldAndRecovery: after a shrink the factor holds for Hold even if
// signals continue, shrinks again after it, stays put for RecoverDelay
// after the last signal, then grows by RecoverRate per second to 1.
func TestHoldAndRecovery(t *testing.T) {
	e := New(testConfig())
	rejecting := Sample{Answered: 100, Rejected: 10, Latency: time.Second, Load: 100, Capacity: 100}
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	steps := []struct {
		ms   int
		s    Sample
		want float64
	}{
		{0, rejecting, 0.81},
		{500, Sample{Answered: 100, Rejected: 10, Latency: time.Second, Load: 81, Capacity: 100}, 0.81}, // held
		{1000, Sample{Answered: 100, Rejected: 10, Latency: time.Second, Load: 81, Capacity: 100}, 0.81 * 0.81},
		{2000, ok(100, 10*time.Millisecond, 65), 0.6561}, // 1 s after the last signal
		{3000, ok(100, 10*time.Millisecond, 65), 0.6561}, // 2 s: recovery starts
		{4000, ok(100, 10*time.Millisecond, 65), 0.7061},
		{10000, ok(100, 10*time.Millisecond, 65), 1},
	}
	for _, st := range steps {
		f, _ := e.Update(at(st.ms), st.s)
		if math.Abs(f-st.want) > 1e-9 {
			t.Fatalf("at %d ms: factor %v, want %v", st.ms, f, st.want)
		}
	}
	if sig, _ := e.Signal(); sig != SignalNone {
		t.Errorf("recovered: Signal() = %v, want none", sig)
	}
}

// TestFewRequestsAccumulate: a quiet group's requests are judged once
// MinRequests of them arrived, over several intervals.
func TestFewRequestsAccumulate(t *testing.T) {
	e := New(testConfig())
	s := Sample{Answered: 3, Rejected: 1, Latency: 2 * 10 * time.Millisecond, Load: 50, Capacity: 100}
	for i := range 3 {
		if f, sig := e.Update(t0.Add(time.Duration(i)*time.Second), s); f != 1 || sig != SignalNone {
			t.Fatalf("update %d with %d requests so far: %v %v", i, 3*(i+1), f, sig)
		}
	}
	f, sig := e.Update(t0.Add(3*time.Second), s)
	if want := 0.5 * 0.9 * (1 - 4.0/12); sig != SignalRejections || math.Abs(f-want) > 1e-9 {
		t.Errorf("12 requests, 4 refused: %v %v, want %v rejections", f, sig, want)
	}
}

// TestSawTooth: a group whose real capacity is 70% of its declared one,
// fed by a plan that sends it min(demand, factor·capacity), settles with
// its load oscillating within a band of about 1 − Decrease around 70, and
// is never above 80 once it has shrunk.
func TestSawTooth(t *testing.T) {
	e := New(testConfig())
	const demand, real = 100.0, 70.0
	lo, hi := math.Inf(1), 0.0
	for i := range 240 { // 60 s at 250 ms
		now := t0.Add(time.Duration(i) * 250 * time.Millisecond)
		load := math.Min(demand, e.Factor()*100)
		s := Sample{Answered: 100, Latency: 100 * 10 * time.Millisecond, Load: load, Capacity: 100}
		if load > real {
			s.Rejected = int64(math.Ceil(100 * (load - real) / load))
		}
		e.Update(now, s)
		if i >= 80 {
			lo, hi = min(lo, load), max(hi, load)
		}
	}
	if lo < 55 || hi > 75 {
		t.Errorf("load after 20 s between %v and %v, want within [55, 75]", lo, hi)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := testConfig().Validate(); err != nil {
		t.Fatalf("testConfig: %v", err)
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	c := DefaultConfig()
	c.Decrease, c.MinFactor = 1, 0
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate accepted decrease 1 and min_factor 0")
	}
	for _, want := range []string{"decrease", "min_factor"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

func TestSignalString(t *testing.T) {
	for s := range NumSignals {
		if s.String() == "" || s.String()[0] == 'S' {
			t.Errorf("Signal %d has no name", s)
		}
	}
	if got := Signal(99).String(); got != "Signal(99)" {
		t.Errorf("Signal(99).String() = %q", got)
	}
}

// TestStopsAnswering: a group that stops answering (requests pile up, no
// answers) shrinks to what it still answers; a busy group whose requests
// in flight its answer rate explains does not.
func TestStopsAnswering(t *testing.T) {
	tests := []struct {
		name    string
		s       Sample
		want    float64
		wantSig Signal
	}{
		{"25 out, none answered", Sample{Outstanding: 25, Load: 100, Capacity: 100}, 0.1, SignalInFlight},
		{"9 out of 8 instances, none answered: too few to tell", Sample{Outstanding: 9, Instances: 8, Load: 100, Capacity: 100}, 1, SignalNone},
		// Soft limits may hold a gfe to a few requests per instance: two
		// per instance without an answer are enough.
		{"8 out of 4 instances, none answered", Sample{Outstanding: 8, Instances: 4, Load: 100, Capacity: 100}, 0.1, SignalInFlight},
		{"7 out of 4 instances, none answered", Sample{Outstanding: 7, Instances: 4, Load: 100, Capacity: 100}, 1, SignalNone},
		// 400/s answered in 40 ms: about 16 in flight is normal (Little).
		{"16 out at 400/s, 40 ms", Sample{Answered: 100, Latency: 100 * 40 * time.Millisecond, Outstanding: 16, Load: 400, Capacity: 500}, 1, SignalNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := New(testConfig())
			f, sig := e.Update(t0, tt.s)
			if sig != tt.wantSig || math.Abs(f-tt.want) > 1e-9 {
				t.Errorf("Update = %v %v, want %v %v", f, sig, tt.want, tt.wantSig)
			}
		})
	}
	// 40 streams open, answered as they open, and stay open with no new
	// request: no signal.
	e := New(testConfig())
	for i := range 8 {
		s := Sample{Outstanding: 40, Load: 10, Capacity: 100}
		if i == 0 {
			s.Answered, s.Latency = 40, 40*10*time.Millisecond
		}
		if f, sig := e.Update(t0.Add(time.Duration(i)*250*time.Millisecond), s); f != 1 || sig != SignalNone {
			t.Fatalf("open streams, update %d: %v %v", i, f, sig)
		}
	}
}

// TestStrongestSignalWins: a sample with a mild load report (1.05: keep
// Decrease) and a deep queue (300 ms: keep 70%) sheds by the queue.
func TestStrongestSignalWins(t *testing.T) {
	e := New(testConfig())
	e.Update(t0, ok(50, 40*time.Millisecond, 90))
	e.Update(t0.Add(250*time.Millisecond), ok(50, 340*time.Millisecond, 90)) // queueing once: not yet
	s := ok(50, 340*time.Millisecond, 90)
	s.Reports, s.Utilization = 10, 10.5
	if f, sig := e.Update(t0.Add(500*time.Millisecond), s); sig != SignalQueueing || math.Abs(f-0.9*0.7) > 1e-9 {
		t.Errorf("Update = %v %v, want %v queueing", f, sig, 0.9*0.7)
	}
}

// TestSilence: a group whose requests out creep from 3 to 5 (too few to
// grow by two per instance at once) and that answers nothing while load is
// planned counts as stopped answering after a second; one with no load
// planned never does, nor one whose requests out stay put (idle streams;
// TestStopsAnswering).
func TestSilence(t *testing.T) {
	for _, load := range []float64{50, 0} {
		e := New(DefaultConfig())
		var f float64
		var sig Signal
		for i := range 6 {
			out := int64(min(3+i/2, 5))
			f, sig = e.Update(t0.Add(time.Duration(i)*250*time.Millisecond), Sample{Outstanding: out, Instances: 4, Load: load, Capacity: 100})
			if i < 4 && sig != SignalNone {
				t.Fatalf("load %v, update %d: %v %v before a second of silence", load, i, f, sig)
			}
		}
		if load > 0 && (sig != SignalInFlight || f != 0.1) {
			t.Errorf("load %v: after 1.25 s of silence %v %v, want 0.1 in_flight", load, f, sig)
		}
		if load == 0 && (sig != SignalNone || f != 1) {
			t.Errorf("no load planned: %v %v, want 1 none", f, sig)
		}
	}
}

// TestReportsConfirmLatency: where the instances send load reports, latency
// above the baseline and requests in flight at the limits shrink the group
// only when the reports say it is busy (ConfirmUtilization, 0.8); a group
// without reports is judged by them alone, as before.
func TestReportsConfirmLatency(t *testing.T) {
	withReports := func(s Sample, u float64) Sample {
		s.Reports, s.Utilization = 10, 10*u
		return s
	}
	inFlight := func(s Sample) Sample {
		s.InFlight, s.Limit = 40, 40
		return s
	}
	tests := []struct {
		name    string
		sample  Sample
		confirm float64
		want    Signal
	}{
		{"slow, no reports", ok(50, 70*time.Millisecond, 90), 0.8, SignalQueueing},
		{"slow, reports 0.5", withReports(ok(50, 70*time.Millisecond, 90), 0.5), 0.8, SignalNone},
		{"slow, reports 0.79", withReports(ok(50, 70*time.Millisecond, 90), 0.79), 0.8, SignalNone},
		{"slow, reports 0.8", withReports(ok(50, 70*time.Millisecond, 90), 0.8), 0.8, SignalQueueing},
		{"slow, reports 0.5, confirm off", withReports(ok(50, 70*time.Millisecond, 90), 0.5), 0, SignalQueueing},
		{"at the limits, no reports", inFlight(ok(50, 40*time.Millisecond, 90)), 0.8, SignalInFlight},
		{"at the limits, reports 0.5", withReports(inFlight(ok(50, 40*time.Millisecond, 90)), 0.5), 0.8, SignalNone},
		// A report above 1 is its own signal, whatever latency says.
		{"reports 1.2", withReports(ok(50, 40*time.Millisecond, 90), 1.2), 0.8, SignalLoadReport},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.ConfirmUtilization = tt.confirm
			e := New(cfg)
			e.Update(t0, ok(50, 40*time.Millisecond, 90)) // the baseline
			e.Update(t0.Add(250*time.Millisecond), tt.sample)
			_, sig := e.Update(t0.Add(500*time.Millisecond), tt.sample)
			if sig != tt.want {
				t.Errorf("signal %v, want %v", sig, tt.want)
			}
		})
	}
}

// slowGroup plays a one-instance group whose requests take lat (none is
// ever answered if lat is 0) to Update every 250ms from t0 for the given
// number of updates; this gfe sends one request every 100ms from t0+560ms
// (10 req/s on an idle group: the first sample after the load starts holds
// two requests out and no answer). It returns the factor and signal of
// every Update.
func slowGroup(e *Estimator, lat time.Duration, limit int64, updates int) ([]float64, []Signal) {
	const sample, every = 250 * time.Millisecond, 100 * time.Millisecond
	first := t0.Add(560 * time.Millisecond)
	var fs []float64
	var sigs []Signal
	prev := t0
	for i := range updates {
		now := t0.Add(time.Duration(i) * sample)
		s := Sample{Instances: 1, Limit: limit, Load: 10, Capacity: 28.5}
		for at := first; !at.After(now); at = at.Add(every) {
			end := at.Add(lat)
			switch {
			case lat > 0 && !end.After(now) && end.After(prev):
				s.Answered++
				s.Latency += lat
			case lat == 0 || end.After(now):
				s.Outstanding++
			}
		}
		if limit > 0 {
			s.InFlight = s.Outstanding
		}
		f, sig := e.Update(now, s)
		fs, sigs = append(fs, f), append(sigs, sig)
		prev = now
	}
	return fs, sigs
}

// TestSlowFirstAnswer: load starts on an idle one-instance group whose
// requests take 200ms. The first 250ms sample after it has two requests
// out and none answered: not a group that stopped answering, because they
// fit in its concurrency limits (10) and no answer time says they are
// late; the factor stays 1 for the whole run. A group without limits that
// answered before is judged by its baseline: two requests out for less
// than twice its 200ms are young. A group that really stops answering is
// still caught: from idle with limits and no answer time, by the second
// of silence (or at once when its limits fill); with an answer time
// known, once its requests are out twice that.
func TestSlowFirstAnswer(t *testing.T) {
	const lat = 200 * time.Millisecond
	e := New(DefaultConfig())
	fs, sigs := slowGroup(e, lat, 10, 40) // 10 s
	for i := range fs {
		if fs[i] != 1 || sigs[i] != SignalNone {
			t.Fatalf("limits 10, slow answers, update %d (t=%v): factor %v %v, want 1 none", i, time.Duration(i)*250*time.Millisecond, fs[i], sigs[i])
		}
	}

	// No limits, but the group answered in 200ms 20s ago (its baseline).
	e = New(DefaultConfig())
	e.Update(t0.Add(-20*time.Second), ok(10, lat, 10))
	e.Update(t0.Add(-20*time.Second+250*time.Millisecond), Sample{Instances: 1, Capacity: 28.5})
	fs, sigs = slowGroup(e, lat, 0, 40)
	for i := range fs {
		if fs[i] != 1 || sigs[i] != SignalNone {
			t.Fatalf("no limits, baseline 200ms, update %d: factor %v %v, want 1 none", i, fs[i], sigs[i])
		}
	}

	// The same group stuck (nothing answered): the two requests out at
	// 750ms were sent after the Update at 500ms, so at 1250ms they have
	// been out at least 500ms > 2 × 200ms.
	e = New(DefaultConfig())
	e.Update(t0.Add(-20*time.Second), ok(10, lat, 10))
	e.Update(t0.Add(-20*time.Second+250*time.Millisecond), Sample{Instances: 1, Capacity: 28.5})
	fs, sigs = slowGroup(e, 0, 0, 6)
	if fs[3] != 1 || fs[4] != 1 || fs[5] != 0.1 || sigs[5] != SignalInFlight {
		t.Errorf("stuck, baseline 200ms: factors %v signals %v, want 1 until 1250ms, then 0.1 in_flight", fs, sigs)
	}

	// Stuck, limits 20, no answer time: young until a second of silence
	// (the silence began at the Update at 500ms; 10 out at 1500ms, within
	// the limits).
	e = New(DefaultConfig())
	fs, sigs = slowGroup(e, 0, 20, 7)
	if fs[5] != 1 || fs[6] != 0.1 || sigs[6] != SignalInFlight {
		t.Errorf("stuck, limits 20: factors %v signals %v, want 1 until 1500ms, then 0.1 in_flight", fs, sigs)
	}
	// Stuck at its limits: no slot left to be serving them, a stall at once.
	e = New(DefaultConfig())
	if f, sig := e.Update(t0, Sample{Outstanding: 10, InFlight: 10, Limit: 10, Instances: 1, Load: 10, Capacity: 28.5}); f != 0.1 || sig != SignalInFlight {
		t.Errorf("10 out at limits 10, none answered: %v %v, want 0.1 in_flight", f, sig)
	}
}

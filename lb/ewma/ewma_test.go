package ewma

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestValue(t *testing.T) {
	tests := []struct {
		name    string
		alpha   float64
		samples []float64
		want    float64
	}{
		{"first sample sets", 0.5, []float64{10}, 10},
		{"half way", 0.5, []float64{10, 20}, 15},
		{"default alpha", 0, []float64{10, 20}, 13},
		{"converges", 0.5, []float64{0, 8, 8, 8}, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Value{Alpha: tt.alpha}
			var got float64
			for _, s := range tt.samples {
				got = v.Update(s)
			}
			if math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("Update(%v) = %v, want %v", tt.samples, got, tt.want)
			}
		})
	}
}

func TestRate(t *testing.T) {
	r := Rate{Alpha: 1}
	t0 := time.Unix(1000, 0)
	if got := r.Sample(t0); got != 0 {
		t.Fatalf("first Sample = %v, want 0", got)
	}
	r.Add(500)
	if got := r.Sample(t0.Add(500 * time.Millisecond)); got != 1000 {
		t.Fatalf("Sample after 500 events in 0.5s = %v, want 1000", got)
	}
	r.Add(100)
	if got := r.Sample(t0.Add(1500 * time.Millisecond)); got != 100 {
		t.Fatalf("Sample after 100 events in 1s = %v, want 100", got)
	}
	if got := r.Sample(t0.Add(1500 * time.Millisecond)); got != 100 {
		t.Fatalf("Sample with no time passed = %v, want unchanged 100", got)
	}
	if got := r.Total(); got != 600 {
		t.Fatalf("Total = %d, want 600", got)
	}
}

func TestRateAddAllocs(t *testing.T) {
	var r Rate
	if n := testing.AllocsPerRun(100, func() { r.Add(1) }); n != 0 {
		t.Fatalf("Add allocates %v times, want 0", n)
	}
}

func TestRateTau(t *testing.T) {
	// With Tau = 1s a sample dt after the previous one weighs 1 − e^−dt.
	t0 := time.Unix(0, 0)
	half := Rate{Tau: time.Second}
	whole := Rate{Tau: time.Second}
	half.Sample(t0)
	whole.Sample(t0)
	half.Add(100)
	whole.Add(100)
	half.Sample(t0.Add(500 * time.Millisecond)) // first sample sets 200/s
	whole.Sample(t0.Add(500 * time.Millisecond))
	half.Add(400)
	whole.Add(400)
	// half sees the same 400 events as 1600/s over 0.25s, then 0/s.
	half.Sample(t0.Add(750 * time.Millisecond))
	got := half.Sample(t0.Add(1000 * time.Millisecond))
	want := whole.Sample(t0.Add(1000 * time.Millisecond))
	a := -math.Expm1(-0.5)
	if w := 200 + a*(800-200); math.Abs(want-w) > 1e-9 {
		t.Errorf("Tau sample = %v, want %v", want, w)
	}
	b := -math.Expm1(-0.25)
	h := 200 + b*(1600-200)
	h += b * (0 - h)
	if math.Abs(got-h) > 1e-9 {
		t.Errorf("Tau samples at 0.25s steps = %v, want %v", got, h)
	}
}

func TestLevel(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type step struct {
		at time.Duration
		x  float64
	}
	tests := []struct {
		name   string
		tau    time.Duration
		attack bool
		steps  []step
		want   float64
	}{
		{"first sample sets", time.Second, false, []step{{0, 7}}, 7},
		{"one tau", time.Second, false, []step{{0, 0}, {time.Second, 10}}, 10 * (1 - math.Exp(-1))},
		{"two half taus equal one tau", time.Second, false, []step{{0, 0}, {500 * time.Millisecond, 10}, {time.Second, 10}}, 10 * (1 - math.Exp(-1))},
		{"time going back is ignored", time.Second, false, []step{{time.Second, 4}, {0, 100}}, 4},
		{"zero tau follows", 0, false, []step{{0, 1}, {time.Second, 9}}, 9},
		// FastAttack: 100 → 150 is 5 square roots and 50% up: taken at
		// once; 100 → 125 is 2.5 square roots up: smoothed; a fall is
		// smoothed.
		{"attack: a rise passes at once", time.Second, true, []step{{0, 100}, {time.Second, 150}}, 150},
		{"attack: a rise within the noise is smoothed", time.Second, true, []step{{0, 100}, {time.Second, 125}}, 100 + 25*(1-math.Exp(-1))},
		{"attack: a fall is smoothed", time.Second, true, []step{{0, 100}, {time.Second, 10}}, 100 - 90*(1-math.Exp(-1))},
		{"attack: from zero", 2 * time.Second, true, []step{{0, 0}, {time.Second, 30}}, 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := Level{Tau: tt.tau, FastAttack: tt.attack}
			var got float64
			for _, s := range tt.steps {
				got = l.Sample(t0.Add(s.at), s.x)
			}
			if math.Abs(got-tt.want) > 1e-12 {
				t.Errorf("Sample = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestRateFastAttack: with FastAttack a step up in the rate is the
// estimate after one whole sampling interval, a step down decays with Tau,
// and counts within the Poisson noise of a steady rate are smoothed.
func TestRateFastAttack(t *testing.T) {
	const dt = 250 * time.Millisecond
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name   string
		counts []int64 // events per interval of dt, after a first Sample at t0
		want   float64 // the estimate after the last interval
	}{
		// The first interval sets the level; then 200/s is 50 a step.
		{"steady", []int64{50, 50, 50}, 200},
		// 200/s to 450/s: 112 or 113 events a step; the first one jumps.
		{"step up shows in one interval", []int64{50, 50, 112}, 448},
		// Noise of ±2σ (σ = √50 ≈ 7) is smoothed: 64 predicted 50 is
		// 200 + (256−200)(1−e^−0.25).
		{"noise is smoothed", []int64{50, 64}, 200 + 56*-math.Expm1(-0.25)},
		// 3σ above but under 10% more: at 40,000/s a step predicts 10,000,
		// σ = 100; 10,400 is 4σ but only 4% more.
		{"small relative excess is smoothed", []int64{10000, 10400}, 40000 + 1600*-math.Expm1(-0.25)},
		// 450/s to 200/s decays with Tau (1 s): after 1 s, 37% of the step
		// is left.
		{"step down decays", []int64{112, 50, 50, 50, 50}, 200 + 248*math.Exp(-1)},
		// At 4/s one event is predicted per step: 4 is within 3σ (1+3),
		// 5 is not.
		{"low rate: within 3σ", []int64{1, 4}, 4 + 12*-math.Expm1(-0.25)},
		{"low rate: beyond 3σ", []int64{1, 5}, 20},
		// A stall and its catch-up (30 then 75 against 50 predicted) is
		// not a rise: 75 is 3.5σ and 50% above 50, and would attack, but
		// less the 20 the stall left short it is 55, and is smoothed.
		{"stall and catch-up is smoothed", []int64{50, 50, 30, 75}, ewmaSteps(200, 120, 300)},
		// A real rise right after a stall still attacks, with the
		// catch-up left out: 30, then 30 + 112 − 20 shortfall.
		{"rise after a stall attacks", []int64{50, 50, 30, 142}, (142 - 20) * 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Rate{Tau: time.Second, FastAttack: true}
			now := t0
			r.Sample(now)
			var got float64
			for _, c := range tt.counts {
				r.Add(c)
				now = now.Add(dt)
				got = r.Sample(now)
			}
			if math.Abs(got-tt.want) > 1e-6 {
				t.Errorf("after %v: %v, want %v", tt.counts, got, tt.want)
			}
		})
	}
}

// ewmaSteps returns a Tau = 1 s level at start after samples of rates, each
// a dt = 250 ms interval (the smoothing TestRateFastAttack expects).
func ewmaSteps(start float64, rates ...float64) float64 {
	v := start
	for _, r := range rates {
		v += (r - v) * -math.Expm1(-0.25)
	}
	return v
}

// TestRateSummedRise: a step up under the one-interval thresholds attacks
// once its run of intervals passes them summed (rise), at the gfe's
// constants (Tau 2 s, 500 ms plan interval): 300/s to 340/s (+13%) is 170
// events against 150 predicted, 1.6σ, so one interval is smoothed; summed
// over four intervals (2 s) it is 3.3σ and 13% above, and the estimate is
// 340. Smoothing alone would be at 300 + 40·(1 − e^−1) ≈ 325 by then.
func TestRateSummedRise(t *testing.T) {
	const dt = 500 * time.Millisecond
	r := Rate{Tau: 2 * time.Second, FastAttack: true}
	now := time.Unix(1000, 0)
	r.Sample(now)
	for range 20 {
		r.Add(150)
		now = now.Add(dt)
		r.Sample(now)
	}
	var got []float64
	for range 4 {
		r.Add(170)
		now = now.Add(dt)
		got = append(got, r.Sample(now))
	}
	if got[0] >= 310 {
		t.Errorf("after one interval of +13%%: %.1f/s, want it smoothed (under 310)", got[0])
	}
	if math.Abs(got[3]-340) > 1e-6 {
		t.Errorf("after four intervals of +13%%: %.1f/s (every interval: %.1f), want 340", got[3], got)
	}
}

// TestRateSummedRiseNoise: at a steady 300/s with Poisson noise (normal
// approximation, seeded), summed runs leave the estimate within 10% of
// the rate in all but 1% of 4000 intervals of 500 ms (35 with this seed;
// 24 from the one-interval attack alone, before summed runs).
func TestRateSummedRiseNoise(t *testing.T) {
	const dt = 500 * time.Millisecond
	rng := rand.New(rand.NewPCG(1, 2))
	r := Rate{Tau: 2 * time.Second, FastAttack: true}
	now := time.Unix(1000, 0)
	r.Sample(now)
	high := 0
	for i := range 4000 {
		r.Add(int64(math.Round(150 + math.Sqrt(150)*rng.NormFloat64())))
		now = now.Add(dt)
		if v := r.Sample(now); i > 10 && v > 330 {
			high++
		}
	}
	if high > 40 {
		t.Errorf("%d of 4000 estimates above 330/s at a steady 300/s, want at most 40 (1%%)", high)
	}
}

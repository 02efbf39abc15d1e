package autoscalebench

import (
	"math"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/autoscale/window"
)

// The scorecard's evidence rows, after the five: the Kubernetes
// HPA, and the Cloud Run rules with the waterfall as their buffer run with
// Knative's constants instead of the seeds', so that the cost comparison
// with the KPA is at equal constants. docs/design.md §6 lets an operator
// set both: "scaling controls to specify custom CPU or concurrency
// targets", and every time constant is configurable.
const (
	// KnativeTarget is the KPA's target utilization
	// (container-concurrency-target-percentage 70%).
	KnativeTarget = 0.7
	// KnativeWindow is the KPA's stable window (60s).
	KnativeWindow = 60 * time.Second
	// KnativeTick is the KPA's tick (2s): with Knative's default
	// scale-down-delay of 0s, a scale-down takes effect at the next one.
	KnativeTick = 2 * time.Second

	// Oracle70 is the oracle at KnativeTarget: the floor for
	// instance-seconds at the KPA's target, against which the @70% rows'
	// relative columns (÷ oracle, overshoot, post-panic dip) are taken.
	Oracle70 = "oracle@70%"
	// Waterfall70 is cloudrun+waterfall with both targets at
	// KnativeTarget, the seeds' time constants otherwise.
	Waterfall70 = "cloudrun+waterfall@70%"
	// Waterfall70Windows is Waterfall70 with every time constant of the
	// rules that is longer than the KPA's stable window cut to it
	// (KnativeWindow): the concurrency driver's long window (10m) and the
	// second demoted set's idle timeout (15m).
	Waterfall70Windows = "cloudrun+waterfall@70%,60s"
	// WaterfallKnative is Waterfall70Windows with the first demoted set
	// stopped after KnativeTick below DemotedIdleUtilization instead of a
	// minute: scale-down by demotion as prompt as the KPA's.
	WaterfallKnative = "cloudrun+waterfall@knative"
	// CloudrunKnative is the Cloud Run rules alone (one region, no
	// buffer) with WaterfallKnative's constants: what the constants alone
	// change, against cloudrun.
	CloudrunKnative = "cloudrun@knative"
)

// variantRuns returns the evidence rows' runs, in the order of
// Autoscalers after cloudrun+waterfall (Oracle70 is a placeholder the
// caller fills with the oracle at KnativeTarget).
func variantRuns(m Model, cold time.Duration, initial int) []caseRun {
	targets := func(a *config.Autoscaling) {
		a.CPUTarget, a.ConcurrencyTarget = KnativeTarget, KnativeTarget
	}
	windows := func(a *config.Autoscaling) {
		a.ConcurrencyLongWindow, a.IdleTimeout = KnativeWindow, KnativeWindow
	}
	demotion := func(a *config.Autoscaling) { a.DemotedIdleWindow = KnativeTick }
	return []caseRun{
		{"hpa", newHPAScaler(m, cold, initial), false, 0},
		{Oracle70, nil, false, 1},
		{Waterfall70, newCloudRunScaler(m, cold, initial, targets), true, 1},
		{Waterfall70Windows, newCloudRunScaler(m, cold, initial, targets, windows), true, 1},
		{WaterfallKnative, newCloudRunScaler(m, cold, initial, targets, windows, demotion), true, 1},
		{CloudrunKnative, newCloudRunScaler(m, cold, initial, targets, windows, demotion), false, 1},
	}
}

// HPA defaults (Kubernetes' horizontal pod autoscaler, autoscaling/v2):
// the controller's sync period, tolerance, scale-down stabilization window
// and default scale-up policies (the larger of 4 pods and 100% per 15s),
// minReplicas 1.
const (
	hpaSyncPeriod      = 15 * time.Second
	hpaTolerance       = 0.1
	hpaDownStabilize   = 300 * time.Second
	hpaUpPods          = 4
	hpaUpPercent       = 100
	hpaMinReplicas     = 1
	hpaMetricsInterval = 15 * time.Second // metrics-server's resolution
)

// hpaScaler is the Kubernetes HPA with its defaults on CPU utilization at
// the model's target (the seeds' 60%: the row compares the algorithm, not
// the target). Every hpaSyncPeriod it reads the mean CPU of the last
// hpaMetricsInterval (metrics-server's window; queued requests use no CPU,
// so it sees at most 100% per ready pod) and computes, as the replica
// calculator does:
//
//	ratio   = cores in use / (ready pods × target)
//	desired = ceil(cores in use / target)
//
// holding the count while |ratio − 1| ≤ tolerance; on a scale-up, pods not
// yet ready count at 0% (ratio over ready + starting pods), and if that
// ratio no longer says up by more than the tolerance it holds. The
// recommendation is then stabilized: a scale-down takes the highest
// recommendation of the last 300s; a scale-up is bounded by the default
// policies to max(current + 4, 2 × current). minReplicas is 1 (the HPA
// does not scale to zero) and maxReplicas the model's max. Requests that
// find no free slot wait in the model's FIFO queue and never fail (there
// is no activator and no request timeout in the model). Not modelled: the
// CPU initialization period and the readiness delay (a pod's CPU counts
// from its first ready second).
type hpaScaler struct {
	m     Model
	cold  time.Duration
	cpu   window.Mean
	ticks int
	// recs are the recommendations of the last hpaDownStabilize, oldest
	// first, with their times.
	recs []hpaRec
}

type hpaRec struct {
	at time.Time
	n  int
}

func newHPAScaler(m Model, cold time.Duration, _ int) *hpaScaler {
	return &hpaScaler{m: m, cold: cold, cpu: window.Mean{Span: hpaMetricsInterval}}
}

func (s *hpaScaler) second(now time.Time, sec second, f *fleet) {
	s.cpu.Add(now, sec.CPU)
	s.ticks++
	if s.ticks%int(hpaSyncPeriod/time.Second) != 0 {
		return
	}
	current := len(f.readyAt)
	want := s.recommend(now, f.ready(now), current)
	if n := want - current; n > 0 {
		f.start(now, n, s.cold)
	} else {
		f.stop(-n)
	}
}

// recommend returns the replica count at now for ready of current pods
// (the rest starting), after tolerance, stabilization and policies.
func (s *hpaScaler) recommend(now time.Time, ready, current int) int {
	cores := s.cpu.Value()
	target := s.m.Target // cores per pod aimed for: 1 core requested per instance
	raw := current
	switch {
	case ready == 0:
		// No pod reports a metric: nothing to compute from.
	default:
		ratio := cores / (float64(ready) * target)
		if math.Abs(ratio-1) > hpaTolerance {
			raw = ceilN(cores / target)
			if ratio > 1 && current > ready {
				// Scale-up with pods not ready yet: they count at 0%.
				if r2 := cores / (float64(current) * target); r2 <= 1+hpaTolerance {
					raw = current
				}
			}
		}
	}
	raw = min(max(raw, hpaMinReplicas), s.m.MaxInstances)
	s.recs = append(s.recs, hpaRec{now, raw})
	for len(s.recs) > 0 && !s.recs[0].at.After(now.Add(-hpaDownStabilize)) {
		s.recs = s.recs[1:]
	}
	want := raw
	if raw < current {
		// Scale-down stabilization: the highest recommendation of the
		// window, never above the current count.
		for _, r := range s.recs {
			want = max(want, r.n)
		}
		want = min(want, current)
	}
	if up := max(current+hpaUpPods, current*(100+hpaUpPercent)/100); want > up {
		want = up
	}
	return min(max(want, hpaMinReplicas), s.m.MaxInstances)
}

func (s *hpaScaler) step(time.Time, []batch, int64, int64, *fleet, int) (int64, int64) {
	return 0, 0
}

// ceilN rounds x up, treating x within 1e-9 above an integer as that
// integer.
func ceilN(x float64) int {
	if x <= 0 {
		return 0
	}
	return int(math.Ceil(x - 1e-9))
}

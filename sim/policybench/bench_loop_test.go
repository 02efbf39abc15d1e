package policybench

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/spillway-lb/spillway/internal/benchpolicy"
	"github.com/spillway-lb/spillway/lb/backend"
	lbcapacity "github.com/spillway-lb/spillway/lb/capacity"
	"github.com/spillway-lb/spillway/lb/routing"
	"github.com/spillway-lb/spillway/sim"
)

// newTestRunner returns a runner of policy p over s's whole timeline, and
// its working state, as Bench sets them up.
func newTestRunner(t *testing.T, s *sim.Scenario, p benchpolicy.Row) (*runner, *stepState) {
	t.Helper()
	tl := *s.Timeline
	tr := s.NewTrace(&tl, tl.Steps())
	topo, err := newTopology(s, &tl, tr, []benchpolicy.Row{p})
	if err != nil {
		t.Fatal(err)
	}
	lps, err := topo.solveSteps(tr)
	if err != nil {
		t.Fatal(err)
	}
	r := newRunner(s, &tl, tr, topo, lps, p, false)
	return r, r.newStepState()
}

func TestReportedUtilization(t *testing.T) {
	tests := []struct {
		name                           string
		backlog, lambda, mu, dt, waitS float64
		want                           float64
	}{
		{name: "idle", mu: 125, dt: 1},
		{name: "no queue", lambda: 100, mu: 125, dt: 1, want: 0.8},
		// Arrivals outrun service all step: at least 1, plus the wait.
		{name: "queue builds", lambda: 150, mu: 125, dt: 1, waitS: 0.1, want: 1.2 + 0.1},
		{name: "queue holds", backlog: 10, lambda: 125, mu: 125, dt: 1, waitS: 0.08, want: 1 + 0.08},
		// 25 requests drain at 125 − 25 = 100/s: a queue for a quarter of
		// the step, at 1 instead of 0.2.
		{name: "queue drains", backlog: 25, lambda: 25, mu: 125, dt: 1, waitS: 0.025, want: 0.2 + 0.25*0.8 + 0.025},
		{name: "queue drains all step", backlog: 500, lambda: 25, mu: 125, dt: 1, waitS: 3.6, want: 1 + 3.6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := reportedUtilization(tt.backlog, tt.lambda, tt.mu, tt.dt, tt.waitS); math.Abs(got-tt.want) > 1e-12 {
				t.Errorf("reportedUtilization = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestBatchCarry: fractional requests carry over from batch to batch, per
// outcome, so that the counts over many batches are exact to one request.
func TestBatchCarry(t *testing.T) {
	var c batchCarry
	var ok, rejected, failed int
	for range 1000 {
		o, r, f := c.take(2.37, 0.011, 0.5)
		ok, rejected, failed = ok+o, rejected+r, failed+f
	}
	if ok != 2370 || rejected != 11 || failed != 500 {
		t.Errorf("counts over 1000 batches = %d, %d, %d; want 2370, 11, 500", ok, rejected, failed)
	}
}

// TestBenchSignals checks what one step's requests tell the gfe, on the
// counters of the builder's Backend of each instance (what its next Build
// takes).
func TestBenchSignals(t *testing.T) {
	ms := float64(time.Millisecond)
	tests := []struct {
		name string
		yaml string
		// steps to run; the signals of the last are checked on the
		// instance slots listed in want.
		steps  int
		policy string
		want   map[int]backend.Signals
	}{
		{
			// Step 1 of "overload with a full queue" (TestBenchOneInstance):
			// the 200 ms queue is full from step 0, so 25 of the 150
			// arrivals are refused; the 125 served wait 200 ms behind the
			// backlog plus 208 ms of saturated M/M/1, 10 ms away. The
			// instance reports 150/125 + 0.2 s of work waiting.
			name:   "refused and served",
			yaml:   oneInstance(150, "timeline: {duration_s: 2, model: {max_queue_ms: 200}}"),
			steps:  2,
			policy: "waterfall",
			want: map[int]backend.Signals{0: {
				Answered: 150, Rejected: 25,
				Latency: 125 * time.Duration((10+200+208)*ms),
				Reports: 1, Utilization: 1.2 + 0.2, Rates: 1, Rate: 150,
			}},
		},
		{
			name:   "no load reports",
			yaml:   oneInstance(150, "timeline: {duration_s: 2, model: {max_queue_ms: 200, load_reports: false}}"),
			steps:  2,
			policy: "waterfall",
			want: map[int]backend.Signals{0: {
				Answered: 150, Rejected: 25,
				Latency: 125 * time.Duration((10+200+208)*ms),
			}},
		},
		{
			// One of two instances fails at t = 1; the gfe learns of it at
			// t = 3, so in step 1 the 50 requests sent to it get no answer.
			name: "sent to an instance that is down",
			yaml: `
regions: [{name: r, groups: [{name: g, instances: 2, healthy: 2, rate_per_instance: 100}]}]
sites: [{name: s, demand_rps: 100, rtt_ms: {r: 10}}]
timeline: {duration_s: 2, events: [{at_s: 1, group: g, healthy: 1}]}
`,
			steps:  2,
			policy: "waterfall",
			want: map[int]backend.Signals{
				// 50 on μ = 125: M/M/1 of 1/75 s.
				0: {Answered: 50, Latency: 50 * time.Duration((10+1000.0/75)*ms), Reports: 1, Utilization: 0.4, Rates: 1, Rate: 50},
				1: {Failed: 50},
			},
		},
		{
			// A batch of 5000 requests is counted as 1000.
			name:   "large batch",
			yaml:   `{regions: [{name: r, groups: [{name: g, instances: 1, healthy: 1, rate_per_instance: 10000}]}], sites: [{name: s, demand_rps: 5000, rtt_ms: {r: 10}}], timeline: {duration_s: 1}}`,
			steps:  1,
			policy: "waterfall",
			want: map[int]backend.Signals{0: {
				Answered: 1000, Latency: 1000 * time.Duration((10+1000.0/7500)*ms), Reports: 1, Utilization: 0.4, Rates: 1, Rate: 5000,
			}},
		},
		{
			// The baselines' builds read no signals: none are given.
			name:   "baseline",
			yaml:   oneInstance(150, "timeline: {duration_s: 2, model: {max_queue_ms: 200}}"),
			steps:  2,
			policy: "hash5/global",
			want:   map[int]backend.Signals{0: {}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, st := newTestRunner(t, mustParse(t, tt.yaml), policies(t, tt.policy)[0])
			var tot benchTotals
			for k := range tt.steps {
				// Each step's Build takes the signals of the step before.
				if _, err := r.step(k, &tot, st); err != nil {
					t.Fatal(err)
				}
			}
			for slot, want := range tt.want {
				be := r.gfes.builders[0].Backend(r.topo.slotAddr[slot])
				if be == nil {
					t.Fatalf("slot %d: the gfe has no backend", slot)
				}
				got := be.TakeSignals()
				opts := cmpopts.EquateApprox(0, 1e-6)
				if diff := cmp.Diff(want, got, opts, cmp.Comparer(func(a, b time.Duration) bool { return (a - b).Abs() <= time.Duration(want.Answered) })); diff != "" {
					t.Errorf("slot %d signals mismatch (-want +got):\n%s", slot, diff)
				}
			}
		})
	}
}

// groupCapacity returns site si's last table's GroupCapacity of group
// (the scenario's name).
func groupCapacity(t *testing.T, r *runner, si int, group string) routing.GroupCapacity {
	t.Helper()
	name := r.topo.groupCfg[r.topo.groupIdx[group]]
	for _, gc := range r.gfes.tables[si].Services[benchService].Capacity() {
		if gc.Group == name {
			return gc
		}
	}
	t.Fatalf("site %d's table has no group %s", si, group)
	return routing.GroupCapacity{}
}

// TestBenchFactorGossip: one of X's two instances fails at t = 1 and the
// gfes learn of it at t = 1 + gossip delay. Site a, which sends to X, gets
// connect errors in step 1 and shrinks X in its own plan of step 2; site b,
// which sends only to Y, hears a's factor one gossip delay later, rounded
// up to whole steps and at least one step (the gfes of one step do not
// hear each other), and plans X with it; with a delay longer than the run,
// never.
func TestBenchFactorGossip(t *testing.T) {
	for _, delay := range []float64{0.5, 2, 3, 1e9} {
		t.Run(fmt.Sprintf("gossip delay %v", delay), func(t *testing.T) {
			s := mustParse(t, fmt.Sprintf(`
regions:
  - {name: X, groups: [{name: x, instances: 2, healthy: 2, rate_per_instance: 100}]}
  - {name: Y, groups: [{name: y, instances: 10, healthy: 10, rate_per_instance: 100}]}
sites:
  - {name: a, demand_rps: 100, rtt_ms: {X: 1, Y: 50}}
  - {name: b, demand_rps: 100, rtt_ms: {X: 50, Y: 1}}
timeline: {duration_s: 6, gossip_delay_s: %v, events: [{at_s: 1, group: x, healthy: 1}]}
`, delay))
			r, st := newTestRunner(t, s, policies(t, "waterfall")[0])
			lag := max(1, int(math.Ceil(delay)))
			var tot benchTotals
			var shrunk float64
			for k := range r.tr.Steps {
				if _, err := r.step(k, &tot, st); err != nil {
					t.Fatal(err)
				}
				a, b := groupCapacity(t, r, 0, "x"), groupCapacity(t, r, 1, "x")
				if k == 2 {
					if !(a.Own < 1) || a.Signal != lbcapacity.SignalConnectErrors {
						t.Fatalf("step 2: a's own factor %v (%v), want below 1 from connect errors", a.Own, a.Signal)
					}
					shrunk = a.Own
				}
				if b.Own != 1 {
					t.Errorf("step %d: b's own factor %v, want 1 (it sends nothing to X)", k, b.Own)
				}
				switch {
				case k < 2+lag && b.Factor != 1:
					t.Errorf("step %d: b plans X at factor %v before it can have heard of a's, want 1", k, b.Factor)
				case k == 2+lag && b.Factor != shrunk:
					t.Errorf("step %d: b plans X at factor %v, want a's %v of step 2", k, b.Factor, shrunk)
				}
			}
		})
	}
}

// TestBenchLoopFlashCrowd shows the closed loop at work in simulation:
// three sites near X (1000 rps, planned at 950) step from 250 to 500 rps
// together at t = 10 for 20 s, and gossip takes 5 s. Each site's gfe knows
// its own new demand at once but the others' only 5 s later, so each fills
// X as if the others still sent 250: X gets 1450 rps, 145% of its
// capacity.
//
//   - Loop off: X stays at 1450 until gossip brings the new demand (t =
//     15): 5 steps, 7250 of the run's 45,000 requests, are served over
//     capacity.
//   - Loop on: every gfe sees X queue in step 10 and shrinks X in its own
//     plan of step 11, before gossip. X's load reports of step 10 also
//     show more than the plan and the gfe's own requests explain (the
//     others' rise), so each gfe plans step 11 as if the others rose as
//     it did (the herd guard, lb/routing/herd.go): X is back
//     under its capacity from step 11, and requests wait less. The price
//     is X's unused capacity until gossip comes and while its factor
//     recovers: more requests go to far Y.
//
// At commit c08e051, with the shrink alone, over capacity fell from 16.1%
// to 13.0%, the load above capacity from 5.0% to 1.9% and the p99 from
// 1555 ms to 841 ms; with the herd guard, to 3.2%, 1.0% and 475 ms
// (X at 705 req/s in steps 11-13, 747 in step 14).
func TestBenchLoopFlashCrowd(t *testing.T) {
	rows := map[bool]Row{}
	loads := map[bool][]float64{}
	for _, feedback := range []bool{false, true} {
		s := mustParse(t, fmt.Sprintf(`
regions:
  - {name: X, groups: [{name: x, instances: 10, healthy: 10, rate_per_instance: 100}]}
  - {name: Y, groups: [{name: y, instances: 20, healthy: 20, rate_per_instance: 100}]}
sites:
  - {name: a, demand_rps: 250, rtt_ms: {X: 1, Y: 50}}
  - {name: b, demand_rps: 250, rtt_ms: {X: 2, Y: 50}}
  - {name: c, demand_rps: 250, rtt_ms: {X: 3, Y: 50}}
timeline:
  duration_s: 40
  gossip_delay_s: 5
  feedback: %v
  demand: [{site: "*", kind: flash_crowd, at_s: 10, rps: 500, hold_s: 20}]
`, feedback))
		res, byID := benchRows(t, s, Options{Series: true, Policies: policies(t, "waterfall")})
		rows[feedback] = byID["waterfall"]
		loads[feedback] = series(t, res, "waterfall", "X", load)
		var table strings.Builder
		if err := res.WriteTable(&table); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(table.String(), "damping 0.5, feedback off, seed"); got == feedback {
			t.Errorf("feedback %v: table header %q says feedback off: %v", feedback, strings.SplitN(table.String(), "\n", 2)[0], got)
		}
	}
	off, on := rows[false], rows[true]
	want := []float64{750, 1450, 1450, 1450, 1450, 1450, 950}
	if diff := cmp.Diff(want, loads[false][9:16], cmpopts.EquateApprox(1e-12, 1e-9)); diff != "" {
		t.Errorf("loop off: load on X at t = 9..15 mismatch (-want +got):\n%s", diff)
	}
	if got, want := off.OverCapacity, 7250.0/45000; math.Abs(got-want) > 1e-9 {
		t.Errorf("loop off: over capacity %v, want %v (steps 10 to 14)", got, want)
	}
	x := loads[true]
	if diff := cmp.Diff([]float64{750, 1450}, x[9:11], cmpopts.EquateApprox(1e-12, 1e-9)); diff != "" {
		t.Errorf("loop on: load on X at t = 9, 10 (before the loop can act) mismatch (-want +got):\n%s", diff)
	}
	for k := 11; k < 15; k++ {
		if !(x[k] <= 1000) {
			t.Errorf("loop on: load on X at t = %d is %v (t = 9..16: %v), want at most X's capacity of 1000 from the first build after the overload until gossip comes", k, x[k], x[9:17])
		}
	}
	if !(on.OverCapacity < off.OverCapacity) || !(on.Excess < off.Excess) || !(on.P99Ms < off.P99Ms) || !(on.CrossRegion > off.CrossRegion) {
		t.Errorf("loop on: over capacity %.4f, excess %.4f, p99 %.1f ms, cross-region %.3f; off: %.4f, %.4f, %.1f ms, %.3f; want the first three lower and more cross-region traffic",
			on.OverCapacity, on.Excess, on.P99Ms, on.CrossRegion, off.OverCapacity, off.Excess, off.P99Ms, off.CrossRegion)
	}
	t.Logf("loop off: over capacity %.4f, excess %.4f, p99 %.1f ms, cross-region %.3f; on: %.4f, %.4f, %.1f ms, %.3f",
		off.OverCapacity, off.Excess, off.P99Ms, off.CrossRegion, on.OverCapacity, on.Excess, on.P99Ms, on.CrossRegion)
}

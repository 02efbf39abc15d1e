package sim

import (
	"errors"
	"math"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// tinyRegions is a two-region, one-group-each layout for inline timeline
// tests; append sites and a timeline.
const tinyRegions = `
regions:
  - name: us-east
    groups:
      - {name: us-east-b, instances: 10, healthy: 10, rate_per_instance: 100}
  - name: eu-west
    groups:
      - {name: eu-west-b, instances: 10, healthy: 10, rate_per_instance: 100}
sites:
  - {name: nyc, demand_rps: 500, rtt_ms: {us-east: 5, eu-west: 80}}
  - {name: lon, demand_rps: 300, rtt_ms: {eu-west: 5, us-east: 80}}
`

func TestParseTimeline(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want *Timeline
	}{
		{
			name: "no timeline",
			yaml: tinyRegions,
			want: nil,
		},
		{
			name: "defaults",
			yaml: tinyRegions + "timeline: {duration_s: 30}\n",
			want: func() *Timeline {
				tl := DefaultTimeline()
				tl.DurationS = 30
				return &tl
			}(),
		},
		{
			name: "every key",
			yaml: tinyRegions + `
timeline:
  duration_s: 60
  step_s: 0.5
  gossip_delay_s: 0
  demand_smoothing_s: 2.5
  damping: 1
  feedback: false
  seed: 7
  model:
    utilization_at_capacity: 0.7
    max_queue_ms: 250
    clients_per_site: 10
    connections_per_client: 2
    client_skew: 1.2
    load_reports: false
  demand:
    - {site: nyc, kind: step, at_s: 0, rps: 100}
    - {site: nyc, kind: ramp, at_s: 5, for_s: 5, rps: 200}
    - {site: lon, kind: flash_crowd, at_s: 10, rps: 900, hold_s: 20}
    - {site: "*", kind: diurnal, period_s: 60, amplitude: 0.2, phase_s: -15}
    - {site: lon, kind: noise, amplitude: 0.05}
  events:
    - {at_s: 1, group: us-east-b, healthy: 4}
    - {at_s: 2, group: eu-west-b, instances: 14, cold_start_s: 20}
    - {at_s: 3, group: us-east-b, capacity_scaler: 0.5}
`,
			want: &Timeline{
				DurationS: 60, StepS: 0.5, GossipDelayS: 0, DemandSmoothingS: 2.5, Damping: 1, Feedback: false, Seed: 7,
				Model: Model{UtilizationAtCapacity: 0.7, MaxQueueMs: 250, ClientsPerSite: 10, ConnectionsPerClient: 2, ClientSkew: 1.2, LoadReports: false},
				Demand: []DemandChange{
					{Site: "nyc", Kind: DemandStep, AtS: 0, RPS: 100},
					{Site: "nyc", Kind: DemandRamp, AtS: 5, ForS: 5, RPS: 200},
					{Site: "lon", Kind: DemandFlashCrowd, AtS: 10, RPS: 900, HoldS: 20},
					{Site: AllSites, Kind: DemandDiurnal, PeriodS: 60, Amplitude: 0.2, PhaseS: -15},
					{Site: "lon", Kind: DemandNoise, Amplitude: 0.05},
				},
				Events: []Event{
					{AtS: 1, Group: "us-east-b", Kind: EventHealth, Healthy: 4},
					{AtS: 2, Group: "eu-west-b", Kind: EventScale, Instances: 14, ColdStartS: 20},
					{AtS: 3, Group: "us-east-b", Kind: EventScaler, CapacityScaler: 0.5},
				},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustParse(t, tt.yaml)
			if diff := cmp.Diff(tt.want, s.Timeline); diff != "" {
				t.Errorf("Timeline mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseTimelineBadFiles(t *testing.T) {
	tests := []struct {
		file string
		want []string
	}{
		{"missing-duration.bad.yaml", []string{"timeline.duration_s: required"}},
		{"ranges.bad.yaml", []string{
			"timeline.duration_s: must be a finite number > 0, got 0",
			"timeline.step_s: must be a finite number > 0, got -1",
			"timeline.gossip_delay_s: must be a finite number >= 0, got +Inf",
			"timeline.demand_smoothing_s: must be a finite number in [0, 3600], got -1",
			"timeline.damping: must be in (0,1], got 0",
			"timeline.seed: must be a whole number in [0, 9007199254740992], got 1.5",
			"timeline.model.utilization_at_capacity: must be in (0,1], got 1.5",
			"timeline.model.max_queue_ms: must be a finite number > 0, got 0",
			"timeline.model.clients_per_site: must be a whole number in [1, 100000], got 0",
			"timeline.model.connections_per_client: must be a whole number in [1, 100], got 2.5",
			"timeline.model.client_skew: must be in [0,4], got 5",
		}},
		{"too-many-steps.bad.yaml", []string{"timeline: duration_s / step_s must be at most 100000 steps, got 1000000"}},
		{"too-many-keys.bad.yaml", []string{"timeline.model: clients_per_site × connections_per_client must be at most 1000000, got 10000000"}},
		{"demand.bad.yaml", []string{
			`timeline.demand[0].site: unknown site "paris"`,
			`timeline.demand[1].kind: unknown kind "surge" (want one of step, ramp, flash_crowd, diurnal, noise)`,
			`timeline.demand[2].kind: required (one of step, ramp, flash_crowd, diurnal, noise)`,
			`timeline.demand[3].site: required`,
			`timeline.demand[4].for_s: not used by kind step`,
			`timeline.demand[5].for_s: required by kind ramp`,
			`timeline.demand[7]: starts at 30 s, before timeline.demand[6] (flash_crowd of site nyc) ends at 37 s; level changes of a site must not overlap`,
			`timeline.demand[8].at_s: must be in [0, duration_s 60), got 60`,
			`timeline.demand[8].rps: must be a finite number >= 0, got -1`,
			`timeline.demand[9].period_s: must be a finite number > 0, got 0`,
			`timeline.demand[9].amplitude: must be in [0,1], got 1.5`,
			`timeline.demand[11]: site lon already has a noise entry (timeline.demand[10])`,
		}},
		{"events.bad.yaml", []string{
			`timeline.events[0].group: unknown group "us-west-b"`,
			`timeline.events[1]: must set one of healthy, instances, capacity_scaler, slowdown`,
			`timeline.events[2]: must set only one of healthy, instances, capacity_scaler, slowdown, got healthy and instances`,
			`timeline.events[3].cold_start_s: only valid with instances`,
			`timeline.events[4].at_s: required`,
			`timeline.events[8].capacity_scaler: must be in [0,1], got 2`,
			`timeline.events[9].at_s: must be in [0, duration_s 60), got 70`,
			`timeline.events[10].instances: must be a whole number in [0, 9007199254740992], got 2.5`,
			`timeline.events[10].cold_start_s: must be a finite number >= 0, got -1`,
			`timeline.events[11].slowdown: must be a finite number >= 1, got 0.5`,
			`timeline.events[12]: must set only one of healthy, instances, capacity_scaler, slowdown, got capacity_scaler and slowdown`,
			`timeline.events[5].healthy: 11 > 10 started instances of group us-east-b at 2 s`,
			`timeline.events[7].instances: scale-down of group eu-west-b to 8 at 5 s while 2 instances are still cold-starting`,
		}},
		{"unknown-key.bad.yaml", []string{`line 13: unknown field "gossip"`, `line 15: unknown field "when"`}},
		{"not-a-mapping.bad.yaml", []string{"line 11: cannot unmarshal !!int `5` into a timeline (a mapping)"}},
		{"wrong-type.bad.yaml", []string{
			"line 13: cannot unmarshal !!map into a list of demand changes",
			"line 15: cannot unmarshal !!str `soon` into a number",
			"line 16: cannot unmarshal !!str `often` into true or false",
			"line 17: cannot unmarshal !!int `2` into true or false",
		}},
	}
	covered := map[string]bool{}
	for _, tt := range tests {
		covered[tt.file] = true
		t.Run(tt.file, func(t *testing.T) {
			_, err := LoadScenario(filepath.Join("testdata", "bench", tt.file))
			if !errors.Is(err, ErrInvalidScenario) {
				t.Fatalf("LoadScenario error = %v, want ErrInvalidScenario", err)
			}
			var se *ScenarioError
			if !errors.As(err, &se) {
				t.Fatalf("error %T is not a *ScenarioError", err)
			}
			if diff := cmp.Diff(tt.want, se.Problems); diff != "" {
				t.Errorf("problems mismatch (-want +got):\n%s", diff)
			}
		})
	}
	files, err := filepath.Glob(filepath.Join("testdata", "bench", "*.bad.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !covered[filepath.Base(f)] {
			t.Errorf("fixture %s has no entry in the table", f)
		}
	}
}

// TestTimelineValidate checks that a hand-built Timeline is validated like
// a parsed one.
func TestTimelineValidate(t *testing.T) {
	s := mustParse(t, tinyRegions)
	tl := DefaultTimeline()
	tl.StepS = 0
	tl.Events = []Event{{AtS: 0, Group: "us-east-b", Kind: EventHealth, Healthy: 11}}
	s.Timeline = &tl
	err := s.Validate()
	var se *ScenarioError
	if !errors.As(err, &se) {
		t.Fatalf("Validate() = %v, want a *ScenarioError", err)
	}
	want := []string{
		"timeline.step_s: must be a finite number > 0, got 0",
		"timeline.events[0].healthy: 11 > 10 started instances of group us-east-b at 0 s",
	}
	if diff := cmp.Diff(want, se.Problems); diff != "" {
		t.Errorf("problems mismatch (-want +got):\n%s", diff)
	}
}

func TestDemandProgram(t *testing.T) {
	s := mustParse(t, tinyRegions+`
timeline:
  duration_s: 100
  demand:
    - {site: nyc, kind: step, at_s: 0, rps: 100}
    - {site: nyc, kind: ramp, at_s: 10, for_s: 10, rps: 200}
    - {site: nyc, kind: flash_crowd, at_s: 30, rps: 1000, rise_s: 4, hold_s: 10, fall_s: 8}
    - {site: nyc, kind: step, at_s: 60, rps: 50}
    - {site: lon, kind: diurnal, period_s: 40, amplitude: 0.5, phase_s: 10}
`)
	progs := s.demandPrograms(s.Timeline, s.Timeline.Steps())
	nyc, lon := &progs[0], &progs[1]
	nycTests := []struct{ t, want float64 }{
		{0, 100},
		{5, 100},
		{10, 100},  // the ramp starts
		{15, 150},  // halfway up
		{20, 200},  // done
		{32, 600},  // halfway up the rise from 200
		{34, 1000}, // hold
		{44, 1000}, // the fall starts
		{48, 600},  // halfway down to 200
		{52, 200},  // back to the level before
		{60, 50},
		{99, 50},
	}
	for _, tt := range nycTests {
		if got := nyc.at(tt.t); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("nyc demand at %v s = %v, want %v", tt.t, got, tt.want)
		}
	}
	// 300 × (1 + 0.5·sin(2π(t + 10)/40)).
	lonTests := []struct{ t, want float64 }{{0, 450}, {10, 300}, {20, 150}, {30, 300}, {40, 450}, {75, 300 * (1 + 0.5*math.Sqrt2/2)}}
	for _, tt := range lonTests {
		if got := lon.at(tt.t); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("lon demand at %v s = %v, want %v", tt.t, got, tt.want)
		}
	}
}

func TestDemandNoise(t *testing.T) {
	yaml := tinyRegions + `
timeline:
  duration_s: 2000
  seed: 9
  demand:
    - {site: nyc, kind: noise, amplitude: 0.1}
`
	s := mustParse(t, yaml)
	progs := s.demandPrograms(s.Timeline, s.Timeline.Steps())
	var sum, sq float64
	n := s.Timeline.Steps()
	for k := range n {
		v := progs[0].at(float64(k)) / 500
		sum += v
		sq += v * v
	}
	mean := sum / float64(n)
	sd := math.Sqrt(sq/float64(n) - mean*mean)
	if math.Abs(mean-1) > 0.01 || math.Abs(sd-0.1) > 0.01 {
		t.Errorf("noise multiplier mean %v sd %v, want 1 and 0.1", mean, sd)
	}
	if progs[1].at(3) != 300 {
		t.Errorf("lon has no noise but demand %v", progs[1].at(3))
	}
	// The same step gives the same value, whatever the time inside it, and
	// the same seed gives the same sequence.
	again := mustParse(t, yaml).demandPrograms(s.Timeline, n)
	if progs[0].at(7) != progs[0].at(7.5) || progs[0].at(7) != again[0].at(7) {
		t.Errorf("noise is not a function of (seed, site, step)")
	}
}

func TestGroupStates(t *testing.T) {
	s := mustParse(t, tinyRegions+`
timeline:
  duration_s: 20
  events:
    - {at_s: 2, group: us-east-b, healthy: 4}
    - {at_s: 3, group: us-east-b, instances: 14, cold_start_s: 5}
    - {at_s: 4, group: eu-west-b, capacity_scaler: 0.5}
    - {at_s: 9, group: us-east-b, instances: 6}
    - {at_s: 10, group: eu-west-b, instances: 12}
    - {at_s: 11, group: eu-west-b, healthy: 0}
`)
	actions, problems := s.groupActions(nil)
	if len(problems) > 0 {
		t.Fatalf("groupActions problems: %v", problems)
	}
	times := []float64{0, 2, 3, 4, 7.9, 8, 9, 10, 11}
	got := groupStatesAt(s.initialGroupStates(), actions, s.Timeline.Events, times)
	ue := func(started, healthy, pending int) GroupState {
		return GroupState{Started: started, Healthy: healthy, Pending: pending, CapacityScaler: 1}
	}
	ew := func(started, healthy int, scaler float64) GroupState {
		return GroupState{Started: started, Healthy: healthy, CapacityScaler: scaler}
	}
	want := [][]GroupState{
		{ue(10, 10, 0), ew(10, 10, 1)},
		{ue(10, 4, 0), ew(10, 10, 1)},
		{ue(10, 4, 4), ew(10, 10, 1)},   // 4 cold-starting
		{ue(10, 4, 4), ew(10, 10, 0.5)}, // scaler
		{ue(10, 4, 4), ew(10, 10, 0.5)},
		{ue(14, 8, 0), ew(10, 10, 0.5)}, // ready at 3 + 5, healthy
		{ue(6, 6, 0), ew(10, 10, 0.5)},  // scale-down drops the 6 unhealthy first, then 2 healthy
		{ue(6, 6, 0), ew(12, 12, 0.5)},  // no cold start: serving at once
		{ue(6, 6, 0), ew(12, 0, 0.5)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("group states mismatch (-want +got):\n%s", diff)
	}
}

// TestTrace checks the gossip-delayed view: at step k the gfes see the
// world of k − 2 (and of 0 before that).
func TestTrace(t *testing.T) {
	s := mustParse(t, tinyRegions+`
timeline:
  duration_s: 5
  gossip_delay_s: 2
  demand:
    - {site: nyc, kind: step, at_s: 1, rps: 700}
  events:
    - {at_s: 3, group: eu-west-b, healthy: 5}
`)
	tr := s.NewTrace(s.Timeline, 5)
	wantDemand := [][]float64{{500, 300}, {700, 300}, {700, 300}, {700, 300}, {700, 300}}
	wantSeen := [][]float64{{500, 300}, {500, 300}, {500, 300}, {700, 300}, {700, 300}}
	if diff := cmp.Diff(wantDemand, tr.Demand); diff != "" {
		t.Errorf("demand mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantSeen, tr.Seen); diff != "" {
		t.Errorf("seen demand mismatch (-want +got):\n%s", diff)
	}
	var healthy, seenHealthy []int
	for k := range 5 {
		healthy = append(healthy, tr.Groups[k][1].Healthy)
		seenHealthy = append(seenHealthy, tr.SeenGroups[k][1].Healthy)
	}
	if diff := cmp.Diff([]int{10, 10, 10, 5, 5}, healthy); diff != "" {
		t.Errorf("eu-west-b healthy mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{10, 10, 10, 10, 10}, seenHealthy); diff != "" {
		t.Errorf("eu-west-b healthy as seen mismatch (-want +got):\n%s", diff)
	}
}

// TestDemandEstimates checks the gfes' demand filter in the trace: a step
// up shows in full in its own step (fast attack), a step down and a rise
// below the attack threshold decay with the time constant, the other gfes
// see the estimate gossip delay later, and smoothing 0 follows every step.
func TestDemandEstimates(t *testing.T) {
	decay := math.Exp(-1) // one 1 s step of a 1 s time constant
	tests := []struct {
		name      string
		demand    []float64
		smoothing float64
		want      []float64
	}{
		{"step up passes at once", []float64{500, 700, 700}, 1, []float64{500, 700, 700}},
		{"step down decays", []float64{700, 500, 500}, 1, []float64{700, 500 + 200*decay, 500 + 200*decay*decay}},
		{"small rise is smoothed", []float64{1000, 1050, 1050}, 1, []float64{1000, 1050 - 50*decay, 1050 - 50*decay*decay}},
		{"no smoothing", []float64{700, 500, 1050}, 0, []float64{700, 500, 1050}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			demand := make([][]float64, len(tt.demand))
			for k, d := range tt.demand {
				demand[k] = []float64{d}
			}
			got := demandEstimates(demand, 1, tt.smoothing)
			for k := range tt.want {
				if math.Abs(got[k][0]-tt.want[k]) > 1e-9 {
					t.Errorf("step %d: estimate %v, want %v", k, got[k][0], tt.want[k])
				}
			}
		})
	}

	s := mustParse(t, tinyRegions+`
timeline:
  duration_s: 5
  gossip_delay_s: 2
  demand_smoothing_s: 1
  demand:
    - {site: nyc, kind: step, at_s: 1, rps: 400}
`)
	tr := s.NewTrace(s.Timeline, 5)
	nyc := func(m [][]float64) []float64 {
		var out []float64
		for _, row := range m {
			out = append(out, math.Round(row[0]*100)/100)
		}
		return out
	}
	d := 400 + 100*decay
	wantHeard := []float64{500, d, 400 + 100*decay*decay, 400 + 100*decay*decay*decay, 400 + 100*math.Pow(decay, 4)}
	for i := range wantHeard {
		wantHeard[i] = math.Round(wantHeard[i]*100) / 100
	}
	if diff := cmp.Diff(wantHeard, nyc(tr.Heard)); diff != "" {
		t.Errorf("nyc's own estimate mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]float64{wantHeard[0], wantHeard[0], wantHeard[0], wantHeard[1], wantHeard[2]}, nyc(tr.Seen)); diff != "" {
		t.Errorf("nyc's estimate as the others see it mismatch (-want +got):\n%s", diff)
	}
}

// TestShippedScenariosParse checks that every shipped scenario parses and
// which of them have a timeline.
func TestShippedScenariosParse(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "configs", "scenarios", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var timelines []string
	for _, f := range files {
		s, err := LoadScenario(f)
		if err != nil {
			t.Fatal(err)
		}
		if s.Timeline != nil {
			timelines = append(timelines, filepath.Base(f))
		}
	}
	want := []string{"autoscale.yaml", "flash-crowd.yaml", "global-overload.yaml", "large.yaml", "steady.yaml", "uneven.yaml", "unhealthy-region.yaml"}
	if diff := cmp.Diff(want, timelines); diff != "" { // Glob sorts
		t.Errorf("scenarios with a timeline mismatch (-want +got):\n%s", diff)
	}
}

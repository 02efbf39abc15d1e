package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/spillway-lb/spillway/config"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

// approx compares float results up to rounding in the planner.
var approx = cmpopts.EquateApprox(1e-9, 1e-9)

// baselineScenario exercises the baselines' scope rules: region c is the
// nearest for s1 but has no healthy instance, b-drained is healthy but
// drained (capacity_scaler 0), s4's two regions tie on RTT, s3 has no demand.
const baselineScenario = `
regions:
  - name: a
    groups:
      - {name: a-1, instances: 4, healthy: 4, rate_per_instance: 100}   # 400 rps
      - {name: a-2, instances: 4, healthy: 2, rate_per_instance: 100}   # 200 rps
  - name: b
    groups:
      - {name: b-1, instances: 2, healthy: 2, rate_per_instance: 100}   # 200 rps
      - {name: b-drained, instances: 3, healthy: 3, rate_per_instance: 100, capacity_scaler: 0}
  - name: c
    groups:
      - {name: c-1, instances: 3, healthy: 0, rate_per_instance: 100}
sites:
  - {name: s1, demand_rps: 600, rtt_ms: {c: 1, a: 5, b: 50}}
  - {name: s2, demand_rps: 300, rtt_ms: {b: 10}}
  - {name: s3, demand_rps: 0, rtt_ms: {a: 1}}
  - {name: s4, demand_rps: 120, rtt_ms: {b: 20, a: 20}}
`

func TestExpectedFlowsBaselines(t *testing.T) {
	s := mustParse(t, baselineScenario)
	sites := []SiteDemand{{"s1", 600}, {"s2", 300}, {"s3", 0}, {"s4", 120}}
	// Global: s1 sees a (6 eligible) + b (2; b-drained excluded) + c (0) = 8
	// instances, 75 rps each; s4 sees the same 8, 15 rps each.
	global := Result{
		Scope: config.HashScopeGlobal,
		Sites: sites,
		Flows: []Flow{
			{"s1", "a", "a-1", 300, ""}, {"s1", "a", "a-2", 150, ""}, {"s1", "b", "b-1", 150, ""},
			{"s2", "b", "b-1", 300, ""},
			{"s4", "a", "a-1", 60, ""}, {"s4", "a", "a-2", 30, ""}, {"s4", "b", "b-1", 30, ""},
		},
		Regions: []RegionLoad{
			{Name: "a", CapacityRPS: 600, LoadRPS: 540, Utilization: 0.9},
			{Name: "b", CapacityRPS: 200, LoadRPS: 480, Utilization: 2.4},
			{Name: "c", CapacityRPS: 0, LoadRPS: 0, Utilization: 0},
		},
	}
	// Nearest region: s1 skips c (nothing eligible) for a; s4's tie between a
	// and b goes to a by name.
	nearest := Result{
		Scope: config.HashScopeNearestRegion,
		Sites: sites,
		Flows: []Flow{
			{"s1", "a", "a-1", 400, ""}, {"s1", "a", "a-2", 200, ""},
			{"s2", "b", "b-1", 300, ""},
			{"s4", "a", "a-1", 80, ""}, {"s4", "a", "a-2", 40, ""},
		},
		Regions: []RegionLoad{
			{Name: "a", CapacityRPS: 600, LoadRPS: 720, Utilization: 1.2},
			{Name: "b", CapacityRPS: 200, LoadRPS: 300, Utilization: 1.5},
			{Name: "c", CapacityRPS: 0, LoadRPS: 0, Utilization: 0},
		},
	}
	tests := []struct {
		name   string
		policy config.Policy
		scope  config.HashScope
		want   Result
	}{}
	for _, p := range []config.Policy{config.PolicyRoundRobin, config.PolicyLeastRequest, config.PolicyHash2, config.PolicyHash3, config.PolicyHash5} {
		for _, c := range []struct {
			scope config.HashScope
			want  Result
		}{{"", global}, {config.HashScopeGlobal, global}, {config.HashScopeNearestRegion, nearest}} {
			want := c.want
			want.Policy = p
			tests = append(tests, struct {
				name   string
				policy config.Policy
				scope  config.HashScope
				want   Result
			}{name: string(p) + "/" + string(c.scope), policy: p, scope: c.scope, want: want})
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.ExpectedFlows(tt.policy, tt.scope)
			if err != nil {
				t.Fatalf("ExpectedFlows(%s, %q): %v", tt.policy, tt.scope, err)
			}
			if diff := cmp.Diff(&tt.want, got, approx); diff != "" {
				t.Errorf("ExpectedFlows(%s, %q) mismatch (-want +got):\n%s", tt.policy, tt.scope, diff)
			}
		})
	}
}

// TestExpectedFlowsEnvoyPriority: envoy_priority's flows are Envoy's
// priority loads over each site's regions by RTT, from health alone. s1's
// nearest region a is 60% healthy (6 of 10): 84% stays there although it
// is over capacity (no capacity spill), 16% goes to b, whose drained group
// counts for nothing, and none to c. s2 reaches only c.
func TestExpectedFlowsEnvoyPriority(t *testing.T) {
	s := mustParse(t, `
regions:
  - name: a
    groups:
      - {name: a-1, instances: 5, healthy: 3, rate_per_instance: 10}
      - {name: a-2, instances: 5, healthy: 3, rate_per_instance: 10}
  - name: b
    groups:
      - {name: b-1, instances: 4, healthy: 4, rate_per_instance: 10}
      - {name: b-drained, instances: 4, healthy: 4, rate_per_instance: 10, capacity_scaler: 0}
  - name: c
    groups:
      - {name: c-1, instances: 2, healthy: 2, rate_per_instance: 10}
sites:
  - {name: s1, demand_rps: 100, rtt_ms: {a: 5, b: 20, c: 50}}
  - {name: s2, demand_rps: 50, rtt_ms: {c: 1}}
`)
	want := &Result{
		Policy: config.PolicyEnvoyPriority,
		Sites:  []SiteDemand{{"s1", 100}, {"s2", 50}},
		Flows: []Flow{
			{"s1", "a", "a-1", 42, ""}, {"s1", "a", "a-2", 42, ""}, {"s1", "b", "b-1", 16, ""},
			{"s2", "c", "c-1", 50, ""},
		},
		Regions: []RegionLoad{
			{Name: "a", CapacityRPS: 60, LoadRPS: 84, Utilization: 1.4},
			{Name: "b", CapacityRPS: 40, LoadRPS: 16, Utilization: 0.4},
			{Name: "c", CapacityRPS: 20, LoadRPS: 50, Utilization: 2.5},
		},
	}
	got, err := s.ExpectedFlows(config.PolicyEnvoyPriority, "")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, approx); diff != "" {
		t.Errorf("ExpectedFlows(envoy_priority) mismatch (-want +got):\n%s", diff)
	}
}

// TestExpectedFlowsWaterfall checks the worked numbers of docs/design.md §3 on
// small worlds. It needs the real lb/waterfall planner.
func TestExpectedFlowsWaterfall(t *testing.T) {
	const twoRegions = `
regions:
  - name: us-east
    groups: [{name: us-east-b, instances: 10, healthy: 10, rate_per_instance: 100}]
  - name: eu-west
    groups: [{name: eu-west-b, instances: 10, healthy: 10, rate_per_instance: 100}]
`
	tests := []struct {
		name        string
		yaml        string
		wantFlows   []Flow
		wantRegions []RegionLoad
	}{
		{
			name:        "rule 1: nearest region takes everything under capacity",
			yaml:        twoRegions + `sites: [{name: nyc, demand_rps: 500, rtt_ms: {us-east: 5, eu-west: 80}}]`,
			wantFlows:   []Flow{{"nyc", "us-east", "us-east-b", 500, "nearest"}},
			wantRegions: []RegionLoad{{"eu-west", 1000, 0, 0}, {"us-east", 1000, 500, 0.5}},
		},
		{
			name: "rule 2: zones fill in proportion to capacity",
			yaml: `
regions:
  - name: us-east
    groups:
      - {name: us-east-b, instances: 6, healthy: 6, rate_per_instance: 100}
      - {name: us-east-c, instances: 8, healthy: 8, rate_per_instance: 100, capacity_scaler: 0.5}
sites: [{name: nyc, demand_rps: 500, rtt_ms: {us-east: 5}}]`,
			wantFlows:   []Flow{{"nyc", "us-east", "us-east-b", 300, "nearest"}, {"nyc", "us-east", "us-east-c", 200, "nearest"}},
			wantRegions: []RegionLoad{{"us-east", 1000, 500, 0.5}},
		},
		{
			name:        "rule 4: overflow spills to the next-nearest region",
			yaml:        twoRegions + `sites: [{name: nyc, demand_rps: 1500, rtt_ms: {us-east: 5, eu-west: 80}}]`,
			wantFlows:   []Flow{{"nyc", "us-east", "us-east-b", 1000, "nearest"}, {"nyc", "eu-west", "eu-west-b", 500, "spill_capacity"}},
			wantRegions: []RegionLoad{{"eu-west", 1000, 500, 0.5}, {"us-east", 1000, 1000, 1}},
		},
		{
			name: "rule 4: the closer site keeps the contended region",
			yaml: twoRegions + `
sites:
  - {name: nyc, demand_rps: 800, rtt_ms: {us-east: 5, eu-west: 80}}
  - {name: bos, demand_rps: 600, rtt_ms: {us-east: 10, eu-west: 75}}`,
			wantFlows: []Flow{
				{"bos", "us-east", "us-east-b", 200, "nearest"}, {"bos", "eu-west", "eu-west-b", 400, "spill_capacity"},
				{"nyc", "us-east", "us-east-b", 800, "nearest"},
			},
			wantRegions: []RegionLoad{{"eu-west", 1000, 400, 0.4}, {"us-east", 1000, 1000, 1}},
		},
		{
			name: "rule 5: h = 0.4 keeps 80% although capacity suffices",
			yaml: `
regions:
  - name: us-east
    groups: [{name: us-east-b, instances: 10, healthy: 4, rate_per_instance: 100}]
  - name: eu-west
    groups: [{name: eu-west-b, instances: 10, healthy: 10, rate_per_instance: 100}]
sites: [{name: nyc, demand_rps: 200, rtt_ms: {us-east: 5, eu-west: 80}}]`,
			wantFlows:   []Flow{{"nyc", "us-east", "us-east-b", 160, "nearest"}, {"nyc", "eu-west", "eu-west-b", 40, "spill_health"}},
			wantRegions: []RegionLoad{{"eu-west", 1000, 40, 0.04}, {"us-east", 400, 160, 0.4}},
		},
		{
			name: "rule 6: 20% global excess puts every region at 120%",
			yaml: twoRegions + `
sites:
  - {name: nyc, demand_rps: 1500, rtt_ms: {us-east: 5, eu-west: 80}}
  - {name: lon, demand_rps: 900, rtt_ms: {eu-west: 5, us-east: 70}}`,
			wantFlows: []Flow{
				{"lon", "eu-west", "eu-west-b", 900, "nearest"},
				{"nyc", "us-east", "us-east-b", 1200, "nearest"}, {"nyc", "eu-west", "eu-west-b", 300, "spill_capacity"},
			},
			wantRegions: []RegionLoad{{"eu-west", 1000, 1200, 1.2}, {"us-east", 1000, 1200, 1.2}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustParse(t, tt.yaml)
			got, err := s.ExpectedFlows(config.PolicyWaterfall, "")
			if err != nil {
				t.Fatalf("ExpectedFlows(waterfall): %v", err)
			}
			if got.Policy != config.PolicyWaterfall || got.Scope != "" {
				t.Errorf("policy, scope = %q, %q; want waterfall and no scope", got.Policy, got.Scope)
			}
			if diff := cmp.Diff(tt.wantFlows, got.Flows, approx); diff != "" {
				t.Errorf("flows mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantRegions, got.Regions, approx); diff != "" {
				t.Errorf("regions mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestExpectedFlowsMinRTT checks that MinRTT is lb/waterfall's
// ComputeMinRTT: where spilling costs one site less RTT than another, that
// site steps aside, unlike under Waterfall; uniform overload is the same.
func TestExpectedFlowsMinRTT(t *testing.T) {
	const twoRegions = `
regions:
  - name: us-east
    groups: [{name: us-east-b, instances: 10, healthy: 10, rate_per_instance: 100}]
  - name: eu-west
    groups: [{name: eu-west-b, instances: 10, healthy: 10, rate_per_instance: 100}]
`
	tests := []struct {
		name        string
		yaml        string
		wantFlows   []Flow
		wantRegions []RegionLoad
	}{
		{
			// Waterfall: nyc (5 ms) keeps us-east, bos spills 400 at 75 ms.
			name: "the site whose next region is almost as close steps aside",
			yaml: twoRegions + `
sites:
  - {name: nyc, demand_rps: 800, rtt_ms: {us-east: 5, eu-west: 12}}
  - {name: bos, demand_rps: 600, rtt_ms: {us-east: 10, eu-west: 75}}`,
			wantFlows: []Flow{
				{"bos", "us-east", "us-east-b", 600, "nearest"},
				{"nyc", "us-east", "us-east-b", 400, "nearest"}, {"nyc", "eu-west", "eu-west-b", 400, "spill_capacity"},
			},
			wantRegions: []RegionLoad{{"eu-west", 1000, 400, 0.4}, {"us-east", 1000, 1000, 1}},
		},
		{
			name: "rule 6: 20% global excess puts every region at 120%",
			yaml: twoRegions + `
sites:
  - {name: nyc, demand_rps: 1500, rtt_ms: {us-east: 5, eu-west: 80}}
  - {name: lon, demand_rps: 900, rtt_ms: {eu-west: 5, us-east: 70}}`,
			wantFlows: []Flow{
				{"lon", "eu-west", "eu-west-b", 900, "nearest"},
				{"nyc", "us-east", "us-east-b", 1200, "nearest"}, {"nyc", "eu-west", "eu-west-b", 300, "spill_capacity"},
			},
			wantRegions: []RegionLoad{{"eu-west", 1000, 1200, 1.2}, {"us-east", 1000, 1200, 1.2}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustParse(t, tt.yaml)
			got, err := s.ExpectedFlows(config.PolicyMinRTT, "")
			if err != nil {
				t.Fatalf("ExpectedFlows(min_rtt): %v", err)
			}
			if got.Policy != config.PolicyMinRTT || got.Scope != "" {
				t.Errorf("policy, scope = %q, %q; want min_rtt and no scope", got.Policy, got.Scope)
			}
			if diff := cmp.Diff(tt.wantFlows, got.Flows, approx); diff != "" {
				t.Errorf("flows mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantRegions, got.Regions, approx); diff != "" {
				t.Errorf("regions mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestShippedScenariosWaterfall pins what each scenario in configs/scenarios
// is meant to show under Waterfall (numbers worked out from docs/design.md §3
// in each file's header comment).
func TestShippedScenariosWaterfall(t *testing.T) {
	tests := []struct {
		file        string
		wantFlows   []Flow
		wantRegions []RegionLoad
	}{
		{
			file: "steady.yaml",
			wantFlows: []Flow{
				{"lon", "eu-west", "eu-west-b", 600, "nearest"}, {"lon", "eu-west", "eu-west-c", 300, "nearest"},
				{"nyc", "us-east", "us-east-b", 600, "nearest"}, {"nyc", "us-east", "us-east-c", 600, "nearest"},
				{"tokyo", "asia-east", "asia-east-a", 350, "nearest"}, {"tokyo", "asia-east", "asia-east-b", 350, "nearest"},
			},
			wantRegions: []RegionLoad{
				{"asia-east", 1200, 700, 700.0 / 1200}, {"eu-west", 1200, 900, 0.75}, {"us-east", 2000, 1200, 0.6},
			},
		},
		{
			file: "flash-crowd.yaml",
			wantFlows: []Flow{
				{"lon", "eu-west", "eu-west-b", 400, "nearest"}, {"lon", "eu-west", "eu-west-c", 200, "nearest"},
				{"nyc", "us-east", "us-east-b", 1000, "nearest"}, {"nyc", "us-east", "us-east-c", 1000, "nearest"},
				{"nyc", "eu-west", "eu-west-b", 1000.0 / 3, "spill_capacity"}, {"nyc", "eu-west", "eu-west-c", 500.0 / 3, "spill_capacity"},
				{"tokyo", "asia-east", "asia-east-a", 350, "nearest"}, {"tokyo", "asia-east", "asia-east-b", 350, "nearest"},
			},
			wantRegions: []RegionLoad{
				{"asia-east", 1200, 700, 700.0 / 1200}, {"eu-west", 1200, 1100, 1100.0 / 1200}, {"us-east", 2000, 2000, 1},
			},
		},
		{
			file: "unhealthy-region.yaml",
			wantFlows: []Flow{
				{"lon", "eu-west", "eu-west-b", 200, "nearest"}, {"lon", "eu-west", "eu-west-c", 200, "nearest"},
				{"lon", "us-east", "us-east-b", 50, "spill_health"}, {"lon", "us-east", "us-east-c", 50, "spill_health"},
				{"nyc", "us-east", "us-east-b", 600, "nearest"}, {"nyc", "us-east", "us-east-c", 600, "nearest"},
				{"tokyo", "asia-east", "asia-east-a", 350, "nearest"}, {"tokyo", "asia-east", "asia-east-b", 350, "nearest"},
			},
			wantRegions: []RegionLoad{
				{"asia-east", 1200, 700, 700.0 / 1200}, {"eu-west", 800, 400, 0.5}, {"us-east", 2000, 1300, 0.65},
			},
		},
		{
			file: "global-overload.yaml",
			wantFlows: []Flow{
				{"lon", "eu-west", "eu-west-b", 900, "nearest"}, {"lon", "eu-west", "eu-west-c", 900, "nearest"},
				{"nyc", "us-east", "us-east-b", 1200, "nearest"}, {"nyc", "us-east", "us-east-c", 1200, "nearest"},
				{"nyc", "eu-west", "eu-west-b", 60, "spill_capacity"}, {"nyc", "eu-west", "eu-west-c", 60, "spill_capacity"},
				{"nyc", "asia-east", "asia-east-a", 240, "spill_capacity"}, {"nyc", "asia-east", "asia-east-b", 240, "spill_capacity"},
				{"tokyo", "asia-east", "asia-east-a", 480, "nearest"}, {"tokyo", "asia-east", "asia-east-b", 480, "nearest"},
			},
			wantRegions: []RegionLoad{
				{"asia-east", 1200, 1440, 1.2}, {"eu-west", 1600, 1920, 1.2}, {"us-east", 2000, 2400, 1.2},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			s, err := LoadScenario(filepath.Join("..", "configs", "scenarios", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.ExpectedFlows(config.PolicyWaterfall, "")
			if err != nil {
				t.Fatalf("ExpectedFlows(waterfall): %v", err)
			}
			if diff := cmp.Diff(tt.wantFlows, got.Flows, approx); diff != "" {
				t.Errorf("flows mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantRegions, got.Regions, approx); diff != "" {
				t.Errorf("regions mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestExpectedFlowsErrors(t *testing.T) {
	s := mustParse(t, baselineScenario)
	dark := mustParse(t, `
regions:
  - name: a
    groups: [{name: a-1, instances: 2, healthy: 0, rate_per_instance: 100}]
  - name: b
    groups: [{name: b-1, instances: 2, healthy: 2, rate_per_instance: 100}]
sites:
  - {name: s1, demand_rps: 10, rtt_ms: {a: 1}}
  - {name: s2, demand_rps: 0, rtt_ms: {a: 1}}
`)
	tiny := mustParse(t, `
regions: [{name: r, groups: [{name: g, instances: 1, healthy: 1, rate_per_instance: 1e-300}]}]
sites: [{name: s, demand_rps: 1e300, rtt_ms: {r: 1}}]
`)
	tests := []struct {
		name    string
		s       *Scenario
		policy  config.Policy
		scope   config.HashScope
		wantErr error  // checked with errors.Is when set
		wantMsg string // exact message
	}{
		{name: "unknown policy", s: s, policy: "random", wantMsg: `unknown policy "random" (want one of waterfall, min_rtt, round_robin, least_request, envoy_priority, hash2, hash3, hash5, prequal)`},
		{name: "unknown scope", s: s, policy: config.PolicyRoundRobin, scope: "zone", wantMsg: `unknown scope "zone" (want one of global, nearest_region)`},
		{name: "scope with waterfall", s: s, policy: config.PolicyWaterfall, scope: config.HashScopeGlobal, wantErr: ErrScopeNotApplicable,
			wantMsg: `scope "global": ` + ErrScopeNotApplicable.Error()},
		{name: "scope with min_rtt", s: s, policy: config.PolicyMinRTT, scope: config.HashScopeNearestRegion, wantErr: ErrScopeNotApplicable,
			wantMsg: `scope "nearest_region": ` + ErrScopeNotApplicable.Error()},
		{name: "scope with envoy_priority", s: s, policy: config.PolicyEnvoyPriority, scope: config.HashScopeGlobal, wantErr: ErrScopeNotApplicable,
			wantMsg: `scope "global": ` + ErrScopeNotApplicable.Error()},
		{name: "no priority level healthy", s: dark, policy: config.PolicyEnvoyPriority, wantErr: ErrUnservable,
			wantMsg: `site "s1", policy envoy_priority: ` + ErrUnservable.Error()},
		{name: "site reaches no healthy instance", s: dark, policy: config.PolicyHash5, scope: config.HashScopeGlobal, wantErr: ErrUnservable,
			wantMsg: `site "s1", scope global: ` + ErrUnservable.Error()},
		{name: "nearest region scope has nothing either", s: dark, policy: config.PolicyLeastRequest, scope: config.HashScopeNearestRegion, wantErr: ErrUnservable,
			wantMsg: `site "s1", scope nearest_region: ` + ErrUnservable.Error()},
		{name: "utilization overflows", s: tiny, policy: config.PolicyRoundRobin, wantErr: ErrOverflow,
			wantMsg: `round_robin: region "r": ` + ErrOverflow.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.s.ExpectedFlows(tt.policy, tt.scope)
			if err == nil {
				t.Fatalf("ExpectedFlows(%s, %q) = %+v, want error", tt.policy, tt.scope, got)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("ExpectedFlows(%s, %q) error = %v, want errors.Is %v", tt.policy, tt.scope, err, tt.wantErr)
			}
			if err.Error() != tt.wantMsg {
				t.Errorf("ExpectedFlows(%s, %q) error = %q, want %q", tt.policy, tt.scope, err, tt.wantMsg)
			}
		})
	}
}

func TestParsePolicyAndScope(t *testing.T) {
	for _, p := range config.Policies() {
		if got, err := config.ParsePolicy(string(p)); err != nil || got != p {
			t.Errorf("ParsePolicy(%q) = %q, %v; want %q, nil", p, got, err, p)
		}
	}
	for _, sc := range config.HashScopes() {
		if got, err := config.ParseHashScope(string(sc)); err != nil || got != sc {
			t.Errorf("ParseScope(%q) = %q, %v; want %q, nil", sc, got, err, sc)
		}
	}
	for _, bad := range []string{"", "Waterfall", "hash4"} {
		if _, err := config.ParsePolicy(bad); err == nil {
			t.Errorf("ParsePolicy(%q) = nil error, want error", bad)
		}
	}
	if _, err := config.ParseHashScope(""); err == nil {
		t.Errorf("ParseScope(\"\") = nil error, want error")
	}
}

// TestResultJSON checks the wire shape of Result: the key sets at every
// level, and that the JSON decodes back into the same values.
func TestResultJSON(t *testing.T) {
	s := mustParse(t, baselineScenario)
	res, err := s.ExpectedFlows(config.PolicyRoundRobin, config.HashScopeNearestRegion)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(res, &back); diff != "" {
		t.Errorf("JSON round trip mismatch (-want +got):\n%s", diff)
	}
	checkJSONKeys(t, data, []string{"flows", "policy", "regions", "scope", "sites"}, false)

	// Waterfall: no scope, and every flow has a reason.
	res, err = s.ExpectedFlows(config.PolicyWaterfall, "")
	if err != nil {
		t.Fatal(err)
	}
	if data, err = json.Marshal(res); err != nil {
		t.Fatal(err)
	}
	checkJSONKeys(t, data, []string{"flows", "policy", "regions", "sites"}, true)

	// Waterfall has no scope key, and an empty flow list encodes as [].
	empty := &Result{Policy: config.PolicyWaterfall, Flows: []Flow{}, Sites: []SiteDemand{}, Regions: []RegionLoad{}}
	data, err = json.Marshal(empty)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"policy":"waterfall","sites":[],"flows":[],"regions":[]}`; string(data) != want {
		t.Errorf("json.Marshal(empty waterfall result) = %s, want %s", data, want)
	}
}

// checkJSONKeys checks the key set of a Result object and of its elements;
// flows carry a reason when withReason is set.
func checkJSONKeys(t *testing.T, data []byte, wantTop []string, withReason bool) {
	t.Helper()
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatalf("result is not a JSON object: %v", err)
	}
	if diff := cmp.Diff(wantTop, slices.Sorted(mapKeys(raw))); diff != "" {
		t.Errorf("top-level keys mismatch (-want +got):\n%s", diff)
	}
	elemKeys := map[string][]string{
		"sites":   {"demand_rps", "name"},
		"flows":   {"group", "region", "rps", "site"},
		"regions": {"capacity_rps", "load_rps", "name", "utilization"},
	}
	if withReason {
		elemKeys["flows"] = []string{"group", "reason", "region", "rps", "site"}
	}
	for field, want := range elemKeys {
		var elems []map[string]any
		if err := json.Unmarshal(raw[field], &elems); err != nil {
			t.Fatalf("%s is not a list of objects: %v", field, err)
		}
		if len(elems) == 0 {
			t.Errorf("%s is empty; the shape check needs at least one element", field)
		}
		for i, e := range elems {
			if diff := cmp.Diff(want, slices.Sorted(mapKeys(e))); diff != "" {
				t.Errorf("%s[%d] keys mismatch (-want +got):\n%s", field, i, diff)
			}
		}
	}
}

func mapKeys[V any](m map[string]V) func(yield func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestWriteTable compares the text rendering with testdata/table.golden;
// run with -update to rewrite it.
func TestWriteTable(t *testing.T) {
	s := mustParse(t, baselineScenario)
	res, err := s.ExpectedFlows(config.PolicyLeastRequest, config.HashScopeGlobal)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := res.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "table.golden")
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), buf.String()); diff != "" {
		t.Errorf("WriteTable mismatch (-want +got):\n%s", diff)
	}
}

// TestExpectedFlowsConservation checks the guarantees of ExpectedFlows for
// every policy and scope on the shipped scenarios: demand conserved, no
// zero flows, regions complete and consistent.
func TestExpectedFlowsConservation(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "configs", "scenarios", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no shipped scenarios found: %v", err)
	}
	for _, f := range files {
		s, err := LoadScenario(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range config.Policies() {
			scopes := config.HashScopes()
			if p.OrdersRegions() {
				scopes = []config.HashScope{""}
			}
			for _, sc := range scopes {
				t.Run(filepath.Base(f)+"/"+string(p)+"/"+string(sc), func(t *testing.T) {
					res, err := s.ExpectedFlows(p, sc)
					if err != nil {
						t.Fatal(err)
					}
					checkResult(t, s, res)
				})
			}
		}
	}
}

// checkResult checks the invariants ExpectedFlows documents.
func checkResult(t *testing.T, s *Scenario, res *Result) {
	t.Helper()
	sent := map[string]float64{}
	load := map[string]float64{}
	for _, f := range res.Flows {
		if !(f.RPS > 0) || math.IsInf(f.RPS, 0) {
			t.Errorf("flow %+v: rps must be finite and > 0", f)
		}
		sent[f.Site] += f.RPS
		load[f.Region] += f.RPS
	}
	if len(res.Sites) != len(s.Sites) {
		t.Errorf("result lists %d sites, scenario has %d", len(res.Sites), len(s.Sites))
	}
	for _, st := range s.Sites {
		if got := sent[st.Name]; math.Abs(got-st.DemandRPS) > 1e-9*max(st.DemandRPS, 1) {
			t.Errorf("site %s: flows add up to %v, want demand %v", st.Name, got, st.DemandRPS)
		}
	}
	if len(res.Regions) != len(s.Regions) {
		t.Errorf("result lists %d regions, scenario has %d", len(res.Regions), len(s.Regions))
	}
	for _, r := range res.Regions {
		if math.Abs(r.LoadRPS-load[r.Name]) > 1e-9*max(r.LoadRPS, 1) {
			t.Errorf("region %s: load_rps %v, flows add up to %v", r.Name, r.LoadRPS, load[r.Name])
		}
		want := 0.0
		if r.CapacityRPS > 0 {
			want = r.LoadRPS / r.CapacityRPS
		}
		if r.Utilization != want {
			t.Errorf("region %s: utilization %v, want %v", r.Name, r.Utilization, want)
		}
	}
}

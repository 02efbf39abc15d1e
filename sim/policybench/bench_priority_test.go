package policybench

import (
	"math"
	"testing"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/benchpolicy"
)

// TestBenchEnvoyPriority: the envoy_priority row on constructed worlds.
// Each site's gfe builds its own levels (its nearest region first), so
// with everything healthy no request leaves its site's nearest region,
// even when that region is five times over capacity (no capacity spill);
// with 60% of the nearest region healthy, 84% stays there and 16% goes to
// the next priority.
func TestBenchEnvoyPriority(t *testing.T) {
	for _, tt := range []struct {
		name      string
		yaml      string
		wantCross float64
		overCap   bool
	}{
		{
			name: "all healthy, nearest overloaded: every site stays nearest",
			yaml: `
regions:
  - {name: X, groups: [{name: x, instances: 2, healthy: 2, rate_per_instance: 100}]}
  - {name: Y, groups: [{name: y, instances: 2, healthy: 2, rate_per_instance: 100}]}
sites:
  - {name: a, demand_rps: 1000, rtt_ms: {X: 10, Y: 50}}
  - {name: b, demand_rps: 10, rtt_ms: {X: 50, Y: 10}}
`,
			wantCross: 0, overCap: true,
		},
		{
			name: "nearest 60% healthy: 16% to the next priority",
			yaml: `
regions:
  - {name: X, groups: [{name: x, instances: 10, healthy: 6, rate_per_instance: 100}]}
  - {name: Y, groups: [{name: y, instances: 10, healthy: 10, rate_per_instance: 100}]}
sites:
  - {name: a, demand_rps: 100, rtt_ms: {X: 10, Y: 50}}
`,
			wantCross: 0.16,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := mustParse(t, tt.yaml)
			_, rows := benchRows(t, s, Options{Policies: []benchpolicy.Row{{Policy: config.PolicyEnvoyPriority}}})
			got, ok := rows["envoy_priority"]
			if !ok {
				t.Fatalf("no envoy_priority row: %v", rows)
			}
			if got.Scope != "" {
				t.Errorf("scope %q, want none", got.Scope)
			}
			if math.Abs(got.CrossRegion-tt.wantCross) > 1e-9 {
				t.Errorf("cross-region share %v, want %v", got.CrossRegion, tt.wantCross)
			}
			if tt.overCap != (got.OverCapacity > 0.9) {
				t.Errorf("over capacity %v, want above 0.9: %v", got.OverCapacity, tt.overCap)
			}
		})
	}
}

// TestBenchEnvoyPriorityTakesNoScope: envoy_priority orders regions
// itself, as the gfe does: a row with a scope is refused.
func TestBenchEnvoyPriorityTakesNoScope(t *testing.T) {
	s := mustParse(t, oneInstance(10, ""))
	_, err := Run(s, Options{Policies: []benchpolicy.Row{{Policy: config.PolicyEnvoyPriority, Scope: config.HashScopeGlobal}}})
	if err == nil {
		t.Fatal("Run(envoy_priority/global) = nil error, want one")
	}
}

package policybench

import (
	"errors"
	"strings"
	"testing"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/benchpolicy"
	"github.com/spillway-lb/spillway/sim"
)

// TestBenchErrors: Run refuses a bad row (listed twice, a scope where the
// gfe takes none, an unknown policy or scope, a service option the
// simulator does not model) or scenario with an error that names it.
func TestBenchErrors(t *testing.T) {
	s := mustParse(t, twoRegions)
	wf := benchpolicy.Defaults()[0]
	tests := []struct {
		name    string
		s       *sim.Scenario
		opts    Options
		wantErr error
		wantMsg string
	}{
		{name: "no policies", s: s, opts: Options{Policies: []benchpolicy.Row{}}, wantMsg: "bench: no policies"},
		{name: "twice", s: s, opts: Options{Policies: []benchpolicy.Row{wf, wf}}, wantMsg: "bench policy waterfall: listed twice"},
		{name: "scope on a planned policy", s: s, opts: Options{Policies: []benchpolicy.Row{{Policy: config.PolicyWaterfall, Scope: config.HashScopeGlobal}}}, wantErr: sim.ErrScopeNotApplicable},
		{name: "unknown policy", s: s, opts: Options{Policies: []benchpolicy.Row{{Policy: "random"}}}, wantMsg: `bench policy random: unknown policy "random"`},
		{name: "nearest_region without hashing", s: s, opts: Options{Policies: []benchpolicy.Row{benchpolicy.Row{Policy: config.PolicyRoundRobin, Scope: config.HashScopeNearestRegion}}}, wantMsg: "the gfe takes a hash_scope only for hash2, hash3 and hash5"},
		{name: "unknown scope", s: s, opts: Options{Policies: []benchpolicy.Row{benchpolicy.Row{Policy: config.PolicyHash2, Scope: "zone"}}}, wantMsg: `unknown scope "zone"`},
		{name: "load_aware", s: s, opts: Options{Policies: []benchpolicy.Row{{Policy: config.PolicyWaterfall, Options: benchpolicy.Options{LoadAware: true}}}},
			wantErr: ErrOptionNotModelled, wantMsg: "bench policy waterfall+load_aware: load_aware: not modelled by lbsim bench"},
		{name: "shed", s: s, opts: Options{Policies: []benchpolicy.Row{wf, {Policy: config.PolicyWaterfall, Options: benchpolicy.Options{LoadAware: true, Shed: true}}}},
			wantErr: ErrOptionNotModelled, wantMsg: "run it with lbbench --story uneven"},
		{name: "invalid scenario", s: &sim.Scenario{}, wantErr: sim.ErrInvalidScenario},
		{name: "too many instances", s: mustParse(t, `
regions: [{name: r, groups: [{name: g, instances: 10000, healthy: 10000, rate_per_instance: 1}, {name: h, instances: 10000, healthy: 10000, rate_per_instance: 1}, {name: i, instances: 10000, healthy: 10000, rate_per_instance: 1}]}]
sites: [{name: s, demand_rps: 1, rtt_ms: {r: 1}}]
`), wantErr: ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Run(tt.s, tt.opts)
			if err == nil {
				t.Fatal("Bench() succeeded, want an error")
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("Bench() error = %v, want %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("Bench() error = %v, want it to contain %q", err, tt.wantMsg)
			}
		})
	}
}

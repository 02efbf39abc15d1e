package config

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway-lb/spillway/lb/autoscale"
)

// TestAutoscalingGood: a present block has its absent keys filled from
// DefaultAutoscaling; an absent block is the zero Autoscaling (off); a
// block survives Marshal and Parse, zeros that differ from a default
// (tolerance: 0) included.
func TestAutoscalingGood(t *testing.T) {
	c, err := Load("testdata/autoscaling.good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultAutoscaling()
	want.MinInstances, want.MaxInstances, want.InitialInstances = 1, 20, 2
	want.CPUsPerInstance, want.MaxConcurrencyPerInstance = 2, 10
	want.ColdStart, want.Tolerance = 20*time.Second, 0
	g1, _ := c.Group("g1")
	if diff := cmp.Diff(want, g1.Group.Autoscaling); diff != "" {
		t.Errorf("g1 autoscaling (-want +got):\n%s", diff)
	}
	if !g1.Group.Autoscaling.Enabled() {
		t.Errorf("g1 Enabled() = false, want true")
	}
	if got, want := g1.Group.Autoscaling.MaxPendingWait(), 70*time.Second; got != want {
		t.Errorf("g1 MaxPendingWait() = %v, want %v (3.5 × 20s)", got, want)
	}
	g2, _ := c.Group("g2")
	if g2.Group.Autoscaling != (Autoscaling{}) || g2.Group.Autoscaling.Enabled() {
		t.Errorf("g2 autoscaling = %+v, want the zero (off) block", g2.Group.Autoscaling)
	}
	out, err := Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(out, "back.yaml")
	if err != nil {
		t.Fatalf("Parse(Marshal(c)): %v\n%s", err, out)
	}
	if diff := cmp.Diff(c, back, ignoreIndex); diff != "" {
		t.Errorf("Parse(Marshal(c)) differs (-c +back):\n%s", diff)
	}
	if !strings.Contains(string(out), "tolerance: 0") {
		t.Errorf("Marshal dropped tolerance: 0 (default 0.1):\n%s", out)
	}
}

// TestAutoscalingRules: the default block converts to lb/autoscale's
// defaults, and a valid block to a valid autoscale.Config.
func TestAutoscalingRules(t *testing.T) {
	a := DefaultAutoscaling()
	a.MinInstances, a.MaxInstances = 1, 7
	if diff := cmp.Diff(autoscale.DefaultConfig(1, 7), a.Rules()); diff != "" {
		t.Errorf("Rules() of the defaults (-autoscale.DefaultConfig +got):\n%s", diff)
	}
	if err := a.Rules().Validate(); err != nil {
		t.Errorf("Rules().Validate() = %v", err)
	}
}

// TestAutoscalingDerived: Initial and MaxPendingWait as documented.
func TestAutoscalingDerived(t *testing.T) {
	for _, tt := range []struct {
		name           string
		min, initial   int
		coldStart      time.Duration
		wantInitial    int
		wantMaxPending time.Duration
	}{
		{"defaults", 0, 0, 10 * time.Second, 0, 35 * time.Second},
		{"initial 0 means min", 3, 0, 2 * time.Second, 3, 10 * time.Second},
		{"initial set", 1, 4, 20 * time.Second, 4, 70 * time.Second},
		{"floor of 10s", 0, 0, time.Second, 0, 10 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := DefaultAutoscaling()
			a.MinInstances, a.InitialInstances, a.ColdStart = tt.min, tt.initial, tt.coldStart
			if got := a.Initial(); got != tt.wantInitial {
				t.Errorf("Initial() = %d, want %d", got, tt.wantInitial)
			}
			if got := a.MaxPendingWait(); got != tt.wantMaxPending {
				t.Errorf("MaxPendingWait() = %v, want %v", got, tt.wantMaxPending)
			}
		})
	}
}

// TestAutoscalingValidation: each bad value is reported once, with the
// file and the full field path; the bound itself is accepted.
func TestAutoscalingValidation(t *testing.T) {
	const path = "regions[0].zones[0].groups[0].autoscaling."
	on := func(a *Autoscaling) { *a = DefaultAutoscaling(); a.MaxInstances = 10 }
	for _, tt := range []struct {
		name   string
		mutate func(*Autoscaling)
		want   string // "" = valid
	}{
		{"off (zero)", func(a *Autoscaling) {}, ""},
		{"off (defaults)", func(a *Autoscaling) { *a = DefaultAutoscaling() }, ""},
		{"on", on, ""},
		{"max at bound", func(a *Autoscaling) { on(a); a.MaxInstances = 10_000 }, ""},
		{"max above bound", func(a *Autoscaling) { on(a); a.MaxInstances = 10_001 }, "max_instances: must be in 1..10000, got 10001"},
		{"max missing", func(a *Autoscaling) { *a = DefaultAutoscaling(); a.MinInstances = 2 }, "max_instances: required (1..10000) when the autoscaling block is set, got 0"},
		{"min negative", func(a *Autoscaling) { on(a); a.MinInstances = -1 }, "min_instances: must be in 0..max_instances (10), got -1"},
		{"initial above max", func(a *Autoscaling) { on(a); a.InitialInstances = 11 }, "initial_instances: must be 0 (= min_instances) or in min_instances..max_instances (0..10), got 11"},
		{"cpus zero", func(a *Autoscaling) { on(a); a.CPUsPerInstance = 0 }, "cpus_per_instance: must be in (0, 1000], got 0"},
		{"cpus inf", func(a *Autoscaling) { on(a); a.CPUsPerInstance = math.Inf(1) }, "cpus_per_instance: must be in (0, 1000], got +Inf"},
		{"concurrency target low", func(a *Autoscaling) { on(a); a.ConcurrencyTarget = 0.05 }, "concurrency_target: must be in [0.1, 0.95], got 0.05"},
		{"cpu target at bound", func(a *Autoscaling) { on(a); a.CPUTarget = 0.95 }, ""},
		{"act high above 1", func(a *Autoscaling) { on(a); a.ACTHighCPU = 1.5 }, "act_high_cpu: must be in (0, 1], got 1.5"},
		{"tolerance above", func(a *Autoscaling) { on(a); a.Tolerance = 0.6 }, "tolerance: must be in [0, 0.5], got 0.6"},
		{"keep fraction", func(a *Autoscaling) { on(a); a.DemotedKeepFraction = -0.1 }, "demoted_keep_fraction: must be in [0, 1], got -0.1"},
		{"cold start above 1h", func(a *Autoscaling) { on(a); a.ColdStart = time.Hour + 1 }, "cold_start: must be at most 1h0m0s, got 1h0m0.000000001s"},
		{"act interval above 1m", func(a *Autoscaling) { on(a); a.ACTInterval = 2 * time.Minute }, "act_interval: must be at most 1m0s, got 2m0s"},
		{"idle timeout negative", func(a *Autoscaling) { on(a); a.IdleTimeout = -time.Second }, "idle_timeout: must be > 0, got -1s"},
		{"pending factor", func(a *Autoscaling) { on(a); a.PendingWaitColdStarts = 101 }, "pending_wait_cold_starts: must be in [0, 100], got 101"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := parseBounds(t, func(c *Config) { tt.mutate(&c.Regions[0].Zones[0].Groups[0].Autoscaling) })
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			fes := FieldErrors(err)
			if len(fes) != 1 {
				t.Fatalf("Validate(): %d errors, want 1: %v", len(fes), err)
			}
			if want := "bounds.yaml: " + path + tt.want; fes[0].Error() != want {
				t.Errorf("Validate():\n got %s\nwant %s", fes[0].Error(), want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not match ErrInvalid")
			}
		})
	}
}

// TestValidateAutoscaling: the standalone check names the file and the
// given prefix (lbsim's trace parser uses prefix "group").
func TestValidateAutoscaling(t *testing.T) {
	a := DefaultAutoscaling()
	a.MaxInstances, a.MinInstances = 2, 3
	err := ValidateAutoscaling("trace.yaml", "group", a)
	fes := FieldErrors(err)
	if len(fes) != 1 || fes[0].Error() != "trace.yaml: group.min_instances: must be in 0..max_instances (2), got 3" {
		t.Errorf("ValidateAutoscaling = %v", err)
	}
	if err := ValidateAutoscaling("", "", DefaultAutoscaling()); err != nil {
		t.Errorf("ValidateAutoscaling(defaults) = %v, want nil", err)
	}
}

// TestAutoscalingEnv: an environment variable turns a group's autoscaler
// on, and the block it creates gets the defaults.
func TestAutoscalingEnv(t *testing.T) {
	c, err := load("testdata/minimal.good.yaml", []string{"SPILLWAY_REGIONS_0_ZONES_0_GROUPS_0_AUTOSCALING_MAX_INSTANCES=7"})
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultAutoscaling()
	want.MaxInstances = 7
	if diff := cmp.Diff(want, c.Regions[0].Zones[0].Groups[0].Autoscaling); diff != "" {
		t.Errorf("autoscaling from env (-want +got):\n%s", diff)
	}
}

// TestDecodeAutoscaling: a block held outside a config decodes with the
// same defaults, schema checks and validation, each problem at its path.
func TestDecodeAutoscaling(t *testing.T) {
	for _, tt := range []struct {
		name    string
		raw     any
		want    Autoscaling
		wantErr []string
	}{
		{"defaults filled", map[string]any{"max_instances": 3, "cold_start": "20s"},
			func() Autoscaling {
				a := DefaultAutoscaling()
				a.MaxInstances, a.ColdStart = 3, 20*time.Second
				return a
			}(), nil},
		{"not a map", []any{1}, Autoscaling{}, []string{"f.yaml: group: expected a map, got a list"}},
		{"empty block", map[string]any{}, Autoscaling{}, []string{"f.yaml: group.max_instances: required (1..10000)"}},
		{"typo and range", map[string]any{"max_instances": 3, "cpu_targt": 0.5, "tolerance": 0.7}, Autoscaling{}, []string{
			`f.yaml: group.cpu_targt: unknown field (did you mean "cpu_target"?)`,
			"f.yaml: group.tolerance: must be in [0, 0.5], got 0.7",
		}},
		{"wrong type", map[string]any{"max_instances": 3, "cold_start": 5}, Autoscaling{}, []string{
			`f.yaml: group.cold_start: expected a duration such as "5s", got number 5`,
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeAutoscaling("f.yaml", "group", tt.raw)
			var msgs []string
			for _, fe := range FieldErrors(err) {
				msgs = append(msgs, fe.Error())
			}
			if diff := cmp.Diff(tt.wantErr, msgs); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("block (-want +got):\n%s", diff)
			}
		})
	}
}

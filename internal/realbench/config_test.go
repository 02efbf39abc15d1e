package realbench

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/benchpolicy"
)

func TestValidate(t *testing.T) {
	for _, c := range []Config{DefaultConfig(), QuickConfig()} {
		if err := c.Validate(); err != nil {
			t.Errorf("Validate() of a preset = %v", err)
		}
	}
	bad := Config{
		Net: 0,
		Policies: []benchpolicy.Row{{Policy: "hash4"}, {Policy: "waterfall"}, {Policy: "waterfall"},
			{Policy: "least_request", Scope: "global", Options: benchpolicy.Options{Shed: true}}},
		Warmup: -time.Second,
		Phases: []Phase{
			{Name: "x", Duration: 0, Demand: map[string]float64{"paris": 1, "nyc": -1}},
			{Name: "y", Duration: time.Second},
		},
		SourcesPerSite: 200,
		Tolerance:      -1,
		Headroom:       0,
	}
	err := bad.Validate()
	if err == nil {
		t.Fatal("Validate() = nil for a config with every field wrong")
	}
	for _, want := range []string{
		"net: must be in 1..254, got 0", `policies[0]: unknown policy "hash4"`, "policies[2]: waterfall listed twice",
		`policies[3]: unknown policy "least_request/global+shed"`, "warmup: must be >= 0",
		"phases[0].duration: must be > 0", `phases[0].demand: unknown site "paris"`, "phases[0].demand[nyc]: must be >= 0",
		"phases[1].demand: no site has demand", "sources_per_site: must be in 1..150", "window: must be > 0",
		"tolerance: must be >= 0", "timeout: must be > 0", "headroom: must be > 0",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() error lacks %q:\n%v", want, err)
		}
	}
	if err := (&Config{Net: 1}).Validate(); err == nil || !strings.Contains(err.Error(), "policies: none") || !strings.Contains(err.Error(), "phases: none") {
		t.Errorf("Validate() of a near-zero config = %v, want policies: none and phases: none", err)
	}
}

func TestScale(t *testing.T) {
	c := DefaultConfig()
	c.Scale(0.5)
	got := []time.Duration{c.Warmup, c.Phases[0].Duration, c.Phases[1].Duration}
	if diff := cmp.Diff([]time.Duration{1500 * time.Millisecond, 3 * time.Second, 6 * time.Second}, got); diff != "" {
		t.Errorf("durations after Scale(0.5) (-want +got):\n%s", diff)
	}
	if c.measured() != 9*time.Second {
		t.Errorf("measured() = %v, want 9s", c.measured())
	}
}

func TestSpecHeadroom(t *testing.T) {
	c := DefaultConfig()
	for _, r := range c.spec().Regions {
		if r.MaxRPS != 0 || r.Rate != 40 {
			t.Errorf("headroom 1: region %s Rate %g MaxRPS %g, want 40 and 0 (enforce Rate)", r.Name, r.Rate, r.MaxRPS)
		}
	}
	c.Headroom = 1.25
	for _, r := range c.spec().Regions {
		if r.MaxRPS != 50 || r.Rate != 40 {
			t.Errorf("headroom 1.25: region %s Rate %g MaxRPS %g, want 40 and 50", r.Name, r.Rate, r.MaxRPS)
		}
	}
}

// TestWithRow: a row's options reach the service config the deployment is
// written with (load_aware and overload blocks), and a row without any
// turns them back off.
func TestWithRow(t *testing.T) {
	st := UnevenStory(true)
	spec := st.spec()
	for _, p := range append(UnevenPolicies(), benchpolicy.Row{Policy: "min_rtt", Options: benchpolicy.Options{Shed: true}}, UnevenPolicies()[0]) {
		withRow(&spec, p)
		cfg, err := config.Parse([]byte(spec.ConfigYAML()), "spillway.yaml")
		if err != nil {
			t.Fatalf("%s: the written config: %v", p.ID(), err)
		}
		svc := cfg.Services[0]
		got := benchpolicy.Row{Policy: svc.Policy, Scope: svc.HashScope, Options: benchpolicy.Options{LoadAware: svc.LoadAware.Enabled, Shed: svc.Overload.Shed}}
		if want := (benchpolicy.Row{Policy: p.Policy, Scope: p.HashScope(), Options: p.Options}); got != want {
			t.Errorf("%s: the written config serves %s", p.ID(), got.ID())
		}
	}
}

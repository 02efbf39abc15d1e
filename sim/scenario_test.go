package sim

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/waterfall"
)

// mustParse parses a scenario written inline in a test.
func mustParse(t *testing.T, yamlText string) *Scenario {
	t.Helper()
	s, err := ParseScenario([]byte(yamlText), "test.yaml")
	if err != nil {
		t.Fatalf("ParseScenario: %v", err)
	}
	return s
}

func TestParseScenario(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want *Scenario
	}{
		{
			name: "format example, capacity_scaler defaults to 1",
			yaml: `
regions:
  - name: us-east
    groups:
      - name: us-east-b          # unique in the scenario
        zone: us-east-b
        instances: 10            # instances in the group
        healthy: 10              # of which pass health checks
        rate_per_instance: 100   # RATE capacity: requests/s per healthy instance
        capacity_scaler: 1.0     # optional, default 1.0
      - {name: us-east-c, instances: 4, healthy: 3, rate_per_instance: 50}
  - name: eu-west
    groups:
      - {name: eu-west-b, zone: eu-west-b, instances: 2, healthy: 0, rate_per_instance: 10, capacity_scaler: 0}
sites:
  - name: nyc
    demand_rps: 1500
    rtt_ms: {us-east: 5, eu-west: 80}
  - name: lon
    demand_rps: 0
    rtt_ms: {eu-west: 4.5}
`,
			want: &Scenario{
				Regions: []Region{
					{Name: "us-east", Groups: []Group{
						{Name: "us-east-b", Zone: "us-east-b", Instances: 10, Healthy: 10, RatePerInstance: 100, CapacityScaler: 1},
						{Name: "us-east-c", Instances: 4, Healthy: 3, RatePerInstance: 50, CapacityScaler: 1},
					}},
					{Name: "eu-west", Groups: []Group{
						{Name: "eu-west-b", Zone: "eu-west-b", Instances: 2, Healthy: 0, RatePerInstance: 10, CapacityScaler: 0},
					}},
				},
				Sites: []Site{
					{Name: "nyc", DemandRPS: 1500, RTTms: map[string]float64{"us-east": 5, "eu-west": 80}},
					{Name: "lon", DemandRPS: 0, RTTms: map[string]float64{"eu-west": 4.5}},
				},
			},
		},
		{
			name: "explicit document start and fractional scaler",
			yaml: `---
regions: [{name: r, groups: [{name: g, instances: 3, healthy: 2, rate_per_instance: 7.5, capacity_scaler: 0.25}]}]
sites: [{name: s, demand_rps: 1, rtt_ms: {r: 0}}]
`,
			want: &Scenario{
				Regions: []Region{{Name: "r", Groups: []Group{
					{Name: "g", Instances: 3, Healthy: 2, RatePerInstance: 7.5, CapacityScaler: 0.25},
				}}},
				Sites: []Site{{Name: "s", DemandRPS: 1, RTTms: map[string]float64{"r": 0}}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseScenario([]byte(tt.yaml), "test.yaml")
			if err != nil {
				t.Fatalf("ParseScenario: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseScenario mismatch (-want +got):\n%s", diff)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("Validate() of a parsed scenario = %v, want nil", err)
			}
		})
	}
}

// TestParseScenarioBadFiles checks every fixture in testdata/*.bad.yaml
// against the exact list of problems it must produce.
func TestParseScenarioBadFiles(t *testing.T) {
	tests := []struct {
		file string
		want []string
	}{
		{"unknown-region.bad.yaml", []string{`sites[0].rtt_ms: unknown region "eu-wst"`}},
		{"healthy-above-instances.bad.yaml", []string{`regions[1].groups[0].healthy: 12 > instances 10`}},
		{"duplicate-names.bad.yaml", []string{
			`regions[1].name: duplicate region "us-east" (also regions[0])`,
			`regions[1].groups[0].name: duplicate group "g1" (also regions[0].groups[0])`,
			`sites[1].name: duplicate site "nyc" (also sites[0])`,
		}},
		{"negative-numbers.bad.yaml", []string{
			`regions[0].groups[0].instances: must be >= 0, got -1`,
			`regions[0].groups[0].healthy: must be >= 0, got -2`,
			`regions[0].groups[0].rate_per_instance: must be a finite number >= 0, got -100`,
			`sites[0].demand_rps: must be a finite number >= 0, got -5`,
			`sites[0].rtt_ms.us-east: must be a finite number >= 0, got -1`,
		}},
		{"capacity-scaler.bad.yaml", []string{
			`regions[0].groups[0].capacity_scaler: must be in [0,1], got 1.5`,
			`regions[0].groups[1].capacity_scaler: must be in [0,1], got -0.1`,
			`regions[0].groups[2].capacity_scaler: must be in [0,1], got NaN`,
		}},
		{"no-rtt.bad.yaml", []string{
			`sites[0].rtt_ms: must name at least one region`,
			`sites[1].rtt_ms: must name at least one region`,
		}},
		{"empty.bad.yaml", []string{`empty scenario file`}},
		{"empty-lists.bad.yaml", []string{
			`regions: must list at least one region`,
			`sites: must list at least one site`,
		}},
		{"unknown-key.bad.yaml", []string{
			`line 6: unknown field "healty"`,
			`line 10: unknown field "demand"`,
		}},
		{"missing-fields.bad.yaml", []string{
			`regions[0].name: required`,
			`regions[0].groups[0].name: required`,
			`regions[0].groups[0].instances: required`,
			`regions[0].groups[0].healthy: required`,
			`regions[0].groups[0].rate_per_instance: required`,
			`regions[1].groups: must list at least one group`,
			`sites[0].name: required`,
			`sites[0].demand_rps: required`,
		}},
		{"wrong-type.bad.yaml", []string{
			"line 4: cannot unmarshal !!str `ten` into a number",
			"line 8: cannot unmarshal !!str `fast` into a number",
		}},
		{"fractional.bad.yaml", []string{
			`regions[0].groups[0].instances: must be at most 9007199254740992, got 1e+300`,
			`regions[0].groups[0].healthy: must be a whole number, got 1.5`,
		}},
		{"two-documents.bad.yaml", []string{`more than one YAML document; a scenario is a single document`}},
		{"duplicate-key.bad.yaml", []string{`line 8: mapping key "demand_rps" already defined at line 7`}},
		{"syntax.bad.yaml", []string{`line 1: did not find expected '-' indicator`}},
		{"not-a-mapping.bad.yaml", []string{`line 1: cannot unmarshal !!seq into a scenario (a mapping with regions and sites)`}},
		{"overflow.bad.yaml", []string{
			`regions[0].groups[0].rate_per_instance: must be at most 1e+09 (the gfe's config bound), got 1e+307`,
			`regions[0].groups[0]: capacity healthy × rate_per_instance × capacity_scaler overflows`,
			`sites[0].demand_rps: must be a finite number >= 0, got +Inf`,
		}},
	}
	covered := map[string]bool{}
	for _, tt := range tests {
		covered[tt.file] = true
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join("testdata", tt.file)
			_, err := LoadScenario(path)
			if !errors.Is(err, ErrInvalidScenario) {
				t.Fatalf("LoadScenario(%s) error = %v, want ErrInvalidScenario", path, err)
			}
			var se *ScenarioError
			if !errors.As(err, &se) {
				t.Fatalf("LoadScenario(%s) error %T is not a *ScenarioError", path, err)
			}
			if diff := cmp.Diff(tt.want, se.Problems); diff != "" {
				t.Errorf("LoadScenario(%s) problems mismatch (-want +got):\n%s", path, diff)
			}
			// Every line of the message names the file, then one problem.
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("error has %d lines, want %d:\n%v", len(lines), len(tt.want), err)
			}
			for i, line := range lines {
				if want := path + ": " + tt.want[i]; line != want {
					t.Errorf("error line %d = %q, want %q", i, line, want)
				}
			}
			// The same problems as config's field errors: file, path, message.
			fes := config.FieldErrors(err)
			if len(fes) != len(tt.want) {
				t.Fatalf("%d config.FieldErrors, want %d", len(fes), len(tt.want))
			}
			for i, fe := range fes {
				if fe.File != path || fe.Error() != path+": "+tt.want[i] {
					t.Errorf("field error %d = %+v (%q), want file %s and %q", i, fe, fe.Error(), path, tt.want[i])
				}
			}
		})
	}
	// Every fixture on disk has an expectation.
	files, err := filepath.Glob(filepath.Join("testdata", "*.bad.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !covered[filepath.Base(f)] {
			t.Errorf("fixture %s has no entry in the table", f)
		}
	}
}

func TestLoadScenarioMissingFile(t *testing.T) {
	_, err := LoadScenario(filepath.Join(t.TempDir(), "nope.yaml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadScenario(missing) error = %v, want os.ErrNotExist", err)
	}
	if errors.Is(err, ErrInvalidScenario) {
		t.Errorf("LoadScenario(missing) error = %v, must not be ErrInvalidScenario", err)
	}
}

func TestValidate(t *testing.T) {
	good := func() *Scenario {
		return &Scenario{
			Regions: []Region{{Name: "r", Groups: []Group{{Name: "g", Instances: 2, Healthy: 1, RatePerInstance: 10, CapacityScaler: 1}}}},
			Sites:   []Site{{Name: "s", DemandRPS: 5, RTTms: map[string]float64{"r": 1}}},
		}
	}
	tests := []struct {
		name   string
		mutate func(*Scenario)
		want   []string // nil: valid
	}{
		{name: "valid", mutate: func(*Scenario) {}},
		{
			name:   "NaN demand and rtt",
			mutate: func(s *Scenario) { s.Sites[0].DemandRPS = math.NaN(); s.Sites[0].RTTms["r"] = math.Inf(1) },
			want: []string{
				"sites[0].demand_rps: must be a finite number >= 0, got NaN",
				"sites[0].rtt_ms.r: must be a finite number >= 0, got +Inf",
			},
		},
		{
			name:   "zero-value scaler is a valid drain",
			mutate: func(s *Scenario) { s.Regions[0].Groups[0].CapacityScaler = 0 },
		},
		{
			name: "unknown regions reported in sorted order",
			mutate: func(s *Scenario) {
				s.Sites[0].RTTms = map[string]float64{"zz": 1, "aa": 2, "r": 3}
			},
			want: []string{
				`sites[0].rtt_ms: unknown region "aa"`,
				`sites[0].rtt_ms: unknown region "zz"`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := good()
			tt.mutate(s)
			err := s.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var se *ScenarioError
			if !errors.As(err, &se) || !errors.Is(err, ErrInvalidScenario) {
				t.Fatalf("Validate() = %v, want a *ScenarioError wrapping ErrInvalidScenario", err)
			}
			if diff := cmp.Diff(tt.want, se.Problems); diff != "" {
				t.Errorf("Validate() problems mismatch (-want +got):\n%s", diff)
			}
			if se.File != "" || err.Error() != strings.Join(tt.want, "\n") {
				t.Errorf("Validate() message = %q, want the problems without a file prefix", err.Error())
			}
		})
	}
}

func TestGroupCapacity(t *testing.T) {
	tests := []struct {
		name string
		g    Group
		want float64
	}{
		{"all healthy", Group{Instances: 10, Healthy: 10, RatePerInstance: 100, CapacityScaler: 1}, 1000},
		{"healthy only", Group{Instances: 10, Healthy: 4, RatePerInstance: 100, CapacityScaler: 1}, 400},
		{"scaled", Group{Instances: 8, Healthy: 8, RatePerInstance: 100, CapacityScaler: 0.5}, 400},
		{"drained", Group{Instances: 8, Healthy: 8, RatePerInstance: 100, CapacityScaler: 0}, 0},
		{"none healthy", Group{Instances: 8, Healthy: 0, RatePerInstance: 100, CapacityScaler: 1}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.g.Capacity(); got != tt.want {
				t.Errorf("%+v.Capacity() = %v, want %v", tt.g, got, tt.want)
			}
		})
	}
}

func TestToWorld(t *testing.T) {
	s := mustParse(t, `
regions:
  - name: us-east
    groups:
      - {name: us-east-b, zone: b, instances: 10, healthy: 8, rate_per_instance: 100, capacity_scaler: 0.5}
      - {name: us-east-c, zone: c, instances: 2, healthy: 2, rate_per_instance: 30}
  - name: eu-west
    groups:
      - {name: eu-west-b, zone: b, instances: 3, healthy: 0, rate_per_instance: 100}
sites:
  - {name: nyc, demand_rps: 1500, rtt_ms: {us-east: 5, eu-west: 80}}
`)
	want := waterfall.World{
		Regions: []waterfall.Region{
			{Name: "us-east", Groups: []waterfall.Group{
				{Name: "us-east-b", Zone: "b", Instances: 10, Healthy: 8, Capacity: 400},
				{Name: "us-east-c", Zone: "c", Instances: 2, Healthy: 2, Capacity: 60},
			}},
			{Name: "eu-west", Groups: []waterfall.Group{
				{Name: "eu-west-b", Zone: "b", Instances: 3, Healthy: 0, Capacity: 0},
			}},
		},
		Sites: []waterfall.Site{{Name: "nyc", Demand: 1500, RTT: map[string]float64{"us-east": 5, "eu-west": 80}}},
	}
	got := s.ToWorld()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("ToWorld mismatch (-want +got):\n%s", diff)
	}
	// The World owns its RTT maps: changing it leaves the scenario alone.
	got.Sites[0].RTT["us-east"] = 999
	if s.Sites[0].RTTms["us-east"] != 5 {
		t.Errorf("ToWorld shares the RTT map with the scenario")
	}
}

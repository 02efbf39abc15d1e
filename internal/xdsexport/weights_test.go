package xdsexport

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/lb/waterfall"
)

// testYAML is two regions: us-east with groups ue-b (2 instances) and
// ue-c (1), eu-west with ew-b (2); service web (waterfall) over all three,
// rr (round robin) over ue-b and ew-b, and drain (waterfall) whose ew-b
// backend is drained.
const testYAML = `regions:
  - name: us-east
    zones:
      - name: us-east-b
        groups:
          - name: ue-b
            instances: [{address: 127.0.0.1:9001}, {address: 127.0.0.1:9002}]
      - name: us-east-c
        groups:
          - name: ue-c
            instances: [{address: 127.0.0.1:9011}]
  - {name: eu-west, zones: [{name: eu-west-b, groups: [{name: ew-b, instances: [{address: 127.0.0.2:9001}, {address: 127.0.0.2:9002}]}]}]}
services:
  - name: web
    backends:
      - {group: ue-b, max_rate_per_instance: 100}
      - {group: ue-c, max_rate_per_instance: 100}
      - {group: ew-b, max_rate_per_instance: 100}
  - name: rr
    policy: round_robin
    backends:
      - {group: ue-b, max_rate_per_instance: 100}
      - {group: ew-b, max_rate_per_instance: 100}
  - name: drain
    backends:
      - {group: ue-b, max_rate_per_instance: 100}
      - {group: ew-b, max_rate_per_instance: 100, capacity_scaler: 0}
routes:
  - {host: "*", path_prefix: /, service: web}
  - {host: api.example.com, path_prefix: /v1/, service: rr}
  - {host: "*.example.com", path_prefix: /, service: drain}
`

func testSnapshot(t testing.TB, unhealthy ...string) *snapshot.Snapshot {
	t.Helper()
	cfg, err := config.Parse([]byte(testYAML), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return snapshot.FromConfig("v1", cfg, unhealthy...)
}

// testPlan is a plan of web: nyc spills a third to eu-west (us-east's two
// groups split 2:1 by capacity), lon all in eu-west, tokyo idle (its idle
// row all in ue-b). Groups carry their loads: nyc 300, lon 100.
func testPlan() *waterfall.Plan {
	return &waterfall.Plan{
		Flows: []waterfall.Flow{
			{Site: "lon", Region: "eu-west", Group: "ew-b", Demand: 100, Share: 1},
			{Site: "nyc", Region: "us-east", Group: "ue-b", Demand: 133.3, Share: 0.4444444},
			{Site: "nyc", Region: "us-east", Group: "ue-c", Demand: 66.7, Share: 0.2222222},
			{Site: "nyc", Region: "eu-west", Group: "ew-b", Demand: 100, Share: 0.3333334},
		},
		Idle: []waterfall.Flow{{Site: "tokyo", Region: "us-east", Group: "ue-b", Share: 1}},
		Groups: []waterfall.GroupLoad{
			{Name: "ew-b", Region: "eu-west", Load: 200},
			{Name: "ue-b", Region: "us-east", Load: 133.3},
			{Name: "ue-c", Region: "us-east", Load: 66.7},
		},
		Sites: []waterfall.SiteLoad{{Name: "lon", Demand: 100}, {Name: "nyc", Demand: 300}, {Name: "tokyo"}},
	}
}

func TestWeights(t *testing.T) {
	ueB := func(p, w uint32) Locality {
		return Locality{Region: "us-east", Zone: "us-east-b", Group: "ue-b", Priority: p, Weight: w}
	}
	ueC := func(p, w uint32) Locality {
		return Locality{Region: "us-east", Zone: "us-east-c", Group: "ue-c", Priority: p, Weight: w}
	}
	ewB := func(p, w uint32) Locality {
		return Locality{Region: "eu-west", Zone: "eu-west-b", Group: "ew-b", Priority: p, Weight: w}
	}
	tests := []struct {
		name      string
		service   string
		plan      *waterfall.Plan
		site      string
		unhealthy []string
		want      []Locality
	}{{
		name: "spilling site: its row's shares, scaled", service: "web", plan: testPlan(), site: "nyc",
		want: []Locality{ueB(0, 444444), ueC(0, 222222), ewB(0, 333333)},
	}, {
		name: "nearest only: the unused groups are failover", service: "web", plan: testPlan(), site: "lon",
		// Priority 1 weighs by healthy instances.
		want: []Locality{ueB(1, 2), ueC(1, 1), ewB(0, WeightScale)},
	}, {
		name: "idle site: its idle row", service: "web", plan: testPlan(), site: "tokyo",
		want: []Locality{ueB(0, WeightScale), ueC(1, 1), ewB(1, 2)},
	}, {
		name: "unknown site: the load all sites send each group", service: "web", plan: testPlan(), site: "paris",
		want: []Locality{ueB(0, 333250), ueC(0, 166750), ewB(0, 500000)},
	}, {
		name: "no locality: the same aggregate", service: "web", plan: testPlan(), site: "",
		want: []Locality{ueB(0, 333250), ueC(0, 166750), ewB(0, 500000)},
	}, {
		name: "no plan yet: healthy instances", service: "web", plan: nil, site: "nyc", unhealthy: []string{"127.0.0.1:9002"},
		want: []Locality{ueB(0, 1), ueC(0, 1), ewB(0, 2)},
	}, {
		name: "group without healthy instances keeps weight 1", service: "web", plan: nil, site: "nyc", unhealthy: []string{"127.0.0.2:9001", "127.0.0.2:9002"},
		want: []Locality{ueB(0, 2), ueC(0, 1), ewB(0, 1)},
	}, {
		name: "baseline policy ignores any plan", service: "rr", plan: testPlan(), site: "nyc",
		want: []Locality{ueB(0, 2), ewB(0, 2)},
	}, {
		name: "drained group left out", service: "drain", plan: nil, site: "nyc",
		want: []Locality{ueB(0, 2)},
	}, {
		name: "nothing planned anywhere: healthy instances", service: "web", site: "paris",
		plan: &waterfall.Plan{Groups: []waterfall.GroupLoad{{Name: "ue-b"}, {Name: "ue-c"}, {Name: "ew-b"}}},
		want: []Locality{ueB(0, 2), ueC(0, 1), ewB(0, 2)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := testSnapshot(t, tt.unhealthy...)
			sc, ok := s.Config.Service(tt.service)
			if !ok {
				t.Fatalf("no service %s", tt.service)
			}
			got := Weights(sc, s, tt.plan, tt.site)
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("Weights(%s, %q) (-want +got):\n%s", tt.service, tt.site, d)
			}
		})
	}
}

func TestScaled(t *testing.T) {
	tests := []struct {
		v, total float64
		want     uint32
	}{
		{0, 1, 0},
		{-1, 1, 0},
		{1e-9, 1, 1}, // any share keeps some traffic
		{0.5, 1, 500000},
		{1, 1, WeightScale},
		{1.0000001, 1, WeightScale}, // rounding noise above 1 is capped
		{50, 200, 250000},
	}
	for _, tt := range tests {
		if got := scaled(tt.v, tt.total); got != tt.want {
			t.Errorf("scaled(%v, %v) = %d, want %d", tt.v, tt.total, got, tt.want)
		}
	}
}

// TestWeightsDemotedAndEmpty: without a plan a group weighs its healthy
// active instances: a demoted one counts for nothing, and an autoscaled
// group at zero keeps weight 1.
func TestWeightsDemotedAndEmpty(t *testing.T) {
	const y = `regions:
  - name: r1
    zones:
      - name: z1
        groups:
          - name: g
            instances:
              - {address: 127.0.0.1:1}
              - {address: 127.0.0.1:2}
              - {address: 127.0.0.1:3, demoted: true}
          - name: auto
            autoscaling: {max_instances: 3}
services:
  - name: rr
    policy: round_robin
    backends:
      - {group: g, max_rate_per_instance: 10}
      - {group: auto, max_rate_per_instance: 10}
routes:
  - service: rr
`
	cfg, err := config.Parse([]byte(y), "demoted.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := snapshot.FromConfig("v1", cfg)
	sc, _ := cfg.Service("rr")
	want := []Locality{
		{Region: "r1", Zone: "z1", Group: "g", Weight: 2},
		{Region: "r1", Zone: "z1", Group: "auto", Weight: 1},
	}
	if d := cmp.Diff(want, Weights(sc, s, nil, "nyc")); d != "" {
		t.Errorf("Weights (-want +got):\n%s", d)
	}
}

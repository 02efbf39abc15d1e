package waterfall

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestComputeScenarios runs the situations of docs/design.md §3 (its rules
// and properties), one named case each, with exact numbers.
func TestComputeScenarios(t *testing.T) {
	tests := []struct {
		name        string
		world       World
		wantFlows   []Flow
		wantLoads   map[string]float64 // region → load
		wantLambda  float64
		wantIdle    []Flow
		wantUnplace map[string]float64
	}{
		{
			name: "all regions under capacity: everything stays nearest",
			world: World{
				Regions: []Region{reg("us", grp("us-a", 100)), reg("eu", grp("eu-a", 100))},
				Sites: []Site{
					site("nyc", 60, "us", 10, "eu", 80),
					site("ams", 70, "eu", 10, "us", 80),
				},
			},
			wantFlows: []Flow{
				flow("ams", "eu", "eu-a", 70, 1, ReasonNearest),
				flow("nyc", "us", "us-a", 60, 1, ReasonNearest),
			},
			wantLoads:  map[string]float64{"us": 60, "eu": 70},
			wantLambda: 1,
		},
		{
			name: "one region full: overflow to the next-nearest region with capacity, then the next",
			world: World{
				Regions: []Region{
					reg("near", grp("near-a", 100)),
					reg("mid", grp("mid-a", 50)),
					reg("drained", grp("drained-a", 0)),
					reg("far", grp("far-a", 1000)),
				},
				Sites: []Site{site("s", 200, "near", 5, "drained", 10, "mid", 20, "far", 90)},
			},
			wantFlows: []Flow{
				flow("s", "near", "near-a", 100, 0.5, ReasonNearest),
				flow("s", "mid", "mid-a", 50, 0.25, ReasonSpillCapacity),
				flow("s", "far", "far-a", 50, 0.25, ReasonSpillCapacity),
			},
			wantLoads:  map[string]float64{"near": 100, "mid": 50, "drained": 0, "far": 50},
			wantLambda: 1,
		},
		{
			name: "more than half of a region unhealthy: preemptive spill although capacity suffices (h=0.4 keeps 80%)",
			world: World{
				Regions: []Region{
					reg("a", sickGrp("a-a", 600, 6, 2), sickGrp("a-b", 400, 4, 2)), // 4 of 10 healthy
					reg("b", grp("b-a", 1000)),
				},
				Sites: []Site{site("s", 100, "a", 10, "b", 30)},
			},
			wantFlows: []Flow{
				flow("s", "a", "a-a", 48, 0.48, ReasonNearest),
				flow("s", "a", "a-b", 32, 0.32, ReasonNearest),
				flow("s", "b", "b-a", 20, 0.2, ReasonSpillHealth),
			},
			wantLoads:  map[string]float64{"a": 80, "b": 20},
			wantLambda: 1,
		},
		{
			name: "exactly half unhealthy: no preemptive spill",
			world: World{
				Regions: []Region{reg("a", sickGrp("a-a", 1000, 10, 5)), reg("b", grp("b-a", 1000))},
				Sites:   []Site{site("s", 100, "a", 10, "b", 30)},
			},
			wantFlows:  []Flow{flow("s", "a", "a-a", 100, 1, ReasonNearest)},
			wantLoads:  map[string]float64{"a": 100, "b": 0},
			wantLambda: 1,
		},
		{
			name: "global demand 20% over global capacity: every region at 120%",
			world: World{
				Regions: []Region{
					reg("a", grp("a-a", 60), grp("a-b", 40)),
					reg("b", grp("b-a", 200)),
				},
				Sites: []Site{
					site("sa", 150, "a", 5, "b", 50),
					site("sb", 210, "b", 5, "a", 50),
				},
			},
			wantFlows: []Flow{
				flow("sa", "a", "a-a", 72, 0.48, ReasonNearest),
				flow("sa", "a", "a-b", 48, 0.32, ReasonNearest),
				flow("sa", "b", "b-a", 30, 0.2, ReasonSpillCapacity),
				flow("sb", "b", "b-a", 210, 1, ReasonNearest),
			},
			wantLoads:  map[string]float64{"a": 120, "b": 240},
			wantLambda: 1.2,
		},
		{
			name: "zones of a region fill in proportion to capacity",
			world: World{
				Regions: []Region{reg("a", grp("a-b", 30), grp("a-c", 90), grp("a-d", 0))},
				Sites:   []Site{site("s", 60, "a", 1)},
			},
			wantFlows: []Flow{
				flow("s", "a", "a-b", 15, 0.25, ReasonNearest),
				flow("s", "a", "a-c", 45, 0.75, ReasonNearest),
			},
			wantLoads:  map[string]float64{"a": 60},
			wantLambda: 1,
		},
		{
			name: "closer traffic keeps priority: the farther site spills",
			world: World{
				Regions: []Region{reg("a", grp("a-a", 100)), reg("b", grp("b-a", 1000))},
				Sites: []Site{
					site("close", 80, "a", 10, "b", 50),
					site("far", 80, "a", 20, "b", 30),
				},
			},
			wantFlows: []Flow{
				flow("close", "a", "a-a", 80, 1, ReasonNearest),
				flow("far", "a", "a-a", 20, 0.25, ReasonNearest),
				flow("far", "b", "b-a", 60, 0.75, ReasonSpillCapacity),
			},
			wantLoads:  map[string]float64{"a": 100, "b": 60},
			wantLambda: 1,
		},
		{
			name: "equal RTT: the site named first keeps priority, regions tie by name",
			world: World{
				Regions: []Region{reg("y", grp("y-a", 50)), reg("x", grp("x-a", 50)), reg("z", grp("z-a", 100))},
				Sites: []Site{
					site("s2", 50, "x", 10, "y", 10, "z", 40),
					site("s1", 50, "x", 10, "y", 10, "z", 40),
				},
			},
			wantFlows: []Flow{
				flow("s1", "x", "x-a", 50, 1, ReasonNearest),
				flow("s2", "y", "y-a", 50, 1, ReasonSpillCapacity),
			},
			wantLoads:  map[string]float64{"x": 50, "y": 50, "z": 0},
			wantLambda: 1,
		},
		{
			name: "preemptive spill with no room elsewhere returns to the nearest region",
			world: World{
				Regions: []Region{reg("a", sickGrp("a-a", 100, 10, 4)), reg("b", grp("b-a", 10))},
				Sites:   []Site{site("s", 100, "a", 10, "b", 20)},
			},
			wantFlows: []Flow{
				flow("s", "a", "a-a", 90, 0.9, ReasonNearest),
				flow("s", "b", "b-a", 10, 0.1, ReasonSpillHealth),
			},
			wantLoads:  map[string]float64{"a": 90, "b": 10},
			wantLambda: 1,
		},
		{
			name: "site reaching only full regions: overload in proportion to capacity",
			world: World{
				Regions: []Region{reg("a", grp("a-a", 100)), reg("b", grp("b-a", 300)), reg("c", grp("c-a", 1000))},
				Sites: []Site{
					site("ya", 100, "a", 1),
					site("yb", 300, "b", 1),
					site("x", 100, "a", 10, "b", 20),
					site("z", 1, "c", 1),
				},
			},
			wantFlows: []Flow{
				flow("x", "a", "a-a", 25, 0.25, ReasonOverload),
				flow("x", "b", "b-a", 75, 0.75, ReasonOverload),
				flow("ya", "a", "a-a", 100, 1, ReasonNearest),
				flow("yb", "b", "b-a", 300, 1, ReasonNearest),
				flow("z", "c", "c-a", 1, 1, ReasonNearest),
			},
			wantLoads:  map[string]float64{"a": 125, "b": 375, "c": 1},
			wantLambda: 1,
		},
		{
			name: "site reaching no capacity: unplaced, the others planned",
			world: World{
				Regions: []Region{reg("a", grp("a-a", 100)), reg("dark", grp("dark-a", 0))},
				Sites: []Site{
					site("ok", 10, "a", 5),
					site("cut", 40, "dark", 5, "gone", 1), // "gone" is not in the world: ignored
					{Name: "lost", Demand: 7},
				},
			},
			wantFlows:   []Flow{flow("ok", "a", "a-a", 10, 1, ReasonNearest)},
			wantLoads:   map[string]float64{"a": 10, "dark": 0},
			wantLambda:  1,
			wantUnplace: map[string]float64{"cut": 40, "lost": 7},
		},
		{
			name: "site without demand gets an idle row over the final loads",
			world: World{
				Regions: []Region{reg("a", grp("a-a", 50)), reg("b", sickGrp("b-a", 100, 10, 3)), reg("c", grp("c-a", 100))},
				Sites: []Site{
					site("busy", 50, "a", 1),
					site("quiet", 0, "a", 5, "b", 10, "c", 20),
				},
			},
			wantFlows:  []Flow{flow("busy", "a", "a-a", 50, 1, ReasonNearest)},
			wantLoads:  map[string]float64{"a": 50, "b": 0, "c": 0},
			wantLambda: 1,
			// a is full; b (h=0.3) keeps 60%, c takes the rest.
			wantIdle: []Flow{
				flow("quiet", "b", "b-a", 0, 0.6, ReasonSpillCapacity),
				flow("quiet", "c", "c-a", 0, 0.4, ReasonSpillHealth),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustCompute(t, tt.world)
			checkPlan(t, "Compute", p, tt.wantFlows, tt.wantIdle, tt.wantLoads, tt.wantLambda, tt.wantUnplace)
		})
	}
}

// TestComputeCapacityAddedReturnsTraffic: spill is temporary (rule 7); once
// the nearest region grows, its site's traffic comes back.
func TestComputeCapacityAddedReturnsTraffic(t *testing.T) {
	world := func(nearCapacity float64) World {
		return World{
			Regions: []Region{reg("near", grp("near-a", nearCapacity)), reg("far", grp("far-a", 500))},
			Sites:   []Site{site("s", 100, "near", 10, "far", 40)},
		}
	}
	tests := []struct {
		name string
		near float64
		want []Flow
	}{
		{"before scale-up: half spills", 50, []Flow{
			flow("s", "near", "near-a", 50, 0.5, ReasonNearest),
			flow("s", "far", "far-a", 50, 0.5, ReasonSpillCapacity),
		}},
		{"after scale-up: all back in the nearest region", 150, []Flow{
			flow("s", "near", "near-a", 100, 1, ReasonNearest),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mustCompute(t, world(tt.near)).Flows
			if diff := cmp.Diff(tt.want, got, approx); diff != "" {
				t.Errorf("Compute(near capacity %v) (-want +got):\n%s", tt.near, diff)
			}
		})
	}
}

func TestComputeRegionSummary(t *testing.T) {
	w := World{
		Regions: []Region{
			reg("a", sickGrp("a-a", 60, 6, 2), sickGrp("a-b", 40, 4, 2)),
			reg("empty"),
			reg("b", Group{Name: "b-a", Capacity: 10}), // no instance counts: h = 1
		},
		Sites: []Site{site("s", 10, "a", 1)},
	}
	p := mustCompute(t, w)
	// s reaches only a: a keeps 8, and the 2 it spills find no other region
	// and return to it.
	want := []RegionLoad{
		{Name: "a", Capacity: 100, Load: 10, Health: 0.4, Keep: 0.8},
		{Name: "b", Capacity: 10, Load: 0, Health: 1, Keep: 1},
		{Name: "empty", Capacity: 0, Load: 0, Health: 1, Keep: 1},
	}
	if diff := cmp.Diff(want, p.Regions, approx); diff != "" {
		t.Errorf("Compute regions (-want +got):\n%s", diff)
	}
	wantGroups := []GroupLoad{
		{Name: "a-a", Region: "a", Zone: "a", Capacity: 60, Load: 6},
		{Name: "a-b", Region: "a", Zone: "b", Capacity: 40, Load: 4},
		{Name: "b-a", Region: "b", Capacity: 10},
	}
	if diff := cmp.Diff(wantGroups, p.Groups, approx); diff != "" {
		t.Errorf("Compute groups (-want +got):\n%s", diff)
	}
	wantSites := []SiteLoad{{Name: "s", Demand: 10}}
	if diff := cmp.Diff(wantSites, p.Sites, approx); diff != "" {
		t.Errorf("Compute sites (-want +got):\n%s", diff)
	}
	if got := p.SiteRegions("s"); !slices.Equal(got, []string{"a"}) {
		t.Errorf("SiteRegions(s) = %v, want [a]", got)
	}
}

func TestComputeConfig(t *testing.T) {
	w := World{
		Regions: []Region{reg("a", sickGrp("a-a", 1000, 10, 3)), reg("b", grp("b-a", 1000))},
		Sites:   []Site{site("s", 100, "a", 1, "b", 2)},
	}
	tests := []struct {
		name      string
		cfg       Config
		wantNear  float64 // demand kept in a
		wantErr   error
		wantInErr string
	}{
		{name: "default: h=0.3 keeps 60%", cfg: DefaultConfig(), wantNear: 60},
		{name: "slope 3 keeps 90%", cfg: Config{SpillThreshold: 0.5, SpillSlope: 3}, wantNear: 90},
		{name: "threshold 0.25: no spill at h=0.3", cfg: Config{SpillThreshold: 0.25, SpillSlope: 2}, wantNear: 100},
		{name: "threshold 0: never spill", cfg: Config{}, wantNear: 100},
		{name: "threshold above 1", cfg: Config{SpillThreshold: 1.5, SpillSlope: 2}, wantErr: ErrInvalidConfig, wantInErr: "spill_threshold: must be in [0, 1], got 1.5"},
		{name: "NaN slope", cfg: Config{SpillThreshold: 0.5, SpillSlope: math.NaN()}, wantErr: ErrInvalidConfig, wantInErr: "spill_slope: must be finite and >= 0, got NaN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Compute(w, tt.cfg)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Compute(%+v) error = %v, want %v", tt.cfg, err, tt.wantErr)
			}
			if err != nil {
				if !strings.Contains(err.Error(), tt.wantInErr) {
					t.Errorf("Compute(%+v) error = %q, want it to contain %q", tt.cfg, err, tt.wantInErr)
				}
				return
			}
			if got := siteFlows(p, "s")["a"]; !near(got, tt.wantNear) {
				t.Errorf("Compute(%+v) sends %v to a, want %v", tt.cfg, got, tt.wantNear)
			}
		})
	}
}

func TestComputeInvalidWorld(t *testing.T) {
	valid := func() World {
		return World{
			Regions: []Region{reg("a", grp("a-a", 10), grp("a-b", 10)), reg("b", grp("b-a", 10))},
			Sites:   []Site{site("s0", 1, "a", 1), site("s1", 1, "b", 1), site("s2", 1, "a", 1)},
		}
	}
	tests := []struct {
		name   string
		mutate func(w *World)
		want   []string // every line of the error after the prefix
	}{
		{"negative demand", func(w *World) { w.Sites[2].Demand = -1 },
			[]string{"sites[2].demand: must be finite and >= 0, got -1"}},
		{"NaN demand", func(w *World) { w.Sites[0].Demand = math.NaN() },
			[]string{"sites[0].demand: must be finite and >= 0, got NaN"}},
		{"infinite capacity", func(w *World) { w.Regions[0].Groups[1].Capacity = math.Inf(1) },
			[]string{"regions[0].groups[1].capacity: must be finite and >= 0, got +Inf"}},
		{"negative capacity", func(w *World) { w.Regions[1].Groups[0].Capacity = -5 },
			[]string{"regions[1].groups[0].capacity: must be finite and >= 0, got -5"}},
		{"healthy above instances", func(w *World) { w.Regions[0].Groups[0].Healthy = 11 },
			[]string{"regions[0].groups[0].healthy: must be in [0, instances=10], got 11"}},
		{"negative instances", func(w *World) { w.Regions[1].Groups[0].Instances, w.Regions[1].Groups[0].Healthy = -1, 0 },
			[]string{"regions[1].groups[0].instances: must be >= 0, got -1"}},
		{"duplicate region", func(w *World) { w.Regions[1].Name = "a" },
			[]string{`regions[1].name: "a" duplicates regions[0]`}},
		{"duplicate group across regions", func(w *World) { w.Regions[1].Groups[0].Name = "a-b" },
			[]string{`regions[1].groups[0].name: "a-b" duplicates regions[0].groups[1]`}},
		{"duplicate site", func(w *World) { w.Sites[2].Name = "s0" },
			[]string{`sites[2].name: "s0" duplicates sites[0]`}},
		{"empty names", func(w *World) { w.Regions[0].Name, w.Sites[1].Name = "", "" },
			[]string{"regions[0].name: must not be empty", "sites[1].name: must not be empty"}},
		{"negative RTT", func(w *World) { w.Sites[1].RTT["b"] = -3 },
			[]string{`sites[1].rtt["b"]: must be finite and >= 0, got -3`}},
		{"RTTByRegion: negative and NaN RTT", func(w *World) {
			w.Sites[1].RTT, w.Sites[1].RTTByRegion = nil, []float64{math.NaN(), -2}
		}, []string{
			`sites[1].rtt_by_region[0] ("a"): must be >= 0 (+Inf: unreachable), got NaN`,
			`sites[1].rtt_by_region[1] ("b"): must be >= 0 (+Inf: unreachable), got -2`,
		}},
		{"RTTByRegion: one entry short", func(w *World) {
			w.Sites[0].RTT, w.Sites[0].RTTByRegion = nil, []float64{1}
		}, []string{"sites[0].rtt_by_region: has 1 entries, want one per region (2)"}},
		{"RTTByRegion and RTT both set", func(w *World) { w.Sites[2].RTTByRegion = []float64{1, 2} },
			[]string{"sites[2]: rtt and rtt_by_region are both set; set one"}},
		{"every problem at once, in input order", func(w *World) {
			w.Sites[0].Demand = -1
			w.Regions[1].Groups[0].Capacity = math.NaN()
			w.Sites[2].RTT["a"] = math.Inf(1)
		}, []string{
			"regions[1].groups[0].capacity: must be finite and >= 0, got NaN",
			"sites[0].demand: must be finite and >= 0, got -1",
			`sites[2].rtt["a"]: must be finite and >= 0, got +Inf`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := valid()
			tt.mutate(&w)
			p, err := Compute(w, DefaultConfig())
			if !errors.Is(err, ErrInvalidWorld) || p != nil {
				t.Fatalf("Compute = %v, %v; want nil, error wrapping ErrInvalidWorld", p, err)
			}
			got := strings.Split(strings.TrimPrefix(err.Error(), ErrInvalidWorld.Error()+": "), "\n")
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Compute error lines (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := Compute(valid(), DefaultConfig()); err != nil {
		t.Errorf("Compute(valid world) error = %v", err)
	}
}

func TestPlanRow(t *testing.T) {
	w := World{
		Regions: []Region{reg("a", grp("a-a", 10), grp("a-b", 30)), reg("b", grp("b-a", 100))},
		Sites: []Site{
			site("m", 60, "a", 1, "b", 2),
			site("n", 0, "b", 1),
			site("o", 5, "b", 3),
			{Name: "p", Demand: 3},
		},
	}
	p := mustCompute(t, w)
	tests := []struct {
		site string
		want []Flow
	}{
		{"m", []Flow{
			flow("m", "a", "a-a", 10, 1.0/6, ReasonNearest),
			flow("m", "a", "a-b", 30, 0.5, ReasonNearest),
			flow("m", "b", "b-a", 20, 1.0/3, ReasonSpillCapacity),
		}},
		{"n", []Flow{flow("n", "b", "b-a", 0, 1, ReasonNearest)}},
		{"o", []Flow{flow("o", "b", "b-a", 5, 1, ReasonNearest)}},
		{"p", nil},
		{"absent", nil},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, p.Row(tt.site), approx); diff != "" {
			t.Errorf("Row(%q) (-want +got):\n%s", tt.site, diff)
		}
	}
	if got := testing.AllocsPerRun(100, func() { p.Row("o") }); got != 0 {
		t.Errorf("Row allocates %v times, want 0", got)
	}
	if s, ok := p.Site("p"); !ok || s.Unplaced != 3 {
		t.Errorf("Site(p) = %+v, %v; want Unplaced 3", s, ok)
	}
	if _, ok := p.Site("absent"); ok {
		t.Errorf("Site(absent) found")
	}
	if _, ok := p.Region("absent"); ok {
		t.Errorf("Region(absent) found")
	}
	if got := len(p.RegionGroups("a")); got != 2 {
		t.Errorf("len(RegionGroups(a)) = %d, want 2", got)
	}
}

func TestReason(t *testing.T) {
	tests := []struct {
		r    Reason
		want string
	}{
		{ReasonNearest, "nearest"},
		{ReasonSpillCapacity, "spill_capacity"},
		{ReasonSpillHealth, "spill_health"},
		{ReasonOverload, "overload"},
		{Reason(9), "Reason(9)"},
	}
	for _, tt := range tests {
		if got := tt.r.String(); got != tt.want {
			t.Errorf("Reason(%d).String() = %q, want %q", tt.r, got, tt.want)
		}
	}
	b, err := json.Marshal(Flow{Reason: ReasonSpillHealth})
	if err != nil || !strings.Contains(string(b), `"Reason":"spill_health"`) {
		t.Fatalf("json.Marshal(Flow) = %s, %v; want Reason as a name", b, err)
	}
	var f Flow
	if err := json.Unmarshal(b, &f); err != nil || f.Reason != ReasonSpillHealth {
		t.Errorf("json round trip = %v, %v; want spill_health", f.Reason, err)
	}
	if err := f.Reason.UnmarshalText([]byte("sideways")); err == nil {
		t.Errorf("UnmarshalText(sideways) = nil, want an error")
	}
	if _, err := Reason(9).MarshalText(); err == nil {
		t.Errorf("Reason(9).MarshalText() = nil error, want one")
	}
}

// ExampleCompute is the worked example of the package documentation.
func ExampleCompute() {
	w := World{
		Regions: []Region{
			{Name: "us-east", Groups: []Group{
				{Name: "us-east-b", Zone: "b", Instances: 6, Healthy: 6, Capacity: 60},
				{Name: "us-east-c", Zone: "c", Instances: 4, Healthy: 4, Capacity: 40},
			}},
			{Name: "eu-west", Groups: []Group{
				{Name: "eu-west-b", Zone: "b", Instances: 10, Healthy: 10, Capacity: 100},
			}},
		},
		Sites: []Site{
			{Name: "nyc", Demand: 150, RTT: map[string]float64{"us-east": 10, "eu-west": 80}},
			{Name: "ams", Demand: 30, RTT: map[string]float64{"eu-west": 10, "us-east": 80}},
		},
	}
	for _, sick := range []int{0, 6} {
		w.Regions[1].Groups[0].Healthy = 10 - sick
		p, err := Compute(w, DefaultConfig())
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("eu-west with %d of 10 instances failing:\n", sick)
		for _, f := range p.Flows {
			fmt.Printf("  %s → %-9s %5.1f  %.3f  %s\n", f.Site, f.Group, f.Demand, f.Share, f.Reason)
		}
	}
	// Output:
	// eu-west with 0 of 10 instances failing:
	//   ams → eu-west-b  30.0  1.000  nearest
	//   nyc → us-east-b  60.0  0.400  nearest
	//   nyc → us-east-c  40.0  0.267  nearest
	//   nyc → eu-west-b  50.0  0.333  spill_capacity
	// eu-west with 6 of 10 instances failing:
	//   ams → eu-west-b  30.0  1.000  nearest
	//   nyc → us-east-b  60.0  0.400  nearest
	//   nyc → us-east-c  40.0  0.267  nearest
	//   nyc → eu-west-b  50.0  0.333  spill_capacity
}

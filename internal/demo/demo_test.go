package demo

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway-lb/spillway/internal/loadgen"
)

func TestRatesAndPrint(t *testing.T) {
	measure := 2 * time.Second
	results := []SiteResult{
		{Site: "nyc", Demand: 450, Res: &loadgen.Result{
			Sent: 900, OK: 880, Failed: 20,
			ByRegion:  map[string]int64{"us-east": 640, "eu-west": 240},
			Routed:    map[string]int64{"us-east": 660, "eu-west": 240},
			Latencies: []time.Duration{10 * time.Millisecond, 20 * time.Millisecond},
		}},
		{Site: "lon", Demand: 150, Res: &loadgen.Result{
			Sent: 300, OK: 300,
			ByRegion:  map[string]int64{"eu-west": 300},
			Routed:    map[string]int64{"eu-west": 300},
			Latencies: []time.Duration{12 * time.Millisecond},
		}},
	}
	if d := cmp.Diff(map[string]float64{"us-east": 320, "eu-west": 270}, ServedRPS(results, measure)); d != "" {
		t.Errorf("ServedRPS mismatch (-want +got):\n%s", d)
	}
	if d := cmp.Diff(map[string]float64{"us-east": 330, "eu-west": 270}, RoutedRPS(results, measure)); d != "" {
		t.Errorf("RoutedRPS mismatch (-want +got):\n%s", d)
	}
	var b bytes.Buffer
	Print(&b, 2, 5, Story()[1], results, map[string]RegionPlan{"us-east": {Utilization: 0.95, Effective: 288, Signals: "queueing"}, "eu-west": {Utilization: 0.84, Effective: 320}}, measure)
	out := b.String()
	for _, want := range []string{
		"== phase 2/5: flash crowd at nyc",
		"nyc   450/s",              // demand
		"73%",                      // nyc's share in us-east: 640/880
		"2.2%",                     // nyc's error rate: 20/900
		"us-east     320/s  330/s", // capacity, sent
		"103%",                     // us-east utilization: 330/320
		"95%",                      // us-east planned
		"288/s  queueing",          // us-east effective capacity, signal
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Print output lacks %q:\n%s", want, out)
		}
	}
}

func TestStoryIsTheSeedSituations(t *testing.T) {
	s := Story()
	if len(s) != 5 {
		t.Fatalf("Story has %d phases, want 5", len(s))
	}
	var total float64
	for _, d := range s[3].Demand {
		total += d
	}
	if want := 1.2 * 3 * RegionCapacity; total != want {
		t.Errorf("global overload demand = %v, want 20%% over the %d of capacity = %v", total, 3*RegionCapacity, want)
	}
	if s[2].Unhealthy["eu-west"] != 5 {
		t.Errorf("unhealthy phase fails %d eu-west instances, want 5 of 8 (more than half)", s[2].Unhealthy["eu-west"])
	}
	if s[1].Demand["nyc"] <= RegionCapacity {
		t.Errorf("flash crowd demand at nyc %v does not exceed us-east's %d", s[1].Demand["nyc"], RegionCapacity)
	}
}

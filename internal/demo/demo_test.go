package demo

import (
	"bytes"
	"slices"
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
	for i, ph := range s {
		if ph.Overload != (i == 3) {
			t.Errorf("phase %d (%s): Overload %v, want it on the global overload phase alone", i+1, ph.Name, ph.Overload)
		}
	}
	if s[2].Unhealthy["eu-west"] != 5 {
		t.Errorf("unhealthy phase fails %d eu-west instances, want 5 of 8 (more than half)", s[2].Unhealthy["eu-west"])
	}
	if s[1].Demand["nyc"] <= RegionCapacity {
		t.Errorf("flash crowd demand at nyc %v does not exceed us-east's %d", s[1].Demand["nyc"], RegionCapacity)
	}
}

// TestQuotaPhase: the quota phase's table shows each consumer's counts
// and the control plane's view, and CheckQuota passes the expected outcome
// and names each failed expectation.
func TestQuotaPhase(t *testing.T) {
	good := []QuotaConsumer{
		{Project: "greedy", Rate: 20, Sent: 120, OK: 61, Limited: 59, Used: 60, Limit: 60, Source: "default"},
		{Project: "polite", Rate: 0.5, Sent: 3, OK: 3, Used: 3, Limit: 60, Source: "default"},
	}
	var b bytes.Buffer
	PrintQuota(&b, 6, 6, good, 6*time.Second)
	for _, want := range []string{"== phase 6/6: quota", "greedy   20.0/s   120        61   59", "polite    0.5/s     3         3    0"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("PrintQuota output lacks %q:\n%s", want, b.String())
		}
	}
	if err := CheckQuota(good); err != nil {
		t.Errorf("CheckQuota(expected outcome) = %v", err)
	}
	for _, tt := range []struct {
		name string
		edit func([]QuotaConsumer)
		want string
	}{
		{"greedy never refused", func(cs []QuotaConsumer) { cs[0].OK, cs[0].Limited = 120, 0 }, "greedy: 120 admitted, 0 refused"},
		{"greedy over two windows' limit", func(cs []QuotaConsumer) { cs[0].OK, cs[0].Limited = 123, 1 }, "at most 122"},
		{"polite refused", func(cs []QuotaConsumer) { cs[1].OK, cs[1].Limited = 2, 1 }, "polite: 2 of 3 admitted"},
		{"errors", func(cs []QuotaConsumer) { cs[1].Other = 1 }, "polite: 1 answers neither"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cs := append([]QuotaConsumer(nil), good...)
			tt.edit(cs)
			if err := CheckQuota(cs); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("CheckQuota = %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// overloadSite is a site's measured overload phase: ok answers 200 after
// their latencies in turn, shed answers 503 from the gfe (no region) and
// busy answers 503 from a backend of us-east.
func overloadSite(site string, lat []time.Duration, ok, shed, busy int) SiteResult {
	var recs []loadgen.Record
	for i := range ok {
		recs = append(recs, loadgen.Record{Status: 200, Region: "us-east", Latency: lat[i%len(lat)]})
	}
	for range shed {
		recs = append(recs, loadgen.Record{Status: 503, Latency: time.Millisecond})
	}
	for range busy {
		recs = append(recs, loadgen.Record{Status: 503, Region: "us-east", Latency: 900 * time.Millisecond})
	}
	recs = append(recs, loadgen.Record{Dropped: true})
	return SiteResult{Site: site, Demand: 500, Res: &loadgen.Result{Sent: int64(ok + shed + busy), OK: int64(ok), Failed: int64(shed + busy), Records: recs}}
}

// TestOverloadPhase: the global overload phase reports each site's shed
// share (the gfe's own 503s, not a backend's) and the p99 of its 2xx
// answers alone; CheckOverload passes a shed share near 29% at every site
// and names a site that shed too little or nothing.
func TestOverloadPhase(t *testing.T) {
	ms := time.Millisecond
	fast := []time.Duration{20 * ms, 30 * ms, 40 * ms, 60 * ms}
	nyc := overloadSite("nyc", append(slices.Repeat([]time.Duration{30 * ms}, 98), 90*ms, 120*ms), 71*2, 28*2, 1*2)
	lon := overloadSite("lon", fast, 71, 29, 0)
	if p99, n := Admitted(nyc.Res); p99 != 90*ms || n != 142 {
		t.Errorf("Admitted(nyc) = %v over %d, want 90ms (the 2xx answers' p99; the busy 503s took 900ms) over 142", p99, n)
	}
	if f := Shed(nyc.Res); f != 0.28 {
		t.Errorf("Shed(nyc) = %v, want 0.28 (56 of 200; the backend's 503s are not shed)", f)
	}
	good := []SiteResult{nyc, lon}
	if err := CheckOverload(good); err != nil {
		t.Errorf("CheckOverload(28%% and 29%% shed) = %v", err)
	}
	var b bytes.Buffer
	Print(&b, 4, 7, Story()[3], good, nil, 2*time.Second)
	for _, want := range []string{
		"shed  p50  p99  admitted p99",
		"28.0%", // nyc's shed share
		"90ms",  // nyc's admitted p99
		"shedding: admitted p99 under 150ms at every site: met: nyc 90ms (28% shed), lon 60ms (29% shed)",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("Print output lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	slow := overloadSite("tokyo", []time.Duration{400 * ms}, 71, 29, 0)
	PrintOverload(&b, []SiteResult{nyc, slow})
	if want := "MISSED: nyc 90ms (28% shed), tokyo 400ms (29% shed)"; !strings.Contains(b.String(), want) {
		t.Errorf("PrintOverload = %q, want it to contain %q", b.String(), want)
	}
	if err := CheckOverload([]SiteResult{overloadSite("lon", fast, 85, 15, 0)}); err == nil || !strings.Contains(err.Error(), "lon: the gfe shed 15.0%") {
		t.Errorf("CheckOverload(15%% shed, admit 1's share was 21%%) = %v, want an error naming lon", err)
	}
	unshed := overloadSite("tokyo", fast, 100, 0, 30)
	if err := CheckOverload([]SiteResult{nyc, unshed}); err == nil || !strings.Contains(err.Error(), "tokyo: the gfe shed 0.0% of its requests") || strings.Contains(err.Error(), "nyc") {
		t.Errorf("CheckOverload(tokyo unshed) = %v, want an error naming tokyo alone", err)
	}
	if err := CheckOverload(nil); err == nil {
		t.Error("CheckOverload(nothing measured) = nil")
	}
}

func TestParsePhases(t *testing.T) {
	for _, tt := range []struct {
		in      string
		want    map[int]bool
		wantErr bool
	}{
		{"", nil, false},
		{"1,4", map[int]bool{1: true, 4: true}, false},
		{" 7 ", map[int]bool{7: true}, false},
		{"0", nil, true},
		{"8", nil, true},
		{"1,x", nil, true},
	} {
		got, err := ParsePhases(tt.in, 7)
		if (err != nil) != tt.wantErr || !cmp.Equal(got, tt.want) {
			t.Errorf("ParsePhases(%q) = %v, %v; want %v (error %v)", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

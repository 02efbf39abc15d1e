package realbench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/benchpolicy"
)

// TestUnevenStory checks the uneven story's schedule and deployment: nine
// phases from 0.5x to 2x of the 350 req/s declared, tokyo sending half of
// every phase's demand next to asia-east, the smallest region, and half of
// every region's instances antagonized, each with a seed of its own.
func TestUnevenStory(t *testing.T) {
	for _, quick := range []bool{false, true} {
		st := UnevenStory(quick)
		if err := st.Validate(); err != nil {
			t.Fatalf("quick=%v: Validate: %v", quick, err)
		}
		wantPhase, wantReps, wantPeriod := 6*time.Second, 5, 4*time.Second
		if quick {
			wantPhase, wantReps, wantPeriod = 2*time.Second, 2, 2*time.Second
		}
		if st.Reps != wantReps || st.Timeout != 5*time.Second || st.Antagonist.Period != wantPeriod || len(st.Policies) != len(UnevenPolicies()) {
			t.Errorf("quick=%v: reps %d, timeout %v, antagonist period %v, %d policies; want %d, 5s, %v, %d",
				quick, st.Reps, st.Timeout, st.Antagonist.Period, len(st.Policies), wantReps, wantPeriod, len(UnevenPolicies()))
		}
		var names []string
		for _, ph := range st.Phases {
			names = append(names, ph.Name)
			if ph.Duration != wantPhase {
				t.Errorf("quick=%v, %s: %v long, want %v", quick, ph.Name, ph.Duration, wantPhase)
			}
		}
		if got, want := strings.Join(names, " "), "0.5x 0.7x 0.9x 0.95x 1.1x 1.3x 1.5x 1.7x 2x"; got != want {
			t.Errorf("quick=%v: phases %s, want %s", quick, got, want)
		}
	}

	st := UnevenStory(false)
	if c := UnevenCapacity(); c != 350 {
		t.Fatalf("declared capacity %g req/s, want 350", c)
	}
	for _, tt := range []struct {
		phase                   int
		tokyo, nyc, lon, sao    float64
		wantTotal, wantMinShare float64
	}{
		// 0.5x: tokyo's 87.5 req/s exceed asia-east's 50 by 37.5 of 175.
		{0, 87.5, 35, 35, 17.5, 175, 37.5 / 175},
		// 0.9x: 157.5 - 50 = 107.5 of 315 must leave.
		{2, 157.5, 63, 63, 31.5, 315, 107.5 / 315},
		// 0.95x: 166.25 - 50 = 116.25 of 332.5.
		{3, 166.25, 66.5, 66.5, 33.25, 332.5, 116.25 / 332.5},
		// 2x: every region at λ = 2 (rule 6): tokyo's 350 less asia-east's 100 of 700.
		{8, 350, 140, 140, 70, 700, 250.0 / 700},
	} {
		d := st.Phases[tt.phase].Demand
		if !near(d["tokyo"], tt.tokyo) || !near(d["nyc"], tt.nyc) || !near(d["lon"], tt.lon) || !near(d["sao"], tt.sao) || !near(demandOf(st.Phases[tt.phase]), tt.wantTotal) {
			t.Errorf("phase %d: demand %v, want tokyo %g nyc %g lon %g sao %g (%g in all)", tt.phase, d, tt.tokyo, tt.nyc, tt.lon, tt.sao, tt.wantTotal)
		}
		_, phases, err := minCrossRegion(st.spec(), &st.Config)
		if err != nil {
			t.Fatal(err)
		}
		if !near(phases[tt.phase], tt.wantMinShare) {
			t.Errorf("phase %d: minimum cross-region share %.4f, want %.4f", tt.phase, phases[tt.phase], tt.wantMinShare)
		}
	}
	// The whole story: phases of equal length, weighted by their demand.
	// Cross-region flow 37.5 + 72.5 + 107.5 + 116.25 + 125 × (1.1 + 1.3 +
	// 1.5 + 1.7 + 2) = 1283.75 of 350 × 10.65 = 3727.5 req/s.
	total, _, err := minCrossRegion(st.spec(), &st.Config)
	if err != nil {
		t.Fatal(err)
	}
	if want := 1283.75 / 3727.5; !near(total, want) {
		t.Errorf("minimum cross-region share %.5f, want %.5f", total, want)
	}

	// The deployment: asia-east the smallest region, tokyo's nearest; half
	// of every region's instances antagonized with seeds of their own.
	spec := st.spec()
	seeds := map[string]bool{}
	for _, r := range spec.Regions {
		n := r.Instances * len(r.Zones)
		want := 4
		if r.Name == "asia-east" {
			want = 2
		}
		if n != want || r.Rate != 25 {
			t.Errorf("%s: %d instances of %g req/s, want %d of 25", r.Name, n, r.Rate, want)
		}
		var slowed []string
		for i := 0; i < len(r.BackendArgs); i += 2 {
			if r.BackendArgs[i] != "--antagonist" {
				t.Fatalf("%s: backend args %q, want --antagonist pairs", r.Name, r.BackendArgs)
			}
			rule := r.BackendArgs[i+1]
			name, rest, _ := strings.Cut(rule, ":")
			slowed = append(slowed, name)
			if !strings.HasPrefix(rest, "period=4s,duty=0.5,slowdown=3x,seed=") {
				t.Errorf("%s: antagonist %q, want period=4s,duty=0.5,slowdown=3x,seed=N", r.Name, rule)
			}
			seed := rest[strings.LastIndex(rest, "=")+1:]
			if seeds[seed] {
				t.Errorf("%s: seed %s used twice", name, seed)
			}
			seeds[seed] = true
		}
		wantSlowed := fmt.Sprintf("%s-b-1 %s-c-1", r.Name, r.Name)
		if r.Name == "asia-east" {
			wantSlowed = "asia-east-b-1" // of b-1 and c-1
		}
		if got := strings.Join(slowed, " "); got != wantSlowed {
			t.Errorf("%s: antagonized %s, want %s (half of %d)", r.Name, got, wantSlowed, n)
		}
		if !strings.Contains(r.InstanceKeys, "max_concurrency=3") || !strings.Contains(r.InstanceKeys, "service_time=80ms") || !strings.Contains(r.InstanceKeys, "max_rps=0") {
			t.Errorf("%s: instance keys %q, want 3 slots of 80ms and no rate limit", r.Name, r.InstanceKeys)
		}
	}
	tab, err := newTable(spec, &st.Config)
	if err != nil {
		t.Fatal(err)
	}
	if tab.nearest["tokyo"] != "asia-east" {
		t.Errorf("tokyo's nearest region %s, want asia-east", tab.nearest["tokyo"])
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6*max(1, math.Abs(b)) }

// TestStoryOrder checks that the policies are interleaved: each
// repetition rotates the order by one.
func TestStoryOrder(t *testing.T) {
	st := UnevenStory(true)
	st.Policies = []benchpolicy.Row{{Policy: "waterfall"}, {Policy: "min_rtt"}, {Policy: "round_robin", Scope: "global"}}
	var got []string
	for rep := range 4 {
		var ids []string
		for _, p := range st.order(rep) {
			ids = append(ids, p.ID())
		}
		got = append(got, strings.Join(ids, ","))
	}
	want := []string{"waterfall,min_rtt,round_robin/global", "min_rtt,round_robin/global,waterfall", "round_robin/global,waterfall,min_rtt", "waterfall,min_rtt,round_robin/global"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("orders %q, want %q", got, want)
	}
}

// TestStoryRun checks one run's measures against a synthetic measurement:
// in phase 0 (0.5x) 990 requests served in 10 ms, 5 unanswered within the
// 5 s deadline (they count as 5000 ms) and 5 refused at once (errors, no
// latency); in phase 8 (2x) 100 served in 200 ms.
func TestStoryRun(t *testing.T) {
	st := UnevenStory(true)
	spec := st.spec()
	tab, err := newTable(spec, &st.Config)
	if err != nil {
		t.Fatal(err)
	}
	m := Measurement{Policy: st.Policies[0], Requests: concat(
		reqs(990, "tokyo", 0, 0, "", 0, 200, "asia-east", "asia-east-b-1", 10*ms),
		reqs(5, "tokyo", 0, 0, "", 0, 0, "", "", 5*time.Second),
		reqs(5, "tokyo", 0, 0, "", 0, 503, "asia-east", "asia-east-b-1", 1*ms),
		reqs(100, "nyc", 8, 16*time.Second, "", 0, 200, "eu-west", "eu-west-b-1", 200*ms),
	)}
	row, err := tab.row(m)
	if err != nil {
		t.Fatal(err)
	}
	run := tab.storyRun(m, row, &st.Config)
	// 1095 latencies: 990 × 10, 100 × 200, 5 × 5000.
	// Sorted: 990 × 10, 100 × 200, 5 × 5000; the p99 is the 1085th, the
	// p99.9 the 1094th (nearest rank).
	if run.P50Ms != 10 || run.P99Ms != 200 || run.P999Ms != 5000 {
		t.Errorf("p50/p99/p99.9 %v/%v/%v ms, want 10/200/5000", run.P50Ms, run.P99Ms, run.P999Ms)
	}
	// Within 0.95x: 995 latencies, the p99 the 986th (10 ms); above it
	// 100 × 200 ms.
	if run.P99WithinMs != 10 || run.P99OverMs != 200 {
		t.Errorf("p99 within/over %v/%v ms, want 10/200", run.P99WithinMs, run.P99OverMs)
	}
	if want := (990*10 + 100*200 + 5*5000) / 1095.0; !near(run.MeanMs, want) {
		t.Errorf("mean %v ms, want %v", run.MeanMs, want)
	}
	if !near(run.DeadlineMissed, 5/1100.0) || !near(run.ErrorRate, 10/1100.0) || !near(run.ErrorRateWithin, 10/1000.0) {
		t.Errorf("deadline missed %v, errors %v, within %v; want 5/1100, 10/1100, 10/1000", run.DeadlineMissed, run.ErrorRate, run.ErrorRateWithin)
	}
	if !near(run.CrossRegion, 100/1095.0) {
		t.Errorf("cross-region %v, want 100/1095 (nyc's to eu-west)", run.CrossRegion)
	}
	var asia RegionUtil
	for _, u := range run.Utilization {
		if u.Region == "asia-east" {
			asia = u
		}
	}
	// 995 routed to asia-east within the first 1 s window of 18 (9 phases
	// of 2 s): 995/50 at most, that over 18 on average.
	if !near(asia.Max, 995/50.0) || !near(asia.Mean, 995/50.0/18) {
		t.Errorf("asia-east utilization max %v mean %v, want %v and %v", asia.Max, asia.Mean, 995/50.0, 995/50.0/18)
	}

	// Three runs summarised: median, minimum, maximum.
	a, b, c := run, run, run
	a.P99Ms, b.P99Ms, c.P99Ms = 30, 10, 20
	sr := summarise(st.Policies[0], []StoryRun{a, b, c})
	if sr.P99Ms != 20 || sr.Min.P99Ms != 10 || sr.Max.P99Ms != 30 || sr.Scope != "-" || len(sr.Utilization) != 4 {
		t.Errorf("summary p99 %v [%v-%v], scope %q, %d regions; want 20 [10-30], -, 4", sr.P99Ms, sr.Min.P99Ms, sr.Max.P99Ms, sr.Scope, len(sr.Utilization))
	}
	if med, lo, hi := medianRange([]float64{4, 1, 3, 2}); med != 2.5 || lo != 1 || hi != 4 {
		t.Errorf("medianRange(4 1 3 2) = %v %v %v, want 2.5 1 4", med, lo, hi)
	}
}

// TestStoryResultJSONRoundTrip: the JSON of a StoryResult has the story's
// rows and phases under "rows" and "phases" (not the embedded Result's),
// and decodes back to the same table (lbbench --render).
func TestStoryResultJSONRoundTrip(t *testing.T) {
	st := UnevenStory(true)
	spec := st.spec()
	tab, err := newTable(spec, &st.Config)
	if err != nil {
		t.Fatal(err)
	}
	p := benchpolicy.Row{Policy: "waterfall", Options: benchpolicy.Options{LoadAware: true, Shed: true}}
	m := Measurement{Policy: p, Requests: reqs(100, "tokyo", 0, 0, "", 0, 200, "asia-east", "asia-east-b-1", 10*ms)}
	row, err := tab.row(m)
	if err != nil {
		t.Fatal(err)
	}
	res := &StoryResult{Result: *newResult(spec, &st.Config, tab), Story: "uneven", Reps: 1, TimeoutS: 5, MinCrossRegion: 0.25}
	res.Result.Phases = nil
	res.StoryPhases = []StoryPhase{{PhaseInfo: PhaseInfo{Name: "0.5x", DurationS: 2}, Load: 0.5, MinCrossRegion: 0.2}}
	res.Rows = []StoryRow{summarise(p, []StoryRun{tab.storyRun(m, row, &st.Config)})}
	var js bytes.Buffer
	if err := res.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Rows   []map[string]any `json:"rows"`
		Phases []map[string]any `json:"phases"`
	}
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Rows) != 1 || doc.Rows[0]["p999_ms"] != 10.0 || len(doc.Phases) != 1 || doc.Phases[0]["load"] != 0.5 {
		t.Fatalf("JSON rows %v, phases %v; want one story row (p999_ms 10) and one story phase (load 0.5)", doc.Rows, doc.Phases)
	}
	if r := doc.Rows[0]; r["policy"] != "waterfall" || r["load_aware"] != true || r["shed"] != true {
		t.Errorf("JSON row: policy %v, load_aware %v, shed %v; want waterfall, true, true", r["policy"], r["load_aware"], r["shed"])
	}
	var back StoryResult
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	var want, got strings.Builder
	if err := res.WriteTable(&want); err != nil {
		t.Fatal(err)
	}
	if err := back.WriteTable(&got); err != nil {
		t.Fatal(err)
	}
	if got.String() != want.String() {
		t.Errorf("table after the round trip:\n%s\nwant:\n%s", got.String(), want.String())
	}
	if !strings.Contains(want.String(), "waterfall+load_aware+shed") || !strings.Contains(want.String(), "minimum necessary cross-region share (LP over the declared capacities): 25.0%") {
		t.Errorf("table lacks the row or the minimum share:\n%s", want.String())
	}
}

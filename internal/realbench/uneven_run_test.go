package realbench

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/benchpolicy"
)

// TestRunStoryUneven runs the uneven story for real, cut to a quarter of
// its quick length (0.5 s phases), for waterfall, waterfall with
// load_aware and shedding (a config every gfe must take: the row's options
// in the service's config) and round robin, one repetition, and checks that the JSON `lbbench --story uneven --json`
// prints has every key, today's row keys among them, and plausible values:
// p99.9 >= p99 >= 0 and within the deadline, shares in [0, 1], the
// minimum cross-region share the LP's, every request of the schedule.
func TestRunStoryUneven(t *testing.T) {
	st := UnevenStory(true)
	st.Scale(0.25)
	st.Net = 66 // TestRunQuick uses 60, the e2e tests 20–59
	st.Reps = 1
	st.Policies = []benchpolicy.Row{{Policy: "waterfall"}, {Policy: "waterfall", Options: benchpolicy.Options{LoadAware: true, Shed: true}}, {Policy: "round_robin", Scope: "global"}}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var progress strings.Builder
	res, err := RunStory(ctx, st, Options{Dir: t.TempDir(), Bins: bins, Progress: &progress})
	t.Logf("progress:\n%s", progress.String())
	if err != nil {
		t.Fatalf("RunStory: %v", err)
	}
	var table, out bytes.Buffer
	if err := res.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())
	if err := res.WriteJSON(&out); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("decode the JSON: %v", err)
	}
	for _, k := range []string{"story", "reps", "timeout_s", "antagonist", "min_cross_region", "phases", "rows", "regions", "sites", "warmup_s", "load_avg", "wall_s"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("JSON has no top-level key %q", k)
		}
	}
	if v, _ := doc["min_cross_region"].(float64); !near(v, 1283.75/3727.5) {
		t.Errorf("min_cross_region %v, want the LP's %.4f", doc["min_cross_region"], 1283.75/3727.5)
	}
	if ph, _ := doc["phases"].([]any); len(ph) != 9 {
		t.Errorf("%d phases, want 9", len(ph))
	}
	rows, _ := doc["rows"].([]any)
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 3", len(rows))
	}
	scheduled := st.Scheduled()
	for i, want := range []string{"waterfall", "waterfall", "round_robin"} {
		row, _ := rows[i].(map[string]any)
		for _, k := range []string{"policy", "scope", "p99_ms", "mean_ms", "error_rate", "cross_region", "p999_ms", "p50_ms", "p99_within_ms", "p99_over_ms", "deadline_missed", "min", "max", "utilization", "runs"} {
			if _, ok := row[k]; !ok {
				t.Errorf("row %d: no key %q", i, k)
			}
		}
		if row["policy"] != want {
			t.Errorf("row %d: policy %v, want %s", i, row["policy"], want)
		}
		if withOptions := i == 1; (row["load_aware"] == true) != withOptions || (row["shed"] == true) != withOptions {
			t.Errorf("row %d: load_aware %v, shed %v; want both %v", i, row["load_aware"], row["shed"], withOptions)
		}
		num := func(k string) float64 { v, _ := row[k].(float64); return v }
		p99, p999 := num("p99_ms"), num("p999_ms")
		if !(p99 > 0 && p999 >= p99 && p999 <= 5000) {
			t.Errorf("%s: p99 %v, p99.9 %v ms; want 0 < p99 <= p99.9 <= 5000 (the deadline)", want, p99, p999)
		}
		if m := num("mean_ms"); !(m > 0 && m <= p999) {
			t.Errorf("%s: mean %v ms, want in (0, p99.9]", want, m)
		}
		for _, k := range []string{"error_rate", "cross_region", "deadline_missed", "error_rate_within", "over_capacity"} {
			if v := num(k); v < 0 || v > 1 {
				t.Errorf("%s: %s = %v, want a share in [0, 1]", want, k, v)
			}
		}
		if n := num("requests"); n < 0.9*scheduled || n > 1.02*scheduled {
			t.Errorf("%s: %v requests, want %.0f (demand × duration) within -10%%/+2%%", want, n, scheduled)
		}
		utils, _ := row["utilization"].([]any)
		if len(utils) != 4 {
			t.Errorf("%s: utilization of %d regions, want 4", want, len(utils))
		}
		for _, u := range utils {
			u, _ := u.(map[string]any)
			mean, _ := u["mean"].(float64)
			mx, _ := u["max"].(float64)
			if !(mean > 0 && mean <= mx) {
				t.Errorf("%s, %v: utilization mean %v, max %v; want 0 < mean <= max", want, u["region"], mean, mx)
			}
		}
		if runs, _ := row["runs"].([]any); len(runs) != 1 {
			t.Errorf("%s: %d runs, want 1", want, len(runs))
		}
	}
	// Round robin spreads every site over every instance: most of its
	// requests leave their site's region, far above the minimum.
	if !strings.Contains(table.String(), "waterfall+load_aware+shed") {
		t.Errorf("the table has no row waterfall+load_aware+shed:\n%s", table.String())
	}
	if rr := res.Rows[2]; rr.CrossRegion < 0.6 {
		t.Errorf("round_robin: cross-region %.3f, want > 0.6 (10 of 14 instances are outside any site's region)", rr.CrossRegion)
	}
}

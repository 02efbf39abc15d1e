package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway-lb/spillway/sim/autoscalebench"
)

// TestAutoscaleJSON: `lbsim autoscale --json` prints one object per tick
// with exactly the keys of the trace interface, and the step trace's
// scale-up in numbers.
func TestAutoscaleJSON(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"autoscale", "--trace", "../../configs/autoscale/step.yaml", "--json"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
	}
	type tick struct {
		T           float64        `json:"t_s"`
		Running     int            `json:"running"`
		Recommended int            `json:"recommended"`
		Driver      string         `json:"driver"`
		Drivers     map[string]int `json:"drivers"`
		Demoted     int            `json:"demoted"`
		Stopped     int            `json:"stopped"`
	}
	var ticks []tick
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var keys map[string]json.RawMessage
		if err := json.Unmarshal(sc.Bytes(), &keys); err != nil {
			t.Fatalf("line %d is not a JSON object: %v", len(ticks)+1, err)
		}
		got := slices.Sorted(func(yield func(string) bool) {
			for k := range keys {
				if !yield(k) {
					return
				}
			}
		})
		if diff := cmp.Diff([]string{"demoted", "driver", "drivers", "recommended", "running", "stopped", "t_s"}, got); diff != "" {
			t.Fatalf("line %d keys (-want +got):\n%s", len(ticks)+1, diff)
		}
		var k tick
		if err := json.Unmarshal(sc.Bytes(), &k); err != nil {
			t.Fatal(err)
		}
		ticks = append(ticks, k)
	}
	if len(ticks) != 300 {
		t.Fatalf("%d ticks, want 300", len(ticks))
	}
	// The load steps from 3 to 30 in flight at t=30s; the one-minute means
	// climb, the recommendation follows (5s cold start before running).
	for _, want := range []tick{
		{T: 30, Running: 1, Recommended: 1, Driver: "cpu", Drivers: map[string]int{"cpu": 1, "concurrency": 1, "act": 1}},
		{T: 35, Running: 1, Recommended: 2, Driver: "cpu", Drivers: map[string]int{"cpu": 2, "concurrency": 2, "act": 2}},
		{T: 40, Running: 2, Recommended: 2, Driver: "cpu", Drivers: map[string]int{"cpu": 2, "concurrency": 2, "act": 2}},
		{T: 83, Running: 4, Recommended: 5, Driver: "cpu", Drivers: map[string]int{"cpu": 5, "concurrency": 5, "act": 5}},
		{T: 88, Running: 5, Recommended: 5, Driver: "cpu", Drivers: map[string]int{"cpu": 5, "concurrency": 5, "act": 5}},
		// Down to 6 in flight at t=120s: the 10-minute concurrency mean
		// holds the count longest; demoted instances stop a minute later.
		{T: 135, Running: 5, Recommended: 4, Driver: "cpu", Drivers: map[string]int{"cpu": 4, "concurrency": 4, "act": 4}, Demoted: 1},
		{T: 195, Running: 4, Recommended: 3, Driver: "concurrency", Drivers: map[string]int{"cpu": 1, "concurrency": 3, "act": 1}, Demoted: 1, Stopped: 1},
		{T: 300, Running: 3, Recommended: 3, Driver: "concurrency", Drivers: map[string]int{"cpu": 1, "concurrency": 3, "act": 1}},
	} {
		if diff := cmp.Diff(want, ticks[int(want.T)-1]); diff != "" {
			t.Errorf("t=%gs (-want +got):\n%s", want.T, diff)
		}
	}
}

// TestAutoscaleTable: the table has a header and one row per tick.
func TestAutoscaleTable(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"autoscale", "--trace", "../../configs/autoscale/idle-to-zero.yaml"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
	if len(lines) != 1096 {
		t.Fatalf("%d lines, want a header and 1095 ticks", len(lines))
	}
	if got := strings.Fields(lines[0]); !slices.Equal(got, []string{"t_s", "running", "recommended", "driver", "cpu", "concurrency", "act", "demoted", "stopped"}) {
		t.Errorf("header = %q", lines[0])
	}
	if got := strings.Fields(lines[120]); !slices.Equal(got, []string{"120", "4", "0", "idle", "1", "2", "0", "4", "0"}) {
		t.Errorf("t=120 row = %q, want idle at zero with 4 demoted", lines[120])
	}
}

// TestAutoscaleErrors: usage errors and bad traces exit 2 with every
// problem and its path on stderr.
func TestAutoscaleErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("group: {max_instances: 2, min_instances: 3}\ntick: 1s\nsamples: [{cpu_cores: -1}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		args []string
		want []string
	}{
		{"no trace", []string{"autoscale"}, []string{"lbsim autoscale: --trace is required"}},
		{"extra argument", []string{"autoscale", "--trace", bad, "x"}, []string{`lbsim autoscale: unexpected argument "x"`}},
		{"missing file", []string{"autoscale", "--trace", "nope.yaml"}, []string{"lbsim autoscale: read trace: open nope.yaml"}},
		{"bad trace", []string{"autoscale", "--trace", bad}, []string{
			"lbsim autoscale: " + bad + ": group.min_instances: must be in 0..max_instances (2), got 3",
			"lbsim autoscale: " + bad + ": samples[0].cpu_cores: must be a number in [0, 1e+12], got -1",
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tt.args, &stdout, &stderr); code != exitUsage {
				t.Errorf("exit %d, want %d", code, exitUsage)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
				}
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout = %q, want nothing", stdout.String())
			}
		})
	}
}

// TestAutoscaleBenchCommand: --json prints {"rows": [...]}, one row per
// (load, cold start, autoscaler), each with every key of the scorecard.
func TestAutoscaleBenchCommand(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"autoscale-bench", "--json"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
	}
	var out struct {
		Rows []map[string]any `json:"rows"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("stdout is not the JSON object: %v", err)
	}
	// The five autoscalers and the evidence rows after them
	// (autoscalebench.Autoscalers: hpa and the Knative-constant rows).
	if n := len(autoscalebench.Autoscalers); n != 11 || len(out.Rows) != 6*2*n {
		t.Fatalf("%d rows, want 6 loads × 2 cold starts × 11 autoscalers (%d listed)", len(out.Rows), n)
	}
	keys := []string{"load", "cold_start_s", "autoscaler", "instance_s", "oracle_ratio", "peak", "overshoot",
		"p50_ms", "p99_ms", "failed", "waited", "time_to_capacity_s", "post_panic_dip", "cold_starts_per_1k",
		"buffer_rtt_ms", "request_ms", "p99_all_ms"}
	loads, scalers := map[any]bool{}, map[any]bool{}
	for _, r := range out.Rows {
		for _, k := range keys {
			if _, ok := r[k]; !ok {
				t.Errorf("row %v has no key %q", r, k)
			}
		}
		loads[r["load"]] = true
		scalers[r["autoscaler"]] = true
	}
	for _, l := range []string{"step", "ramp", "spike", "flash", "diurnal", "sporadic"} {
		if !loads[l] {
			t.Errorf("no rows for load %q", l)
		}
	}
	for _, a := range []string{"oracle", "kpa", "kpa+activator", "cloudrun", "cloudrun+waterfall"} {
		if !scalers[a] {
			t.Errorf("no rows for autoscaler %q", a)
		}
	}
	if code := run([]string{"autoscale-bench", "x"}, &stdout, &stderr); code != exitUsage {
		t.Errorf("extra argument: exit %d, want %d", code, exitUsage)
	}
}

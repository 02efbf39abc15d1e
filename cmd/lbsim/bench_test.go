package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway-lb/spillway/internal/benchpolicy"
	"github.com/spillway-lb/spillway/sim/policybench"
)

// benchOutput is the part of `lbsim bench --json` the tests read.
type benchOutput struct {
	Scenario string   `json:"scenario"`
	Steps    int      `json:"steps"`
	Regions  []string `json:"regions"`
	Policies []struct {
		Policy       string            `json:"policy"`
		Scope        string            `json:"scope"`
		OverCapacity float64           `json:"over_capacity"`
		P99Ms        float64           `json:"p99_ms"`
		CDF          []json.RawMessage `json:"cdf"`
		Series       []json.RawMessage `json:"series"`
	} `json:"policies"`
}

func runBenchJSON(t *testing.T, args ...string) benchOutput {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(append([]string{"bench", "--json"}, args...), &stdout, &stderr); code != exitOK {
		t.Fatalf("run(bench %q) = %d, want 0; stderr:\n%s", args, code, stderr.String())
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr = %q, want empty", stderr.String())
	}
	dec := json.NewDecoder(&stdout)
	var out benchOutput
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("stdout is not a JSON object: %v", err)
	}
	if _, err := dec.Token(); err == nil {
		t.Fatal("stdout has more than one JSON value")
	}
	return out
}

func TestBenchShippedScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "configs", "scenarios", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			out := runBenchJSON(t, "--scenario", file, "--steps", "3")
			if out.Scenario != filepath.Base(file) {
				t.Errorf("scenario = %q, want %q", out.Scenario, filepath.Base(file))
			}
			if out.Steps > 3 || out.Steps < 1 {
				t.Errorf("steps = %d, want 1 to 3", out.Steps)
			}
			var ids []string
			for _, p := range out.Policies {
				id := p.Policy
				if p.Scope != "" {
					id += "/" + p.Scope
				}
				ids = append(ids, id)
				if len(p.CDF) != len(policybench.CDFProbabilities()) || p.Series != nil {
					t.Errorf("%s: %d CDF points, series %v; want %d points and no series", id, len(p.CDF), p.Series != nil, len(policybench.CDFProbabilities()))
				}
			}
			var want []string
			for _, p := range benchpolicy.Defaults() {
				want = append(want, p.ID())
			}
			if diff := cmp.Diff(want, ids); diff != "" {
				t.Errorf("rows mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBenchTable(t *testing.T) {
	var stdout, stderr bytes.Buffer
	file := filepath.Join("..", "..", "configs", "scenarios", "flash-crowd.yaml")
	if code := run([]string{"bench", "--scenario", file}, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
	}
	checkInOrder(t, "stdout", stdout.String(), []string{
		"flash-crowd.yaml: 90 steps of 1s, gossip delay 2s, demand smoothing 2s, damping 0.5",
		"POLICY", "P99_MS", "OVER_CAP", "RTT/LP", "OSC_PP",
		"waterfall", "min_rtt", "round_robin", "least_request", "hash2", "hash5", "nearest_region",
		"waterfall vs hashing: fewer over-capacity requests than 6 of 6 hashing rows, lower p99 than 6 of 6",
	})
}

func TestBenchSeries(t *testing.T) {
	path := filepath.Join(t.TempDir(), "series.csv")
	file := filepath.Join("..", "..", "configs", "scenarios", "flash-crowd.yaml")
	out := runBenchJSON(t, "--scenario", file, "--series", path, "--policies", "waterfall, hash5")
	var ids []string
	for _, p := range out.Policies {
		ids = append(ids, p.Policy+"/"+p.Scope)
		if p.Series != nil {
			t.Errorf("%s: series on stdout, want it only in the CSV file", p.Policy)
		}
	}
	if diff := cmp.Diff([]string{"waterfall/", "hash5/global", "hash5/nearest_region"}, ids); diff != "" {
		t.Errorf("rows mismatch (-want +got):\n%s", diff)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	records, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"policy", "scope", "t_s", "region", "share", "load_rps", "capacity_rps"}, records[0]); diff != "" {
		t.Errorf("header mismatch (-want +got):\n%s", diff)
	}
	if got, want := len(records)-1, 3*90*3; got != want {
		t.Errorf("%d data rows, want %d (3 policies × 90 steps × 3 regions)", got, want)
	}
	if diff := cmp.Diff([]string{"waterfall", "", "20", "us-east", "0.48", "1200", "2000"}, records[1+20*3]); diff != "" {
		t.Errorf("waterfall at t = 20 s, us-east (-want +got):\n%s", diff)
	}
}

func TestBenchErrors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join("..", "..", "configs", "scenarios", "steady.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, `
regions: [{name: r, groups: [{name: g, instances: 1, healthy: 1, rate_per_instance: 100}]}]
sites: [{name: s, demand_rps: 1, rtt_ms: {r: 1}}]
timeline: {duration_s: 10, events: [{at_s: 1, group: h, healthy: 1}]}
`)
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStderr []string
	}{
		{name: "help", args: []string{"bench", "-h"}, wantCode: exitOK, wantStderr: []string{"usage: lbsim bench", "-policies", "-scenario", "-series", "-steps"}},
		{name: "missing scenario", args: []string{"bench"}, wantCode: exitUsage, wantStderr: []string{"lbsim bench: --scenario is required", "usage: lbsim bench"}},
		{name: "a row with options", args: []string{"bench", "--scenario", good, "--policies", "waterfall,waterfall+load_aware+shed"}, wantCode: exitUsage,
			wantStderr: []string{`lbsim bench: --policies: waterfall+load_aware+shed: not modelled by lbsim bench`, "run it with lbbench --story uneven"}},
		{name: "unknown policy", args: []string{"bench", "--scenario", good, "--policies", "waterfall,random"}, wantCode: exitUsage,
			wantStderr: []string{`lbsim bench: --policies: unknown policy "random" (want one of waterfall, min_rtt, round_robin/global`}},
		{name: "empty policy list", args: []string{"bench", "--scenario", good, "--policies", " , "}, wantCode: exitUsage, wantStderr: []string{"--policies: no policy named"}},
		{name: "negative steps", args: []string{"bench", "--scenario", good, "--steps", "-1"}, wantCode: exitUsage, wantStderr: []string{"--steps: must be >= 0, got -1"}},
		{name: "extra argument", args: []string{"bench", "--scenario", good, "now"}, wantCode: exitUsage, wantStderr: []string{`unexpected argument "now"`}},
		{name: "bad timeline", args: []string{"bench", "--scenario", bad}, wantCode: exitUsage,
			wantStderr: []string{"lbsim bench: " + bad + `: timeline.events[0].group: unknown group "h"` + "\n"}},
		{name: "unwritable series", args: []string{"bench", "--scenario", good, "--steps", "1", "--series", filepath.Join(dir, "no", "such", "dir.csv")}, wantCode: exitFail,
			wantStderr: []string{"lbsim bench: series: open ", "no such file or directory"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tt.args, &stdout, &stderr)
			if code != tt.wantCode {
				t.Errorf("run(%q) = %d, want %d; stderr:\n%s", tt.args, code, tt.wantCode, stderr.String())
			}
			checkInOrder(t, "stderr", stderr.String(), tt.wantStderr)
			if stdout.Len() != 0 {
				t.Errorf("stdout = %q, want empty", stdout.String())
			}
		})
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/sim"
)

const defaultTestTimeout = 2 * time.Minute // go build under -race on a busy 2-core box

// planOutput is the JSON object `lbsim plan --json` prints.
type planOutput struct {
	Policy string `json:"policy"`
	Scope  string `json:"scope"`
	Sites  []struct {
		Name      string  `json:"name"`
		DemandRPS float64 `json:"demand_rps"`
	} `json:"sites"`
	Flows []struct {
		Site   string  `json:"site"`
		Region string  `json:"region"`
		Group  string  `json:"group"`
		RPS    float64 `json:"rps"`
		Reason string  `json:"reason"`
	} `json:"flows"`
	Regions []struct {
		Name        string  `json:"name"`
		CapacityRPS float64 `json:"capacity_rps"`
		LoadRPS     float64 `json:"load_rps"`
		Utilization float64 `json:"utilization"`
	} `json:"regions"`
}

// decodePlan decodes stdout as exactly one JSON object, checks its key sets
// at every level, and returns it. Planned policies (waterfall, min_rtt) have
// no scope and a reason on every flow; the baselines have a scope and no
// reasons.
func decodePlan(t *testing.T, stdout []byte, noScope, planned bool) planOutput {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(stdout))
	var raw map[string]json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		t.Fatalf("stdout is not a JSON object: %v\n%s", err, stdout)
	}
	if _, err := dec.Token(); err == nil {
		t.Fatalf("stdout has more than one JSON value:\n%s", stdout)
	}
	wantTop := []string{"flows", "policy", "regions", "scope", "sites"}
	wantFlow := []string{"group", "region", "rps", "site"}
	if noScope {
		wantTop = []string{"flows", "policy", "regions", "sites"}
	}
	if planned {
		wantFlow = []string{"group", "reason", "region", "rps", "site"}
	}
	if diff := cmp.Diff(wantTop, sortedKeys(raw)); diff != "" {
		t.Errorf("top-level keys mismatch (-want +got):\n%s", diff)
	}
	for field, want := range map[string][]string{
		"sites":   {"demand_rps", "name"},
		"flows":   wantFlow,
		"regions": {"capacity_rps", "load_rps", "name", "utilization"},
	} {
		var elems []map[string]json.RawMessage
		if err := json.Unmarshal(raw[field], &elems); err != nil {
			t.Fatalf("%s is not a list of objects: %v", field, err)
		}
		for i, e := range elems {
			if diff := cmp.Diff(want, sortedKeys(e)); diff != "" {
				t.Errorf("%s[%d] keys mismatch (-want +got):\n%s", field, i, diff)
			}
		}
	}
	var out planOutput
	dec = json.NewDecoder(bytes.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("decode plan: %v", err)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// checkConservation checks that every site's flows add up to its demand,
// and that regions agree with the flows and the scenario.
func checkConservation(t *testing.T, scen *sim.Scenario, out planOutput) {
	t.Helper()
	sent := map[string]float64{}
	load := map[string]float64{}
	for _, f := range out.Flows {
		if !(f.RPS > 0) {
			t.Errorf("flow %+v: rps must be > 0", f)
		}
		sent[f.Site] += f.RPS
		load[f.Region] += f.RPS
	}
	if len(out.Sites) != len(scen.Sites) {
		t.Errorf("plan lists %d sites, scenario has %d", len(out.Sites), len(scen.Sites))
	}
	for _, st := range scen.Sites {
		if got := sent[st.Name]; math.Abs(got-st.DemandRPS) > 1e-6*max(st.DemandRPS, 1) {
			t.Errorf("site %s: flows add up to %v rps, want demand %v", st.Name, got, st.DemandRPS)
		}
	}
	capacity := map[string]float64{}
	for _, r := range scen.Regions {
		for _, g := range r.Groups {
			capacity[r.Name] += g.Capacity()
		}
	}
	if len(out.Regions) != len(scen.Regions) {
		t.Errorf("plan lists %d regions, scenario has %d", len(out.Regions), len(scen.Regions))
	}
	for _, r := range out.Regions {
		if r.CapacityRPS != capacity[r.Name] {
			t.Errorf("region %s: capacity_rps %v, want %v", r.Name, r.CapacityRPS, capacity[r.Name])
		}
		if math.Abs(r.LoadRPS-load[r.Name]) > 1e-6*max(r.LoadRPS, 1) {
			t.Errorf("region %s: load_rps %v, flows add up to %v", r.Name, r.LoadRPS, load[r.Name])
		}
		if r.CapacityRPS > 0 && math.Abs(r.Utilization-r.LoadRPS/r.CapacityRPS) > 1e-12 {
			t.Errorf("region %s: utilization %v, want %v", r.Name, r.Utilization, r.LoadRPS/r.CapacityRPS)
		}
	}
}

// TestPlanShippedScenarios runs `plan --json` on every scenario in
// configs/scenarios for every policy (and, for the baselines, every scope).
func TestPlanShippedScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "configs", "scenarios", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"flash-crowd.yaml", "global-overload.yaml", "steady.yaml", "unhealthy-region.yaml"} {
		if !slices.Contains(files, filepath.Join("..", "..", "configs", "scenarios", want)) {
			t.Errorf("configs/scenarios/%s is missing", want)
		}
	}
	for _, file := range files {
		scen, err := sim.LoadScenario(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, policy := range config.Policies() {
			scopes := []string{"", "global", "nearest_region"}
			if policy.OrdersRegions() {
				scopes = []string{""}
			}
			for _, scope := range scopes {
				args := []string{"plan", "--scenario", file, "--policy", string(policy), "--json"}
				if scope != "" {
					args = append(args, "--scope", scope)
				}
				t.Run(strings.Join(args[2:], " "), func(t *testing.T) {
					var stdout, stderr bytes.Buffer
					if code := run(args, &stdout, &stderr); code != exitOK {
						t.Fatalf("run(%q) = %d, want 0; stderr:\n%s", args, code, stderr.String())
					}
					if stderr.Len() != 0 {
						t.Errorf("stderr = %q, want empty", stderr.String())
					}
					out := decodePlan(t, stdout.Bytes(), policy.OrdersRegions(), policy.IsPlanned())
					if out.Policy != string(policy) {
						t.Errorf("policy = %q, want %q", out.Policy, policy)
					}
					wantScope := scope
					if wantScope == "" && !policy.OrdersRegions() {
						wantScope = "global"
					}
					if out.Scope != wantScope {
						t.Errorf("scope = %q, want %q", out.Scope, wantScope)
					}
					checkConservation(t, scen, out)
				})
			}
		}
	}
}

func TestPlanJSONExact(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "scen.yaml")
	writeFile(t, path, `
regions:
  - name: us-east
    groups:
      - {name: us-east-b, zone: us-east-b, instances: 10, healthy: 10, rate_per_instance: 100, capacity_scaler: 1.0}
  - name: eu-west
    groups:
      - {name: eu-west-b, zone: eu-west-b, instances: 10, healthy: 10, rate_per_instance: 100}
sites:
  - {name: nyc, demand_rps: 1500, rtt_ms: {us-east: 5, eu-west: 80}}
`)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{
			name: "waterfall spills the overflow",
			args: []string{"--policy", "waterfall"},
			want: `{"policy":"waterfall","sites":[{"name":"nyc","demand_rps":1500}],` +
				`"flows":[{"site":"nyc","region":"us-east","group":"us-east-b","rps":1000,"reason":"nearest"},` +
				`{"site":"nyc","region":"eu-west","group":"eu-west-b","rps":500,"reason":"spill_capacity"}],` +
				`"regions":[{"name":"eu-west","capacity_rps":1000,"load_rps":500,"utilization":0.5},` +
				`{"name":"us-east","capacity_rps":1000,"load_rps":1000,"utilization":1}]}`,
		},
		{
			name: "round robin nearest region",
			args: []string{"--policy", "round_robin", "--scope", "nearest_region"},
			want: `{"policy":"round_robin","scope":"nearest_region","sites":[{"name":"nyc","demand_rps":1500}],` +
				`"flows":[{"site":"nyc","region":"us-east","group":"us-east-b","rps":1500}],` +
				`"regions":[{"name":"eu-west","capacity_rps":1000,"load_rps":0,"utilization":0},` +
				`{"name":"us-east","capacity_rps":1000,"load_rps":1500,"utilization":1.5}]}`,
		},
		{
			name: "hash5 global",
			args: []string{"--policy", "hash5"},
			want: `{"policy":"hash5","scope":"global","sites":[{"name":"nyc","demand_rps":1500}],` +
				`"flows":[{"site":"nyc","region":"us-east","group":"us-east-b","rps":750},` +
				`{"site":"nyc","region":"eu-west","group":"eu-west-b","rps":750}],` +
				`"regions":[{"name":"eu-west","capacity_rps":1000,"load_rps":750,"utilization":0.75},` +
				`{"name":"us-east","capacity_rps":1000,"load_rps":750,"utilization":0.75}]}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"plan", "--json", "--scenario", path}, tt.args...)
			var stdout, stderr bytes.Buffer
			if code := run(args, &stdout, &stderr); code != exitOK {
				t.Fatalf("run(%q) = %d, want 0; stderr:\n%s", args, code, stderr.String())
			}
			var got, want any
			if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
				t.Fatalf("stdout is not JSON: %v\n%s", err, stdout.String())
			}
			if err := json.Unmarshal([]byte(tt.want), &want); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got, cmpopts.EquateApprox(1e-9, 1e-9)); diff != "" {
				t.Errorf("run(%q) JSON mismatch (-want +got):\n%s", args, diff)
			}
		})
	}
}

// TestPlanMinRTT: --policy min_rtt plans with waterfall.ComputeMinRTT, so
// nyc, whose next region is 7 ms farther, steps aside for bos (65 ms
// farther), where waterfall keeps the nearest pair first and spills bos.
func TestPlanMinRTT(t *testing.T) {
	path := filepath.Join(t.TempDir(), "scen.yaml")
	writeFile(t, path, `
regions:
  - name: us-east
    groups: [{name: us-east-b, instances: 10, healthy: 10, rate_per_instance: 100}]
  - name: eu-west
    groups: [{name: eu-west-b, instances: 10, healthy: 10, rate_per_instance: 100}]
sites:
  - {name: nyc, demand_rps: 800, rtt_ms: {us-east: 5, eu-west: 12}}
  - {name: bos, demand_rps: 600, rtt_ms: {us-east: 10, eu-west: 75}}
`)
	tests := []struct {
		policy string
		want   string // flows
	}{
		{"waterfall", `[{"site":"bos","region":"us-east","group":"us-east-b","rps":200,"reason":"nearest"},` +
			`{"site":"bos","region":"eu-west","group":"eu-west-b","rps":400,"reason":"spill_capacity"},` +
			`{"site":"nyc","region":"us-east","group":"us-east-b","rps":800,"reason":"nearest"}]`},
		{"min_rtt", `[{"site":"bos","region":"us-east","group":"us-east-b","rps":600,"reason":"nearest"},` +
			`{"site":"nyc","region":"us-east","group":"us-east-b","rps":400,"reason":"nearest"},` +
			`{"site":"nyc","region":"eu-west","group":"eu-west-b","rps":400,"reason":"spill_capacity"}]`},
	}
	for _, tt := range tests {
		t.Run(tt.policy, func(t *testing.T) {
			args := []string{"plan", "--json", "--scenario", path, "--policy", tt.policy}
			var stdout, stderr bytes.Buffer
			if code := run(args, &stdout, &stderr); code != exitOK {
				t.Fatalf("run(%q) = %d, want 0; stderr:\n%s", args, code, stderr.String())
			}
			var got struct {
				Policy string `json:"policy"`
				Flows  any    `json:"flows"`
			}
			if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
				t.Fatalf("stdout is not JSON: %v\n%s", err, stdout.String())
			}
			var want any
			if err := json.Unmarshal([]byte(tt.want), &want); err != nil {
				t.Fatal(err)
			}
			if got.Policy != tt.policy {
				t.Errorf("policy = %q, want %q", got.Policy, tt.policy)
			}
			if diff := cmp.Diff(want, got.Flows, cmpopts.EquateApprox(1e-9, 1e-9)); diff != "" {
				t.Errorf("run(%q) flows mismatch (-want +got):\n%s", args, diff)
			}
		})
	}
}

func TestPlanTable(t *testing.T) {
	scenario := func(name string) string { return filepath.Join("..", "..", "configs", "scenarios", name) }
	tests := []struct {
		name string
		args []string
		want string
	}{
		{
			name: "baseline has no reason column",
			args: []string{"--scenario", scenario("steady.yaml"), "--policy", "round_robin", "--scope", "nearest_region"},
			want: `policy: round_robin  scope: nearest_region

SITE   DEMAND_RPS  REGION     GROUP        RPS    SHARE
lon    900.0       eu-west    eu-west-b    450.0  50.0%
                   eu-west    eu-west-c    450.0  50.0%
nyc    1200.0      us-east    us-east-b    600.0  50.0%
                   us-east    us-east-c    600.0  50.0%
tokyo  700.0       asia-east  asia-east-a  350.0  50.0%
                   asia-east  asia-east-b  350.0  50.0%

REGION     CAPACITY_RPS  LOAD_RPS  UTILIZATION
asia-east  1200.0        700.0     58.3%
eu-west    1200.0        900.0     75.0%
us-east    2000.0        1200.0    60.0%
`,
		},
		{
			name: "waterfall shows why each flow is where it is",
			args: []string{"--scenario", scenario("unhealthy-region.yaml"), "--policy", "waterfall"},
			want: `policy: waterfall  scope: -

SITE   DEMAND_RPS  REGION     GROUP        RPS    SHARE  REASON
lon    500.0       eu-west    eu-west-b    200.0  40.0%  nearest
                   eu-west    eu-west-c    200.0  40.0%  nearest
                   us-east    us-east-b    50.0   10.0%  spill_health
                   us-east    us-east-c    50.0   10.0%  spill_health
nyc    1200.0      us-east    us-east-b    600.0  50.0%  nearest
                   us-east    us-east-c    600.0  50.0%  nearest
tokyo  700.0       asia-east  asia-east-a  350.0  50.0%  nearest
                   asia-east  asia-east-b  350.0  50.0%  nearest

REGION     CAPACITY_RPS  LOAD_RPS  UTILIZATION
asia-east  1200.0        700.0     58.3%
eu-west    800.0         400.0     50.0%
us-east    2000.0        1300.0    65.0%
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"plan"}, tt.args...)
			var stdout, stderr bytes.Buffer
			if code := run(args, &stdout, &stderr); code != exitOK {
				t.Fatalf("run(%q) = %d, want 0; stderr:\n%s", args, code, stderr.String())
			}
			if diff := cmp.Diff(tt.want, stdout.String()); diff != "" {
				t.Errorf("run(%q) table mismatch (-want +got):\n%s", args, diff)
			}
		})
	}
}

func TestRunErrors(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join("..", "..", "configs", "scenarios", "steady.yaml")
	bad := filepath.Join(dir, "scen.yaml")
	writeFile(t, bad, `
regions:
  - name: us-east
    groups: [{name: us-east-b, instances: 10, healthy: 10, rate_per_instance: 100}]
  - name: eu-west
    groups: [{name: eu-west-b, instances: 10, healthy: 12, rate_per_instance: 100}]
sites:
  - {name: nyc, demand_rps: 1500, rtt_ms: {us-east: 5, eu-wst: 80}}
`)
	dark := filepath.Join(dir, "dark.yaml")
	writeFile(t, dark, `
regions: [{name: r, groups: [{name: g, instances: 2, healthy: 0, rate_per_instance: 100}]}]
sites: [{name: s, demand_rps: 10, rtt_ms: {r: 1}}]
`)
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStderr []string // substrings, in order
		wantStdout string   // substring; "" means stdout must be empty
	}{
		{name: "no command", args: nil, wantCode: exitUsage, wantStderr: []string{"usage: lbsim"}},
		{name: "unknown command", args: []string{"simulate"}, wantCode: exitUsage, wantStderr: []string{`unknown command "simulate"`, "usage: lbsim"}},
		{name: "help", args: []string{"help"}, wantCode: exitOK, wantStdout: "usage: lbsim"},
		{name: "plan -h", args: []string{"plan", "-h"}, wantCode: exitOK, wantStderr: []string{"usage: lbsim plan", "-scenario"}},
		{name: "unknown flag", args: []string{"plan", "--scenari", good}, wantCode: exitUsage, wantStderr: []string{"flag provided but not defined: -scenari"}},
		{name: "missing scenario", args: []string{"plan", "--policy", "waterfall"}, wantCode: exitUsage, wantStderr: []string{"--scenario is required", "usage: lbsim plan"}},
		{name: "missing policy", args: []string{"plan", "--scenario", good}, wantCode: exitUsage, wantStderr: []string{"--policy is required"}},
		{name: "unknown policy", args: []string{"plan", "--scenario", good, "--policy", "random"}, wantCode: exitUsage,
			wantStderr: []string{`--policy: unknown policy "random" (want one of waterfall, min_rtt, round_robin, least_request, envoy_priority, hash2, hash3, hash5, prequal)`}},
		{name: "unknown scope", args: []string{"plan", "--scenario", good, "--policy", "hash2", "--scope", "zone"}, wantCode: exitUsage,
			wantStderr: []string{`--scope: unknown scope "zone"`}},
		{name: "scope with waterfall", args: []string{"plan", "--scenario", good, "--policy", "waterfall", "--scope", "global"}, wantCode: exitUsage,
			wantStderr: []string{"--scope: scope applies only to"}},
		{name: "scope with min_rtt", args: []string{"plan", "--scenario", good, "--policy", "min_rtt", "--scope", "nearest_region"}, wantCode: exitUsage,
			wantStderr: []string{"--scope: scope applies only to"}},
		{name: "extra argument", args: []string{"plan", "--scenario", good, "--policy", "hash2", "now"}, wantCode: exitUsage,
			wantStderr: []string{`unexpected argument "now"`}},
		{name: "missing file", args: []string{"plan", "--scenario", filepath.Join(dir, "nope.yaml"), "--policy", "hash2"}, wantCode: exitUsage,
			wantStderr: []string{"lbsim plan: read scenario: open ", "no such file or directory"}},
		{name: "bad scenario lists every problem", args: []string{"plan", "--scenario", bad, "--policy", "waterfall", "--json"}, wantCode: exitUsage,
			wantStderr: []string{
				"lbsim plan: " + bad + ": regions[1].groups[0].healthy: 12 > instances 10\n",
				"lbsim plan: " + bad + `: sites[0].rtt_ms: unknown region "eu-wst"` + "\n",
			}},
		{name: "gossip without nodes", args: []string{"gossip"}, wantCode: exitUsage,
			wantStderr: []string{"--nodes: must be at least 3, got 0", "usage: lbsim gossip --nodes N"}},
		{name: "gossip unknown profile", args: []string{"gossip", "--nodes", "3", "--profile", "huge", "--quiet"}, wantCode: exitFail,
			wantStderr: []string{`lbsim gossip: gossipbench: gfe-0000: --gossip-profile: gossip profile "huge": must be one of [lan large]`}},
		{name: "unservable site", args: []string{"plan", "--scenario", dark, "--policy", "round_robin"}, wantCode: exitFail,
			wantStderr: []string{`lbsim plan: site "s", scope global: site has demand but no eligible instance in scope`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(tt.args, &stdout, &stderr)
			if code != tt.wantCode {
				t.Errorf("run(%q) = %d, want %d; stderr:\n%s", tt.args, code, tt.wantCode, stderr.String())
			}
			checkInOrder(t, "stderr", stderr.String(), tt.wantStderr)
			if tt.wantStdout == "" && stdout.Len() != 0 {
				t.Errorf("stdout = %q, want empty", stdout.String())
			}
			if !strings.Contains(stdout.String(), tt.wantStdout) {
				t.Errorf("stdout = %q, want it to contain %q", stdout.String(), tt.wantStdout)
			}
		})
	}
}

func checkInOrder(t *testing.T, what, got string, want []string) {
	t.Helper()
	rest := got
	for _, w := range want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Errorf("%s = %q, want it to contain %q (in order)", what, got, w)
			return
		}
		rest = rest[i+len(w):]
	}
	if len(want) == 0 && got != "" {
		t.Errorf("%s = %q, want empty", what, got)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBinary builds the real lbsim binary and runs it as a user would.
func TestBinary(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the end-to-end test needs the go tool on PATH: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "lbsim")
	build := exec.CommandContext(ctx, goTool, "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	exitCode := func(err error) int {
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0
		case errors.As(err, &ee):
			return ee.ExitCode()
		}
		t.Fatalf("run lbsim: %v", err)
		return -1
	}
	lbsim := func(args ...string) (stdout, stderr []byte, code int) {
		var o, e bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Stdout, cmd.Stderr = &o, &e
		code = exitCode(cmd.Run())
		return o.Bytes(), e.Bytes(), code
	}

	scenario := filepath.Join("..", "..", "configs", "scenarios", "flash-crowd.yaml")
	scen, err := sim.LoadScenario(scenario)
	if err != nil {
		t.Fatal(err)
	}
	for _, policy := range []string{"waterfall", "least_request"} {
		stdout, stderr, code := lbsim("plan", "--scenario", scenario, "--policy", policy, "--json")
		if code != 0 || len(stderr) != 0 {
			t.Fatalf("lbsim plan --policy %s: exit %d, stderr %q; want 0 and empty", policy, code, stderr)
		}
		out := decodePlan(t, stdout, policy == "waterfall", policy == "waterfall")
		checkConservation(t, scen, out)
		if policy == "waterfall" {
			// flash-crowd: nyc fills us-east exactly and spills the rest.
			for _, r := range out.Regions {
				if r.Name == "us-east" && math.Abs(r.Utilization-1) > 1e-9 {
					t.Errorf("waterfall: us-east utilization %v, want 1", r.Utilization)
				}
			}
		}
	}

	bad := filepath.Join("..", "..", "sim", "testdata", "unknown-region.bad.yaml")
	stdout, stderr, code := lbsim("plan", "--scenario", bad, "--policy", "hash3", "--json")
	if code != exitUsage {
		t.Errorf("lbsim plan on a bad file: exit %d, want %d", code, exitUsage)
	}
	if len(stdout) != 0 {
		t.Errorf("lbsim plan on a bad file: stdout %q, want empty", stdout)
	}
	if want := "lbsim plan: " + bad + `: sites[0].rtt_ms: unknown region "eu-wst"` + "\n"; string(stderr) != want {
		t.Errorf("lbsim plan on a bad file: stderr %q, want %q", stderr, want)
	}
}

package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/svgchart"
	"github.com/spillway-lb/spillway/sim"
	"github.com/spillway-lb/spillway/sim/policybench"
)

const flashCrowd = "../../configs/scenarios/flash-crowd.yaml"

// chartPolicies are the default chart rows, in order.
var chartPolicies = []string{
	"waterfall", "min_rtt", "round_robin/global",
	"hash2/global", "hash3/global", "hash5/global",
	"hash2/nearest_region", "hash3/nearest_region", "hash5/nearest_region",
}

// svgTexts decodes data as XML, failing on malformed XML, and returns the
// root element's name and the content of every <text> element.
func svgTexts(t *testing.T, data []byte) (root string, texts []string) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(data))
	inText := false
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return root, texts
		}
		if err != nil {
			t.Fatalf("malformed XML: %v", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = el.Name.Local
			}
			if el.Name.Local == "text" {
				inText = true
				texts = append(texts, "")
			}
		case xml.CharData:
			if inText {
				texts[len(texts)-1] += string(el)
			}
		case xml.EndElement:
			inText = inText && el.Name.Local != "text"
		}
	}
}

func TestRunEndToEnd(t *testing.T) {
	tests := []struct {
		name string
		args []string
		// wantPanels are the panel titles, each once; wantTexts counts
		// other texts of the chart.
		wantPanels []string
		wantTexts  map[string]int
	}{
		{
			name:       "shares",
			args:       []string{"--kind", "shares"},
			wantPanels: chartPolicies,
			wantTexts: map[string]int{
				"flash-crowd.yaml: share of all routed requests per region, by policy": 1,
				"us-east": 1, "eu-west": 1, "asia-east": 1, // one legend
				"simulated time (s)": 3, "share of requests (%)": 3, "capacity": 0,
			},
		},
		{
			name:       "utilization",
			args:       []string{"--kind", "utilization"},
			wantPanels: chartPolicies,
			wantTexts: map[string]int{
				"flash-crowd.yaml: region load / capacity, by policy": 1,
				"us-east": 1, "eu-west": 1, "asia-east": 1,
				"simulated time (s)": 3, "utilization (%)": 3, "capacity": 9,
			},
		},
		{
			name: "cdf",
			args: []string{"--kind", "cdf"},
			wantTexts: map[string]int{
				"flash-crowd.yaml: latency of served requests (CDF), by policy": 1,
				"latency (ms, log scale)": 1, "requests at or below (%)": 1,
				"waterfall": 1, "hash5/nearest_region": 1,
			},
		},
		{
			name:       "two policies",
			args:       []string{"--kind", "utilization", "--policies", "waterfall, hash2/nearest_region"},
			wantPanels: []string{"waterfall", "hash2/nearest_region"},
			wantTexts: map[string]int{
				"min_rtt": 0, "hash2/global": 0,
				"simulated time (s)": 2, "utilization (%)": 1, "capacity": 2,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "chart.svg")
			var stderr bytes.Buffer
			if code := run(append([]string{"--scenario", flashCrowd, "--out", out}, tt.args...), &stderr); code != exitOK {
				t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
			}
			data, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			root, texts := svgTexts(t, data)
			if root != "svg" {
				t.Errorf("root element %q, want svg", root)
			}
			want := map[string]int{"least_request/global": 0}
			for _, id := range tt.wantPanels {
				want[id] = 1
			}
			for k, v := range tt.wantTexts {
				want[k] = v
			}
			got := map[string]int{}
			for k := range want {
				got[k] = 0
			}
			for _, tx := range texts {
				if _, ok := got[tx]; ok {
					got[tx]++
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("texts (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRunErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("regions: []\nsites: []\nbogus: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.svg")
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStderr string
	}{
		{name: "help", args: []string{"-h"}, wantCode: exitOK, wantStderr: "usage: benchchart --scenario FILE --kind"},
		{name: "no scenario", args: []string{"--kind", "shares", "--out", out}, wantCode: exitUsage, wantStderr: "benchchart: --scenario is required"},
		{name: "no out", args: []string{"--scenario", flashCrowd, "--kind", "shares"}, wantCode: exitUsage, wantStderr: "benchchart: --out is required"},
		{name: "bad kind", args: []string{"--scenario", flashCrowd, "--kind", "pie", "--out", out}, wantCode: exitUsage, wantStderr: `--kind: want shares, utilization or cdf, got "pie"`},
		{name: "extra argument", args: []string{"--scenario", flashCrowd, "--kind", "cdf", "--out", out, "more"}, wantCode: exitUsage, wantStderr: `unexpected argument "more"`},
		{name: "unknown policy", args: []string{"--scenario", flashCrowd, "--kind", "cdf", "--out", out, "--policies", "random"}, wantCode: exitUsage, wantStderr: `--policies: unknown policy "random"`},
		{name: "bad scenario", args: []string{"--scenario", bad, "--kind", "shares", "--out", out}, wantCode: exitUsage, wantStderr: "benchchart: " + bad},
		{name: "missing scenario", args: []string{"--scenario", filepath.Join(dir, "none.yaml"), "--kind", "shares", "--out", out}, wantCode: exitUsage, wantStderr: "no such file"},
		{name: "unwritable out", args: []string{"--scenario", flashCrowd, "--kind", "shares", "--out", filepath.Join(dir, "no", "dir", "x.svg")}, wantCode: exitFail, wantStderr: "benchchart: write chart:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			if code := run(tt.args, &stderr); code != tt.wantCode {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tt.wantCode, stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr %q does not contain %q", stderr.String(), tt.wantStderr)
			}
		})
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed run left %s (stat: %v)", out, err)
	}
}

func TestSelectPolicies(t *testing.T) {
	tests := []struct {
		name    string
		list    string
		want    []string
		wantErr string
	}{
		{name: "default drops least_request", list: "", want: chartPolicies},
		{name: "by name and ID", list: "hash5/nearest_region, waterfall", want: []string{"waterfall", "hash5/nearest_region"}},
		{name: "bare name means both scopes", list: "hash3", want: []string{"hash3/global", "hash3/nearest_region"}},
		{name: "least_request on request", list: "least_request", want: []string{"least_request/global"}},
		{name: "unknown", list: "hash7", wantErr: `unknown policy "hash7"`},
		{name: "empty items", list: " , ", wantErr: "no policy named"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := selectPolicies(tt.list)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, p := range got {
				ids = append(ids, p.ID())
			}
			if diff := cmp.Diff(tt.want, ids); diff != "" {
				t.Errorf("policies (-want +got):\n%s", diff)
			}
		})
	}
}

// benchFlashCrowd runs the default chart policies through flash-crowd.yaml
// with series.
func benchFlashCrowd(t *testing.T) *policybench.Result {
	t.Helper()
	scen, err := sim.LoadScenario(flashCrowd)
	if err != nil {
		t.Fatal(err)
	}
	pols, err := selectPolicies("")
	if err != nil {
		t.Fatal(err)
	}
	res, err := policybench.Run(scen, policybench.Options{Policies: pols, Series: true})
	if err != nil {
		t.Fatal(err)
	}
	res.Scenario = "flash-crowd.yaml"
	return res
}

// at returns the y value of the panel's series named name at x.
func at(t *testing.T, p svgchart.Panel, name string, x float64) float64 {
	t.Helper()
	for _, s := range p.Series {
		if s.Name != name {
			continue
		}
		for i := range s.X {
			if s.X[i] == x {
				return s.Y[i]
			}
		}
	}
	t.Fatalf("panel %s: no %s point at x = %g", p.Title, name, x)
	return 0
}

func panel(t *testing.T, fig *svgchart.Figure, title string) svgchart.Panel {
	t.Helper()
	for _, p := range fig.Panels {
		if p.Title == title {
			return p
		}
	}
	t.Fatalf("no panel %q", title)
	return svgchart.Panel{}
}

// TestFlashCrowdFigures checks the numbers the flash-crowd charts show
// while nyc's crowd holds (t = 40 s, 2500 + 600 + 700 = 3800 rps against
// us-east 2000, eu-west 1200 and asia-east 1200 rps of capacity).
func TestFlashCrowdFigures(t *testing.T) {
	res := benchFlashCrowd(t)
	const hold = 40.0
	shares, err := sharesFigure(res)
	if err != nil {
		t.Fatal(err)
	}
	util, err := utilizationFigure(res)
	if err != nil {
		t.Fatal(err)
	}
	for _, fig := range []*svgchart.Figure{shares, util} {
		var titles []string
		for _, p := range fig.Panels {
			titles = append(titles, p.Title)
			if len(p.Series) != 3 {
				t.Errorf("%s panel %s: %d series, want one per region", fig.Title, p.Title, len(p.Series))
			}
		}
		if diff := cmp.Diff(chartPolicies, titles); diff != "" {
			t.Errorf("%s: panel titles (-want +got):\n%s", fig.Title, diff)
		}
		if fig.X.Max != 89 {
			t.Errorf("%s: x axis ends at %g, want 89 (the last step of 90)", fig.Title, fig.X.Max)
		}
	}
	for _, p := range shares.Panels {
		if p.Kind != svgchart.StackedArea {
			t.Errorf("shares panel %s is not stacked", p.Title)
		}
		for k, x := range p.Series[0].X {
			var sum float64
			for _, s := range p.Series {
				sum += s.Y[k]
			}
			if math.Abs(sum-100) > 1e-6 {
				t.Errorf("shares %s at t = %g add up to %g%%, want 100", p.Title, x, sum)
			}
		}
	}
	for _, p := range util.Panels {
		if diff := cmp.Diff([]svgchart.RefLine{{Y: 100, Label: "capacity"}}, p.RefLines); diff != "" {
			t.Errorf("utilization %s reference lines (-want +got):\n%s", p.Title, diff)
		}
	}

	tests := []struct {
		fig           *svgchart.Figure
		panel, region string
		want, tol     float64
	}{
		// waterfall fills us-east to its target utilization (0.95 of 2000
		// rps) and eu-west too (0.95 of 1200), and spills the rest of nyc's
		// surplus to asia-east: 1900 + 1140 + 760 = 3800 rps
		{util, "waterfall", "us-east", 95, 1},
		{util, "waterfall", "eu-west", 95, 1},
		{util, "waterfall", "asia-east", 100 * 760 / 1200.0, 1},
		{shares, "waterfall", "us-east", 100 * 1900 / 3800.0, 0.5},
		// hashing within the nearest region keeps all of nyc in us-east
		{util, "hash2/nearest_region", "us-east", 125, 0.5},
		{util, "hash5/nearest_region", "us-east", 125, 0.5},
		{shares, "hash5/nearest_region", "us-east", 100 * 2500 / 3800.0, 0.5},
		// round robin spreads evenly over 48 instances: eu-west's 16
		// (eu-west-c at half capacity) get a third of 3800 rps
		{util, "round_robin/global", "eu-west", 100 * 3800 / 3 / 1200.0, 0.5},
		{shares, "round_robin/global", "eu-west", 100 / 3.0, 0.5},
	}
	for _, tt := range tests {
		if got := at(t, panel(t, tt.fig, tt.panel), tt.region, hold); math.Abs(got-tt.want) > tt.tol {
			t.Errorf("%s %s %s at t = %g: %.2f, want %.2f ± %g", tt.fig.Title, tt.panel, tt.region, hold, got, tt.want, tt.tol)
		}
	}
}

func TestNoSeries(t *testing.T) {
	res := &policybench.Result{Regions: []string{"r"}, Steps: 1, StepS: 1, Policies: []policybench.Row{{Policy: "waterfall"}}}
	for name, build := range map[string]func(*policybench.Result) (*svgchart.Figure, error){"shares": sharesFigure, "utilization": utilizationFigure} {
		if _, err := build(res); !errors.Is(err, errNoSeries) {
			t.Errorf("%s without series: error %v, want errNoSeries", name, err)
		}
	}
}

func TestUtilizationSkipsNoCapacity(t *testing.T) {
	res := &policybench.Result{Scenario: "s", Regions: []string{"a", "b"}, Steps: 3, StepS: 1, Policies: []policybench.Row{{
		Policy: "waterfall",
		Series: []policybench.SeriesStep{
			{TS: 0, Shares: []float64{1, 0}, LoadRPS: []float64{50, 0}, CapacityRPS: []float64{100, 0}},
			{TS: 1, Shares: []float64{1, 0}, LoadRPS: []float64{150, 0}, CapacityRPS: []float64{0, 0}},
			{TS: 2, Shares: []float64{1, 0}, LoadRPS: []float64{80, 0}, CapacityRPS: []float64{100, 0}},
		},
	}}}
	fig, err := utilizationFigure(res)
	if err != nil {
		t.Fatal(err)
	}
	want := []svgchart.Series{{Name: "a", X: []float64{0, 2}, Y: []float64{50, 80}}}
	if diff := cmp.Diff(want, fig.Panels[0].Series); diff != "" {
		t.Errorf("series (-want +got):\n%s", diff)
	}
}

// cdf returns a CDF at policybench.CDFProbabilities with ms(p), and its p50 and p99.
func cdf(ms func(p float64) float64) (pts []policybench.CDFPoint, p50, p99 float64) {
	for _, p := range policybench.CDFProbabilities() {
		pts = append(pts, policybench.CDFPoint{P: p, Ms: ms(p)})
	}
	return pts, ms(0.5), ms(0.99)
}

func TestCDFFigure(t *testing.T) {
	wfCDF, wf50, wf99 := cdf(func(p float64) float64 { return 10 + 100*p })
	hCDF, h50, h99 := cdf(func(p float64) float64 { return 20 + 1000*p*p })
	zeroCDF, z50, z99 := cdf(func(p float64) float64 { return 0 })
	badCDF, _, _ := cdf(func(p float64) float64 { return 164.45 }) // every point at p99
	rows := []policybench.Row{
		{Policy: "waterfall", CDF: wfCDF, P50Ms: wf50, P99Ms: wf99},
		{Policy: "hash2", Scope: config.HashScopeGlobal, CDF: hCDF, P50Ms: h50, P99Ms: h99},
		{Policy: "hash2", Scope: config.HashScopeNearestRegion, CDF: hCDF, P50Ms: h50, P99Ms: h99},
		{Policy: "round_robin", Scope: config.HashScopeGlobal, CDF: zeroCDF, P50Ms: z50, P99Ms: z99}, // served nothing
	}
	fig, err := cdfFigure(&policybench.Result{Scenario: "s.yaml", Policies: rows})
	if err != nil {
		t.Fatal(err)
	}
	if !fig.X.Log || fig.Title != "s.yaml: latency of served requests (CDF), by policy" || len(fig.Panels) != 1 {
		t.Fatalf("figure %+v: want one panel on a log x axis titled by the scenario", fig)
	}
	type style struct {
		Name, ColorKey string
		Dashed, Bold   bool
		N              int
		First, Last    [2]float64
	}
	var got []style
	for _, s := range fig.Panels[0].Series {
		got = append(got, style{s.Name, s.ColorKey, s.Dashed, s.Bold, len(s.X), [2]float64{s.X[0], s.Y[0]}, [2]float64{s.X[len(s.X)-1], s.Y[len(s.Y)-1]}})
	}
	n := len(policybench.CDFProbabilities())
	want := []style{
		{"waterfall", "waterfall", false, true, n, [2]float64{11, 1}, [2]float64{109.9, 99.9}},
		{"hash2/global", "hash2", false, false, n, [2]float64{20.1, 1}, [2]float64{1018.001, 99.9}},
		{"hash2/nearest_region", "hash2", true, false, n, [2]float64{20.1, 1}, [2]float64{1018.001, 99.9}},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) < 1e-9 })); diff != "" {
		t.Errorf("series (-want +got):\n%s", diff)
	}

	for _, tt := range []struct {
		name    string
		rows    []policybench.Row
		wantErr string
	}{
		{name: "CDF contradicts P50", rows: []policybench.Row{{Policy: "waterfall", CDF: badCDF, P50Ms: 24.75, P99Ms: 164.45}},
			wantErr: "waterfall: latency CDF inconsistent: 164.45 ms at p 0.5, but P50Ms = 24.75 ms"},
		{name: "CDF falls", rows: []policybench.Row{{Policy: "waterfall", CDF: []policybench.CDFPoint{{P: 0.1, Ms: 5}, {P: 0.2, Ms: 4}}}},
			wantErr: "point 1 (p 0.2, 4 ms) after (p 0.1, 5 ms)"},
		{name: "nothing served", rows: rows[3:], wantErr: "no policy served a request"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := cdfFigure(&policybench.Result{Policies: tt.rows})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

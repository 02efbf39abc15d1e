package realbench

import (
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/spillway-lb/spillway/internal/benchpolicy"
	"github.com/spillway-lb/spillway/internal/topology"
)

const ms = time.Millisecond

// twoRegions is a small deployment for the table tests: regions a and b of
// one instance of 10 req/s each; site s1 is 10 ms from a and 50 from b, s2
// the other way round.
func twoRegions() topology.Spec {
	return topology.Spec{
		Regions: []topology.Region{
			{Name: "a", Zones: []string{"z"}, Instances: 1, Rate: 10},
			{Name: "b", Zones: []string{"z"}, Instances: 1, Rate: 10},
		},
		Sites: []topology.Site{
			{Name: "s1", RTT: map[string]time.Duration{"a": 10 * ms, "b": 50 * ms}},
			{Name: "s2", RTT: map[string]time.Duration{"a": 50 * ms, "b": 10 * ms}},
		},
	}
}

// reqs returns n requests of one kind, sent at t, t+1ms, ...; each from
// its own port (counting up from port) of src unless port is 0.
func reqs(n int, site string, phase int, t time.Duration, src string, port uint16, status int, region, backend string, lat time.Duration) []Request {
	out := make([]Request, n)
	for i := range out {
		out[i] = Request{Site: site, Phase: phase, T: t + time.Duration(i)*ms, Status: status, Region: region, Backend: backend, Latency: lat}
		if port != 0 {
			out[i].Source = netip.AddrPortFrom(netip.MustParseAddr(src), port+uint16(i))
		}
	}
	return out
}

func concat(parts ...[]Request) []Request {
	var out []Request
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func ptr(v float64) *float64 { return &v }

// TestRow checks every number of a row against a synthetic run worked out
// by hand (see the comments), each site's p99, instances and failures per
// phase included, in two phases: "steady" (2 s, 5 req/s from
// each site, LP mean RTT 10 ms) and "flash" (1 s, s1 at 15 req/s: the LP
// puts 10 in a and 5 in b at 50 ms, s2's 5 in b: mean (100+250+50)/20 = 20
// ms).
func TestRow(t *testing.T) {
	cfg := Config{
		Phases: []Phase{
			{Name: "steady", Duration: 2 * time.Second, Demand: map[string]float64{"s1": 5, "s2": 5}},
			{Name: "flash", Duration: time.Second, Demand: map[string]float64{"s1": 15, "s2": 5}},
		},
		Window: time.Second, Tolerance: 0.01,
	}
	tab, err := newTable(twoRegions(), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]float64{10, 20}, tab.lpMean, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("LP mean RTT per phase (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"s1": "a", "s2": "b"}, tab.nearest); diff != "" {
		t.Errorf("nearest (-want +got):\n%s", diff)
	}

	m := Measurement{
		Policy: benchpolicy.Row{Policy: "hash5", Scope: "global"},
		Requests: concat(
			// Window 0 (steady): 11 arrive at a-1, over 10·1.01.
			reqs(11, "s1", 0, 0, "127.0.1.100", 1000, 200, "a", "a-1", 10*ms),
			reqs(3, "s2", 0, 0, "127.0.2.100", 2000, 200, "b", "b-1", 20*ms),
			// A gfe error from the same address:port as the first s2
			// request: not routed, not a new pair.
			reqs(1, "s2", 0, 500*ms, "127.0.2.100", 2000, 502, "", "", 1*ms),
			// Window 1 (steady): 10 arrive at a-1 (not over), one of them
			// rejected by the backend; one transport error with no
			// connection.
			reqs(9, "s1", 0, time.Second, "127.0.1.100", 1100, 200, "a", "a-1", 10*ms),
			reqs(1, "s1", 0, 1500*ms, "127.0.1.100", 1200, 503, "a", "a-1", 5*ms),
			reqs(1, "s2", 0, 1500*ms, "", 0, 0, "", "", 5*time.Second),
			// Window 2 (flash): 12 at a-1 (over), 4 of s1's spill to b
			// (cross-region), b-1 gets 9 (not over).
			reqs(12, "s1", 1, 2*time.Second, "127.0.1.100", 1300, 200, "a", "a-1", 30*ms),
			reqs(4, "s1", 1, 2*time.Second, "127.0.1.100", 1400, 200, "b", "b-1", 60*ms),
			reqs(5, "s2", 1, 2*time.Second, "127.0.2.100", 2100, 200, "b", "b-1", 20*ms),
		),
		Dropped: 2,
	}
	got, err := tab.row(m)
	if err != nil {
		t.Fatal(err)
	}
	// Served latencies: 20×10, 8×20, 12×30, 4×60 ms (44): sum 960; p50 is
	// the 22nd (20), p99 the 44th (60). Per site and phase: steady s1 20
	// served at 10 ms and a 503 from a-1 (21 routed there); s2 3 at 20 ms,
	// a gfe 502 and a transport error (status 0); flash s1 12 at 30 and 4
	// at 60 ms (p99 the 16th: 60), s2 5 at 20.
	// Over capacity: a-1 in windows 0 (11 served) and 2 (12 served).
	// Excess: (11−10) + (12−10) = 3 of 49 requests.
	// RTT: 33 to a from s1 at 10, 8 to b from s2 at 10, 4 to b from s1 at
	// 50: 610 over 45 routed; the LP: 24 routed in steady at 10 and 21 in
	// flash at 20: 660.
	want := Row{
		Policy: "hash5", Scope: "global",
		Requests: 49, Sent: 47, OK: 44, Failed: 3, Dropped: 2, Routed: 45,
		MeanMs: 960.0 / 44, P50Ms: 20, P99Ms: 60,
		OverCapacity: 23.0 / 44, Excess: 3.0 / 49, ErrorRate: 5.0 / 49, CrossRegion: 4.0 / 45,
		MeanRTTMs: 610.0 / 45, RTTOverLP: ptr(610.0 / 660),
		Sources: 2, SourcePorts: 45, Connected: 46,
		Phases: []PhaseRow{
			{
				Name: "steady", Sent: 26, OK: 23, Failed: 3, P99Ms: 20, OverCapacity: 11.0 / 23, CrossRegion: 0,
				Sites: []SitePhase{
					{Site: "s1", Sent: 21, OK: 20, Routed: map[string]int64{"a": 21}, P99Ms: 10,
						Backends: map[string]int64{"a/a-1": 21}, Failures: map[string]int64{"503": 1}},
					{Site: "s2", Sent: 5, OK: 3, Routed: map[string]int64{"b": 3}, P99Ms: 20,
						Backends: map[string]int64{"b/b-1": 3}, Failures: map[string]int64{"502": 1, "0": 1}},
				},
				LoadRPS: map[string]float64{"a": 10.5, "b": 1.5},
			},
			{
				Name: "flash", Sent: 21, OK: 21, P99Ms: 60, OverCapacity: 12.0 / 21, CrossRegion: 4.0 / 21,
				Sites: []SitePhase{
					{Site: "s1", Sent: 16, OK: 16, Routed: map[string]int64{"a": 12, "b": 4}, P99Ms: 60,
						Backends: map[string]int64{"a/a-1": 12, "b/b-1": 4}, Failures: map[string]int64{}},
					{Site: "s2", Sent: 5, OK: 5, Routed: map[string]int64{"b": 5}, P99Ms: 20,
						Backends: map[string]int64{"b/b-1": 5}, Failures: map[string]int64{}},
				},
				LoadRPS: map[string]float64{"a": 12, "b": 9},
			},
		},
		Series: []WindowLoad{
			{TS: 0, LoadRPS: map[string]float64{"a": 11, "b": 3}},
			{TS: 1, LoadRPS: map[string]float64{"a": 10}},
			{TS: 2, LoadRPS: map[string]float64{"a": 12, "b": 9}},
		},
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
		t.Errorf("row (-want +got):\n%s", diff)
	}
	if err := got.check(); err != nil {
		t.Errorf("check() = %v, want nil", err)
	}
}

// TestRowWindows checks the windows' edges: a last window shorter than
// Window has a proportionally smaller capacity, a request sent after the
// measured part (a site that started late) counts in the last window, and
// the tolerance is strict.
func TestRowWindows(t *testing.T) {
	cfg := Config{
		Phases:    []Phase{{Name: "only", Duration: 1500 * ms, Demand: map[string]float64{"s1": 10}}},
		Window:    time.Second,
		Tolerance: 0.1,
	}
	tab, err := newTable(twoRegions(), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		reqs       []Request
		wantOver   float64
		wantExcess float64
	}{
		{
			// Window 0 holds 11 = 10·1.1: not over (strictly more is).
			name:     "at the tolerance",
			reqs:     reqs(11, "s1", 0, 0, "127.0.1.100", 1, 200, "a", "a-1", ms),
			wantOver: 0, wantExcess: 1.0 / 11,
		},
		{
			// Window 1 is 0.5 s: capacity 5; 6 arrive (one 10 ms after the
			// end), 6 > 5.5.
			name:     "short last window",
			reqs:     reqs(6, "s1", 0, 1495*ms, "127.0.1.100", 1, 200, "a", "a-1", ms),
			wantOver: 1, wantExcess: 1.0 / 6,
		},
		{
			name:     "5 in the short window are not over",
			reqs:     reqs(5, "s1", 0, 1100*ms, "127.0.1.100", 1, 200, "a", "a-1", ms),
			wantOver: 0, wantExcess: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			row, err := tab.row(Measurement{Policy: benchpolicy.Row{Policy: "waterfall"}, Requests: tt.reqs})
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(row.OverCapacity-tt.wantOver) > 1e-12 || math.Abs(row.Excess-tt.wantExcess) > 1e-12 {
				t.Errorf("OverCapacity, Excess = %v, %v, want %v, %v", row.OverCapacity, row.Excess, tt.wantOver, tt.wantExcess)
			}
			if row.Scope != "-" {
				t.Errorf("Scope = %q for waterfall, want -", row.Scope)
			}
		})
	}
}

func TestRowRejectsUnknowns(t *testing.T) {
	cfg := Config{Phases: []Phase{{Name: "only", Duration: time.Second, Demand: map[string]float64{"s1": 1}}}, Window: time.Second}
	tab, err := newTable(twoRegions(), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		req     Request
		wantErr string
	}{
		{"unknown site", Request{Site: "x", Status: 200}, `unknown site "x"`},
		{"phase out of range", Request{Site: "s1", Phase: 1, Status: 200}, "phase 1 out of range"},
		{"unknown region", Request{Site: "s1", Status: 200, Region: "c", Backend: "c-1"}, `unknown region "c"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tab.row(Measurement{Requests: []Request{tt.req}})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("row() error = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestNewTableNeedsEveryRTT(t *testing.T) {
	spec := twoRegions()
	delete(spec.Sites[1].RTT, "a")
	cfg := Config{Phases: []Phase{{Name: "only", Duration: time.Second, Demand: map[string]float64{"s1": 1}}}, Window: time.Second}
	if _, err := newTable(spec, &cfg); err == nil || !strings.Contains(err.Error(), "site s2: no RTT to region a") {
		t.Errorf("newTable() error = %v, want site s2: no RTT to region a", err)
	}
}

// TestDeploymentOptimum checks the default story's LP optima: steady is
// all local (8 ms); in the flash crowd nyc keeps 320 in us-east and spills
// 130 to eu-west at 35 ms: (570·8 + 130·35)/700.
func TestDeploymentOptimum(t *testing.T) {
	cfg := DefaultConfig()
	tab, err := newTable(Deployment(cfg.Net), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{8, (570*8 + 130*35) / 700.0}
	if diff := cmp.Diff(want, tab.lpMean, cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("LP mean per phase (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"nyc": "us-east", "lon": "eu-west", "tokyo": "asia-east"}, tab.nearest); diff != "" {
		t.Errorf("nearest (-want +got):\n%s", diff)
	}
}

func TestCheck(t *testing.T) {
	good := Row{Policy: "p", Requests: 5, Sent: 4, Dropped: 1, OK: 3, Failed: 1, Routed: 4, Phases: []PhaseRow{
		{Name: "x", Sent: 4, OK: 3, Failed: 1, Sites: []SitePhase{{Site: "s", Sent: 4, OK: 3, Routed: map[string]int64{"a": 3, "b": 1}}}},
	}}
	if err := good.check(); err != nil {
		t.Fatalf("check() = %v on a consistent row", err)
	}
	tests := []struct {
		name string
		mut  func(*Row)
	}{
		{"requests", func(r *Row) { r.Requests++ }},
		{"ok+failed", func(r *Row) { r.Failed++ }},
		{"routed above sent", func(r *Row) { r.Routed = 5 }},
		{"site sent", func(r *Row) { r.Phases[0].Sites[0].Sent++ }},
		{"site routed", func(r *Row) { r.Phases[0].Sites[0].Routed["c"] = 1 }},
		{"phase sent", func(r *Row) { r.Phases[0].Sent--; r.Phases[0].Failed-- }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := good
			r.Phases = []PhaseRow{good.Phases[0]}
			r.Phases[0].Sites = []SitePhase{{Site: "s", Sent: 4, OK: 3, Routed: map[string]int64{"a": 3, "b": 1}}}
			tt.mut(&r)
			if err := r.check(); err == nil {
				t.Errorf("check() = nil after changing %s, want an error", tt.name)
			}
		})
	}
}

package realbench

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// sampleResult is a hand-made Result with a waterfall row and two hashing
// rows, one of which beats waterfall on over-capacity.
func sampleResult() *Result {
	cfg := DefaultConfig()
	tab, err := newTable(cfg.spec(), &cfg)
	if err != nil {
		panic(err)
	}
	r := newResult(cfg.spec(), &cfg, tab)
	r.Rows = []Row{
		{Policy: "waterfall", Scope: "-", Requests: 11103, Sent: 11103, OK: 11050, Failed: 53, Routed: 11100,
			MeanMs: 231.04, P50Ms: 38.1, P99Ms: 804.2, OverCapacity: 0.236, Excess: 0.026, ErrorRate: 0.005, CrossRegion: 0.121,
			RTTOverLP: ptr(0.96), Sources: 192, SourcePorts: 11076, Connected: 11103},
		{Policy: "hash5", Scope: "global", Requests: 11103, Sent: 11103, OK: 11103, Routed: 11103,
			MeanMs: 66.4, P50Ms: 57.9, P99Ms: 209.5, OverCapacity: 0.034, Excess: 0.002, CrossRegion: 0.661,
			RTTOverLP: ptr(3.9), Sources: 192, SourcePorts: 11078, Connected: 11103},
		{Policy: "hash5", Scope: "nearest_region", Requests: 11103, Sent: 11103, OK: 9793, Failed: 1310, Routed: 11103,
			MeanMs: 301, P50Ms: 16.6, P99Ms: 812.2, OverCapacity: 0.414, Excess: 0.141, ErrorRate: 0.118,
			RTTOverLP: ptr(0.68), Sources: 192, SourcePorts: 11000, Connected: 11100},
	}
	r.StartupS, r.WallS = 0.41, 217.47
	r.LoadAvg = LoadAvg{Samples: 44, Mean: 8.635, Max: 10.54}
	return r
}

func TestWriteTableGolden(t *testing.T) {
	var b bytes.Buffer
	if err := sampleResult().WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "table.golden")
	if *update {
		if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), b.String()); diff != "" {
		t.Errorf("WriteTable (-want +got):\n%s", diff)
	}
}

// TestWriteTableWhere: the table's first line says where the deployment
// ran: loopback, or the lab's hosts (lbbench --lab).
func TestWriteTableWhere(t *testing.T) {
	for _, tt := range []struct {
		lab  string
		want string
	}{
		{"", "real benchmark on loopback (127.40.0.0/16): "},
		{"10.77.0.0/16", "real benchmark on the lab's hosts (network namespaces, 10.77.0.0/16): "},
	} {
		r := sampleResult()
		r.Lab = tt.lab
		var b bytes.Buffer
		if err := r.WriteTable(&b); err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b.Bytes(), []byte(tt.want)) {
			t.Errorf("WriteTable with Lab %q starts %q, want %q", tt.lab, b.String()[:min(b.Len(), 90)], tt.want)
		}
	}
}

func TestWriteJSONRoundTrip(t *testing.T) {
	in := sampleResult()
	var b bytes.Buffer
	if err := in.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var out Result
	if err := json.Unmarshal(b.Bytes(), &out); err != nil {
		t.Fatalf("the JSON does not decode: %v", err)
	}
	if diff := cmp.Diff(in, &out); diff != "" {
		t.Errorf("JSON round trip (-want +got):\n%s", diff)
	}
	var generic map[string]any
	_ = json.Unmarshal(b.Bytes(), &generic)
	for _, k := range []string{"net", "regions", "sites", "warmup_s", "phases", "sources_per_site", "window_s", "tolerance", "headroom", "rows", "startup_s", "wall_s", "load_avg"} {
		if _, ok := generic[k]; !ok {
			t.Errorf("JSON lacks key %q", k)
		}
	}
}

package loadreport_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"github.com/spillway-lb/spillway/lb/loadreport"
)

// typicalText is a TEXT header as a backend sends it.
const typicalText = "TEXT application_utilization=0.85, cpu_utilization=0.6, rps_fractional=120.5, named_metrics.queue=3, named_metrics.foo=7"

// bin returns a BIN header value for m.
func bin(t testing.TB, m *v3orcapb.OrcaLoadReport) string {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return "BIN " + base64.StdEncoding.EncodeToString(b)
}

func TestParseText(t *testing.T) {
	tests := []struct {
		name   string
		header string
		want   loadreport.Report
	}{
		{
			name:   "every field",
			header: "TEXT cpu_utilization=0.7, mem_utilization=0.4, application_utilization=1.25, rps_fractional=95, eps=2, named_metrics.queue=3",
			want:   loadreport.Report{CPUUtilization: 0.7, MemUtilization: 0.4, ApplicationUtilization: 1.25, RPSFractional: 95, EPS: 2, Queue: 3},
		},
		{name: "brief example", header: "TEXT cpu_utilization=0.7, rps_fractional=95, named_metrics.foo=3", want: loadreport.Report{CPUUtilization: 0.7, RPSFractional: 95}},
		{name: "package doc example", header: "TEXT application_utilization=0.7, rps_fractional=95, named_metrics.queue=3", want: loadreport.Report{ApplicationUtilization: 0.7, RPSFractional: 95, Queue: 3}},
		{name: "no spaces", header: "TEXT cpu_utilization=0.5,eps=1", want: loadreport.Report{CPUUtilization: 0.5, EPS: 1}},
		{name: "spaces and tabs around everything", header: "  TEXT \t cpu_utilization =\t0.5 ,  eps= 1\t", want: loadreport.Report{CPUUtilization: 0.5, EPS: 1}},
		{name: "empty elements skipped", header: "TEXT ,cpu_utilization=0.5,, ,eps=1,", want: loadreport.Report{CPUUtilization: 0.5, EPS: 1}},
		{name: "empty report", header: "TEXT", want: loadreport.Report{}},
		{name: "empty report with space", header: "TEXT ", want: loadreport.Report{}},
		{name: "unknown keys ignored, values not read", header: "TEXT rps=5, utilization.disk=x, named_metrics.foo=bar, future=, cpu_utilization=0.2", want: loadreport.Report{CPUUtilization: 0.2}},
		{name: "unknown key repeated", header: "TEXT foo=1, foo=2", want: loadreport.Report{}},
		{name: "exponent and sign", header: "TEXT rps_fractional=1.5e3, eps=+2", want: loadreport.Report{RPSFractional: 1500, EPS: 2}},
		{name: "negative zero reads as zero", header: "TEXT eps=-0", want: loadreport.Report{}},
		{name: "above 1", header: "TEXT application_utilization=3.5", want: loadreport.Report{ApplicationUtilization: 3.5}},
		{name: "typical", header: typicalText, want: loadreport.Report{ApplicationUtilization: 0.85, CPUUtilization: 0.6, RPSFractional: 120.5, Queue: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := loadreport.Parse(tt.header)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.header, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse(%q) mismatch (-want +got):\n%s", tt.header, diff)
			}
			if math.Signbit(got.EPS) {
				t.Errorf("Parse(%q).EPS = -0, want +0", tt.header)
			}
		})
	}
}

func TestParseJSON(t *testing.T) {
	tests := []struct {
		name   string
		header string
		want   loadreport.Report
	}{
		{
			name:   "camel case",
			header: `JSON {"cpuUtilization":0.7,"memUtilization":0.4,"applicationUtilization":1.25,"rpsFractional":95,"eps":2,"namedMetrics":{"queue":3,"foo":9}}`,
			want:   loadreport.Report{CPUUtilization: 0.7, MemUtilization: 0.4, ApplicationUtilization: 1.25, RPSFractional: 95, EPS: 2, Queue: 3},
		},
		{name: "proto names", header: `JSON {"cpu_utilization":0.7,"rps_fractional":95,"named_metrics":{"queue":3}}`, want: loadreport.Report{CPUUtilization: 0.7, RPSFractional: 95, Queue: 3}},
		{name: "package doc example", header: `JSON {"applicationUtilization":0.7,"rpsFractional":95,"namedMetrics":{"queue":3}}`, want: loadreport.Report{ApplicationUtilization: 0.7, RPSFractional: 95, Queue: 3}},
		{name: "unknown fields ignored", header: `JSON {"cpuUtilization":0.5,"futureField":{"a":1}}`, want: loadreport.Report{CPUUtilization: 0.5}},
		{name: "deprecated rps as fallback", header: `JSON {"rps":"40"}`, want: loadreport.Report{RPSFractional: 40}},
		{name: "rps_fractional wins over rps", header: `JSON {"rps":"40","rpsFractional":41.5}`, want: loadreport.Report{RPSFractional: 41.5}},
		{name: "empty object", header: `JSON {}`, want: loadreport.Report{}},
		{name: "spaces", header: "JSON   { \"eps\" : 1 }  ", want: loadreport.Report{EPS: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := loadreport.Parse(tt.header)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.header, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse(%q) mismatch (-want +got):\n%s", tt.header, diff)
			}
		})
	}
}

func TestParseBin(t *testing.T) {
	full := &v3orcapb.OrcaLoadReport{
		CpuUtilization: 0.7, MemUtilization: 0.4, ApplicationUtilization: 1.25, RpsFractional: 95, Eps: 2,
		NamedMetrics: map[string]float64{"queue": 3, "foo": 9}, Utilization: map[string]float64{"disk": 0.5}, RequestCost: map[string]float64{"db": 7},
	}
	padded := bin(t, &v3orcapb.OrcaLoadReport{Eps: 1}) // 9 bytes: no padding needed
	withPad := bin(t, &v3orcapb.OrcaLoadReport{CpuUtilization: 0.5, Rps: 3})
	tests := []struct {
		name   string
		header string
		want   loadreport.Report
	}{
		{name: "every field", header: bin(t, full), want: loadreport.Report{CPUUtilization: 0.7, MemUtilization: 0.4, ApplicationUtilization: 1.25, RPSFractional: 95, EPS: 2, Queue: 3}},
		{name: "package doc example", header: "BIN MQAAAAAAwFdAQhAKBXF1ZXVlEQAAAAAAAAhASWZmZmZmZuY/", want: loadreport.Report{ApplicationUtilization: 0.7, RPSFractional: 95, Queue: 3}},
		{name: "no padding needed", header: padded, want: loadreport.Report{EPS: 1}},
		{name: "padded", header: withPad, want: loadreport.Report{CPUUtilization: 0.5, RPSFractional: 3}},
		{name: "padding left out", header: strings.TrimRight(withPad, "="), want: loadreport.Report{CPUUtilization: 0.5, RPSFractional: 3}},
		{name: "empty proto", header: "BIN ", want: loadreport.Report{}},
	}
	if !strings.HasSuffix(withPad, "=") {
		t.Fatalf("test setup: %q has no padding", withPad)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := loadreport.Parse(tt.header)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.header, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse(%q) mismatch (-want +got):\n%s", tt.header, diff)
			}
		})
	}
}

// TestParseErrors checks that every error wraps the right sentinel and
// names the problem (and, for TEXT, the element and its byte offset).
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name    string
		header  string
		wantErr error
		wantMsg string
	}{
		{name: "empty", header: "", wantErr: loadreport.ErrFormat, wantMsg: `unknown format "": want TEXT, JSON or BIN`},
		{name: "lower-case format", header: "text cpu_utilization=1", wantErr: loadreport.ErrFormat, wantMsg: `unknown format "text"`},
		{name: "no space after format", header: "TEXTcpu_utilization=1", wantErr: loadreport.ErrFormat, wantMsg: `unknown format "TEXTcpu_utilization=1"`},
		{name: "long format name cut short", header: strings.Repeat("X", 100), wantErr: loadreport.ErrFormat, wantMsg: `"` + strings.Repeat("X", 32) + `..."`},
		{name: "no equals", header: "TEXT cpu_utilization=1, eps", wantErr: loadreport.ErrSyntax, wantMsg: `TEXT element 2 at byte 24 "eps": want key=value`},
		{name: "colon separator (Envoy before 1.33)", header: "TEXT cpu_utilization:0.5", wantErr: loadreport.ErrSyntax, wantMsg: `TEXT element 1 at byte 5 "cpu_utilization:0.5": want key=value`},
		{name: "empty key", header: "TEXT eps=1,  =2", wantErr: loadreport.ErrSyntax, wantMsg: `TEXT element 2 at byte 13 "=2": empty key`},
		{name: "repeated key", header: "TEXT eps=1, cpu_utilization=2, eps=1", wantErr: loadreport.ErrSyntax, wantMsg: `TEXT element 3 at byte 31 "eps=1": key repeats an earlier element`},
		{name: "repeated queue", header: "TEXT named_metrics.queue=1,named_metrics.queue=1", wantErr: loadreport.ErrSyntax, wantMsg: "TEXT element 2 at byte 27"},
		{name: "empty value", header: "TEXT eps=", wantErr: loadreport.ErrValue, wantMsg: `TEXT element 1 at byte 5 "eps=": empty value`},
		{name: "not a number", header: "TEXT eps=1, rps_fractional=lots", wantErr: loadreport.ErrValue, wantMsg: `TEXT element 2 at byte 12 "rps_fractional=lots": value is not a number`},
		{name: "NaN", header: "TEXT cpu_utilization=NaN", wantErr: loadreport.ErrValue, wantMsg: "value is NaN"},
		{name: "infinity", header: "TEXT cpu_utilization=+Inf", wantErr: loadreport.ErrValue, wantMsg: "value is not finite"},
		{name: "overflow", header: "TEXT cpu_utilization=1e400", wantErr: loadreport.ErrValue, wantMsg: "value is not finite"},
		{name: "negative", header: "TEXT named_metrics.queue=-1", wantErr: loadreport.ErrValue, wantMsg: `"named_metrics.queue=-1": value is negative`},
		{name: "bad JSON", header: "JSON {cpu", wantErr: loadreport.ErrSyntax, wantMsg: "JSON: "},
		{name: "JSON wrong type", header: `JSON {"cpuUtilization":"high"}`, wantErr: loadreport.ErrSyntax, wantMsg: "JSON: "},
		{name: "JSON negative", header: `JSON {"eps":-1}`, wantErr: loadreport.ErrValue, wantMsg: "JSON: eps -1: value is negative"},
		{name: "JSON NaN", header: `JSON {"applicationUtilization":"NaN"}`, wantErr: loadreport.ErrValue, wantMsg: "JSON: application_utilization NaN: value is NaN"},
		{name: "JSON infinite queue", header: `JSON {"namedMetrics":{"queue":"Infinity"}}`, wantErr: loadreport.ErrValue, wantMsg: "JSON: named_metrics.queue +Inf: value is not finite"},
		{name: "bad base64", header: "BIN not*base64", wantErr: loadreport.ErrSyntax, wantMsg: "BIN: base64: "},
		{name: "bad proto", header: "BIN " + base64.StdEncoding.EncodeToString([]byte{0xff, 0xff}), wantErr: loadreport.ErrSyntax, wantMsg: "BIN: "},
		{name: "BIN negative", header: bin(t, &v3orcapb.OrcaLoadReport{CpuUtilization: -0.5}), wantErr: loadreport.ErrValue, wantMsg: "BIN: cpu_utilization -0.5: value is negative"},
	}
	sentinels := []error{loadreport.ErrFormat, loadreport.ErrSyntax, loadreport.ErrValue}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := loadreport.Parse(tt.header)
			if err == nil {
				t.Fatalf("Parse(%q) = %+v, want an error", tt.header, got)
			}
			for _, s := range sentinels {
				if errors.Is(err, s) != (s == tt.wantErr) {
					t.Errorf("Parse(%q) error %q: errors.Is(%v) = %v, want %v", tt.header, err, s, errors.Is(err, s), s == tt.wantErr)
				}
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("Parse(%q) error = %q, want it to contain %q", tt.header, err, tt.wantMsg)
			}
			if got != (loadreport.Report{}) {
				t.Errorf("Parse(%q) = %+v with its error, want the zero Report", tt.header, got)
			}
		})
	}
}

// TestParseTextAllocs checks the guarantee that a TEXT report parses
// without allocating.
func TestParseTextAllocs(t *testing.T) {
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := loadreport.Parse(typicalText); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Parse(%q) allocates %v times per call, want 0", typicalText, allocs)
	}
}

func BenchmarkParseText(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := loadreport.Parse(typicalText); err != nil {
			b.Fatal(err)
		}
	}
}

func TestUtilization(t *testing.T) {
	tests := []struct {
		name string
		r    loadreport.Report
		want float64
	}{
		{name: "application utilization preferred", r: loadreport.Report{ApplicationUtilization: 0.3, CPUUtilization: 0.9}, want: 0.3},
		{name: "cpu when application is 0", r: loadreport.Report{CPUUtilization: 0.9}, want: 0.9},
		{name: "above 1 kept", r: loadreport.Report{ApplicationUtilization: 2.5}, want: 2.5},
		{name: "nothing reported", r: loadreport.Report{MemUtilization: 0.5, Queue: 4}, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.r.Utilization(); got != tt.want {
				t.Errorf("%+v.Utilization() = %v, want %v", tt.r, got, tt.want)
			}
		})
	}
}

func TestFromProto(t *testing.T) {
	tests := []struct {
		name string
		m    *v3orcapb.OrcaLoadReport
		want loadreport.Report
	}{
		{name: "nil", m: nil, want: loadreport.Report{}},
		{
			name: "every field",
			m: &v3orcapb.OrcaLoadReport{CpuUtilization: 0.7, MemUtilization: 0.4, ApplicationUtilization: 1.25, RpsFractional: 95, Eps: 2,
				NamedMetrics: map[string]float64{"queue": 3, "foo": 9}},
			want: loadreport.Report{CPUUtilization: 0.7, MemUtilization: 0.4, ApplicationUtilization: 1.25, RPSFractional: 95, EPS: 2, Queue: 3},
		},
		{name: "deprecated rps as fallback", m: &v3orcapb.OrcaLoadReport{Rps: 7}, want: loadreport.Report{RPSFractional: 7}},
		{
			name: "invalid values read as 0",
			m: &v3orcapb.OrcaLoadReport{CpuUtilization: math.NaN(), MemUtilization: -1, ApplicationUtilization: math.Inf(1), Eps: 1,
				NamedMetrics: map[string]float64{"queue": math.Inf(-1)}},
			want: loadreport.Report{EPS: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, loadreport.FromProto(tt.m)); diff != "" {
				t.Errorf("FromProto(%v) mismatch (-want +got):\n%s", tt.m, diff)
			}
		})
	}
}

func TestFormat(t *testing.T) {
	tests := []struct {
		name string
		r    loadreport.Report
		want string
	}{
		{name: "zero", r: loadreport.Report{}, want: "TEXT application_utilization=0, cpu_utilization=0, rps_fractional=0, named_metrics.queue=0"},
		{
			name: "test backend shape",
			r:    loadreport.Report{ApplicationUtilization: 1.5, CPUUtilization: 1.5, RPSFractional: 20, Queue: 5},
			want: "TEXT application_utilization=1.5, cpu_utilization=1.5, rps_fractional=20, named_metrics.queue=5",
		},
		{
			name: "every field",
			r:    loadreport.Report{ApplicationUtilization: 0.1, CPUUtilization: 0.2, MemUtilization: 0.3, RPSFractional: 1e21, EPS: 0.5, Queue: 2},
			want: "TEXT application_utilization=0.1, cpu_utilization=0.2, mem_utilization=0.3, rps_fractional=1e+21, eps=0.5, named_metrics.queue=2",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := loadreport.Format(tt.r)
			if got != tt.want {
				t.Errorf("Format(%+v) = %q, want %q", tt.r, got, tt.want)
			}
			back, err := loadreport.Parse(got)
			if err != nil || back != tt.r {
				t.Errorf("Parse(Format(%+v)) = %+v, %v; want the same Report", tt.r, back, err)
			}
		})
	}
}

func TestHeaderNames(t *testing.T) {
	if got := http.CanonicalHeaderKey(loadreport.Header); got != loadreport.Header {
		t.Errorf("Header %q is not canonical (%q)", loadreport.Header, got)
	}
	if !strings.EqualFold(loadreport.Header, "endpoint-load-metrics") {
		t.Errorf("Header = %q, want Envoy's endpoint-load-metrics", loadreport.Header)
	}
	if loadreport.GRPCTrailer != strings.ToLower(loadreport.Header)+"-bin" {
		t.Errorf("GRPCTrailer = %q, want the lower-case header name with -bin", loadreport.GRPCTrailer)
	}
}

func ExampleParse() {
	r, err := loadreport.Parse("TEXT application_utilization=1.5, cpu_utilization=0.9, rps_fractional=20, named_metrics.queue=5")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(r.Utilization(), r.RPSFractional, r.Queue)

	_, err = loadreport.Parse("TEXT cpu_utilization=0.5, eps=-1")
	fmt.Println(err)
	// Output:
	// 1.5 20 5
	// loadreport: invalid value: TEXT element 2 at byte 26 "eps=-1": value is negative
}

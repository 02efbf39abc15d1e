package loadreport_test

import (
	"math"
	"testing"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"

	"github.com/spillway-lb/spillway/lb/loadreport"
)

// FuzzParse checks that Parse never panics, that every Report it accepts
// holds only finite values >= 0, and that such a Report survives Format and
// Parse unchanged, whatever format it came in.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		typicalText,
		"TEXT",
		"TEXT cpu_utilization=0.7, rps_fractional=95, named_metrics.foo=3",
		"TEXT  ,eps = 1e-300 ,, mem_utilization=0x1p-2\t",
		"TEXT eps=1, eps=2",
		"TEXT cpu_utilization=NaN",
		"TEXT a=b=c",
		`JSON {"cpuUtilization":0.7,"namedMetrics":{"queue":3}}`,
		`JSON {"rps":"18446744073709551615"}`,
		"BIN MQAAAAAAwFdAQhAKBXF1ZXVlEQAAAAAAAAhASWZmZmZmZuY/",
		"BIN ////",
		"",
	} {
		f.Add(seed)
	}
	f.Add(bin(f, &v3orcapb.OrcaLoadReport{CpuUtilization: 1e308, Eps: 5e-324}))
	f.Fuzz(func(t *testing.T, header string) {
		r, err := loadreport.Parse(header)
		if err != nil {
			if r != (loadreport.Report{}) {
				t.Errorf("Parse(%q) = %+v with error %v, want the zero Report", header, r, err)
			}
			return
		}
		for _, v := range [...]float64{r.CPUUtilization, r.MemUtilization, r.ApplicationUtilization, r.RPSFractional, r.EPS, r.Queue} {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || math.Signbit(v) {
				t.Fatalf("Parse(%q) = %+v: value %v is not finite and >= 0", header, r, v)
			}
		}
		text := loadreport.Format(r)
		back, err := loadreport.Parse(text)
		if err != nil {
			t.Fatalf("Parse(Format(%+v)) = %q: %v", r, text, err)
		}
		if back != r {
			t.Errorf("Parse(Format(Parse(%q))) = %+v via %q, want %+v", header, back, text, r)
		}
	})
}

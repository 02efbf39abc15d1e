package quotabench

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestConsumers: 100 consumers run from 60 to 6,000 a minute, never
// decreasing, 28,959 in all (4,826 requests/s offered at 10×).
func TestConsumers(t *testing.T) {
	cs := Consumers(100)
	var sum int64
	for i, c := range cs {
		sum += c.Limit
		if i > 0 && c.Limit < cs[i-1].Limit {
			t.Errorf("%s: limit %d below %s's %d", c.Project, c.Limit, cs[i-1].Project, cs[i-1].Limit)
		}
	}
	if cs[0].Limit != 60 || cs[99].Limit != 6000 || sum != 28959 {
		t.Errorf("limits %d..%d, sum %d; want 60..6000, sum 28959", cs[0].Limit, cs[99].Limit, sum)
	}
}

func TestParseMetrics(t *testing.T) {
	page := `# HELP x y
# TYPE spillway_gfe_quota_calls_total counter
spillway_gfe_quota_calls_total{result="ok"} 442
spillway_gfe_quota_admit_seconds_bucket{le="+Inf"} 1.5e+06
broken
`
	got, err := parseMetrics(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		`spillway_gfe_quota_calls_total{result="ok"}`:        442,
		`spillway_gfe_quota_admit_seconds_bucket{le="+Inf"}`: 1.5e6,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("parseMetrics (-want +got):\n%s", d)
	}
}

// FuzzParseMetrics: any page parses without panicking, and every series
// it returns is a line's text before its last space.
func FuzzParseMetrics(f *testing.F) {
	f.Add("a 1\nb{c=\"d e\"} 2\n# x\n")
	f.Add("")
	f.Add(" \n 1 \nx NaN")
	f.Fuzz(func(t *testing.T, page string) {
		got, err := parseMetrics(strings.NewReader(page))
		if err != nil {
			return
		}
		for series := range got {
			if !strings.Contains(page, series+" ") {
				t.Errorf("series %q is not in the page", series)
			}
		}
	})
}

package benchpolicy

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCompare(t *testing.T) {
	wf := Scored{Row: Row{Policy: "waterfall"}, OverCapacity: 0.01, P99Ms: 80}
	rows := []Scored{
		wf,
		{Row: Row{Policy: "round_robin", Scope: "global"}, OverCapacity: 0.5, P99Ms: 900}, // not a hashing row
		{Row: Row{Policy: "hash5", Scope: "global"}, OverCapacity: 0.2, P99Ms: 300},
		{Row: Row{Policy: "hash5", Scope: "nearest_region"}, OverCapacity: 0.01, P99Ms: 60},
		// A waterfall row with options, after the plain one: not the
		// waterfall Compare reads.
		{Row: Row{Policy: "waterfall", Options: Options{LoadAware: true, Shed: true}}, OverCapacity: 0, P99Ms: 10},
	}
	c, ok := Compare(rows)
	want := Comparison{Rows: 2, FewerOverCapacity: 1, LowerP99: 1, Exceptions: []string{
		"over-capacity: hash5/nearest_region 1.0% = waterfall 1.0%",
		"p99: hash5/nearest_region 60.0 ms < waterfall 80.0 ms",
	}}
	if !ok {
		t.Fatal("Compare() ok = false, want true")
	}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("Compare() (-want +got):\n%s", diff)
	}
	wantText := "waterfall vs hashing: fewer over-capacity requests than 1 of 2 hashing rows, lower p99 than 1 of 2\n" +
		"  not better on over-capacity: hash5/nearest_region 1.0% = waterfall 1.0%\n" +
		"  not better on p99: hash5/nearest_region 60.0 ms < waterfall 80.0 ms"
	if got := c.String(); got != wantText {
		t.Errorf("String() = %q, want %q", got, wantText)
	}
	for name, rs := range map[string][]Scored{"no waterfall": rows[1:4], "only a waterfall with options": append(rows[1:4:4], rows[4]), "no hashing row": rows[:2]} {
		if _, ok := Compare(rs); ok {
			t.Errorf("Compare(%s) ok = true, want false", name)
		}
	}
}

package benchpolicy

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway-lb/spillway/config"
)

func ids(rs []Row) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID()
	}
	return out
}

func TestDefaults(t *testing.T) {
	want := []string{
		"waterfall", "min_rtt", "round_robin/global", "least_request/global",
		"hash2/global", "hash3/global", "hash5/global",
		"hash2/nearest_region", "hash3/nearest_region", "hash5/nearest_region",
	}
	if diff := cmp.Diff(want, ids(Defaults())); diff != "" {
		t.Errorf("Defaults() (-want +got):\n%s", diff)
	}
}

func TestSelect(t *testing.T) {
	tests := []struct {
		name    string
		list    string
		want    []string
		wantErr string
	}{
		{name: "empty is all", list: "", want: ids(Defaults())},
		{name: "spaces are all", list: "  ", want: ids(Defaults())},
		{name: "one", list: "waterfall", want: []string{"waterfall"}},
		{name: "bare hash means both scopes", list: "hash2", want: []string{"hash2/global", "hash2/nearest_region"}},
		{name: "default order, spaces", list: " hash5/nearest_region , waterfall", want: []string{"waterfall", "hash5/nearest_region"}},
		{name: "a bare baseline is its one row", list: "min_rtt,round_robin", want: []string{"min_rtt", "round_robin/global"}},
		{name: "p2c is least_request/global", list: "p2c", want: []string{"least_request/global"}},
		{name: "p2c and least_request are one row", list: "least_request, p2c", want: []string{"least_request/global"}},
		{name: "envoy_priority is selectable", list: "envoy_priority,waterfall", want: []string{"waterfall", "envoy_priority"}},
		{name: "envoy_priority takes no scope", list: "envoy_priority/global", wantErr: `unknown policy "envoy_priority/global"`},
		{name: "unknown", list: "waterfall,hash4", wantErr: `unknown policy "hash4" (want one of waterfall, min_rtt, round_robin/global, `},
		{name: "round robin has no nearest scope", list: "round_robin/nearest_region", wantErr: `unknown policy "round_robin/nearest_region"`},
		{name: "only commas", list: " , ", wantErr: "no policy named"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Select(tt.list)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Select(%q) error = %v, want %q", tt.list, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Select(%q) error = %v", tt.list, err)
			}
			if diff := cmp.Diff(tt.want, ids(got)); diff != "" {
				t.Errorf("Select(%q) (-want +got):\n%s", tt.list, diff)
			}
		})
	}
}

// TestExtras: envoy_priority is selectable but not a default row, so
// that the default stories (lbbench's flash crowd, lbsim bench) keep their
// rows and run time; every selectable ID is unique.
func TestExtras(t *testing.T) {
	if diff := cmp.Diff([]string{"envoy_priority"}, ids(Extras())); diff != "" {
		t.Errorf("Extras() (-want +got):\n%s", diff)
	}
	seen := map[string]bool{}
	for _, id := range ids(Selectable()) {
		if seen[id] {
			t.Errorf("row %s listed twice", id)
		}
		seen[id] = true
	}
	if len(seen) != len(Defaults())+len(Extras()) {
		t.Errorf("%d selectable rows, want %d", len(seen), len(Defaults())+len(Extras()))
	}
}

func TestHashScope(t *testing.T) {
	for _, tt := range []struct {
		r    Row
		want config.HashScope
	}{
		{Row{Policy: "waterfall"}, ""},
		{Row{Policy: "round_robin", Scope: "global"}, ""},
		{Row{Policy: "hash3", Scope: "nearest_region"}, "nearest_region"},
		{Row{Policy: "hash5", Scope: "global"}, "global"},
		{Row{Policy: "hash2"}, ""},
	} {
		if got := tt.r.HashScope(); got != tt.want {
			t.Errorf("%s.HashScope() = %q, want %q", tt.r.ID(), got, tt.want)
		}
	}
}

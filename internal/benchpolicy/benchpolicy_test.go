package benchpolicy

import (
	"slices"
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
		{name: "a bare planned policy is its row without options", list: "waterfall", want: []string{"waterfall"}},
		{name: "options, in known order", list: "waterfall+load_aware+shed,least_request,waterfall,waterfall+load_aware",
			want: []string{"waterfall", "waterfall+load_aware", "waterfall+load_aware+shed", "least_request/global"}},
		{name: "min_rtt takes options too", list: "min_rtt+shed", want: []string{"min_rtt+shed"}},
		{name: "options in another order are unknown", list: "waterfall+shed+load_aware", wantErr: `unknown policy "waterfall+shed+load_aware"`},
		{name: "a baseline takes no options", list: "least_request+shed", wantErr: `unknown policy "least_request+shed"`},
		{name: "a baseline with scope takes no options", list: "least_request/global+shed", wantErr: `a planned policy may add +load_aware, +shed or +load_aware+shed`},
		{name: "p2c is least_request/global", list: "p2c", want: []string{"least_request/global"}},
		{name: "p2c and least_request are one row", list: "least_request, p2c", want: []string{"least_request/global"}},
		{name: "envoy_priority is selectable", list: "envoy_priority,waterfall", want: []string{"waterfall", "envoy_priority"}},
		{name: "envoy_priority takes no scope", list: "envoy_priority/global", wantErr: `unknown policy "envoy_priority/global"`},
		{name: "envoy_priority takes no options", list: "envoy_priority+shed", wantErr: `unknown policy "envoy_priority+shed"`},
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

func TestKnown(t *testing.T) {
	want := []string{
		"waterfall", "waterfall+load_aware", "waterfall+shed", "waterfall+load_aware+shed",
		"min_rtt", "min_rtt+load_aware", "min_rtt+shed", "min_rtt+load_aware+shed",
		"round_robin/global", "least_request/global",
		"hash2/global", "hash3/global", "hash5/global",
		"hash2/nearest_region", "hash3/nearest_region", "hash5/nearest_region",
		"envoy_priority",
		"prequal/global",
	}
	if diff := cmp.Diff(want, ids(Known())); diff != "" {
		t.Errorf("Known() (-want +got):\n%s", diff)
	}
	for _, r := range Known() {
		if r.Any() && !r.Policy.IsPlanned() {
			t.Errorf("%s: options on a baseline, which the config rejects", r.ID())
		}
	}
}

// TestExtras: envoy_priority and prequal are selectable but not default rows, so
// that the default stories (lbbench's flash crowd, lbsim bench) keep their
// rows and run time; every known ID is unique.
func TestExtras(t *testing.T) {
	if diff := cmp.Diff([]string{"envoy_priority", "prequal/global"}, ids(Extras())); diff != "" {
		t.Errorf("Extras() (-want +got):\n%s", diff)
	}
	seen := map[string]bool{}
	for _, id := range ids(Known()) {
		if seen[id] {
			t.Errorf("row %s listed twice", id)
		}
		seen[id] = true
	}
	for _, r := range Extras() {
		if slices.Contains(Defaults(), r) {
			t.Errorf("%s is a default row", r.ID())
		}
	}
}

func TestLabel(t *testing.T) {
	for _, tt := range []struct {
		r         Row
		id, label string
	}{
		{Row{Policy: "waterfall"}, "waterfall", "waterfall"},
		{Row{Policy: "hash5", Scope: "nearest_region"}, "hash5/nearest_region", "hash5"},
		{Row{Policy: "waterfall", Options: Options{LoadAware: true}}, "waterfall+load_aware", "waterfall+load_aware"},
		{Row{Policy: "waterfall", Options: Options{Shed: true}}, "waterfall+shed", "waterfall+shed"},
		{Row{Policy: "min_rtt", Options: Options{LoadAware: true, Shed: true}}, "min_rtt+load_aware+shed", "min_rtt+load_aware+shed"},
	} {
		if got := tt.r.ID(); got != tt.id {
			t.Errorf("ID() = %q, want %q", got, tt.id)
		}
		if got := tt.r.Label(); got != tt.label {
			t.Errorf("%s: Label() = %q, want %q", tt.id, got, tt.label)
		}
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

package version

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestFromBuildInfo(t *testing.T) {
	const rev = "0cc1780a12b4c0ffee0cc1780a12b4c0ffee0cc1"
	vcs := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/spillway-lb/spillway", Version: "(devel)"},
		Settings: []debug.BuildSetting{
			{Key: "-trimpath", Value: "true"},
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: rev},
			{Key: "vcs.time", Value: "2026-12-01T15:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	tagged := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.0"}}
	at := time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC)
	tests := []struct {
		name        string
		bi          *debug.BuildInfo
		ver, revOvr string
		want        Info
		wantString  string
	}{
		{name: "work tree with vcs stamp", bi: vcs,
			want:       Info{Version: "(devel)", Revision: rev, Time: at, Modified: true, GoVersion: "go1.26.8"},
			wantString: "(devel) (rev 0cc1780a12b4, 2026-12-01T15:00:00Z, modified) go1.26.8"},
		{name: "module version from go install", bi: tagged,
			want:       Info{Version: "v1.2.0", GoVersion: "go1.26.8"},
			wantString: "v1.2.0 go1.26.8"},
		{name: "version override keeps the vcs stamp", bi: vcs, ver: "v1.3.0",
			want:       Info{Version: "v1.3.0", Revision: rev, Time: at, Modified: true, GoVersion: "go1.26.8"},
			wantString: "v1.3.0 (rev 0cc1780a12b4, 2026-12-01T15:00:00Z, modified) go1.26.8"},
		{name: "revision override drops the other commit's time", bi: vcs, ver: "v1.3.0", revOvr: "abc123",
			want:       Info{Version: "v1.3.0", Revision: "abc123", GoVersion: "go1.26.8"},
			wantString: "v1.3.0 (rev abc123) go1.26.8"},
		{name: "same revision override keeps the stamp", bi: vcs, revOvr: rev,
			want: Info{Version: "(devel)", Revision: rev, Time: at, Modified: true, GoVersion: "go1.26.8"}},
		{name: "no build info", bi: nil,
			want: Info{Version: "(devel)", GoVersion: runtime.Version()}},
		{name: "no build info, overrides (a stripped Docker build)", bi: nil, ver: "v1.2.0", revOvr: "abc123",
			want:       Info{Version: "v1.2.0", Revision: "abc123", GoVersion: runtime.Version()},
			wantString: "v1.2.0 (rev abc123) " + runtime.Version()},
		{name: "unparsable vcs.time is left out",
			bi:   &debug.BuildInfo{GoVersion: "go1.26.8", Settings: []debug.BuildSetting{{Key: "vcs.time", Value: "yesterday"}}},
			want: Info{Version: "(devel)", GoVersion: "go1.26.8"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FromBuildInfo(tt.bi, tt.ver, tt.revOvr)
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("FromBuildInfo() mismatch (-want +got):\n%s", d)
			}
			if tt.wantString != "" && got.String() != tt.wantString {
				t.Errorf("String() = %q, want %q", got.String(), tt.wantString)
			}
		})
	}
}

// TestLineUsesOverrides: Get applies the -X variables (set here as the
// linker would).
func TestLineUsesOverrides(t *testing.T) {
	defer func(v, r string) { version, revision = v, r }(version, revision)
	version, revision = "v9.9.9", "feedface"
	got := Line("gfe")
	want := "gfe v9.9.9 (rev feedface) " + Get().GoVersion
	if got != want {
		t.Errorf("Line() = %q, want %q", got, want)
	}
}

func TestLabels(t *testing.T) {
	i := Info{Version: "v1.2.0", Revision: "abc123", GoVersion: "go1.26.8", Modified: true}
	want := map[string]string{"version": "v1.2.0", "revision": "abc123", "go_version": "go1.26.8"}
	if d := cmp.Diff(want, i.Labels()); d != "" {
		t.Errorf("Labels() mismatch (-want +got):\n%s", d)
	}
}

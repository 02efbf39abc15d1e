package lab

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/benchpolicy"
	"github.com/spillway-lb/spillway/internal/realbench"
)

// TestBenchmarkOnLab runs the real benchmark the way lbbench --lab does
// (Starter as realbench.Options.Start), in quick mode for the waterfall,
// and checks that every request is accounted for, from the 3 ×
// ClientAddrs client addresses of the client hosts, with 0 errors, and
// that the story holds across hosts: no cross-region traffic while every
// region is under half full, nyc's spill to eu-west in the flash crowd.
func TestBenchmarkOnLab(t *testing.T) {
	requireLab(t)
	cfg := realbench.QuickConfig()
	cfg.Policies = []benchpolicy.Row{{Policy: "waterfall"}}
	cfg.SourcesPerSite = ClientAddrs
	start, down := Starter(Config{Prefix: testPrefix, StateDir: t.TempDir(), Bins: bins})
	t.Cleanup(func() {
		if err := down(); err != nil {
			t.Errorf("down: %v", err)
		}
		if left, _ := Namespaces(testPrefix); len(left) > 0 {
			t.Errorf("namespaces left after down: %v", left)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress strings.Builder
	res, err := realbench.Run(ctx, cfg, realbench.Options{Dir: t.TempDir(), Progress: &progress, Start: start, Lab: DefaultNetwork.String()})
	t.Logf("progress:\n%s", progress.String())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	var table strings.Builder
	if err := res.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())
	if len(res.Rows) != 1 {
		t.Fatalf("%d rows, want 1", len(res.Rows))
	}
	scheduled := cfg.Scheduled()
	wf := res.Rows[0]
	if float64(wf.Requests) < 0.9*scheduled || float64(wf.Requests) > 1.02*scheduled {
		t.Errorf("%d requests, want %.0f (demand × duration) within -10%%/+2%%", wf.Requests, scheduled)
	}
	if wf.Dropped != 0 || wf.ErrorRate != 0 {
		t.Errorf("%d requests dropped by the loader, error rate %.4f; want 0 and 0", wf.Dropped, wf.ErrorRate)
	}
	if want := 3 * ClientAddrs; wf.Sources != want {
		t.Errorf("requests came from %d client addresses, want %d (the client hosts')", wf.Sources, want)
	}
	if c := wf.Phases[0].CrossRegion; c > 0.02 {
		t.Errorf("steady: %.3f cross-region with every region under half full, want ≤ 0.02", c)
	}
	if c := wf.Phases[1].CrossRegion; c < 0.05 {
		t.Errorf("flash crowd: %.3f cross-region, want > 0.05 (nyc's spill to eu-west)", c)
	}
	if !strings.HasPrefix(table.String(), "real benchmark on the lab's hosts") {
		t.Errorf("the table does not say it ran on the lab's hosts: %q", strings.SplitN(table.String(), "\n", 2)[0])
	}
}

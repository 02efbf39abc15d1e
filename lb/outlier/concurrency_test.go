package outlier

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestConcurrentReports has many goroutines report on the same hosts at
// once (run it with -race) and checks the counts that do not depend on the
// interleaving.
func TestConcurrentReports(t *testing.T) {
	const (
		goroutines = 8
		reports    = 300 // per goroutine, per host, per phase
	)
	d := mustNew(t, DefaultConfig())
	hs := registerN(d, "g", 4) // at most 2 ejected
	failing, healthy := hs[0], hs[1]

	run := func(now time.Time, report func(now time.Time)) {
		t.Helper()
		var wg sync.WaitGroup
		for range goroutines {
			wg.Go(func() {
				for range reports {
					report(now)
				}
			})
		}
		// Control-plane calls racing with the reports.
		wg.Go(func() {
			for i := range 50 {
				h := d.Register("churn", fmt.Sprintf("c%d", i%5))
				_ = d.Snapshot(now)
				_ = failing.State(now)
				if i%2 == 1 {
					d.Remove(h, now)
				}
			}
		})
		wg.Wait()
	}

	// Phase 1: one host fails every request, one succeeds on every request.
	// Exactly one ejection: later failures of the ejected host are not
	// counted.
	var phase1Ejections sync.Map
	run(t0, func(now time.Time) {
		if failing.Report(ServerError, now) {
			phase1Ejections.Store(now, true)
		}
		if healthy.Report(Success, now) {
			t.Error("Report(Success) ejected a host")
		}
		_ = healthy.Ejected(now)
	})
	if got := d.Stats(); got.Ejections != 1 || got.Refused != 0 {
		t.Errorf("phase 1 Stats = %+v, want 1 ejection, 0 refused", got)
	}
	if !failing.Ejected(t0) || healthy.Ejected(t0) {
		t.Errorf("phase 1: Ejected(failing, healthy) = %v, %v, want true, false", failing.Ejected(t0), healthy.Ejected(t0))
	}

	// Phase 2, after that ejection: every host fails every request. Exactly
	// two hosts (50% of 4) get ejected, once each; the others are refused
	// again and again.
	later := t0.Add(time.Hour)
	run(later, func(now time.Time) {
		for _, h := range hs {
			h.Report(ServerError, now)
		}
	})
	got := d.Stats()
	if got.Ejections != 3 {
		t.Errorf("Stats().Ejections = %d, want 3", got.Ejections)
	}
	// Each of the two refused hosts got goroutines × reports failures, so
	// at least that many / Consecutive5xx complete runs minus the ones cut
	// short by racing resets; at least one each is certain.
	if got.Refused < 2 {
		t.Errorf("Stats().Refused = %d, want >= 2", got.Refused)
	}
	if n := ejectedCount(hs, later); n != 2 {
		t.Errorf("ejected hosts = %d, want 2", n)
	}
}

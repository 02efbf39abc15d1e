package outlier

import (
	"fmt"
	"testing"
	"time"
)

// t0 is the start of every test's timeline.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func mustNew(tb testing.TB, cfg Config) *Detector {
	tb.Helper()
	d, err := New(cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	return d
}

// registerN registers hosts h0..h{n-1} in group.
func registerN(d *Detector, group string, n int) []*Host {
	hs := make([]*Host, n)
	for i := range hs {
		hs[i] = d.Register(group, fmt.Sprintf("h%d", i))
	}
	return hs
}

// reportN reports r n times on h at now and returns how many of the
// reports ejected h.
func reportN(h *Host, r Result, n int, now time.Time) int {
	ejections := 0
	for range n {
		if h.Report(r, now) {
			ejections++
		}
	}
	return ejections
}

// ejectedCount counts the hosts of hs ejected at now.
func ejectedCount(hs []*Host, now time.Time) int {
	n := 0
	for _, h := range hs {
		if h.Ejected(now) {
			n++
		}
	}
	return n
}

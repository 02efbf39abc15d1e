package outlier

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// TestHotPathAllocs checks that the calls the proxy makes per request
// allocate nothing.
func TestHotPathAllocs(t *testing.T) {
	d := mustNew(t, DefaultConfig())
	hs := registerN(d, "g", 4)
	h, ejected := hs[0], hs[1]
	reportN(ejected, ConnectFailure, 3, t0)
	now := t0
	tests := []struct {
		name string
		f    func()
	}{
		{name: "Report(Success)", f: func() { h.Report(Success, now) }},
		{name: "Report(ServerError) non-ejecting", f: func() {
			// Four failures then a success: never a full run.
			h.Report(ServerError, now)
			h.Report(ServerError, now)
			h.Report(Timeout, now)
			h.Report(ConnectFailure, now)
			h.Report(Success, now)
		}},
		{name: "Report(ServerError) on an ejected host", f: func() { ejected.Report(ServerError, now) }},
		{name: "Ejected", f: func() { _ = h.Ejected(now) }},
		{name: "Ejected on an ejected host", f: func() { _ = ejected.Ejected(now) }},
	}
	for _, tt := range tests {
		if got := testing.AllocsPerRun(1000, tt.f); got != 0 {
			t.Errorf("%s: %v allocs/op, want 0", tt.name, got)
		}
	}
	if !ejected.Ejected(now) || h.Ejected(now) {
		t.Fatalf("setup: Ejected = %v, %v, want true, false", ejected.Ejected(now), h.Ejected(now))
	}
	if got := d.Stats().Ejections; got != 1 {
		t.Errorf("Stats().Ejections = %d, want 1 (the loops must not eject)", got)
	}
}

// BenchmarkReport measures Report from all cores on one shared host (the
// worst case for contention) and on a host per goroutine.
func BenchmarkReport(b *testing.B) {
	noEject := DefaultConfig()
	noEject.Consecutive5xx = 1 << 40 // runs never complete
	noEject.ConsecutiveConnectFailures = 1 << 40
	tests := []struct {
		name string
		cfg  Config
		r    Result
		prep func(h *Host)
	}{
		{name: "success", cfg: DefaultConfig(), r: Success},
		{name: "server_error", cfg: noEject, r: ServerError},
		{name: "connect_failure", cfg: noEject, r: ConnectFailure},
		{name: "server_error_while_ejected", cfg: DefaultConfig(), r: ServerError, prep: func(h *Host) {
			reportN(h, ConnectFailure, 3, t0)
		}},
	}
	for _, tt := range tests {
		b.Run(tt.name+"/shared", func(b *testing.B) {
			d := mustNew(b, tt.cfg)
			h := registerN(d, "g", 4)[0]
			if tt.prep != nil {
				tt.prep(h)
			}
			now := t0.Add(time.Second)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					h.Report(tt.r, now)
				}
			})
		})
		b.Run(tt.name+"/per_goroutine", func(b *testing.B) {
			d := mustNew(b, tt.cfg)
			now := t0.Add(time.Second)
			var seq atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				h := d.Register("g", fmt.Sprintf("h%d", seq.Add(1)))
				if tt.prep != nil {
					tt.prep(h)
				}
				for pb.Next() {
					h.Report(tt.r, now)
				}
			})
		})
	}
}

// BenchmarkEjected measures the per-pick check.
func BenchmarkEjected(b *testing.B) {
	d := mustNew(b, DefaultConfig())
	h := registerN(d, "g", 4)[0]
	now := t0
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if h.Ejected(now) {
				b.Error("Ejected = true")
				return
			}
		}
	})
}

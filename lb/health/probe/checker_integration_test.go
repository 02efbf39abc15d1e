package probe

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/lb/health"
)

type toggler interface {
	target() health.Target
	setHealthy(bool)
}

// TestCheckerWithRealProbers runs a health.Checker on a fake clock with the
// real prober against a real local backend, and checks that the backend
// turns unhealthy after exactly unhealthy_threshold failed probes and
// healthy again after exactly healthy_threshold passed ones.
func TestCheckerWithRealProbers(t *testing.T) {
	tests := []struct {
		name     string
		protocol health.Protocol
		backend  func(t *testing.T) toggler
		// hits returns how many probes the backend has seen, or -1 if it
		// cannot count them.
		hits func(b toggler) int
	}{
		{
			name:     "http 200/500",
			protocol: health.ProtocolHTTP,
			backend:  func(t *testing.T) toggler { return newHTTPBackend(t) },
			hits:     func(b toggler) int { return int(b.(*httpBackend).hits.Load()) },
		},
		{
			name:     "tcp listener closed and reopened",
			protocol: health.ProtocolTCP,
			backend:  func(t *testing.T) toggler { return newTCPBackend(t) },
			hits:     func(toggler) int { return -1 },
		},
		{
			name:     "grpc SERVING/NOT_SERVING",
			protocol: health.ProtocolGRPC,
			backend:  func(t *testing.T) toggler { return newGRPCBackend(t, nil, false) },
			hits:     func(b toggler) int { return int(b.(*grpcBackend).checks.Load()) },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			b := tt.backend(t)
			cfg := cfgFor(tt.protocol)
			cfg.Interval, cfg.Timeout, cfg.Jitter = 5*time.Second, 2*time.Second, 0
			cfg.HealthyThreshold, cfg.UnhealthyThreshold = 2, 3

			p, err := New(cfg, Options{})
			if err != nil {
				t.Fatal(err)
			}
			clk := clock.NewFake(epoch)
			var mu sync.Mutex
			var changes []string
			c, err := health.NewChecker(cfg, p, health.Options{
				Clock: clk,
				OnChange: func(ch health.Change) {
					mu.Lock()
					defer mu.Unlock()
					changes = append(changes, string(ch.From)+"->"+string(ch.To)+"@"+ch.At.Sub(epoch).String())
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			c.SetTargets([]health.Target{b.target()})
			runCtx, stop := context.WithCancel(ctx)
			errc := make(chan error, 1)
			go func() { errc <- c.Run(runCtx) }()
			defer func() {
				stop()
				if err := <-errc; err != nil {
					t.Errorf("Run() = %v", err)
				}
			}()

			probes := 0
			step := func(healthy bool, want health.State) {
				t.Helper()
				b.setHealthy(healthy)
				if probes > 0 {
					clk.Advance(cfg.Interval)
				}
				if err := clk.BlockUntil(ctx, 1); err != nil {
					t.Fatalf("probe %d: BlockUntil: %v", probes+1, err)
				}
				probes++
				st, _ := c.Lookup(b.target())
				if st != want {
					t.Fatalf("after probe %d (backend healthy=%v): state %+v, want %+v", probes, healthy, st, want)
				}
			}
			H, U := health.StatusHealthy, health.StatusUnhealthy
			step(true, health.State{Status: H, Passes: 1}) // t=0: first pass admits
			step(false, health.State{Status: H, Fails: 1}) // t=5s
			step(false, health.State{Status: H, Fails: 2}) // t=10s
			step(false, health.State{Status: U, Fails: 3}) // t=15s: 3rd failure flips
			step(true, health.State{Status: U, Passes: 1}) // t=20s
			step(true, health.State{Status: H, Passes: 2}) // t=25s: 2nd pass flips back
			step(false, health.State{Status: H, Fails: 1}) // t=30s: a blip
			step(true, health.State{Status: H, Passes: 1}) // t=35s

			mu.Lock()
			got := changes
			mu.Unlock()
			want := []string{"unknown->healthy@0s", "healthy->unhealthy@15s", "unhealthy->healthy@25s"}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
			if n := tt.hits(b); n != -1 && n != probes {
				t.Errorf("backend saw %d probes, want %d", n, probes)
			}
		})
	}
}

var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

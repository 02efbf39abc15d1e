package quotaredis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/spillway-lb/spillway/internal/redisserver"
	"github.com/spillway-lb/spillway/internal/testkit"
	"github.com/spillway-lb/spillway/lb/quota"
)

// limits: 10 calls and 1000 bytes a minute for everyone, 4 calls for
// project small.
func limits(consumer, metric string) (int64, bool) {
	switch {
	case metric == "calls" && consumer == "small":
		return 4, true
	case metric == "calls":
		return 10, true
	case metric == "bytes":
		return 1000, true
	}
	return 0, false
}

func newStore(t *testing.T, cfg Config, reg prometheus.Registerer) *Store {
	t.Helper()
	s, err := New(cfg, limits, zerolog.Nop(), reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestStoreMatchesAllocator: 3,000 random allocations (seeded: two
// consumers, two metrics, the three modes, reused operation ids, amounts
// up to past the limits, units given back in the window charged or the
// one before, over two consecutive windows) get from the Redis script
// exactly what lb/quota's in-memory Allocator answers, and leave the same
// counts.
func TestStoreMatchesAllocator(t *testing.T) {
	r := testkit.StartRedis(t, "")
	s := newStore(t, Config{Addr: r.Addr, Timeout: time.Second}, nil)
	mem := quota.NewAllocator(limits)
	rng := rand.New(rand.NewPCG(1, 2))
	// Real time: Redis expires keys on its own clock.
	base := time.Now().Truncate(quota.Window)
	ctx := context.Background()
	modes := []quota.Mode{quota.ModeNormal, quota.ModeBestEffort, quota.ModeCheckOnly}
	for i := range 3000 {
		now := base.Add(time.Duration(i) * 2 * quota.Window / 3000)
		req := quota.Request{Consumer: []string{"small", "big"}[rng.IntN(2)], Mode: modes[rng.IntN(3)]}
		if rng.IntN(3) == 0 {
			req.OperationID = fmt.Sprintf("op-%d", rng.IntN(50))
		}
		if rng.IntN(4) != 0 {
			req.Values = append(req.Values, quota.MetricValue{Metric: "calls", Value: rng.Int64N(6)})
		}
		if rng.IntN(2) == 0 {
			req.Values = append(req.Values, quota.MetricValue{Metric: "bytes", Value: rng.Int64N(300)})
		}
		for _, v := range req.Values {
			if rng.IntN(3) == 0 {
				req.Returned = append(req.Returned, quota.MetricValue{Metric: v.Metric, Value: rng.Int64N(v.Value*3 + 4)})
				req.ReturnedWindow = quota.WindowOf(now) - rng.Int64N(2)
			}
		}
		want, werr := mem.Allocate(now, req)
		got, gerr := s.Allocate(ctx, now, req)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("allocation %d %+v: error %v, want %v", i, req, gerr, werr)
		}
		if req.OperationID != "" {
			// A repeated operation gets its first answer, whose
			// RetryAfter the Allocator keeps and Redis recomputes.
			got.RetryAfter, want.RetryAfter = 0, 0
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Fatalf("allocation %d at +%v %+v (-allocator +redis):\n%s", i, now.Sub(base), req, d)
		}
	}
	for _, c := range []string{"small", "big"} {
		for _, m := range []string{"calls", "bytes"} {
			now := base.Add(2*quota.Window - time.Second)
			got, err := s.Used(ctx, now, c, m)
			if want := mem.Used(now, c, m); err != nil || got != want {
				t.Errorf("Used(%s, %s) = %d, %v; want %d", c, m, got, err, want)
			}
		}
	}
}

// TestStoreErrors: invalid requests and unknown metrics fail as the
// Allocator's do, without a call to Redis; a wrong password is a Redis
// failure (ErrUnavailable); the right one from the password file works.
func TestStoreErrors(t *testing.T) {
	r := testkit.StartRedis(t, "s3cret")
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad")
	if err := os.WriteFile(bad, []byte("nope\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	one := []quota.MetricValue{{Metric: "calls", Value: 1}}
	for _, tt := range []struct {
		name    string
		pwFile  string
		req     quota.Request
		wantErr error
	}{
		{"ok", pw, quota.Request{Consumer: "big", Values: one}, nil},
		{"no consumer", pw, quota.Request{Values: one}, quota.ErrInvalidRequest},
		{"negative", pw, quota.Request{Consumer: "big", Values: []quota.MetricValue{{Metric: "calls", Value: -1}}}, quota.ErrInvalidRequest},
		{"unknown metric", pw, quota.Request{Consumer: "big", Values: []quota.MetricValue{{Metric: "gpus", Value: 1}}}, quota.ErrUnknownMetric},
		{"wrong password", bad, quota.Request{Consumer: "big", Values: one}, ErrUnavailable},
		{"no password", "", quota.Request{Consumer: "big", Values: one}, ErrUnavailable},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, Config{Addr: r.Addr, PasswordFile: tt.pwFile, Timeout: time.Second}, nil)
			_, err := s.Allocate(context.Background(), time.Now(), tt.req)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Errorf("Allocate(%+v) = %v, want %v", tt.req, err, tt.wantErr)
			}
		})
	}
	if _, err := New(Config{Addr: r.Addr, PasswordFile: filepath.Join(t.TempDir(), "missing")}, limits, zerolog.Nop(), nil); err == nil {
		t.Error("New with a missing password file: no error")
	}
}

// TestStoreFailsFastAndRecovers kills, and stalls (SIGSTOP), the real
// redis-server under a stream of allocations: no allocation takes longer
// than the 20ms timeout plus scheduling slack, after 5 failures the
// breaker answers without touching the network, and once Redis is back
// allocations succeed again within 2 s (OpenFor 250ms) and count right: a
// fresh consumer with a limit of 4 gets exactly 4 of 10.
func TestStoreFailsFastAndRecovers(t *testing.T) {
	const timeout = 20 * time.Millisecond
	// Slack for a machine with both cores busy and the race detector on;
	// the figure printed is the real worst case.
	const bound = timeout + 60*time.Millisecond
	for _, tt := range []struct {
		name        string
		fault, heal func(context.Context, *redisserver.Server) error
	}{
		{"killed",
			func(_ context.Context, s *redisserver.Server) error { s.Kill(); return nil },
			func(ctx context.Context, s *redisserver.Server) error { return s.Restart(ctx) }},
		{"stalled",
			func(_ context.Context, s *redisserver.Server) error { return s.Stall() },
			func(_ context.Context, s *redisserver.Server) error { return s.Resume() }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			r := testkit.StartRedis(t, "")
			reg := prometheus.NewRegistry()
			s := newStore(t, Config{Addr: r.Addr, Timeout: timeout}, reg)
			one := []quota.MetricValue{{Metric: "calls", Value: 1}}
			// Warm up: the first calls load the script and dial, which a
			// busy machine may not do within 20ms.
			waitAllocates(t, s, "before the fault", 5*time.Second)
			if err := tt.fault(ctx, r); err != nil {
				t.Fatal(err)
			}
			var worst time.Duration
			failed := 0
			for range 200 {
				start := time.Now()
				_, err := s.Allocate(ctx, time.Now(), quota.Request{Consumer: "big", Values: one})
				worst = max(worst, time.Since(start))
				if errors.Is(err, ErrUnavailable) {
					failed++
				}
			}
			open := testutil.ToFloat64(s.calls.WithLabelValues(resultOpen))
			t.Logf("%s: 200 allocations, %d failed, %v open-breaker answers, slowest %v", tt.name, failed, open, worst)
			if failed != 200 || worst > bound {
				t.Errorf("%s: %d of 200 failed (want 200), slowest %v (want <= %v)", tt.name, failed, worst, bound)
			}
			if open < 190 {
				t.Errorf("%s: %v of 200 answered by the open breaker, want >= 190 (it opens after 5 failures)", tt.name, open)
			}
			if err := tt.heal(ctx, r); err != nil {
				t.Fatal(err)
			}
			healed := time.Now()
			waitAllocates(t, s, tt.name+": after Redis came back", 2*time.Second)
			t.Logf("%s: allocations succeed %v after Redis came back", tt.name, time.Since(healed).Round(time.Millisecond))
			// Counting, through a store on the same Redis whose calls a
			// busy machine cannot time out (a timed-out call may still be
			// charged, which would blur the count).
			check := newStore(t, Config{Addr: r.Addr, Timeout: 2 * time.Second}, nil)
			ok := 0
			for range 10 {
				res, err := check.Allocate(ctx, time.Now(), quota.Request{Consumer: "small", Values: one})
				if err != nil {
					t.Fatal(err)
				}
				if !res.Exhausted {
					ok++
				}
			}
			if ok != 4 {
				t.Errorf("%s: after recovery a consumer with limit 4 got %d of 10, want 4", tt.name, ok)
			}
		})
	}
}

// waitAllocates polls s with an allocation every 10ms until one succeeds,
// failing the test after d.
func waitAllocates(t *testing.T, s *Store, what string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		_, err := s.Allocate(context.Background(), time.Now(), quota.Request{Consumer: "big", Values: []quota.MetricValue{{Metric: "calls", Value: 0}}})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: allocations still failing after %v: %v", what, d, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// FuzzParseResult: the script's answer is parsed without panicking, and a
// parsed result has one non-negative value per metric named, and as many
// non-negative amounts given back when it gives any.
func FuzzParseResult(f *testing.F) {
	for _, s := range []string{"0 calls 1 bytes 2", "1 calls 0", "0", "", "2 a 1", "0 a x", "0 a", "0 a -1", "0 calls 1 + 3", "0 a 1 b 2 + 0 5", "0 a 1 + ", "0 a 1 + -1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		res, back, err := parseResult(s)
		if err != nil {
			return
		}
		head, _, _ := strings.Cut(s, " +")
		if want := len(strings.Fields(head)) / 2; len(res.Allocated) != want {
			t.Errorf("parseResult(%q) = %d values, want %d", s, len(res.Allocated), want)
		}
		if back != nil && len(back) != len(res.Allocated) {
			t.Errorf("parseResult(%q) = %d given back for %d values", s, len(back), len(res.Allocated))
		}
		for _, v := range res.Allocated {
			if v.Value < 0 {
				t.Errorf("parseResult(%q): negative %v", s, v)
			}
		}
		for _, b := range back {
			if b < 0 {
				t.Errorf("parseResult(%q): negative amount given back %d", s, b)
			}
		}
	})
}

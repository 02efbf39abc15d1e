package loadaware

import (
	"container/heap"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/lb/backend"
)

// simEpoch is the virtual clock's start.
var simEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// completion is one request in flight in a simulation.
type completion struct {
	at time.Time
	e  int
	l  time.Duration
}

type completions []completion

func (h completions) Len() int           { return len(h) }
func (h completions) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h completions) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *completions) Push(x any)        { *h = append(*h, x.(completion)) }
func (h *completions) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// sim is an open-loop simulation on a virtual clock: one request every
// gap, each sent to the Endpoint the Chooser acquires and answered after
// latency(endpoint, now), when the Chooser observes it. It counts the
// picks of each Endpoint per second.
type sim struct {
	c       *Chooser
	es      []*Endpoint
	gap     time.Duration
	latency func(e int, now time.Time) time.Duration
	// perSecond[s][e] counts the picks of e in second s.
	perSecond [][]int
}

func newSim(t *testing.T, cfg Config, n int, starts []time.Time) *sim {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := &sim{c: c, gap: time.Millisecond}
	for i := range n {
		var st time.Time
		if i < len(starts) {
			st = starts[i]
		}
		s.es = append(s.es, NewEndpoint(backend.New("10.0.0."+string(rune('1'+i))+":80", 0), st))
	}
	return s
}

// run simulates d of virtual time; an Endpoint whose join time (joins[e],
// zero: from the start) is still ahead is not in the group yet.
func (s *sim) run(t *testing.T, d time.Duration, joins []time.Time) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	var inflight completions
	idx := make([]int, 0, len(s.es))
	group := make([]*Endpoint, 0, len(s.es))
	s.perSecond = make([][]int, int(d/time.Second))
	for k := range s.perSecond {
		s.perSecond[k] = make([]int, len(s.es))
	}
	for now := simEpoch; now.Before(simEpoch.Add(d)); now = now.Add(s.gap) {
		for inflight.Len() > 0 && !inflight[0].at.After(now) {
			x := heap.Pop(&inflight).(completion)
			s.es[x.e].b.Release()
			s.c.Observe(s.es[x.e], x.at, x.l)
		}
		idx, group = idx[:0], group[:0]
		for e := range s.es {
			if e < len(joins) && now.Before(joins[e]) {
				continue
			}
			idx = append(idx, e)
			group = append(group, s.es[e])
		}
		k, ok := s.c.Acquire(group, now, rng.Uint64())
		if !ok {
			t.Fatalf("Acquire at %v found every backend full", now.Sub(simEpoch))
		}
		e := idx[k]
		l := s.latency(e, now)
		heap.Push(&inflight, completion{at: now.Add(l), e: e, l: l})
		s.perSecond[int(now.Sub(simEpoch)/time.Second)][e]++
	}
}

// share returns e's share of the picks in seconds [from, to).
func (s *sim) share(e, from, to int) float64 {
	var mine, all int
	for k := from; k < to; k++ {
		for i, n := range s.perSecond[k] {
			all += n
			if i == e {
				mine += n
			}
		}
	}
	return float64(mine) / float64(all)
}

// TestSlowInstanceRecovers is the starvation of Traefik's leasttime
// (an identical upstream left with 5 of 1500 requests after a few slow
// replies, never to recover): three instances answer in 10ms; the first
// answers slowly from 5s to 10s. With the defaults it loses its traffic
// within a second of turning slow and has its third back within
// ProbeAfter plus the latency of the probe it still holds of recovering.
// Each mechanism is needed: without fading and forgetting (Decay and
// ProbeAfter of an hour) the same history starves it for good; with
// fading alone (ProbeAfter of an hour) an instance 500 times slower,
// whose answers stop coming, looks cheaper and cheaper as its estimate
// fades and draws a herd (a fifth of the traffic while slow), then is
// starved after it recovers.
func TestSlowInstanceRecovers(t *testing.T) {
	never := DefaultConfig()
	never.Decay, never.ProbeAfter = time.Hour, time.Hour
	fadeOnly := DefaultConfig()
	fadeOnly.ProbeAfter = time.Hour
	tests := []struct {
		name string
		cfg  Config
		slow time.Duration
		// wantHerd: the slow instance's share over seconds 6–10 is above
		// 0.05; else below 0.02.
		wantHerd bool
		// wantBack: its share over seconds 13–20 is a third within 0.08;
		// else below 0.02.
		wantBack bool
	}{
		{"defaults, 20x slower", DefaultConfig(), 200 * time.Millisecond, false, true},
		{"defaults, 500x slower", DefaultConfig(), 5 * time.Second, false, true},
		{"no fading, no forgetting, 20x slower", never, 200 * time.Millisecond, false, false},
		{"fading alone, 500x slower", fadeOnly, 5 * time.Second, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSim(t, tt.cfg, 3, nil)
			s.latency = func(e int, now time.Time) time.Duration {
				if d := now.Sub(simEpoch); e == 0 && d >= 5*time.Second && d < 10*time.Second {
					return tt.slow
				}
				return 10 * time.Millisecond
			}
			s.run(t, 20*time.Second, nil)
			t.Logf("shares of instance 0 per second: %v", s.shares(0))
			if got := s.share(0, 0, 5); got < 0.25 || got > 0.42 {
				t.Errorf("share of instance 0 before it turned slow = %.3f, want 1/3 ± 0.08", got)
			}
			got := s.share(0, 6, 10)
			if !tt.wantHerd && got > 0.02 {
				t.Errorf("share of instance 0 while slow (6s–10s) = %.4f, want < 0.02", got)
			}
			if tt.wantHerd && got < 0.05 {
				t.Errorf("share of instance 0 while slow (6s–10s) = %.4f, want the herd (> 0.05) without forgetting", got)
			}
			got = s.share(0, 13, 20)
			if tt.wantBack && (got < 0.25 || got > 0.42) {
				t.Errorf("share of instance 0 from 13s (recovered at 10s) = %.3f, want 1/3 ± 0.08", got)
			}
			if !tt.wantBack && got > 0.02 {
				t.Errorf("share of instance 0 from 13s = %.3f, want starvation (< 0.02) without this mechanism", got)
			}
		})
	}
}

func (s *sim) shares(e int) []float64 {
	out := make([]float64, len(s.perSecond))
	for k := range out {
		out[k] = float64(int(s.share(e, k, k+1)*1000)) / 1000
	}
	return out
}

// TestSlowStartRamp: a fourth instance joins three established ones at
// 10s. Over the default 30s window its share ramps up from about a tenth
// of an established one's (MinWeight) to an equal one, rising from one
// 5-second span to the next, and is a quarter after the window.
func TestSlowStartRamp(t *testing.T) {
	join := simEpoch.Add(10 * time.Second)
	s := newSim(t, DefaultConfig(), 4, []time.Time{{}, {}, {}, join})
	s.latency = func(int, time.Time) time.Duration { return 10 * time.Millisecond }
	s.run(t, 50*time.Second, []time.Time{{}, {}, {}, join})
	t.Logf("shares of the new instance per second: %v", s.shares(3))
	first := s.share(3, 10, 12)
	if first > 0.1 {
		t.Errorf("share in the window's first 2s = %.3f, want < 0.1 (an established instance has 0.25)", first)
	}
	prev := first
	for from := 12; from < 40; from += 5 {
		got := s.share(3, from, from+5)
		if got < prev-0.01 {
			t.Errorf("share over [%ds, %ds) = %.3f fell below the previous span's %.3f", from, from+5, got, prev)
		}
		prev = got
	}
	if got := s.share(3, 41, 50); got < 0.21 || got > 0.29 {
		t.Errorf("share after the window (41s–50s) = %.3f, want 0.25 ± 0.04", got)
	}
}

package testbackend

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseAntagonist(t *testing.T) {
	tests := []struct {
		in      string
		want    AntagonistRule
		wantErr string
	}{
		{in: "period=20s,duty=0.5,slowdown=4x", want: AntagonistRule{Antagonist: Antagonist{Period: 20 * time.Second, Duty: 0.5, Slowdown: 4}}},
		{in: "period=20s,slowdown=4", want: AntagonistRule{Antagonist: Antagonist{Period: 20 * time.Second, Duty: 0.5, Slowdown: 4}}},
		{in: "us-east-b-1:period=10s,duty=30%,cpu=2ms,phase=1s,seed=7", want: AntagonistRule{Instance: "us-east-b-1", Antagonist: Antagonist{Period: 10 * time.Second, Duty: 0.3, Slowdown: 1, CPU: 2 * time.Millisecond, Phase: time.Second, Seeded: true, Seed: 7}}},
		{in: " period = 1s , slowdown = 1.5x ", want: AntagonistRule{Antagonist: Antagonist{Period: time.Second, Duty: 0.5, Slowdown: 1.5}}},
		{in: "", wantErr: `"" is not key=value`},
		{in: "slowdown=4x", wantErr: "period is required"},
		{in: "period=20s", wantErr: "changes nothing"},
		{in: "period=20s,slowdown=4x,period=10s", wantErr: "key period given twice"},
		{in: "period=20s,slowdown=fast", wantErr: "slowdown: strconv.ParseFloat"},
		{in: "period=20s,slowdown=0.5x", wantErr: "slowdown: must be in [1, 1e6]"},
		{in: "period=-1s,slowdown=2x", wantErr: "period: must be positive"},
		{in: "period=20s,duty=0,slowdown=2x", wantErr: "duty: must be in (0, 1]"},
		{in: "period=20s,duty=150%,slowdown=2x", wantErr: "duty: must be in (0, 1]"},
		{in: "period=20s,phase=20s,slowdown=2x", wantErr: "phase: must be in [0, period)"},
		{in: "period=20s,cpu=-1ms,slowdown=2x", wantErr: "cpu: must be >= 0"},
		{in: "period=20s,slowdown=2x,seed=-3", wantErr: "seed: strconv.ParseUint"},
		{in: "period=20s,slowdown=2x,speed=3", wantErr: `unknown key "speed"`},
		{in: ":period=20s,slowdown=2x", wantErr: "empty instance name"},
		{in: "period=20s,slowdown=NaN", wantErr: "slowdown: must be in [1, 1e6]"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseAntagonist(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseAntagonist(%q) error = %v, want one containing %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseAntagonist(%q): %v", tt.in, err)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("ParseAntagonist(%q) (-want +got):\n%s", tt.in, d)
			}
			again, err := ParseAntagonist(got.String())
			if err != nil || again != got {
				t.Errorf("ParseAntagonist(%q) = %+v, %v; want the same rule back", got.String(), again, err)
			}
		})
	}
}

func TestAntagonistOn(t *testing.T) {
	square := Antagonist{Period: 20 * time.Second, Duty: 0.5, Slowdown: 4}
	phased := square
	phased.Phase = 5 * time.Second
	tests := []struct {
		name string
		a    Antagonist
		at   time.Duration
		want bool
	}{
		{"square, start", square, 0, true},
		{"square, end of on", square, 10*time.Second - 1, true},
		{"square, off", square, 10 * time.Second, false},
		{"square, end of period", square, 20*time.Second - 1, false},
		{"square, next period", square, 20 * time.Second, true},
		{"before the start", square, -time.Second, false},
		{"phased, before the phase", phased, 5*time.Second - 1, false},
		{"phased, at the phase", phased, 5 * time.Second, true},
		{"phased, off", phased, 15 * time.Second, false},
		{"duty 1: always", Antagonist{Period: time.Second, Duty: 1, Slowdown: 2}, 999 * time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.a.On(tt.at, 0); got != tt.want {
				t.Errorf("On(%v) = %v, want %v", tt.at, got, tt.want)
			}
		})
	}
}

// TestAntagonistSeeded: a seeded schedule is on for exactly Duty of every
// period, in one window whose offset varies from period to period; the
// same seed and instance give the same schedule, another instance another.
func TestAntagonistSeeded(t *testing.T) {
	a := Antagonist{Period: 10 * time.Second, Duty: 0.3, Slowdown: 4, Seeded: true, Seed: 42}
	const step = 10 * time.Millisecond
	schedule := func(name string) []time.Duration {
		s := newAntagonistSchedule(a, name, time.Unix(0, 0))
		var starts []time.Duration
		for k := range 20 {
			on, first := 0, time.Duration(-1)
			prev := false
			windows := 0
			for x := time.Duration(0); x < a.Period; x += step {
				t0 := time.Duration(k)*a.Period + x
				cur := s.on(time.Unix(0, 0).Add(t0))
				if cur {
					on++
					if first < 0 {
						first = x
					}
				}
				if cur && !prev {
					windows++
				}
				prev = cur
			}
			if d := time.Duration(on) * step; d < 2990*time.Millisecond || d > 3010*time.Millisecond || windows != 1 {
				t.Errorf("%s period %d: on for %v in %d windows, want 3s in one", name, k, d, windows)
			}
			starts = append(starts, first)
		}
		return starts
	}
	x, again, y := schedule("a"), schedule("a"), schedule("b")
	if !cmp.Equal(x, again) {
		t.Errorf("the same seed and instance gave two schedules: %v and %v", x, again)
	}
	if cmp.Equal(x, y) {
		t.Errorf("instances a and b have the same schedule %v", x)
	}
	distinct := map[time.Duration]bool{}
	for _, s := range x {
		distinct[s] = true
	}
	if len(distinct) < 10 {
		t.Errorf("window offsets over 20 periods %v: %d distinct, want them to vary", x, len(distinct))
	}
}

func TestAntagonistFor(t *testing.T) {
	all := AntagonistRule{Antagonist: Antagonist{Period: time.Second, Duty: 0.5, Slowdown: 2}}
	a1 := AntagonistRule{Instance: "a", Antagonist: Antagonist{Period: time.Second, Duty: 0.5, Slowdown: 3}}
	rules := []AntagonistRule{a1, all}
	if got, ok := antagonistFor(rules, "a"); !ok || got.Slowdown != 3 {
		t.Errorf("antagonistFor(a) = %+v, %v, want its own rule (slowdown 3)", got, ok)
	}
	if got, ok := antagonistFor(rules, "b"); !ok || got.Slowdown != 2 {
		t.Errorf("antagonistFor(b) = %+v, %v, want the rule for all (slowdown 2)", got, ok)
	}
	if _, ok := antagonistFor(rules[:1], "b"); ok {
		t.Error("antagonistFor(b) without a rule for it found one")
	}
}

// TestAntagonistSlowsInstance drives an http instance with a 10ms service
// time and "a:period=20s,duty=0.5,slowdown=4x" on the fake clock: a
// request in the first 10s holds its slot exactly 40ms, one in the next
// 10s exactly 10ms, and Stats counts the slowed one; the instance b, which
// no rule names, is never slowed.
func TestAntagonistSlowsInstance(t *testing.T) {
	clk := newFakeClock()
	r, err := ParseAntagonist("a:period=20s,duty=0.5,slowdown=4x")
	if err != nil {
		t.Fatal(err)
	}
	c := Capacity{MaxConcurrency: 1, Queue: 1, ServiceTime: 10 * time.Millisecond}
	s := startServer(t, Config{Instances: []InstanceConfig{testInstance("a", c), testInstance("b", c)}, Antagonists: []AntagonistRule{r}}, clk)
	client := newClient(t, "")
	ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
	defer cancel()
	get := func(what, inst string, want time.Duration) {
		t.Helper()
		done := make(chan response, 1)
		go func() { done <- do(ctx, client, http.MethodGet, "http://"+s.Addr(inst)+"/") }()
		advanceExactly(ctx, t, clk, what, want)
		if got := <-done; got.err != nil || got.status != http.StatusOK {
			t.Fatalf("%s: %v, status %d", what, got.err, got.status)
		}
	}
	get("a while on", "a", 40*time.Millisecond)
	get("b while a's antagonist is on", "b", 10*time.Millisecond)
	clk.Advance(10 * time.Second)
	get("a while off", "a", 10*time.Millisecond)
	clk.Advance(10 * time.Second)
	get("a on again", "a", 40*time.Millisecond)
	if st, _ := s.Stats("a"); st.Antagonized != 2 || st.Served != 3 {
		t.Errorf("a: antagonized %d of %d served, want 2 of 3", st.Antagonized, st.Served)
	}
	if st, _ := s.Stats("b"); st.Antagonized != 0 {
		t.Errorf("b: antagonized %d, want 0", st.Antagonized)
	}
}

func TestValidateAntagonists(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Instances = []InstanceConfig{testInstance("a", DefaultCapacity())}
	cfg.Antagonists = []AntagonistRule{
		{Instance: "nosuch", Antagonist: Antagonist{Period: time.Second, Duty: 0.5, Slowdown: 2}},
		{Antagonist: Antagonist{Period: 0, Duty: 0.5, Slowdown: 2}},
	}
	err := cfg.Validate()
	for _, want := range []string{`antagonists[0].instance: no instance is named "nosuch"`, "antagonists[1]", "period: must be positive"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to contain %q", err, want)
		}
	}
}

// FuzzParseAntagonist: ParseAntagonist never panics; what it accepts is
// valid, its schedule answers, and its String parses back to the same rule.
func FuzzParseAntagonist(f *testing.F) {
	for _, s := range []string{
		"period=20s,duty=0.5,slowdown=4x",
		"us-east-b-1:period=10s,duty=30%,cpu=2ms,phase=1s,seed=7",
		"period=1ns,duty=1,slowdown=1e6",
		"a:b:period=1s,slowdown=2",
		"period=20s,duty=0.0000001,slowdown=2,seed=18446744073709551615",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseAntagonist(s)
		if err != nil {
			if strings.TrimSpace(err.Error()) == "" {
				t.Fatalf("ParseAntagonist(%q): empty error", s)
			}
			return
		}
		if err := r.Antagonist.validate(); err != nil {
			t.Fatalf("ParseAntagonist(%q) accepted an invalid antagonist: %v", s, err)
		}
		for _, at := range []time.Duration{0, r.Antagonist.Period / 2, r.Antagonist.Period * 3} {
			r.Antagonist.On(at, 1)
		}
		again, err := ParseAntagonist(r.String())
		if err != nil {
			t.Fatalf("ParseAntagonist(%q) = %+v, whose String %q does not parse: %v", s, r, r.String(), err)
		}
		if again != r {
			t.Fatalf("ParseAntagonist(%q) = %+v; its String %q parses to %+v", s, r, r.String(), again)
		}
	})
}

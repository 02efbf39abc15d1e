package outlier

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestReportRuns(t *testing.T) {
	const (
		S  = Success
		E  = ServerError
		C  = ConnectFailure
		T  = Timeout
		ms = time.Millisecond
	)
	tests := []struct {
		name    string
		results []Result // reported at t0, t0+1ms, t0+2ms, …
		// wantEjectAt is the index of the report that ejects, -1 for none.
		wantEjectAt int
		// want is the state after the last report (Group, Name, Ejected
		// and EjectedUntil are filled in by the test).
		want HostState
	}{
		{
			name:        "4 5xx then success resets",
			results:     []Result{E, E, E, E, S},
			wantEjectAt: -1,
		},
		{
			name:        "4 5xx, success, 4 5xx",
			results:     []Result{E, E, E, E, S, E, E, E, E},
			wantEjectAt: -1,
			want:        HostState{Consecutive5xx: 4},
		},
		{
			name:        "5 5xx eject",
			results:     []Result{E, E, E, E, E},
			wantEjectAt: 4,
			want:        HostState{Multiplier: 1, Reason: ReasonConsecutive5xx},
		},
		{
			name:        "5 timeouts eject",
			results:     []Result{T, T, T, T, T},
			wantEjectAt: 4,
			want:        HostState{Multiplier: 1, Reason: ReasonConsecutive5xx},
		},
		{
			name:        "4xx is a success",
			results:     []Result{E, E, E, E, FromStatus(404), FromStatus(503)},
			wantEjectAt: -1,
			want:        HostState{Consecutive5xx: 1},
		},
		{
			name:        "3 connect failures eject",
			results:     []Result{C, C, C},
			wantEjectAt: 2,
			want:        HostState{Multiplier: 1, Reason: ReasonConsecutiveConnectFailures},
		},
		{
			name:        "2 connect failures then success resets",
			results:     []Result{C, C, S, C, C},
			wantEjectAt: -1,
			want:        HostState{Consecutive5xx: 2, ConsecutiveConnectFailures: 2},
		},
		{
			name:        "5xx ends the connect run but extends the 5xx run",
			results:     []Result{C, C, E, C, C},
			wantEjectAt: 4,
			want:        HostState{Multiplier: 1, Reason: ReasonConsecutive5xx},
		},
		{
			name:        "timeout ends the connect run",
			results:     []Result{C, C, T, C},
			wantEjectAt: -1,
			want:        HostState{Consecutive5xx: 4, ConsecutiveConnectFailures: 1},
		},
		{
			name:        "unknown results are ignored",
			results:     []Result{C, C, numResults, Result(200)},
			wantEjectAt: -1,
			want:        HostState{Consecutive5xx: 2, ConsecutiveConnectFailures: 2},
		},
		{
			name:        "failures while ejected are not counted",
			results:     []Result{C, C, C, E, E, C, C, C, T},
			wantEjectAt: 2,
			want:        HostState{Multiplier: 1, Reason: ReasonConsecutiveConnectFailures},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := mustNew(t, DefaultConfig())
			hs := registerN(d, "g", 10)
			h := hs[3]
			gotEjectAt := -1
			for i, r := range tt.results {
				if h.Report(r, t0.Add(time.Duration(i)*ms)) {
					if gotEjectAt >= 0 {
						t.Fatalf("Report #%d (%v) ejected again after #%d", i, r, gotEjectAt)
					}
					gotEjectAt = i
				}
			}
			if gotEjectAt != tt.wantEjectAt {
				t.Errorf("ejecting report = #%d, want #%d", gotEjectAt, tt.wantEjectAt)
			}
			want := tt.want
			want.Group, want.Name = "g", "h3"
			if tt.wantEjectAt >= 0 {
				want.Ejected = true
				want.EjectedUntil = t0.Add(time.Duration(tt.wantEjectAt)*ms + 30*time.Second)
			}
			now := t0.Add(time.Duration(len(tt.results)) * ms)
			if diff := cmp.Diff(want, h.State(now)); diff != "" {
				t.Errorf("State (-want +got):\n%s", diff)
			}
			if got := h.Ejected(now); got != want.Ejected {
				t.Errorf("Ejected(%v) = %v, want %v", now, got, want.Ejected)
			}
		})
	}
}

// TestEjectionGrowth fails a host at the exact end of each of its ejections
// and checks each ejection's length and that it ends exactly at its
// deadline.
func TestEjectionGrowth(t *testing.T) {
	const s = time.Second
	tests := []struct {
		name      string
		base, max time.Duration
		want      []time.Duration
	}{
		{
			name: "default", base: 30 * s, max: 300 * s,
			want: []time.Duration{30 * s, 60 * s, 90 * s, 120 * s, 150 * s, 180 * s, 210 * s, 240 * s, 270 * s, 300 * s, 300 * s, 300 * s},
		},
		{name: "max not a multiple of base", base: 10 * s, max: 35 * s, want: []time.Duration{10 * s, 20 * s, 30 * s, 35 * s, 35 * s}},
		{name: "base equals max", base: 30 * s, max: 30 * s, want: []time.Duration{30 * s, 30 * s, 30 * s}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.BaseEjectionTime, cfg.MaxEjectionTime = tt.base, tt.max
			d := mustNew(t, cfg)
			h := registerN(d, "g", 2)[0]
			now := t0
			var got []time.Duration
			for i := range tt.want {
				if n := reportN(h, ServerError, 5, now); n != 1 {
					t.Fatalf("ejection %d: 5 failures at %v ejected %d times, want 1", i+1, now, n)
				}
				end := h.State(now).EjectedUntil
				got = append(got, end.Sub(now))
				if !h.Ejected(end.Add(-time.Nanosecond)) {
					t.Errorf("ejection %d: Ejected(deadline-1ns) = false, want true", i+1)
				}
				if h.Ejected(end) {
					t.Errorf("ejection %d: Ejected(deadline) = true, want false", i+1)
				}
				// Failures up to the deadline are not counted.
				if n := reportN(h, ServerError, 10, end.Add(-time.Nanosecond)); n != 0 {
					t.Errorf("ejection %d: failures just before the deadline ejected %d times, want 0", i+1, n)
				}
				now = end
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ejection lengths (-want +got):\n%s", diff)
			}
		})
	}
}

// TestMultiplierDecay ejects a host three times back to back (30s, 60s,
// 90s), keeps it in service for a while, fails it again and checks how long
// that ejection lasts.
func TestMultiplierDecay(t *testing.T) {
	const s = time.Second
	tests := []struct {
		name      string
		inService time.Duration
		wantMult  int // HostState.Multiplier just before the failures
		want      time.Duration
	}{
		{name: "at once", inService: 0, wantMult: 3, want: 120 * s},
		{name: "just under one base", inService: 30*s - 1, wantMult: 3, want: 120 * s},
		{name: "one base", inService: 30 * s, wantMult: 2, want: 90 * s},
		{name: "two bases", inService: 60 * s, wantMult: 1, want: 60 * s},
		{name: "just under three bases", inService: 90*s - 1, wantMult: 1, want: 60 * s},
		{name: "three bases", inService: 90 * s, wantMult: 0, want: 30 * s},
		{name: "an hour", inService: time.Hour, wantMult: 0, want: 30 * s},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := mustNew(t, DefaultConfig())
			h := registerN(d, "g", 2)[0]
			now := t0
			for range 3 {
				reportN(h, ServerError, 5, now)
				now = h.State(now).EjectedUntil
			}
			now = now.Add(tt.inService)
			// Successes do not change the multiplier; only time does.
			reportN(h, Success, 100, now)
			if got := h.State(now).Multiplier; got != tt.wantMult {
				t.Errorf("Multiplier after %s in service = %d, want %d", tt.inService, got, tt.wantMult)
			}
			if n := reportN(h, ServerError, 5, now); n != 1 {
				t.Fatalf("5 failures ejected %d times, want 1", n)
			}
			if got := h.State(now).EjectedUntil.Sub(now); got != tt.want {
				t.Errorf("ejection after %s in service lasts %s, want %s", tt.inService, got, tt.want)
			}
		})
	}
}

// TestMultiplierCapped checks that a host ejected again and again stops
// growing its multiplier at ceil(max/base), so that it needs no more than
// about MaxEjectionTime in service to start again from BaseEjectionTime.
func TestMultiplierCapped(t *testing.T) {
	d := mustNew(t, DefaultConfig()) // 30s, 300s: cap 10
	h := registerN(d, "g", 2)[0]
	now := t0
	for range 15 {
		reportN(h, ConnectFailure, 3, now)
		now = h.State(now).EjectedUntil
	}
	if got := h.State(now).Multiplier; got != 10 {
		t.Errorf("Multiplier after 15 ejections = %d, want 10", got)
	}
	now = now.Add(300 * time.Second)
	if got := h.State(now).Multiplier; got != 0 {
		t.Errorf("Multiplier after 300s in service = %d, want 0", got)
	}
	reportN(h, ConnectFailure, 3, now)
	if got := h.State(now).EjectedUntil.Sub(now); got != 30*time.Second {
		t.Errorf("next ejection lasts %s, want 30s", got)
	}
}

// TestDocExample replays the timeline of the package doc.
func TestDocExample(t *testing.T) {
	at := func(m, s int) time.Time {
		return t0.Add(time.Duration(m)*time.Minute + time.Duration(s)*time.Second)
	}
	d := mustNew(t, DefaultConfig())
	hs := registerN(d, "api", 4)
	a, b, c := hs[0], hs[1], hs[2]
	type step struct {
		name      string
		h         *Host
		r         Result
		n         int
		now       time.Time
		wantUntil time.Time // zero: not ejected by these reports
	}
	steps := []step{
		{name: "0:00 a 5 × 5xx", h: a, r: ServerError, n: 5, now: at(0, 0), wantUntil: at(0, 30)},
		{name: "0:10 b 3 connect failures", h: b, r: ConnectFailure, n: 3, now: at(0, 10), wantUntil: at(0, 40)},
		{name: "0:20 c 5 × 5xx refused", h: c, r: ServerError, n: 5, now: at(0, 20)},
		{name: "0:45 a 5 × 5xx", h: a, r: ServerError, n: 5, now: at(0, 45), wantUntil: at(1, 45)},
		{name: "2:30 a 5 × 5xx", h: a, r: ServerError, n: 5, now: at(2, 30), wantUntil: at(3, 30)},
	}
	run := func(steps []step) {
		for _, s := range steps {
			n := reportN(s.h, s.r, s.n, s.now)
			if got := s.h.State(s.now).EjectedUntil; n > 1 || !got.Equal(s.wantUntil) {
				t.Errorf("%s: %d ejections, ejected until %v, want until %v", s.name, n, got, s.wantUntil)
			}
		}
	}
	run(steps[:4])
	if a.Ejected(at(1, 45)) {
		t.Errorf("a ejected at 1:45, want back in service")
	}
	for _, m := range []struct {
		now  time.Time
		want int
	}{{at(2, 14), 2}, {at(2, 15), 1}, {at(2, 44), 1}, {at(2, 45), 0}} {
		if got := a.State(m.now).Multiplier; got != m.want {
			t.Errorf("a's multiplier at %s = %d, want %d", m.now.Sub(t0), got, m.want)
		}
	}
	run(steps[4:])
	if diff := cmp.Diff(Stats{Ejections: 4, Refused: 1}, d.Stats()); diff != "" {
		t.Errorf("Stats (-want +got):\n%s", diff)
	}
}

func TestDecayed(t *testing.T) {
	const base = 30 * time.Second
	end := t0.UnixNano()
	tests := []struct {
		name string
		k    int
		t    time.Duration // since end
		want int
	}{
		{name: "zero stays zero", k: 0, t: time.Hour, want: 0},
		{name: "before end", k: 3, t: -time.Minute, want: 3},
		{name: "at end", k: 3, t: 0, want: 3},
		{name: "one base", k: 3, t: base, want: 2},
		{name: "just under two bases", k: 3, t: 2*base - 1, want: 2},
		{name: "three bases", k: 3, t: 3 * base, want: 0},
		{name: "long after", k: 3, t: 1000 * time.Hour, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := decayed(tt.k, end, end+int64(tt.t), base); got != tt.want {
				t.Errorf("decayed(%d, end, end+%s, %s) = %d, want %d", tt.k, tt.t, base, got, tt.want)
			}
		})
	}
}

// TestMaxEjectionPercent fails every host of a group, one after the other,
// and counts the ejections.
func TestMaxEjectionPercent(t *testing.T) {
	tests := []struct {
		hosts, percent int
		want           int
	}{
		{hosts: 1, percent: 50, want: 0},
		{hosts: 2, percent: 50, want: 1},
		{hosts: 3, percent: 50, want: 1},
		{hosts: 4, percent: 50, want: 2},
		{hosts: 10, percent: 50, want: 5},
		{hosts: 2, percent: 100, want: 1},
		{hosts: 3, percent: 100, want: 2},
		{hosts: 10, percent: 100, want: 9},
		{hosts: 10, percent: 10, want: 1},
		{hosts: 10, percent: 0, want: 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d hosts at %d%%", tt.hosts, tt.percent), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.MaxEjectionPercent = tt.percent
			d := mustNew(t, cfg)
			hs := registerN(d, "g", tt.hosts)
			other := registerN(d, "other", 4) // groups are counted apart
			reportN(other[0], ConnectFailure, 3, t0)
			// Two rounds: a refused host is considered again after another
			// full run, and must be refused again.
			for round := range 2 {
				for _, h := range hs {
					reportN(h, ServerError, 5, t0.Add(time.Duration(round)*time.Second))
				}
			}
			now := t0.Add(2 * time.Second)
			if got := ejectedCount(hs, now); got != tt.want {
				t.Errorf("ejected hosts = %d, want %d", got, tt.want)
			}
			if ejectedCount(hs, now) == tt.hosts {
				t.Errorf("every host is ejected; at least one must stay")
			}
			// The other group's one run ejects, unless the percentage is too
			// low for a group of 4.
			otherEjected := min(1, cfg.allowedEjections(4))
			want := Stats{
				Ejections: uint64(tt.want + otherEjected),
				Refused:   uint64(2*(tt.hosts-tt.want) + 1 - otherEjected),
			}
			if diff := cmp.Diff(want, d.Stats()); diff != "" {
				t.Errorf("Stats (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEjectionSlotFreesAtDeadline checks that the group limit counts
// ejections that are over by their deadline, without any call at the
// deadline.
func TestEjectionSlotFreesAtDeadline(t *testing.T) {
	d := mustNew(t, DefaultConfig())
	hs := registerN(d, "g", 2)
	a, b := hs[0], hs[1]
	if reportN(a, ServerError, 5, t0) != 1 {
		t.Fatal("a not ejected")
	}
	end := a.State(t0).EjectedUntil
	if got := reportN(b, ServerError, 5, end.Add(-time.Nanosecond)); got != 0 {
		t.Errorf("b ejected %d times while a is ejected, want 0 (group of 2 at 50%%)", got)
	}
	if got := reportN(b, ServerError, 5, end); got != 1 {
		t.Errorf("b ejected %d times at a's deadline, want 1", got)
	}
	if got := reportN(a, ServerError, 5, end); got != 0 {
		t.Errorf("a ejected %d times while b is ejected, want 0", got)
	}
	if diff := cmp.Diff(Stats{Ejections: 2, Refused: 2}, d.Stats()); diff != "" {
		t.Errorf("Stats (-want +got):\n%s", diff)
	}
}

func TestRefusedHostRestartsRuns(t *testing.T) {
	d := mustNew(t, DefaultConfig())
	hs := registerN(d, "g", 2)
	reportN(hs[0], ServerError, 5, t0)
	reportN(hs[1], ServerError, 5, t0)
	if got := hs[1].State(t0); got.Consecutive5xx != 0 || got.Ejected {
		t.Errorf("refused host state = %+v, want runs at zero and not ejected", got)
	}
	reportN(hs[1], ServerError, 4, t0)
	if got := d.Stats().Refused; got != 1 {
		t.Errorf("Refused after 4 more failures = %d, want 1", got)
	}
	reportN(hs[1], ServerError, 1, t0)
	if got := d.Stats().Refused; got != 2 {
		t.Errorf("Refused after a second full run = %d, want 2", got)
	}
}

func TestRegisterReturnsSameHost(t *testing.T) {
	d := mustNew(t, DefaultConfig())
	a := d.Register("g", "a")
	reportN(a, ServerError, 3, t0)
	if again := d.Register("g", "a"); again != a {
		t.Fatalf("Register(g, a) twice returned different hosts")
	}
	if other := d.Register("g2", "a"); other == a {
		t.Fatalf("Register(g2, a) returned the host of group g")
	}
	if got := a.State(t0).Consecutive5xx; got != 3 {
		t.Errorf("Consecutive5xx after re-Register = %d, want 3", got)
	}
	if a.Group() != "g" || a.Name() != "a" {
		t.Errorf("Group(), Name() = %q, %q, want g, a", a.Group(), a.Name())
	}
}

func TestRemove(t *testing.T) {
	tests := []struct {
		name   string
		hosts  int
		eject  []int // hosts ejected, in order, 1s apart
		remove int
		// wantEjected is which hosts (by index, the removed one excluded)
		// are ejected after Remove.
		wantEjected  []int
		wantRestored uint64
	}{
		{name: "last host in service of two", hosts: 2, eject: []int{0}, remove: 1, wantEjected: nil, wantRestored: 1},
		{name: "four to three ends the earliest", hosts: 4, eject: []int{2, 0}, remove: 1, wantEjected: []int{0}, wantRestored: 1},
		{name: "ten to nine keeps four", hosts: 10, eject: []int{0, 1, 2, 3, 4}, remove: 9, wantEjected: []int{1, 2, 3, 4}, wantRestored: 1},
		{name: "removing an ejected host", hosts: 4, eject: []int{0, 1}, remove: 0, wantEjected: []int{1}, wantRestored: 0},
		{name: "within limits", hosts: 10, eject: []int{0, 1}, remove: 9, wantEjected: []int{0, 1}, wantRestored: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := mustNew(t, DefaultConfig())
			hs := registerN(d, "g", tt.hosts)
			for i, e := range tt.eject {
				if reportN(hs[e], ConnectFailure, 3, t0.Add(time.Duration(i)*time.Second)) != 1 {
					t.Fatalf("h%d not ejected", e)
				}
			}
			now := t0.Add(10 * time.Second)
			d.Remove(hs[tt.remove], now)
			var got []int
			for i, h := range hs {
				if i != tt.remove && h.Ejected(now) {
					got = append(got, i)
				}
			}
			if diff := cmp.Diff(tt.wantEjected, got); diff != "" {
				t.Errorf("ejected after Remove (-want +got):\n%s", diff)
			}
			if got := d.Stats().Restored; got != tt.wantRestored {
				t.Errorf("Stats().Restored = %d, want %d", got, tt.wantRestored)
			}
			removed := hs[tt.remove]
			if removed.Ejected(now) {
				t.Errorf("removed host is ejected")
			}
			if n := reportN(removed, ConnectFailure, 10, now); n != 0 {
				t.Errorf("reports on a removed host ejected it %d times", n)
			}
			if again := d.Register("g", removed.Name()); again == removed {
				t.Errorf("Register after Remove returned the removed host")
			}
			d.Remove(removed, now) // a second Remove does nothing
			if got := len(d.Snapshot(now)); got != tt.hosts {
				t.Errorf("Snapshot has %d hosts, want %d", got, tt.hosts)
			}
		})
	}
}

func TestRemoveLastHostDropsGroup(t *testing.T) {
	d := mustNew(t, DefaultConfig())
	h := d.Register("g", "a")
	d.Remove(h, t0)
	if got := d.Snapshot(t0); len(got) != 0 {
		t.Errorf("Snapshot after removing the only host = %+v, want empty", got)
	}
	if len(d.groups) != 0 {
		t.Errorf("groups after removing the only host = %d, want 0", len(d.groups))
	}
}

func TestSetConfigAppliesToNextReport(t *testing.T) {
	d := mustNew(t, DefaultConfig())
	h := registerN(d, "g", 4)[0]
	reportN(h, ServerError, 2, t0)
	cfg := DefaultConfig()
	cfg.Consecutive5xx = 3
	cfg.BaseEjectionTime = 10 * time.Second
	if err := d.SetConfig(cfg); err != nil {
		t.Fatalf("SetConfig: %v", err)
	}
	if n := reportN(h, ServerError, 1, t0); n != 1 {
		t.Fatalf("third failure under Consecutive5xx=3 ejected %d times, want 1", n)
	}
	if got := h.State(t0).EjectedUntil.Sub(t0); got != 10*time.Second {
		t.Errorf("ejection lasts %s, want 10s", got)
	}
}

func TestSnapshotSorted(t *testing.T) {
	d := mustNew(t, DefaultConfig())
	for _, gn := range [][2]string{{"b", "y"}, {"a", "z"}, {"b", "x"}, {"a", "a"}} {
		d.Register(gn[0], gn[1])
	}
	reportN(d.Register("b", "x"), ConnectFailure, 3, t0)
	want := []HostState{
		{Group: "a", Name: "a"},
		{Group: "a", Name: "z"},
		{Group: "b", Name: "x", Ejected: true, EjectedUntil: t0.Add(30 * time.Second), Multiplier: 1, Reason: ReasonConsecutiveConnectFailures},
		{Group: "b", Name: "y"},
	}
	if diff := cmp.Diff(want, d.Snapshot(t0)); diff != "" {
		t.Errorf("Snapshot (-want +got):\n%s", diff)
	}
}

func TestFromStatus(t *testing.T) {
	tests := []struct {
		code int
		want Result
	}{
		{200, Success}, {204, Success}, {301, Success}, {404, Success}, {429, Success},
		{499, Success}, {500, ServerError}, {502, ServerError}, {503, ServerError}, {599, ServerError}, {600, Success},
	}
	for _, tt := range tests {
		if got := FromStatus(tt.code); got != tt.want {
			t.Errorf("FromStatus(%d) = %v, want %v", tt.code, got, tt.want)
		}
	}
}

func TestResultString(t *testing.T) {
	got := []string{Success.String(), ServerError.String(), ConnectFailure.String(), Timeout.String(), Result(9).String()}
	want := []string{"success", "server_error", "connect_failure", "timeout", "result(9)"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("String() (-want +got):\n%s", diff)
	}
}

// TestInvariantsRandom drives several groups with random results, times,
// registrations and removals, and checks after every step that no group is
// over its limit or fully ejected, and that every ejection has a length
// the model allows.
func TestInvariantsRandom(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxEjectionPercent = 60
	cfg.BaseEjectionTime = 10 * time.Second
	cfg.MaxEjectionTime = 45 * time.Second
	d := mustNew(t, cfg)
	rng := rand.New(rand.NewPCG(1, 2))
	groups := map[string][]*Host{}
	names := 0
	for _, g := range []string{"a", "b", "c"} {
		for range 1 + rng.IntN(6) {
			names++
			groups[g] = append(groups[g], d.Register(g, fmt.Sprintf("n%d", names)))
		}
	}
	now := t0
	ejections := 0
	for step := range 20000 {
		now = now.Add(time.Duration(rng.IntN(200)) * time.Millisecond)
		g := []string{"a", "b", "c"}[rng.IntN(3)]
		hs := groups[g]
		switch op := rng.IntN(100); {
		case op == 0 && len(hs) > 1:
			i := rng.IntN(len(hs))
			d.Remove(hs[i], now)
			groups[g] = append(hs[:i:i], hs[i+1:]...)
		case op == 1 && len(hs) < 8:
			names++
			groups[g] = append(hs, d.Register(g, fmt.Sprintf("n%d", names)))
		default:
			h := hs[rng.IntN(len(hs))]
			// Mostly failures, so that runs complete often.
			r := []Result{Success, ServerError, ServerError, ConnectFailure, Timeout}[rng.IntN(5)]
			if h.Report(r, now) {
				ejections++
				s := h.State(now)
				length := s.EjectedUntil.Sub(now)
				if want := cfg.ejectionTime(s.Multiplier); length != want || s.Multiplier < 1 {
					t.Fatalf("step %d: ejection with multiplier %d lasts %s, want %s", step, s.Multiplier, length, want)
				}
			}
		}
		for name, hs := range groups {
			n := ejectedCount(hs, now)
			if n > cfg.allowedEjections(len(hs)) || (n > 0 && n == len(hs)) {
				t.Fatalf("step %d: group %s has %d of %d hosts ejected", step, name, n, len(hs))
			}
		}
	}
	if got := d.Stats().Ejections; got != uint64(ejections) || got < 100 {
		t.Errorf("Stats().Ejections = %d, want %d (and at least 100 for the test to mean anything)", got, ejections)
	}
}

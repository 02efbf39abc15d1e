package waterfall

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/spillway-lb/spillway/lb/backend"
)

// TestPickDemotedLast: a group of 2 active backends (limit 1 each) and 1
// demoted: the first 2 picks take the active ones, the third the demoted
// one (not the next region's group), the fourth the next group, the fifth
// finds everything full.
func TestPickDemotedLast(t *testing.T) {
	for _, policy := range []backend.Policy{backend.PolicyRoundRobin, backend.PolicyLeastRequest} {
		t.Run(policy.String(), func(t *testing.T) {
			active := map[string][]*backend.Backend{"g1": backendsOf("g1", 2, 1), "g2": backendsOf("g2", 1, 1)}
			demoted := map[string][]*backend.Backend{"g1": backendsOf("g1-demoted", 1, 1)}
			p := NewPickerDemoted(row3(0.9, 0.1, 0)[:2], active, demoted, policy)
			var got []string
			for range 4 {
				c, err := p.Pick(0) // rnd 0 chooses g1
				if err != nil {
					t.Fatalf("Pick(0) after %v: %v", got, err)
				}
				got = append(got, c.Group+"/"+c.Backend.Addr())
			}
			want := []string{"g1/g1-", "g1/g1-", "g1/g1-demoted-0", "g2/g2-0"}
			for i := range want {
				if len(got[i]) < len(want[i]) || got[i][:len(want[i])] != want[i] {
					t.Errorf("pick %d = %s, want %s…", i, got[i], want[i])
				}
			}
			if got[0] == got[1] {
				t.Errorf("picks 0 and 1 both %s, want the two active backends", got[0])
			}
			if _, err := p.Pick(0); !errors.Is(err, ErrAllBusy) {
				t.Errorf("Pick with every backend full: %v, want ErrAllBusy", err)
			}
		})
	}
}

// TestPickDemotedIdleWhileActiveFree: a demoted backend gets nothing
// while an active one of its group has a slot, whatever the draw.
func TestPickDemotedIdleWhileActiveFree(t *testing.T) {
	for _, policy := range []backend.Policy{backend.PolicyRoundRobin, backend.PolicyLeastRequest} {
		t.Run(policy.String(), func(t *testing.T) {
			active := map[string][]*backend.Backend{"g1": backendsOf("g1", 3, 2), "g2": backendsOf("g2", 2, 0)}
			demoted := map[string][]*backend.Backend{"g1": backendsOf("g1-demoted", 2, 0), "g2": backendsOf("g2-demoted", 1, 0)}
			p := NewPickerDemoted(row3(0.6, 0.4, 0)[:2], active, demoted, policy)
			rng := rand.New(rand.NewPCG(5, 6))
			// Hold 5 of g1's 6 active slots: one is still free.
			var held []Choice
			for len(held) < 5 {
				c, err := p.Pick(0)
				if err != nil {
					t.Fatal(err)
				}
				if c.Group != "g1" {
					t.Fatalf("pick %d went to %s, want g1", len(held), c.Group)
				}
				held = append(held, c)
			}
			count := map[string]int{}
			for range 10000 {
				c, err := p.Pick(rng.Uint64())
				if err != nil {
					t.Fatal(err)
				}
				count[c.Backend.Addr()]++
				c.Done()
			}
			for _, ds := range demoted {
				for _, d := range ds {
					if n := count[d.Addr()]; n != 0 {
						t.Errorf("demoted %s got %d of 10000 picks, want 0", d.Addr(), n)
					}
				}
			}
			for _, c := range held {
				c.Done()
			}
		})
	}
}

// TestPickDemotedSoftLimits: demoted backends are tried in the same pass
// as their group's active ones: at the active backends' soft limits a
// demoted one takes the request before the next group does, and past
// every soft limit the hard pass again prefers the active backends.
func TestPickDemotedSoftLimits(t *testing.T) {
	active := map[string][]*backend.Backend{"g1": backendsOf("g1", 1, 5), "g2": backendsOf("g2", 1, 1)}
	active["g1"][0].SetSoftLimit(1)
	demoted := map[string][]*backend.Backend{"g1": backendsOf("g1-demoted", 1, 1)}
	p := NewPickerDemoted(row3(1, 0, 0)[:2], active, demoted, backend.PolicyRoundRobin)
	want := []string{"g1-0", "g1-demoted-0", "g2-0", "g1-0", "g1-0"}
	for i, w := range want {
		c, err := p.Pick(0)
		if err != nil || c.Backend.Addr() != w {
			t.Fatalf("pick %d = %v %v, want %s", i, choiceAddr(c), err, w)
		}
	}
}

// TestPickDemotedOnlyGroup: a group whose backends are all demoted is a
// fallback only, whatever its share; with no positive share the even
// spread skips it.
func TestPickDemotedOnlyGroup(t *testing.T) {
	tests := []struct {
		name      string
		row       []Flow
		wantShare map[string]float64
	}{
		{"positive share", row3(0.5, 0.5, 0)[:2], map[string]float64{"g1": 0, "g2": 1}},
		{"no share", row3(0, 0, 0)[:2], map[string]float64{"g1": 0, "g2": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			active := map[string][]*backend.Backend{"g2": backendsOf("g2", 1, 1)}
			demoted := map[string][]*backend.Backend{"g1": backendsOf("g1-demoted", 1, 1)}
			p := NewPickerDemoted(tt.row, active, demoted, backend.PolicyRoundRobin)
			for _, g := range p.Groups() {
				if math.Abs(g.Share-tt.wantShare[g.Group]) > 1e-12 {
					t.Errorf("Groups(): share of %s = %v, want %v", g.Group, g.Share, tt.wantShare[g.Group])
				}
			}
			for i, w := range []string{"g2-0", "g1-demoted-0"} {
				c, err := p.Pick(0)
				if err != nil || c.Backend.Addr() != w {
					t.Fatalf("pick %d = %v %v, want %s", i, choiceAddr(c), err, w)
				}
			}
			if _, err := p.Pick(0); !errors.Is(err, ErrAllBusy) {
				t.Errorf("third pick: %v, want ErrAllBusy", err)
			}
		})
	}
	if _, err := NewPickerDemoted(row3(1, 0, 0), nil, nil, backend.PolicyRoundRobin).Pick(0); !errors.Is(err, ErrNoCapacity) {
		t.Errorf("no backends: %v, want ErrNoCapacity", err)
	}
}

// TestPickDemotedAllocs: the demoted path does not allocate.
func TestPickDemotedAllocs(t *testing.T) {
	for _, policy := range []backend.Policy{backend.PolicyRoundRobin, backend.PolicyLeastRequest} {
		active := map[string][]*backend.Backend{"g1": backendsOf("g1", 2, 1)}
		demoted := map[string][]*backend.Backend{"g1": backendsOf("g1-demoted", 2, 0)}
		p := NewPickerDemoted(row3(1, 0, 0)[:1], active, demoted, policy)
		for _, b := range active["g1"] {
			b.TryAcquire()
		}
		rng := rand.New(rand.NewPCG(1, 1))
		if got := testing.AllocsPerRun(1000, func() {
			c, err := p.Pick(rng.Uint64())
			if err != nil || c.Backend == active["g1"][0] || c.Backend == active["g1"][1] {
				panic(fmt.Sprint(choiceAddr(c), err))
			}
			c.Done()
		}); got != 0 {
			t.Errorf("%v: Pick of a demoted backend allocates %v times per run, want 0", policy, got)
		}
	}
}

// TestPickDemotedProperty: over random pickers and random sequences of
// picks and releases, (1) a pick lands on a demoted backend of a group only
// when every active backend of that group is full, (2) a pick leaves the
// group the draw chose only when every backend of that group, demoted
// included, is full, and (3) ErrAllBusy comes only when every backend is
// full.
func TestPickDemotedProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for trial := range 300 {
		ng := 1 + rng.IntN(4)
		var row []Flow
		active := map[string][]*backend.Backend{}
		demoted := map[string][]*backend.Backend{}
		isDemoted := map[*backend.Backend]bool{}
		groupOf := map[*backend.Backend]string{}
		for gi := range ng {
			name := fmt.Sprintf("g%d", gi)
			row = append(row, Flow{Site: "s", Region: fmt.Sprintf("r%d", gi), Group: name, Share: rng.Float64()})
			active[name] = backendsOf(name, rng.IntN(3), int64(1+rng.IntN(3)))
			demoted[name] = backendsOf(name+"-d", rng.IntN(3), int64(1+rng.IntN(3)))
			for _, b := range active[name] {
				groupOf[b] = name
			}
			for _, b := range demoted[name] {
				groupOf[b], isDemoted[b] = name, true
			}
		}
		policy := backend.Policy(rng.IntN(2))
		p := NewPickerDemoted(row, active, demoted, policy)
		full := func(bs []*backend.Backend) bool {
			for _, b := range bs {
				if !b.Full() {
					return false
				}
			}
			return true
		}
		var held []Choice
		for step := range 40 {
			if len(held) > 0 && rng.IntN(3) == 0 {
				i := rng.IntN(len(held))
				held[i].Done()
				held = append(held[:i], held[i+1:]...)
				continue
			}
			rnd := rng.Uint64()
			// The group the draw chooses, before any fallback.
			chosen := ""
			gs := p.Groups()
			var lo float64
			x := float64(rnd) / (1 << 64)
			for _, g := range gs {
				if g.Share > 0 && x >= lo {
					chosen = g.Group
				}
				if lo += g.Share; x < lo && chosen != "" {
					break
				}
			}
			c, err := p.Pick(rnd)
			if err != nil {
				if errors.Is(err, ErrAllBusy) {
					for g := range active {
						if !full(active[g]) || !full(demoted[g]) {
							t.Fatalf("trial %d step %d: ErrAllBusy with a free backend in %s", trial, step, g)
						}
					}
				}
				continue
			}
			held = append(held, c)
			g := groupOf[c.Backend]
			if isDemoted[c.Backend] {
				// The pick's own slot may have filled the demoted
				// backend; the active ones were full before it.
				if !full(active[g]) {
					t.Fatalf("trial %d step %d: picked demoted %s while an active backend of %s was free", trial, step, c.Backend.Addr(), g)
				}
			}
			if chosen != "" && g != chosen && (!full(active[chosen]) || !full(demoted[chosen])) {
				t.Fatalf("trial %d step %d: left %s for %s with a free backend in %s", trial, step, chosen, g, chosen)
			}
		}
		for _, c := range held {
			c.Done()
		}
	}
}

// BenchmarkPickDemoted measures a pick that finds every active backend of
// its group full and takes a demoted one: the extra Acquire of pickIn.
func BenchmarkPickDemoted(b *testing.B) {
	for _, policy := range []backend.Policy{backend.PolicyRoundRobin, backend.PolicyLeastRequest} {
		b.Run(policy.String(), func(b *testing.B) {
			active := map[string][]*backend.Backend{"g1": backendsOf("g1", 10, 1)}
			demoted := map[string][]*backend.Backend{"g1": backendsOf("g1-demoted", 10, 1000)}
			for _, be := range active["g1"] {
				be.TryAcquire()
			}
			p := NewPickerDemoted(row3(1, 0, 0)[:1], active, demoted, policy)
			rng := rand.NewPCG(1, 2)
			b.ReportAllocs()
			for b.Loop() {
				c, err := p.Pick(rng.Uint64())
				if err != nil {
					b.Fatal(err)
				}
				c.Done()
			}
		})
	}
}

// choiceAddr returns the address of c's backend, "<none>" without one.
func choiceAddr(c Choice) string {
	if c.Backend == nil {
		return "<none>"
	}
	return c.Backend.Addr()
}

package waterfall

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway-lb/spillway/lb/backend"
)

// backendsOf returns n backends named group-0 … group-(n-1).
func backendsOf(group string, n int, limit int64) []*backend.Backend {
	bs := make([]*backend.Backend, n)
	for i := range bs {
		bs[i] = backend.New(fmt.Sprintf("%s-%d", group, i), limit)
	}
	return bs
}

// row3 is a row over groups g1, g2, g3 (regions r1, r2, r3) with the given
// shares.
func row3(s1, s2, s3 float64) []Flow {
	return []Flow{
		{Site: "s", Region: "r1", Group: "g1", Share: s1, Reason: ReasonNearest},
		{Site: "s", Region: "r2", Group: "g2", Share: s2, Reason: ReasonSpillCapacity},
		{Site: "s", Region: "r3", Group: "g3", Share: s3, Reason: ReasonSpillHealth},
	}
}

func TestPickShares(t *testing.T) {
	const picks = 200000
	tests := []struct {
		name     string
		row      []Flow
		backends map[string][]*backend.Backend
		want     map[string]float64
	}{
		{
			name:     "shares of the row",
			row:      row3(0.5, 0.3, 0.2),
			backends: map[string][]*backend.Backend{"g1": backendsOf("g1", 3, 0), "g2": backendsOf("g2", 2, 0), "g3": backendsOf("g3", 1, 0)},
			want:     map[string]float64{"g1": 0.5, "g2": 0.3, "g3": 0.2},
		},
		{
			name:     "a group without backends: its share spread over the others",
			row:      row3(0.5, 0.3, 0.2),
			backends: map[string][]*backend.Backend{"g1": backendsOf("g1", 2, 0), "g3": backendsOf("g3", 2, 0)},
			want:     map[string]float64{"g1": 0.5 / 0.7, "g3": 0.2 / 0.7},
		},
		{
			name:     "shares that do not sum to 1 are normalised",
			row:      row3(3, 1, 0),
			backends: map[string][]*backend.Backend{"g1": backendsOf("g1", 1, 0), "g2": backendsOf("g2", 1, 0), "g3": backendsOf("g3", 1, 0)},
			want:     map[string]float64{"g1": 0.75, "g2": 0.25},
		},
		{
			name:     "no positive share: groups even",
			row:      row3(0, 0, 0),
			backends: map[string][]*backend.Backend{"g1": backendsOf("g1", 1, 0), "g2": backendsOf("g2", 1, 0)},
			want:     map[string]float64{"g1": 0.5, "g2": 0.5},
		},
	}
	for _, tt := range tests {
		for _, policy := range []backend.Policy{backend.PolicyRoundRobin, backend.PolicyLeastRequest} {
			t.Run(tt.name+"/"+policy.String(), func(t *testing.T) {
				p := NewPicker(tt.row, tt.backends, policy)
				rng := rand.New(rand.NewPCG(1, 2))
				count := map[string]float64{}
				for range picks {
					c, err := p.Pick(rng.Uint64())
					if err != nil {
						t.Fatalf("Pick: %v", err)
					}
					count[c.Group]++
					c.Done()
				}
				for g := range count {
					count[g] /= picks
				}
				// 0.005 is more than 4 standard deviations at 200k picks.
				if diff := cmp.Diff(tt.want, count, cmpAbs(0.005)); diff != "" {
					t.Errorf("group frequencies (-want +got):\n%s", diff)
				}
				// Groups reports the same distribution, exactly, with each
				// group's backends.
				shares := map[string]float64{}
				for _, g := range p.Groups() {
					if g.Share > 1e-18 { // the last group also takes rnd = MaxUint64: 2^-64
						shares[g.Group] += g.Share
					}
					if !slices.Equal(tt.backends[g.Group], g.Backends) {
						t.Errorf("Groups(): backends of %s = %v, want %v", g.Group, g.Backends, tt.backends[g.Group])
					}
				}
				if diff := cmp.Diff(tt.want, shares, cmpAbs(1e-12)); diff != "" {
					t.Errorf("Groups() shares (-want +got):\n%s", diff)
				}
			})
		}
	}
}

func cmpAbs(tol float64) cmp.Option {
	return cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) <= tol })
}

func TestPickRoundRobinEven(t *testing.T) {
	bs := backendsOf("g", 4, 0)
	p := NewPicker([]Flow{{Group: "g", Share: 1}}, map[string][]*backend.Backend{"g": bs}, backend.PolicyRoundRobin)
	var order []string
	count := map[string]int{}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 400 {
		c, err := p.Pick(rng.Uint64())
		if err != nil {
			t.Fatalf("Pick: %v", err)
		}
		if len(order) < 6 {
			order = append(order, c.Backend.Addr())
		}
		count[c.Backend.Addr()]++
		c.Done()
	}
	if diff := cmp.Diff([]string{"g-0", "g-1", "g-2", "g-3", "g-0", "g-1"}, order); diff != "" {
		t.Errorf("round robin order (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"g-0": 100, "g-1": 100, "g-2": 100, "g-3": 100}, count); diff != "" {
		t.Errorf("round robin counts (-want +got):\n%s", diff)
	}
}

func TestPickConcurrencyLimits(t *testing.T) {
	for _, policy := range []backend.Policy{backend.PolicyRoundRobin, backend.PolicyLeastRequest} {
		t.Run(policy.String(), func(t *testing.T) {
			backends := map[string][]*backend.Backend{
				"g1": backendsOf("g1", 2, 1),
				"g2": backendsOf("g2", 1, 2),
				"g3": backendsOf("g3", 1, 1),
			}
			p := NewPicker(row3(0.9, 0.05, 0.05), backends, policy)
			const toG1 = 0 // rnd 0 always chooses the first group
			var held []Choice
			pick := func(wantGroup string, wantErr error) {
				t.Helper()
				c, err := p.Pick(toG1)
				if !errors.Is(err, wantErr) || c.Group != wantGroup {
					t.Fatalf("Pick(0) = %q, %v; want %q, %v", c.Group, err, wantGroup, wantErr)
				}
				if err == nil {
					if c.Backend.InFlight() > c.Backend.MaxConcurrency() {
						t.Fatalf("%s has %d in flight, limit %d", c.Backend.Addr(), c.Backend.InFlight(), c.Backend.MaxConcurrency())
					}
					held = append(held, c)
				}
			}
			pick("g1", nil)
			pick("g1", nil)
			// g1 is full: the next groups in plan order, not by share.
			pick("g2", nil)
			pick("g2", nil)
			pick("g3", nil)
			pick("", ErrAllBusy)
			for _, b := range backends["g1"] {
				if b.InFlight() != 1 {
					t.Errorf("%s in flight = %d, want 1", b.Addr(), b.InFlight())
				}
			}
			held[0].Done()
			pick("g1", nil)
			// Raising the limit frees a slot at once; lowering stops picks.
			backends["g3"][0].SetMaxConcurrency(2)
			pick("g3", nil)
			backends["g2"][0].SetMaxConcurrency(1)
			held[2].Done()
			pick("", ErrAllBusy)
			for i, c := range held {
				if i != 0 && i != 2 { // released above
					c.Done()
				}
			}
			for g, bs := range backends {
				for _, b := range bs {
					if b.InFlight() != 0 {
						t.Errorf("group %s: %s in flight = %d after every Done, want 0", g, b.Addr(), b.InFlight())
					}
				}
			}
		})
	}
}

func TestPickNoCapacity(t *testing.T) {
	plan := mustCompute(t, World{
		Regions: []Region{reg("a", grp("a-a", 10))},
		Sites:   []Site{site("cut", 5), site("ok", 5, "a", 1)},
	})
	tests := []struct {
		name     string
		row      []Flow
		backends map[string][]*backend.Backend
	}{
		{"empty row", nil, map[string][]*backend.Backend{"g1": backendsOf("g1", 1, 0)}},
		{"row of a site that reaches no capacity", plan.Row("cut"), map[string][]*backend.Backend{"a-a": backendsOf("a-a", 1, 0)}},
		{"no group has a backend", row3(0.5, 0.5, 0), map[string][]*backend.Backend{"other": backendsOf("o", 1, 0)}},
	}
	for _, tt := range tests {
		p := NewPicker(tt.row, tt.backends, backend.PolicyRoundRobin)
		if c, err := p.Pick(42); !errors.Is(err, ErrNoCapacity) || c.Backend != nil {
			t.Errorf("%s: Pick = %v, %v; want ErrNoCapacity", tt.name, c, err)
		}
	}
	p := NewPicker(plan.Row("ok"), map[string][]*backend.Backend{"a-a": backendsOf("a-a", 1, 0)}, backend.PolicyRoundRobin)
	c, err := p.Pick(42)
	want := Choice{Backend: c.Backend, Region: "a", Group: "a-a", Reason: ReasonNearest}
	if err != nil || c != want || c.Backend.Addr() != "a-a-0" {
		t.Errorf("Pick on the row of site ok = %+v, %v; want %+v", c, err, want)
	}
}

func TestNewPickerCopiesInputs(t *testing.T) {
	row := row3(1, 0, 0)
	bs := backendsOf("g1", 1, 0)
	p := NewPicker(row, map[string][]*backend.Backend{"g1": bs}, backend.PolicyRoundRobin)
	row[0].Group, row[0].Region = "changed", "changed"
	bs[0] = backend.New("other", 0)
	c, err := p.Pick(0)
	if err != nil || c.Group != "g1" || c.Region != "r1" || c.Backend.Addr() != "g1-0" {
		t.Errorf("Pick after the caller changed its inputs = %+v, %v; want g1-0 in g1/r1", c, err)
	}
}

func TestPickDeterministic(t *testing.T) {
	for _, policy := range []backend.Policy{backend.PolicyRoundRobin, backend.PolicyLeastRequest} {
		run := func() []string {
			backends := map[string][]*backend.Backend{"g1": backendsOf("g1", 3, 2), "g2": backendsOf("g2", 2, 2), "g3": backendsOf("g3", 4, 2)}
			p := NewPicker(row3(0.6, 0.3, 0.1), backends, policy)
			rng := rand.New(rand.NewPCG(9, 10))
			var got []string
			for i := range 50 {
				c, err := p.Pick(rng.Uint64())
				if err != nil {
					got = append(got, err.Error())
					continue
				}
				got = append(got, c.Backend.Addr())
				if i%3 == 0 {
					c.Done()
				}
			}
			return got
		}
		if diff := cmp.Diff(run(), run()); diff != "" {
			t.Errorf("%v: two runs with the same random values differ:\n%s", policy, diff)
		}
	}
}

func TestPickAllocs(t *testing.T) {
	for _, policy := range []backend.Policy{backend.PolicyRoundRobin, backend.PolicyLeastRequest} {
		backends := map[string][]*backend.Backend{"g1": backendsOf("g1", 4, 0), "g2": backendsOf("g2", 4, 0), "g3": backendsOf("g3", 4, 0)}
		p := NewPicker(row3(0.5, 0.3, 0.2), backends, policy)
		rng := rand.New(rand.NewPCG(11, 12))
		if got := testing.AllocsPerRun(1000, func() {
			c, err := p.Pick(rng.Uint64())
			if err != nil {
				panic(err)
			}
			c.Done()
		}); got != 0 {
			t.Errorf("%v: Pick+Done allocates %v times per run, want 0", policy, got)
		}
		busy := NewPicker(row3(1, 0, 0), map[string][]*backend.Backend{"g1": backendsOf("g1", 2, 0)}, policy)
		for _, b := range busy.groups[0].backends {
			b.SetMaxConcurrency(1)
			b.TryAcquire()
		}
		if got := testing.AllocsPerRun(1000, func() {
			if _, err := busy.Pick(rng.Uint64()); err != ErrAllBusy {
				panic(err)
			}
		}); got != 0 {
			t.Errorf("%v: Pick returning ErrAllBusy allocates %v times per run, want 0", policy, got)
		}
	}
}

// TestPickerSwapUnderLoad picks from many goroutines while another swaps the
// current Picker, as a gfe does when plans and health change; Backends are
// shared by every snapshot. Run with -race. Limits must hold at every pick,
// every pick must come from the snapshot it was made on, and every slot must
// be returned at the end.
func TestPickerSwapUnderLoad(t *testing.T) {
	const limit = 1
	const workers, picksEach = 4, 5000
	backends := map[string][]*backend.Backend{"g1": backendsOf("g1", 3, limit), "g2": backendsOf("g2", 2, limit), "g3": backendsOf("g3", 2, limit)}
	snapshots := []*Picker{
		NewPicker(row3(0.7, 0.2, 0.1), backends, backend.PolicyRoundRobin),
		NewPicker(row3(0.1, 0.1, 0.8), backends, backend.PolicyLeastRequest),
		NewPicker(row3(0, 1, 0)[1:2], backends, backend.PolicyRoundRobin), // g2 only
	}
	var cur atomic.Pointer[Picker]
	cur.Store(snapshots[0])

	var pickers, swapper sync.WaitGroup
	var done atomic.Bool
	var picked, busy, swaps atomic.Int64
	errs := make(chan error, workers)
	// The swapper runs first, so that picks meet swaps however the
	// goroutines are scheduled.
	swapped := make(chan struct{})
	swapper.Go(func() {
		for i := 0; !done.Load(); i++ {
			cur.Store(snapshots[i%len(snapshots)])
			if swaps.Add(1) == 1 {
				close(swapped)
			}
			runtime.Gosched()
		}
	})
	<-swapped
	// Every worker first takes up to holdFirst slots and keeps them until
	// all have tried: workers × holdFirst exceeds the 7 slots, so some
	// picks find every backend full whatever the scheduling.
	const holdFirst = 2
	var tried sync.WaitGroup
	tried.Add(workers)
	for w := range workers {
		pickers.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			var held []Choice
			defer func() {
				for _, c := range held {
					c.Done()
				}
			}()
			for i := range picksEach {
				if i == holdFirst {
					tried.Done()
					tried.Wait()
				}
				p := cur.Load()
				c, err := p.Pick(rng.Uint64())
				switch {
				case errors.Is(err, ErrAllBusy):
					busy.Add(1)
				case err != nil:
					errs <- err
					return
				case c.Backend.InFlight() > limit:
					errs <- fmt.Errorf("%s: %d in flight > %d", c.Backend.Addr(), c.Backend.InFlight(), limit)
					return
				case p == snapshots[2] && c.Group != "g2":
					errs <- fmt.Errorf("snapshot with only g2 picked %s", c.Group)
					return
				default:
					picked.Add(1)
					held = append(held, c)
				}
				// Hold up to 3 picks per goroutine (12 > the 7 slots), so
				// groups fill up and Pick has to fall back or fail.
				if i >= holdFirst && (len(held) > 3 || (len(held) > 0 && i%3 == 0)) {
					held[0].Done()
					held = held[1:]
				}
			}
		})
	}
	pickers.Wait()
	done.Store(true)
	swapper.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if picked.Load()+busy.Load() != workers*picksEach || picked.Load() == 0 || busy.Load() == 0 || swaps.Load() == 0 {
		t.Errorf("picked %d, busy %d, swaps %d; want picked+busy = %d and each > 0", picked.Load(), busy.Load(), swaps.Load(), workers*picksEach)
	}
	for g, bs := range backends {
		for _, b := range bs {
			if b.InFlight() != 0 {
				t.Errorf("group %s: %s has %d in flight after every Done, want 0", g, b.Addr(), b.InFlight())
			}
		}
	}
}

// TestPickOverflowGroup: a group of share 0 at the end of the row (an
// overflow group) is never a first choice, whatever rnd, and takes picks
// only when every group before it is full; Groups reports it with share 0.
func TestPickOverflowGroup(t *testing.T) {
	backends := map[string][]*backend.Backend{"g1": backendsOf("g1", 1, 1), "g2": backendsOf("g2", 1, 0)}
	p := NewPicker([]Flow{flow("s", "r1", "g1", 10, 1, ReasonNearest), flow("s", "r2", "g2", 0, 0, ReasonSpillCapacity)}, backends, backend.PolicyRoundRobin)
	for _, rnd := range []uint64{0, 1 << 63, math.MaxUint64} {
		c, err := p.Pick(rnd)
		if err != nil || c.Group != "g1" {
			t.Fatalf("Pick(%#x) = %q, %v; want g1", rnd, c.Group, err)
		}
		c.Done()
	}
	held, _ := p.Pick(0)
	c, err := p.Pick(math.MaxUint64)
	if err != nil || c.Group != "g2" || c.Reason != ReasonSpillCapacity {
		t.Errorf("with g1 full: %q %v %v, want g2 spill_capacity", c.Group, c.Reason, err)
	}
	c.Done()
	held.Done()
	if gs := p.Groups(); gs[0].Share != 1 || gs[1].Share != 0 {
		t.Errorf("Groups shares %v %v, want 1 0", gs[0].Share, gs[1].Share)
	}
}

// TestPickSoftLimitsNeverRefuse: when every backend of every group is at
// its soft limit, Pick still picks, under the configured limits, from the
// group the draw chose; ErrAllBusy comes only at the configured limits.
func TestPickSoftLimitsNeverRefuse(t *testing.T) {
	backends := map[string][]*backend.Backend{"g1": backendsOf("g1", 1, 2), "g2": backendsOf("g2", 1, 2)}
	for _, bs := range backends {
		bs[0].SetSoftLimit(1)
	}
	p := NewPicker(row3(0.5, 0.5, 0)[:2], backends, backend.PolicyRoundRobin)
	var held []Choice
	for _, want := range []string{"g1", "g2", "g1", "g2"} { // soft, soft, then hard
		rnd := uint64(0)
		if want == "g2" {
			rnd = math.MaxUint64
		}
		c, err := p.Pick(rnd)
		if err != nil || c.Group != want {
			t.Fatalf("pick %d: %q %v, want %s", len(held), c.Group, err, want)
		}
		held = append(held, c)
	}
	if _, err := p.Pick(0); !errors.Is(err, ErrAllBusy) {
		t.Errorf("at every configured limit: %v, want ErrAllBusy", err)
	}
	for _, c := range held {
		c.Done()
	}
}

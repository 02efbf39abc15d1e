package waterfall

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// backendsOf returns n backends named group-0 … group-(n-1).
func backendsOf(group string, n int, limit int64) []*Backend {
	bs := make([]*Backend, n)
	for i := range bs {
		bs[i] = NewBackend(fmt.Sprintf("%s-%d", group, i), limit)
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
		backends map[string][]*Backend
		want     map[string]float64
	}{
		{
			name:     "shares of the row",
			row:      row3(0.5, 0.3, 0.2),
			backends: map[string][]*Backend{"g1": backendsOf("g1", 3, 0), "g2": backendsOf("g2", 2, 0), "g3": backendsOf("g3", 1, 0)},
			want:     map[string]float64{"g1": 0.5, "g2": 0.3, "g3": 0.2},
		},
		{
			name:     "a group without backends: its share spread over the others",
			row:      row3(0.5, 0.3, 0.2),
			backends: map[string][]*Backend{"g1": backendsOf("g1", 2, 0), "g3": backendsOf("g3", 2, 0)},
			want:     map[string]float64{"g1": 0.5 / 0.7, "g3": 0.2 / 0.7},
		},
		{
			name:     "shares that do not sum to 1 are normalised",
			row:      row3(3, 1, 0),
			backends: map[string][]*Backend{"g1": backendsOf("g1", 1, 0), "g2": backendsOf("g2", 1, 0), "g3": backendsOf("g3", 1, 0)},
			want:     map[string]float64{"g1": 0.75, "g2": 0.25},
		},
		{
			name:     "no positive share: groups even",
			row:      row3(0, 0, 0),
			backends: map[string][]*Backend{"g1": backendsOf("g1", 1, 0), "g2": backendsOf("g2", 1, 0)},
			want:     map[string]float64{"g1": 0.5, "g2": 0.5},
		},
	}
	for _, tt := range tests {
		for _, policy := range []Policy{RoundRobin, LeastRequest} {
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
			})
		}
	}
}

func cmpAbs(tol float64) cmp.Option {
	return cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) <= tol })
}

func TestPickRoundRobinEven(t *testing.T) {
	bs := backendsOf("g", 4, 0)
	p := NewPicker([]Flow{{Group: "g", Share: 1}}, map[string][]*Backend{"g": bs}, RoundRobin)
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

func TestPickLeastRequestPrefersLessLoaded(t *testing.T) {
	bs := backendsOf("g", 3, 0)
	for range 5 {
		bs[0].TryAcquire() // g-0 is busy
	}
	p := NewPicker([]Flow{{Group: "g", Share: 1}}, map[string][]*Backend{"g": bs}, LeastRequest)
	rng := rand.New(rand.NewPCG(5, 6))
	count := map[string]int{}
	for range 1000 {
		c, err := p.Pick(rng.Uint64())
		if err != nil {
			t.Fatalf("Pick: %v", err)
		}
		count[c.Backend.Addr()]++
		c.Done()
	}
	// Any two of three include an idle backend, so g-0 is never chosen;
	// the others split about evenly.
	if count["g-0"] != 0 || count["g-1"] < 400 || count["g-2"] < 400 {
		t.Errorf("least request counts = %v, want g-0: 0, g-1 and g-2 ≈ 500", count)
	}

	// Held picks spread: with no Done, in-flight counts stay within 1.
	fresh := backendsOf("h", 4, 0)
	p = NewPicker([]Flow{{Group: "h", Share: 1}}, map[string][]*Backend{"h": fresh}, LeastRequest)
	for range 400 {
		if _, err := p.Pick(rng.Uint64()); err != nil {
			t.Fatalf("Pick: %v", err)
		}
	}
	lo, hi := int64(math.MaxInt64), int64(0)
	for _, b := range fresh {
		lo, hi = min(lo, b.InFlight()), max(hi, b.InFlight())
	}
	if hi-lo > 10 {
		t.Errorf("least request in-flight spread %d..%d after 400 picks, want within 10", lo, hi)
	}
}

func TestPickConcurrencyLimits(t *testing.T) {
	for _, policy := range []Policy{RoundRobin, LeastRequest} {
		t.Run(policy.String(), func(t *testing.T) {
			backends := map[string][]*Backend{
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

func TestPickSkipsFullBackends(t *testing.T) {
	for _, policy := range []Policy{RoundRobin, LeastRequest} {
		bs := backendsOf("g", 3, 1)
		if !bs[1].TryAcquire() {
			t.Fatal("TryAcquire on an idle backend failed")
		}
		p := NewPicker([]Flow{{Group: "g", Share: 1}}, map[string][]*Backend{"g": bs}, policy)
		rng := rand.New(rand.NewPCG(7, 8))
		for range 200 {
			c, err := p.Pick(rng.Uint64())
			if err != nil || c.Backend == bs[1] {
				t.Fatalf("%v: Pick = %v, %v; want a backend other than the full g-1", policy, c.Backend.Addr(), err)
			}
			c.Done()
		}
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
		backends map[string][]*Backend
	}{
		{"empty row", nil, map[string][]*Backend{"g1": backendsOf("g1", 1, 0)}},
		{"row of a site that reaches no capacity", plan.Row("cut"), map[string][]*Backend{"a-a": backendsOf("a-a", 1, 0)}},
		{"no group has a backend", row3(0.5, 0.5, 0), map[string][]*Backend{"other": backendsOf("o", 1, 0)}},
	}
	for _, tt := range tests {
		p := NewPicker(tt.row, tt.backends, RoundRobin)
		if c, err := p.Pick(42); !errors.Is(err, ErrNoCapacity) || c.Backend != nil {
			t.Errorf("%s: Pick = %v, %v; want ErrNoCapacity", tt.name, c, err)
		}
	}
	p := NewPicker(plan.Row("ok"), map[string][]*Backend{"a-a": backendsOf("a-a", 1, 0)}, RoundRobin)
	c, err := p.Pick(42)
	want := Choice{Backend: c.Backend, Region: "a", Group: "a-a", Reason: ReasonNearest}
	if err != nil || c != want || c.Backend.Addr() != "a-a-0" {
		t.Errorf("Pick on the row of site ok = %+v, %v; want %+v", c, err, want)
	}
}

func TestNewPickerCopiesInputs(t *testing.T) {
	row := row3(1, 0, 0)
	bs := backendsOf("g1", 1, 0)
	p := NewPicker(row, map[string][]*Backend{"g1": bs}, RoundRobin)
	row[0].Group, row[0].Region = "changed", "changed"
	bs[0] = NewBackend("other", 0)
	c, err := p.Pick(0)
	if err != nil || c.Group != "g1" || c.Region != "r1" || c.Backend.Addr() != "g1-0" {
		t.Errorf("Pick after the caller changed its inputs = %+v, %v; want g1-0 in g1/r1", c, err)
	}
}

func TestPickDeterministic(t *testing.T) {
	for _, policy := range []Policy{RoundRobin, LeastRequest} {
		run := func() []string {
			backends := map[string][]*Backend{"g1": backendsOf("g1", 3, 2), "g2": backendsOf("g2", 2, 2), "g3": backendsOf("g3", 4, 2)}
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
	for _, policy := range []Policy{RoundRobin, LeastRequest} {
		backends := map[string][]*Backend{"g1": backendsOf("g1", 4, 0), "g2": backendsOf("g2", 4, 0), "g3": backendsOf("g3", 4, 0)}
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
		busy := NewPicker(row3(1, 0, 0), map[string][]*Backend{"g1": backendsOf("g1", 2, 0)}, policy)
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

func TestBackendTryAcquireConcurrent(t *testing.T) {
	b := NewBackend("x", 7)
	var won atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if b.TryAcquire() {
					won.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if won.Load() != 7 || b.InFlight() != 7 || !b.Full() {
		t.Errorf("concurrent TryAcquire won %d, in flight %d, full %v; want 7, 7, true", won.Load(), b.InFlight(), b.Full())
	}
	b.Release()
	if b.Full() || b.InFlight() != 6 {
		t.Errorf("after Release: full %v, in flight %d; want false, 6", b.Full(), b.InFlight())
	}
	u := NewBackend("u", -3)
	for range 1000 {
		if !u.TryAcquire() {
			t.Fatal("TryAcquire on an unlimited backend failed")
		}
	}
	if u.Full() || u.MaxConcurrency() != 0 || u.InFlight() != 1000 {
		t.Errorf("unlimited backend: full %v, max %d, in flight %d; want false, 0, 1000", u.Full(), u.MaxConcurrency(), u.InFlight())
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
	backends := map[string][]*Backend{"g1": backendsOf("g1", 3, limit), "g2": backendsOf("g2", 2, limit), "g3": backendsOf("g3", 2, limit)}
	snapshots := []*Picker{
		NewPicker(row3(0.7, 0.2, 0.1), backends, RoundRobin),
		NewPicker(row3(0.1, 0.1, 0.8), backends, LeastRequest),
		NewPicker(row3(0, 1, 0)[1:2], backends, RoundRobin), // g2 only
	}
	var cur atomic.Pointer[Picker]
	cur.Store(snapshots[0])

	var pickers, swapper sync.WaitGroup
	var done atomic.Bool
	var picked, busy, swaps atomic.Int64
	errs := make(chan error, workers)
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
				if len(held) > 3 || (len(held) > 0 && i%3 == 0) {
					held[0].Done()
					held = held[1:]
				}
			}
		})
	}
	swapper.Go(func() {
		for i := 0; !done.Load(); i++ {
			cur.Store(snapshots[i%len(snapshots)])
			swaps.Add(1)
			runtime.Gosched()
		}
	})
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

func TestPolicyString(t *testing.T) {
	for p, want := range map[Policy]string{RoundRobin: "round_robin", LeastRequest: "least_request", Policy(7): "Policy(7)"} {
		if got := p.String(); got != want {
			t.Errorf("Policy(%d).String() = %q, want %q", p, got, want)
		}
	}
}

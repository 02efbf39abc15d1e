package backend

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var policies = []Policy{PolicyRoundRobin, PolicyLeastRequest}

// loaded returns backends b-0 … b-(n-1) with the given limits and requests
// in flight.
func loaded(limits, inflight []int64) []*Backend {
	bs := make([]*Backend, len(limits))
	for i, l := range limits {
		bs[i] = New(fmt.Sprintf("b-%d", i), l)
		bs[i].inflight.Store(inflight[i])
	}
	return bs
}

// rndDraws01 is an Acquire rnd whose least-request draws are backend 0, then
// backend 1: its high half draws (hi·n)>>32 = 0 and its low half draws 0 of
// the n−1 others, which is backend 1.
const rndDraws01 = 0

func TestAcquire(t *testing.T) {
	tests := []struct {
		name     string
		policy   Policy
		limits   []int64
		inflight []int64
		cursor   uint64
		rnd      uint64
		want     int // -1: none
	}{
		{name: "round robin, empty", policy: PolicyRoundRobin, want: -1},
		{name: "least request, empty", policy: PolicyLeastRequest, want: -1},
		{name: "round robin takes the cursor's backend", policy: PolicyRoundRobin,
			limits: []int64{0, 0, 0}, inflight: []int64{5, 5, 0}, cursor: 4, want: 1},
		{name: "round robin skips full backends after the cursor", policy: PolicyRoundRobin,
			limits: []int64{1, 1, 1}, inflight: []int64{0, 1, 1}, cursor: 1, want: 0},
		{name: "round robin, all full", policy: PolicyRoundRobin,
			limits: []int64{1, 2}, inflight: []int64{1, 2}, want: -1},
		{name: "unknown policy is round robin", policy: Policy(9),
			limits: []int64{0, 0, 0}, inflight: []int64{0, 0, 0}, cursor: 2, want: 2},
		{name: "least request, one backend", policy: PolicyLeastRequest,
			limits: []int64{0}, inflight: []int64{7}, rnd: math.MaxUint64, want: 0},
		{name: "least request, one full backend", policy: PolicyLeastRequest,
			limits: []int64{3}, inflight: []int64{3}, want: -1},
		{name: "least request takes the less loaded draw", policy: PolicyLeastRequest,
			limits: []int64{0, 0, 0}, inflight: []int64{3, 1, 0}, rnd: rndDraws01, want: 1},
		{name: "least request: ties go to the first draw", policy: PolicyLeastRequest,
			limits: []int64{0, 0, 0}, inflight: []int64{2, 2, 0}, rnd: rndDraws01, want: 0},
		{name: "least request takes the other draw when the less loaded is full", policy: PolicyLeastRequest,
			limits: []int64{0, 1, 0}, inflight: []int64{3, 1, 0}, rnd: rndDraws01, want: 0},
		{name: "least request scans on from the first draw when both are full", policy: PolicyLeastRequest,
			limits: []int64{3, 1, 0, 0}, inflight: []int64{3, 1, 9, 0}, rnd: rndDraws01, want: 2},
		{name: "least request, all full", policy: PolicyLeastRequest,
			limits: []int64{1, 1, 1}, inflight: []int64{1, 1, 1}, rnd: 12345, want: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bs := loaded(tt.limits, tt.inflight)
			rr := NewRoundRobin(tt.cursor)
			got, ok := tt.policy.Acquire(bs, rr, tt.rnd)
			if got != tt.want || ok != (tt.want >= 0) {
				t.Fatalf("%v.Acquire(in flight %v) = %d, %v, want %d, %v", tt.policy, tt.inflight, got, ok, tt.want, tt.want >= 0)
			}
			want := append([]int64(nil), tt.inflight...)
			if ok {
				want[got]++
			}
			var after []int64
			for _, b := range bs {
				after = append(after, b.InFlight())
			}
			if diff := cmp.Diff(want, after, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("in flight after Acquire (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAcquireRoundRobinEven(t *testing.T) {
	bs := backendsOf("g", 4, 0)
	var rr RoundRobin
	var order []string
	count := map[string]int{}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 400 {
		i, ok := PolicyRoundRobin.Acquire(bs, &rr, rng.Uint64())
		if !ok {
			t.Fatal("Acquire on unlimited backends failed")
		}
		if len(order) < 6 {
			order = append(order, bs[i].Addr())
		}
		count[bs[i].Addr()]++
		bs[i].Release()
	}
	if diff := cmp.Diff([]string{"g-0", "g-1", "g-2", "g-3", "g-0", "g-1"}, order); diff != "" {
		t.Errorf("round robin order (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"g-0": 100, "g-1": 100, "g-2": 100, "g-3": 100}, count); diff != "" {
		t.Errorf("round robin counts (-want +got):\n%s", diff)
	}
}

func TestAcquireLeastRequestPrefersLessLoaded(t *testing.T) {
	bs := backendsOf("g", 3, 0)
	for range 5 {
		bs[0].TryAcquire() // g-0 is busy
	}
	rng := rand.New(rand.NewPCG(5, 6))
	count := map[string]int{}
	for range 1000 {
		i, ok := PolicyLeastRequest.Acquire(bs, nil, rng.Uint64())
		if !ok {
			t.Fatal("Acquire on unlimited backends failed")
		}
		count[bs[i].Addr()]++
		bs[i].Release()
	}
	// Any two of three include an idle backend, so g-0 is never chosen;
	// the others split about evenly.
	if count["g-0"] != 0 || count["g-1"] < 400 || count["g-2"] < 400 {
		t.Errorf("least request counts = %v, want g-0: 0, g-1 and g-2 ≈ 500", count)
	}

	// Held picks spread: with no Release, in-flight counts stay within 10.
	fresh := backendsOf("h", 4, 0)
	for range 400 {
		if _, ok := PolicyLeastRequest.Acquire(fresh, nil, rng.Uint64()); !ok {
			t.Fatal("Acquire on unlimited backends failed")
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

func TestAcquireSkipsFullBackends(t *testing.T) {
	for _, policy := range policies {
		t.Run(policy.String(), func(t *testing.T) {
			bs := backendsOf("g", 3, 1)
			if !bs[1].TryAcquire() {
				t.Fatal("TryAcquire on an idle backend failed")
			}
			var rr RoundRobin
			rng := rand.New(rand.NewPCG(7, 8))
			for range 200 {
				i, ok := policy.Acquire(bs, &rr, rng.Uint64())
				if !ok || i == 1 {
					t.Fatalf("Acquire = %d, %v; want a backend other than the full g-1", i, ok)
				}
				bs[i].Release()
			}
		})
	}
}

// TestAcquireConcurrent acquires from many goroutines at once: no backend
// ever exceeds its limit, and every slot is returned at the end. Run with
// -race.
func TestAcquireConcurrent(t *testing.T) {
	for _, policy := range policies {
		t.Run(policy.String(), func(t *testing.T) {
			const limit = 2
			bs := backendsOf("g", 3, limit)
			var rr RoundRobin
			var wg sync.WaitGroup
			errs := make(chan string, 8)
			for w := range 8 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(w), 1))
					var held []int
					for range 2000 {
						if i, ok := policy.Acquire(bs, &rr, rng.Uint64()); ok {
							if n := bs[i].InFlight(); n > limit {
								errs <- bs[i].Addr() + " over its limit"
								return
							}
							held = append(held, i)
						}
						if len(held) > 0 && rng.IntN(2) == 0 {
							bs[held[0]].Release()
							held = held[1:]
						}
					}
					for _, i := range held {
						bs[i].Release()
					}
				})
			}
			wg.Wait()
			close(errs)
			for e := range errs {
				t.Error(e)
			}
			for _, b := range bs {
				if b.InFlight() != 0 {
					t.Errorf("%s has %d in flight after every Release, want 0", b.Addr(), b.InFlight())
				}
			}
		})
	}
}

// TestLeastSplitDraws checks what Acquire's comment says: least on the high
// half of rnd and on its low half moved up draws what the 32-bit
// multiply-shift of each half draws.
func TestLeastSplitDraws(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	zero := func(int) int64 { return 0 }
	for range 10000 {
		rnd := rng.Uint64()
		n := 2 + rng.IntN(1000)
		i, j, _ := least(rnd&^math.MaxUint32, rnd<<32, n, zero)
		wi := int((rnd >> 32) * uint64(n) >> 32)
		wj := int((rnd & math.MaxUint32) * uint64(n-1) >> 32)
		if wj >= wi {
			wj++
		}
		if i != wi || j != wj {
			t.Fatalf("least(split %#x, n=%d) draws %d, %d; want %d, %d", rnd, n, i, j, wi, wj)
		}
	}
}

func TestAcquireAllocs(t *testing.T) {
	for _, policy := range policies {
		bs := backendsOf("g", 4, 0)
		var rr RoundRobin
		rng := rand.New(rand.NewPCG(11, 12))
		if got := testing.AllocsPerRun(1000, func() {
			i, ok := policy.Acquire(bs, &rr, rng.Uint64())
			if !ok {
				panic("Acquire on unlimited backends failed")
			}
			bs[i].Release()
		}); got != 0 {
			t.Errorf("%v: Acquire+Release allocates %v times per run, want 0", policy, got)
		}
		full := backendsOf("f", 2, 1)
		for _, b := range full {
			b.TryAcquire()
		}
		if got := testing.AllocsPerRun(1000, func() {
			if _, ok := policy.Acquire(full, &rr, rng.Uint64()); ok {
				panic("Acquire on full backends succeeded")
			}
		}); got != 0 {
			t.Errorf("%v: Acquire on full backends allocates %v times per run, want 0", policy, got)
		}
	}
}

func TestPolicyString(t *testing.T) {
	for p, want := range map[Policy]string{PolicyRoundRobin: "round_robin", PolicyLeastRequest: "least_request", Policy(7): "Policy(7)"} {
		if got := p.String(); got != want {
			t.Errorf("Policy(%d).String() = %q, want %q", p, got, want)
		}
	}
}

// FuzzAcquire checks Acquire on arbitrary groups: it takes a slot of a
// backend that had room and of no other, and fails only when every backend
// is full, without taking anything.
func FuzzAcquire(f *testing.F) {
	f.Add(uint8(0), []byte{}, []byte{}, uint64(0), uint64(0))
	f.Add(uint8(1), []byte{1, 2, 0}, []byte{1, 0, 5}, uint64(0), uint64(0))
	f.Add(uint8(1), []byte{1, 1, 1}, []byte{1, 1, 1}, ^uint64(0), uint64(7))
	f.Add(uint8(0), []byte{3, 1}, []byte{0, 1}, uint64(1<<32), ^uint64(0))
	f.Fuzz(func(t *testing.T, policy uint8, limits, inflight []byte, rnd, cursor uint64) {
		n := min(len(limits), len(inflight), 64)
		ls, fs := make([]int64, n), make([]int64, n)
		for i := range n {
			ls[i], fs[i] = int64(limits[i]%4), int64(inflight[i]%6)
		}
		bs := loaded(ls, fs)
		allFull := true
		for _, b := range bs {
			allFull = allFull && b.Full()
		}
		p := Policy(policy % 3)
		got, ok := p.Acquire(bs, NewRoundRobin(cursor), rnd)
		switch {
		case !ok && got != -1:
			t.Fatalf("%v.Acquire = %d, false; want -1", p, got)
		case ok != !allFull:
			t.Fatalf("%v.Acquire(limits %v, in flight %v) ok = %v, want %v", p, ls, fs, ok, !allFull)
		case ok && (got < 0 || got >= n):
			t.Fatalf("%v.Acquire = %d, want a member of [0, %d)", p, got, n)
		case ok && ls[got] > 0 && fs[got] >= ls[got]:
			t.Fatalf("%v.Acquire = %d, which was full (%d of %d)", p, got, fs[got], ls[got])
		}
		for i, b := range bs {
			want := fs[i]
			if ok && i == got {
				want++
			}
			if b.InFlight() != want {
				t.Fatalf("%v.Acquire = %d, %v: %s in flight %d, want %d", p, got, ok, b.Addr(), b.InFlight(), want)
			}
		}
	})
}

func BenchmarkAcquire(b *testing.B) {
	for _, policy := range policies {
		b.Run(policy.String(), func(b *testing.B) {
			bs := backendsOf("g", 10, 1000)
			var rr RoundRobin
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				rng := rand.NewPCG(rand.Uint64(), 3)
				for pb.Next() {
					i, ok := policy.Acquire(bs, &rr, rng.Uint64())
					if !ok {
						panic("Acquire failed")
					}
					bs[i].Release()
				}
			})
		})
	}
}

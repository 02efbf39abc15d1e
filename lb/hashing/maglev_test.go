package hashing

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func names(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("10.%d.%d.%d:8080", i>>16&0xff, i>>8&0xff, i&0xff)
	}
	return s
}

func mustMaglev(t testing.TB, size int, backends []string) *Maglev {
	t.Helper()
	m, err := NewMaglev(Config{TableSize: size}, backends)
	if err != nil {
		t.Fatalf("NewMaglev(%d, %d backends) error = %v", size, len(backends), err)
	}
	return m
}

// owners returns the backend name of every slot.
func owners(m *Maglev) []string {
	o := make([]string, len(m.table))
	for s, i := range m.table {
		o[s] = m.names[i]
	}
	return o
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		size    int
		n       int
		wantErr string
	}{
		{name: "default", size: DefaultTableSize, n: 1000},
		{name: "small prime", size: 7, n: 6},
		{name: "max", size: MaxTableSize, n: 1},
		{name: "no backends", size: 2, n: 0},
		{name: "not prime", size: 65536, n: 3, wantErr: "table_size: must be prime, got 65536"},
		{name: "square of prime", size: 49, n: 3, wantErr: "must be prime, got 49"},
		{name: "zero", size: 0, n: 0, wantErr: "table_size: must be a prime in [2, 16777259], got 0"},
		{name: "too large", size: 16777277, n: 3, wantErr: "got 16777277"},
		{name: "as many backends as slots", size: 7, n: 7, wantErr: "larger than the number of backends (7), got 7"},
		{name: "both", size: 8, n: 9, wantErr: "must be prime, got 8\ntable_size: must be larger"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Config{TableSize: tt.size}.Validate(tt.n)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate(%d) with size %d = %v, want nil", tt.n, tt.size, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate(%d) with size %d = %v, want error containing %q", tt.n, tt.size, err, tt.wantErr)
			}
		})
	}
	if got := DefaultConfig().TableSize; got != DefaultTableSize || !isPrime(got) || !isPrime(MaxTableSize) {
		t.Errorf("DefaultConfig().TableSize = %d, want prime %d (and MaxTableSize prime)", got, DefaultTableSize)
	}
}

func TestNewMaglevRejectsBadNames(t *testing.T) {
	if _, err := NewMaglev(DefaultConfig(), []string{"a", "b", "a"}); !errors.Is(err, ErrDuplicateBackend) {
		t.Errorf("NewMaglev(duplicate) error = %v, want ErrDuplicateBackend", err)
	}
	if _, err := NewMaglev(DefaultConfig(), []string{"a", ""}); err == nil || !strings.Contains(err.Error(), "backend 1: empty name") {
		t.Errorf("NewMaglev(empty name) error = %v, want \"backend 1: empty name\"", err)
	}
	if _, err := NewMaglev(Config{TableSize: 3}, names(3)); err == nil {
		t.Errorf("NewMaglev(3 backends, size 3) error = nil, want error")
	}
}

func TestPopulateWorkedExample(t *testing.T) {
	tests := []struct {
		name         string
		offset, skip []uint64
		ids          []uint32
		want         []uint32
	}{
		{
			name:   "b0 b1 b2",
			offset: []uint64{3, 0, 3}, skip: []uint64{4, 2, 1}, ids: []uint32{0, 1, 2},
			want: []uint32{1, 0, 1, 0, 2, 2, 0},
		},
		{
			name:   "b1 left",
			offset: []uint64{3, 3}, skip: []uint64{4, 1}, ids: []uint32{0, 2},
			want: []uint32{0, 0, 0, 0, 2, 2, 2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, populate(7, tt.offset, tt.skip, tt.ids)); diff != "" {
				t.Errorf("populate() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEmptyMaglev(t *testing.T) {
	m := mustMaglev(t, DefaultTableSize, nil)
	if i, ok := m.Pick(42); ok || i != -1 {
		t.Errorf("empty Pick(42) = %d, %v, want -1, false", i, ok)
	}
	if s, ok := m.PickName(42); ok || s != "" {
		t.Errorf("empty PickName(42) = %q, %v, want \"\", false", s, ok)
	}
	if m.Len() != 0 || m.Size() != 0 {
		t.Errorf("empty Len, Size = %d, %d, want 0, 0", m.Len(), m.Size())
	}
}

// TestMaglevSpread checks that every backend owns M/N slots within 1% (in
// fact ⌊M/N⌋ or ⌈M/N⌉), and that random keys spread within 5% of even.
func TestMaglevSpread(t *testing.T) {
	for _, n := range []int{1, 3, 10, 100} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			m := mustMaglev(t, DefaultTableSize, names(n))
			slots := make([]int, n)
			for _, i := range m.table {
				slots[i]++
			}
			even := float64(DefaultTableSize) / float64(n)
			lo, hi := slices.Min(slots), slices.Max(slots)
			if dev := max(even-float64(lo), float64(hi)-even) / even; dev > 0.01 || hi-lo > 1 {
				t.Errorf("slot counts in [%d, %d], want within 1 of each other and 1%% of %.1f (deviation %.4f)", lo, hi, even, dev)
			}

			const keys = 100_000
			r := rand.New(rand.NewPCG(1, uint64(n)))
			picks := make([]int, n)
			for range keys {
				i, ok := m.Pick(r.Uint64())
				if !ok {
					t.Fatalf("Pick() ok = false, want true")
				}
				picks[i]++
			}
			if n > 10 {
				return // 1,000 keys a backend: too few for a 5% bound
			}
			want := float64(keys) / float64(n)
			for i, got := range picks {
				if d := (float64(got) - want) / want; d < -0.05 || d > 0.05 {
					t.Errorf("backend %d got %d of %d keys, want %.0f ± 5%%", i, got, keys, want)
				}
			}
		})
	}
}

// TestMaglevDisruption removes one of N backends and checks that about 1/N
// of the keys move: every key of the removed backend, and few of the others.
func TestMaglevDisruption(t *testing.T) {
	const keys = 100_000
	for _, tt := range []struct {
		n int
		// maxOtherMoved bounds the fraction of keys of the remaining
		// backends that move anyway (Maglev's extra churn, which grows
		// as M/N shrinks; measured 0.0002, 0.0026 and 0.0055 here).
		maxOtherMoved float64
	}{
		{n: 3, maxOtherMoved: 0.002},
		{n: 10, maxOtherMoved: 0.006},
		{n: 100, maxOtherMoved: 0.012},
	} {
		t.Run(fmt.Sprint(tt.n), func(t *testing.T) {
			all := names(tt.n)
			before := mustMaglev(t, DefaultTableSize, all)
			gone := all[tt.n/2]
			rest := slices.Delete(slices.Clone(all), tt.n/2, tt.n/2+1)
			after := mustMaglev(t, DefaultTableSize, rest)

			var moved, onGone, otherMoved int
			for k := range uint64(keys) {
				key := String(fmt.Sprint("client-", k))
				b, _ := before.PickName(key)
				a, _ := after.PickName(key)
				if a == gone {
					t.Fatalf("key %d picked removed backend %s", k, gone)
				}
				if a != b {
					moved++
				}
				switch {
				case b == gone:
					onGone++
				case a != b:
					otherMoved++
				}
			}
			// Every key of the removed backend moves...
			frac := float64(moved) / keys
			want := 1 / float64(tt.n)
			if frac < want*0.9 {
				t.Errorf("moved %.4f of keys, want at least %.4f (1/N less 10%%)", frac, want*0.9)
			}
			// ...and few others do.
			other := float64(otherMoved) / float64(keys-onGone)
			if other > tt.maxOtherMoved {
				t.Errorf("%.4f of the keys of unaffected backends moved, want ≤ %.2f", other, tt.maxOtherMoved)
			}
			if frac > want+tt.maxOtherMoved {
				t.Errorf("moved %.4f of keys, want ≤ %.4f (1/N + %.2f)", frac, want+tt.maxOtherMoved, tt.maxOtherMoved)
			}
			t.Logf("N=%d: moved %.4f (1/N = %.4f), unaffected moved %.4f", tt.n, frac, want, other)
		})
	}
}

// TestMaglevDeterministic checks that the table depends only on the set of
// names: rebuilt, or built from a shuffled input, it maps every slot (and so
// every key) to the same name.
func TestMaglevDeterministic(t *testing.T) {
	all := names(50)
	want := owners(mustMaglev(t, 1009, all))
	r := rand.New(rand.NewPCG(7, 7))
	for trial := range 5 {
		shuffled := slices.Clone(all)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		m := mustMaglev(t, 1009, shuffled)
		if diff := cmp.Diff(want, owners(m)); diff != "" {
			t.Fatalf("trial %d: table differs after shuffle (-want +got):\n%s", trial, diff)
		}
		for k := range uint64(1000) {
			i, _ := m.Pick(k)
			if name, _ := m.PickName(k); shuffled[i] != name {
				t.Fatalf("Pick(%d) = %d (%s), PickName = %s; want the index of the name in the caller's order", k, i, shuffled[i], name)
			}
		}
	}
}

func TestMaglevPickDoesNotAllocate(t *testing.T) {
	m := mustMaglev(t, DefaultTableSize, names(10))
	var key uint64
	if got := testing.AllocsPerRun(1000, func() { key++; m.Pick(key) }); got != 0 {
		t.Errorf("Pick allocs/op = %v, want 0", got)
	}
	if got := testing.AllocsPerRun(1000, func() { key++; m.PickName(key) }); got != 0 {
		t.Errorf("PickName allocs/op = %v, want 0", got)
	}
}

// FuzzPick builds tables of random sizes and backend counts and checks that
// Pick never panics, always returns a member, and is a pure function of the
// key and the set of names.
func FuzzPick(f *testing.F) {
	f.Add(uint64(0), uint8(1), uint8(0), "10.0.0.1:80")
	f.Add(uint64(1<<63), uint8(6), uint8(1), "b")
	f.Add(^uint64(0), uint8(100), uint8(4), "")
	f.Add(uint64(12345), uint8(0), uint8(2), "x")
	sizes := []int{2, 7, 13, 101, 1009, DefaultTableSize}
	f.Fuzz(func(t *testing.T, key uint64, n uint8, sizeSel uint8, prefix string) {
		size := sizes[int(sizeSel)%len(sizes)]
		count := int(n) % size // < size, as Validate requires
		backends := make([]string, count)
		for i := range backends {
			backends[i] = fmt.Sprintf("%s#%d", prefix, i)
		}
		m := mustMaglev(t, size, backends)
		i, ok := m.Pick(key)
		if count == 0 {
			if ok || i != -1 {
				t.Fatalf("Pick(%d) on empty table = %d, %v, want -1, false", key, i, ok)
			}
			return
		}
		if !ok || i < 0 || i >= count {
			t.Fatalf("Pick(%d) = %d, %v, want a member of [0, %d)", key, i, ok, count)
		}
		slices.Reverse(backends)
		name, _ := mustMaglev(t, size, backends).PickName(key)
		if want := m.Name(i); name != want {
			t.Fatalf("PickName(%d) on reversed input = %q, want %q", key, name, want)
		}
	})
}

func BenchmarkMaglevPick(b *testing.B) {
	m := mustMaglev(b, DefaultTableSize, names(1000))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var key, sink uint64
		for pb.Next() {
			key += 0x9E3779B97F4A7C15
			i, _ := m.Pick(key)
			sink += uint64(i)
		}
		_ = sink
	})
}

func BenchmarkMaglevBuild1000(b *testing.B) {
	backends := names(1000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NewMaglev(DefaultConfig(), backends); err != nil {
			b.Fatal(err)
		}
	}
}

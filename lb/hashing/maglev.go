package hashing

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
)

// DefaultTableSize is the default number of slots of a Maglev lookup table.
// It is prime, as the algorithm requires, and about 100 × a 655-backend pool,
// which keeps the imbalance between backends under 1% up to that size (see
// Config.TableSize).
const DefaultTableSize = 65537

// MaxTableSize bounds Config.TableSize so that a typo in a config file cannot
// allocate gigabytes: 16,777,259 is the smallest prime above 2^24 (64 MiB of
// table at 4 bytes a slot).
const MaxTableSize = 16777259

// ErrDuplicateBackend is returned by NewMaglev when two backends share a name.
var ErrDuplicateBackend = errors.New("hashing: duplicate backend name")

// Config holds the tunables of a Maglev table. Start from DefaultConfig.
type Config struct {
	// TableSize is the number of slots M in the lookup table. It must be
	// prime, larger than the number of backends, and at most MaxTableSize.
	// Default 65,537 (DefaultTableSize).
	//
	// Every backend owns either ⌊M/N⌋ or ⌈M/N⌉ slots, so the share of keys
	// two backends receive differs by at most N/M: M ≥ 100·N keeps that
	// under 1% (Maglev §3.4). Larger M also lowers the number of keys that
	// move when the backend set changes. The cost is memory (4 bytes a slot,
	// 256 KiB at the default) and build time, which grows as M·log M.
	TableSize int
}

// DefaultConfig returns a Config with TableSize = DefaultTableSize.
func DefaultConfig() Config {
	return Config{TableSize: DefaultTableSize}
}

// Validate reports whether c can build a table over n backends. The error
// names the field and the bad value.
func (c Config) Validate(n int) error {
	var errs []error
	switch {
	case c.TableSize < 2 || c.TableSize > MaxTableSize:
		errs = append(errs, fmt.Errorf("table_size: must be a prime in [2, %d], got %d", MaxTableSize, c.TableSize))
	case !isPrime(c.TableSize):
		errs = append(errs, fmt.Errorf("table_size: must be prime, got %d", c.TableSize))
	}
	if n >= c.TableSize {
		errs = append(errs, fmt.Errorf("table_size: must be larger than the number of backends (%d), got %d", n, c.TableSize))
	}
	return errors.Join(errs...)
}

// isPrime reports whether n is prime, by trial division (n ≤ MaxTableSize, so
// at most ~2,000 divisions).
func isPrime(n int) bool {
	if n < 2 {
		return false
	}
	if n%2 == 0 {
		return n == 2
	}
	for d := 3; d*d <= n; d += 2 {
		if n%d == 0 {
			return false
		}
	}
	return true
}

// Maglev is a consistent-hashing lookup table over a fixed set of backends
// (Eisenbud et al., "Maglev: A Fast and Reliable Software Network Load
// Balancer", NSDI 2016, §3.4).
//
// A Maglev is immutable after NewMaglev returns: it may be shared by any
// number of goroutines, and Pick may be called concurrently without locks.
// To change the backend set, build a new table and swap it in (for example
// with atomic.Pointer[Maglev]).
type Maglev struct {
	// Immutable after NewMaglev.
	names []string // backends in the caller's order
	table []uint32 // slot → index into names
}

// NewMaglev builds the lookup table for backends, which are identified by
// stable, unique, non-empty names (for example "10.0.0.7:8080"). Pass only
// the healthy backends: a backend leaves the table by being left out.
//
// The table depends only on the set of names and cfg, not on their order:
// NewMaglev sorts the names before populating, so every gfe that sees the
// same healthy set computes the same table. Indexes returned by Pick refer to
// the caller's order of backends.
//
// An empty backends slice gives a table whose Pick always reports false.
func NewMaglev(cfg Config, backends []string) (*Maglev, error) {
	if err := cfg.Validate(len(backends)); err != nil {
		return nil, fmt.Errorf("hashing: maglev: %w", err)
	}
	n := len(backends)
	m := &Maglev{names: slices.Clone(backends)}
	if n == 0 {
		return m, nil
	}

	// Population order is by name, never by input position.
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		switch {
		case backends[a] < backends[b]:
			return -1
		case backends[a] > backends[b]:
			return 1
		}
		return 0
	})
	for k, i := range order {
		if backends[i] == "" {
			return nil, fmt.Errorf("hashing: maglev: backend %d: empty name", i)
		}
		if k > 0 && backends[i] == backends[order[k-1]] {
			return nil, fmt.Errorf("%w %q", ErrDuplicateBackend, backends[i])
		}
	}

	size := uint64(cfg.TableSize)
	offset := make([]uint64, n)
	skip := make([]uint64, n)
	ids := make([]uint32, n)
	for k, i := range order {
		offset[k], skip[k] = permutation(backends[i], size)
		ids[k] = uint32(i)
	}
	m.table = populate(size, offset, skip, ids)
	return m, nil
}

// permutation returns the (offset, skip) pair that defines a backend's
// preference list over m slots: offset = h1(name) mod M and
// skip = h2(name) mod (M−1) + 1, with h1 = String(name) and h2 an independent
// remix of it.
func permutation(name string, m uint64) (offset, skip uint64) {
	h := String(name)
	return h % m, avalanche(h^prime3)%(m-1) + 1
}

// populate runs Maglev's population loop (Pseudocode 1 in the paper) and
// returns the table, each slot holding an entry of ids.
//
// Backend k prefers the slots of its permutation
//
//	permutation[k][j] = (offset[k] + j·skip[k]) mod M,   j = 0, 1, …, M−1.
//
// Because M is prime and 1 ≤ skip[k] < M, each permutation visits every slot
// exactly once. The backends then take turns, in the order given (NewMaglev
// passes them sorted by name): on its turn a backend claims the next slot of
// its permutation that is still empty. The loop stops when all M slots are
// claimed, so every backend ends with ⌊M/N⌋ or ⌈M/N⌉ slots.
//
// Worked example, M = 7, backends b0, b1, b2 with (offset, skip) = (3, 4),
// (0, 2), (3, 1):
//
//	permutation b0: 3 0 4 1 5 2 6
//	permutation b1: 0 2 4 6 1 3 5
//	permutation b2: 3 4 5 6 0 1 2
//	turn 1: b0→3  b1→0  b2→4 (3 taken)
//	turn 2: b0→1 (0, 4 taken)  b1→2  b2→5
//	turn 3: b0→6 (5, 2 taken)  — table full
//	slot:    0  1  2  3  4  5  6
//	owner:  b1 b0 b1 b0 b2 b2 b0
//
// Without b1 the same loop gives b0 b0 b0 b0 b2 b2 b2: b1's slots 0 and 2 go
// to b0, the other backends keep their slots except slot 6, which moves from
// b0 to b2. Maglev trades that little extra movement for an exact balance
// (the paper's "minimal disruption" is near-minimal, not minimal).
// TestPopulateWorkedExample checks both tables.
func populate(m uint64, offset, skip []uint64, ids []uint32) []uint32 {
	next := slices.Clone(offset) // current position in each permutation
	const empty = ^uint32(0)
	table := make([]uint32, m)
	for s := range table {
		table[s] = empty
	}
	filled := uint64(0)
	for {
		for k := range next {
			c := next[k]
			for table[c] != empty {
				c += skip[k]
				if c >= m {
					c -= m
				}
			}
			table[c] = ids[k]
			c += skip[k]
			if c >= m {
				c -= m
			}
			next[k] = c
			filled++
			if filled == m {
				return table
			}
		}
	}
}

// Pick returns the index (into the backends given to NewMaglev) of the
// backend that owns key, and true; or -1 and false when the table has no
// backends. key should already be a hash (Key2, Key3, Key5, String); Pick
// mixes it once more, so raw sequential keys also spread evenly. The same key
// picks the same backend for as long as the table lives, and across tables
// built from the same set of names. Pick does not allocate and does not
// block.
func (m *Maglev) Pick(key uint64) (int, bool) {
	if len(m.table) == 0 {
		return -1, false
	}
	// Lemire's multiply-shift range reduction: maps a uniform 64-bit value
	// to [0, M) without a division.
	slot, _ := bits.Mul64(avalanche(key), uint64(len(m.table)))
	return int(m.table[slot]), true
}

// PickName is Pick returning the backend's name; it returns "" and false
// when the table has no backends. It does not allocate.
func (m *Maglev) PickName(key uint64) (string, bool) {
	i, ok := m.Pick(key)
	if !ok {
		return "", false
	}
	return m.names[i], true
}

// Len returns the number of backends in the table.
func (m *Maglev) Len() int { return len(m.names) }

// Name returns the name of backend i, in the order given to NewMaglev.
func (m *Maglev) Name(i int) string { return m.names[i] }

// Size returns the number of slots M (0 for a table without backends).
func (m *Maglev) Size() int { return len(m.table) }

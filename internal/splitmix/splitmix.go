// Package splitmix is SplitMix64 (Steele, Lea and Flood 2014): a seeded
// sequence of uniform 64-bit values that is safe for concurrent use, for
// the Rand options of routing tables where a run must repeat exactly
// (tests, the simulator). Production gfes use math/rand/v2 instead.
package splitmix

import "sync/atomic"

// gamma is SplitMix64's increment, the odd integer nearest 2^64/φ.
const gamma = 0x9e3779b97f4a7c15

// Mix64 is the SplitMix64 finalizer: a bijection on uint64 whose output
// bits each depend on all input bits.
func Mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// Sequence returns the SplitMix64 sequence that starts from seed. Each call
// returns the next value; calls from several goroutines each get a
// distinct value, in some order.
func Sequence(seed uint64) func() uint64 {
	var n atomic.Uint64
	n.Store(seed)
	return func() uint64 { return Mix64(n.Add(gamma)) }
}

// Package hashing holds the consistent-hashing baselines that Spillway's
// waterfall is compared against (docs/design.md §4): 2-, 3- and 5-tuple flow
// keys hashed over a Maglev lookup table. Hashing looks at neither capacity
// nor region: that is the point of a baseline. The other baselines, round
// robin and least request (power of two choices), are in lb/backend with the
// Backend they pick.
//
// The package is pure: no I/O, no clock, no package state. Everything on the
// request path (Key2, Key3, Key5, String, Maglev.Pick) is allocation-free
// and never blocks.
//
// # Keys
//
// A flow key is a stable 64-bit hash of the flow's tuple:
//
//	2-tuple  Key2(src IP, dst IP)
//	3-tuple  Key3(src IP, dst IP, protocol)
//	5-tuple  Key5(src IP, dst IP, protocol, src port, dst port)
//
// The hashes take no seed and depend on no platform detail, so every gfe
// computes the same key for the same flow; their values are pinned by
// TestGolden. String hashes backend names and request attributes (a header
// value, a cookie value) the same way.
//
// # Maglev
//
// NewMaglev turns a set of backend names into a lookup table of M slots
// (M prime, 65,537 by default). Each backend derives from its name a
// permutation of the slots, and the backends take turns claiming their next
// free preferred slot until the table is full (see populate for a worked
// example with M = 7). Pick maps a key to a slot and returns the slot's
// owner. The result:
//
//   - balance: every backend owns ⌊M/N⌋ or ⌈M/N⌉ slots;
//   - consistency: removing one of N backends moves its 1/N of the keys and
//     only a small fraction of the others (0.3% of them at N = 10,
//     M = 65,537; TestMaglevDisruption);
//   - determinism: the table depends only on the set of names, never on
//     their order or on the process, so every gfe agrees.
//
// Only healthy backends go into the table; a backend that fails its health
// checks leaves by not being passed to the next NewMaglev. Current load is
// not a factor. A table is immutable once built; the owner of a backend
// service builds a new one when the healthy set changes and swaps it in
// with an atomic.Pointer.
//
// Example: a gfe balancing flows by 5-tuple over three backends.
//
//	tbl, err := hashing.NewMaglev(hashing.DefaultConfig(),
//		[]string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"})
//	if err != nil { … }
//	key := hashing.Key5(clientIP, vip, 6, clientPort, 443)
//	i, ok := tbl.Pick(key) // index into the slice above; ok is false only for an empty table
//
// Every packet and every request of that flow gets the same i for as long as
// the three backends stay healthy; if 10.0.0.2 fails, the next table sends
// its flows to the other two and leaves nearly all other flows where they
// were.
package hashing

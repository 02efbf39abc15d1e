package hashing

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// The hashes in this file are part of the wire contract between gfe nodes:
// every gfe must map the same flow and the same backend name to the same
// value, in every process and on every architecture. They therefore use no
// random seed (unlike hash/maphash) and no platform-dependent layout. Do not
// change them without a migration plan: a change re-shuffles every flow and
// invalidates every affinity cookie in flight.

// Constants of XXH64 (Yann Collet, xxHash specification,
// https://github.com/Cyan4973/xxHash/blob/dev/doc/xxhash_spec.md).
const (
	prime1 uint64 = 0x9E3779B185EBCA87
	prime2 uint64 = 0xC2B2AE3D27D4EB4F
	prime3 uint64 = 0x165667B19E3779F9
	prime4 uint64 = 0x85EBCA77C2B2AE63
	prime5 uint64 = 0x27D4EB2F165667C5
)

// FNV-1a 64 parameters (http://www.isthe.com/chongo/tech/comp/fnv/).
const (
	fnvOffset64 uint64 = 14695981039346656037
	fnvPrime64  uint64 = 1099511628211
)

// Domain tags keep the 2-, 3- and 5-tuple keys of the same flow unrelated,
// and keep them apart from String.
const (
	tag2 uint64 = 2
	tag3 uint64 = 3
	tag5 uint64 = 5
)

// String returns a stable 64-bit hash of s: FNV-1a 64 over the bytes of s,
// followed by the XXH64 avalanche so that every output bit depends on every
// input bit (plain FNV-1a mixes its high bits poorly for short inputs). The
// value is the same in every process; String does not allocate.
//
// Use it for backend names (Maglev permutations, affinity cookie ids) and for
// request-derived keys such as a header or cookie value.
func String(s string) uint64 {
	h := fnvOffset64
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime64
	}
	return avalanche(h)
}

// Key2 returns the 2-tuple flow key of docs/design.md §4: source IP and
// destination IP. IPv4 and IPv4-mapped IPv6 forms of an address give the same
// key; zones are ignored; the zero Addr hashes as all zeroes. Key2 does not
// allocate.
func Key2(src, dst netip.Addr) uint64 {
	h := prime5 + tag2
	h = addr(h, src)
	h = addr(h, dst)
	return avalanche(h)
}

// Key3 returns the 3-tuple flow key: source IP, destination IP and protocol
// (the IANA protocol number, 6 for TCP, 17 for UDP). Address rules are those
// of Key2. Key3 does not allocate.
func Key3(src, dst netip.Addr, proto uint8) uint64 {
	h := prime5 + tag3
	h = addr(h, src)
	h = addr(h, dst)
	h = lane(h, uint64(proto))
	return avalanche(h)
}

// Key5 returns the 5-tuple flow key: source IP, destination IP, protocol,
// source port and destination port. Address rules are those of Key2. Key5
// does not allocate.
func Key5(src, dst netip.Addr, proto uint8, srcPort, dstPort uint16) uint64 {
	h := prime5 + tag5
	h = addr(h, src)
	h = addr(h, dst)
	h = lane(h, uint64(proto)|uint64(srcPort)<<8|uint64(dstPort)<<24)
	return avalanche(h)
}

// addr mixes the 16-byte form of a into h (As16 maps IPv4 to ::ffff:a.b.c.d,
// which is what makes IPv4 and IPv4-mapped IPv6 hash alike).
func addr(h uint64, a netip.Addr) uint64 {
	b := a.As16()
	h = lane(h, binary.BigEndian.Uint64(b[:8]))
	return lane(h, binary.BigEndian.Uint64(b[8:]))
}

// lane merges one 64-bit word into h with XXH64's round and merge step (the
// step XXH64 uses for the 8-byte tail of an input).
func lane(h, w uint64) uint64 {
	w *= prime2
	w = bits.RotateLeft64(w, 31)
	w *= prime1
	h ^= w
	return bits.RotateLeft64(h, 27)*prime1 + prime4
}

// avalanche is XXH64's final mix. It is a bijection on uint64.
func avalanche(h uint64) uint64 {
	h ^= h >> 33
	h *= prime2
	h ^= h >> 29
	h *= prime3
	h ^= h >> 32
	return h
}

package hashing

import (
	"hash/fnv"
	"net/netip"
	"testing"
)

func TestStringIsFNV1aThenAvalanche(t *testing.T) {
	for _, s := range []string{"", "a", "10.0.0.1:8080", "backend-with-a-rather-long-name.example.internal:443"} {
		f := fnv.New64a()
		f.Write([]byte(s))
		if got, want := String(s), avalanche(f.Sum64()); got != want {
			t.Errorf("String(%q) = %#x, want %#x", s, got, want)
		}
	}
}

// TestGolden pins the hash values: every gfe must compute the same keys and
// tables, and affinity cookies carry String values, so a change here is a
// wire-format change.
func TestGolden(t *testing.T) {
	a := netip.MustParseAddr("192.0.2.1")
	b := netip.MustParseAddr("198.51.100.7")
	tests := []struct {
		name string
		got  uint64
		want uint64
	}{
		{name: "String empty", got: String(""), want: 0x4fa8d3e0a94eaa96},
		{name: "String addr", got: String("10.0.0.1:8080"), want: 0x57df2d113935acde},
		{name: "Key2", got: Key2(a, b), want: 0x6fee8b376acc4688},
		{name: "Key3", got: Key3(a, b, 6), want: 0xfe9515713aba4185},
		{name: "Key5", got: Key5(a, b, 6, 40000, 443), want: 0xb35ae8d34815b046},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %#x, want %#x", tt.name, tt.got, tt.want)
		}
	}
}

func TestKeysNormalizeAddresses(t *testing.T) {
	v4 := netip.MustParseAddr("192.0.2.1")
	mapped := netip.MustParseAddr("::ffff:192.0.2.1")
	dst := netip.MustParseAddr("2001:db8::1")
	zoned := netip.MustParseAddr("2001:db8::1%eth0")
	if Key2(v4, dst) != Key2(mapped, dst) {
		t.Errorf("Key2(%v) != Key2(%v), want equal", v4, mapped)
	}
	if Key5(v4, dst, 6, 1, 2) != Key5(mapped, zoned, 6, 1, 2) {
		t.Errorf("Key5 differs between %v/%v and %v/%v, want equal", v4, dst, mapped, zoned)
	}
	// The zero Addr is a valid input and hashes like ::.
	if Key2(netip.Addr{}, dst) != Key2(netip.IPv6Unspecified(), dst) {
		t.Errorf("Key2(zero Addr) != Key2(::), want equal")
	}
}

// TestKeysSensitiveToEveryField checks that each tuple element changes the
// key, that elements outside the tuple do not, and that the three tuple
// kinds of one flow differ from each other.
func TestKeysSensitiveToEveryField(t *testing.T) {
	src := netip.MustParseAddr("192.0.2.1")
	src2 := netip.MustParseAddr("192.0.2.2")
	dst := netip.MustParseAddr("198.51.100.7")
	dst2 := netip.MustParseAddr("198.51.100.8")
	base5 := Key5(src, dst, 6, 40000, 443)
	for name, k := range map[string]uint64{
		"src":      Key5(src2, dst, 6, 40000, 443),
		"dst":      Key5(src, dst2, 6, 40000, 443),
		"proto":    Key5(src, dst, 17, 40000, 443),
		"src port": Key5(src, dst, 6, 40001, 443),
		"dst port": Key5(src, dst, 6, 40000, 444),
		"swapped":  Key5(dst, src, 6, 443, 40000),
	} {
		if k == base5 {
			t.Errorf("Key5 with a different %s = base key %#x, want different", name, k)
		}
	}
	if Key2(src, dst) == Key2(src2, dst) || Key2(src, dst) == Key2(src, dst2) {
		t.Errorf("Key2 ignores an address")
	}
	if Key3(src, dst, 6) == Key3(src, dst, 17) {
		t.Errorf("Key3 ignores the protocol")
	}
	if k2, k3 := Key2(src, dst), Key3(src, dst, 0); k2 == k3 {
		t.Errorf("Key2 = Key3(proto 0) = %#x, want different", k2)
	}
	if k3, k5 := Key3(src, dst, 6), Key5(src, dst, 6, 0, 0); k3 == k5 {
		t.Errorf("Key3 = Key5(ports 0) = %#x, want different", k3)
	}
}

// TestKey5Uniform buckets the keys of 65,536 flows that differ only in the
// source port (the weakest realistic input) into 64 buckets by their top bits
// and checks every bucket is within 10% of even (expected 1,024 per bucket,
// standard deviation 32, so 10% is over 3σ).
func TestKey5Uniform(t *testing.T) {
	src := netip.MustParseAddr("192.0.2.1")
	dst := netip.MustParseAddr("198.51.100.7")
	var buckets [64]int
	for p := 0; p < 1<<16; p++ {
		buckets[Key5(src, dst, 6, uint16(p), 443)>>58]++
	}
	const want = (1 << 16) / 64
	for b, got := range buckets {
		if got < want*9/10 || got > want*11/10 {
			t.Errorf("bucket %d has %d keys, want %d ± 10%%", b, got, want)
		}
	}
}

func TestKeysDoNotAllocate(t *testing.T) {
	src := netip.MustParseAddr("2001:db8::7")
	dst := netip.MustParseAddr("192.0.2.1")
	name := "10.0.0.1:8080"
	var sink uint64
	for fn, f := range map[string]func(){
		"Key2":   func() { sink += Key2(src, dst) },
		"Key3":   func() { sink += Key3(src, dst, 6) },
		"Key5":   func() { sink += Key5(src, dst, 6, 40000, 443) },
		"String": func() { sink += String(name) },
	} {
		if got := testing.AllocsPerRun(1000, f); got != 0 {
			t.Errorf("%s allocs/op = %v, want 0", fn, got)
		}
	}
	_ = sink
}

func BenchmarkKey5(b *testing.B) {
	b.ReportAllocs()
	src := netip.MustParseAddr("2001:db8::7")
	dst := netip.MustParseAddr("192.0.2.1")
	var sink uint64
	for i := 0; b.Loop(); i++ {
		sink += Key5(src, dst, 6, uint16(i), 443)
	}
	_ = sink
}

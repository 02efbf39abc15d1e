package testbackend

import (
	"cmp"
	"net/netip"
	"slices"
	"time"
)

// DelayTable holds the delay rules that apply to one region, ready for
// lookup. It is immutable after NewDelayTable and safe for concurrent use.
type DelayTable struct {
	// rules are sorted by decreasing prefix length, region-scoped rules
	// before global ones of the same length, so the first match wins.
	rules []DelayRule
}

// NewDelayTable returns the table of the rules that apply to instances of
// region: the global rules and those scoped to region.
func NewDelayTable(rules []DelayRule, region string) *DelayTable {
	t := &DelayTable{}
	for _, r := range rules {
		if r.Region == "" || r.Region == region {
			r.Prefix = r.Prefix.Masked()
			t.rules = append(t.rules, r)
		}
	}
	slices.SortStableFunc(t.rules, func(a, b DelayRule) int {
		if c := cmp.Compare(b.Prefix.Bits(), a.Prefix.Bits()); c != 0 {
			return c
		}
		switch ar, br := a.Region != "", b.Region != ""; {
		case ar && !br:
			return -1 // region-scoped first
		case !ar && br:
			return 1
		}
		return 0
	})
	return t
}

// Lookup returns the RTT for a caller at addr: that of the rule with the
// longest prefix containing addr, preferring a region-scoped rule over a
// global one of the same length; 0 when no rule matches. IPv4-mapped IPv6
// addresses match IPv4 rules.
func (t *DelayTable) Lookup(addr netip.Addr) time.Duration {
	addr = addr.Unmap()
	for _, r := range t.rules {
		if r.Prefix.Contains(addr) {
			return r.RTT
		}
	}
	return 0
}

// sourceKey returns the /24 (IPv4) or /64 (IPv6) of addr, the granularity at
// which Stats counts callers.
func sourceKey(addr netip.Addr) netip.Prefix {
	addr = addr.Unmap()
	bits := 24
	if addr.Is6() {
		bits = 64
	}
	p, err := addr.Prefix(bits)
	if err != nil {
		return netip.Prefix{}
	}
	return p
}

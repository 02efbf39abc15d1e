package waterfall

import (
	"fmt"
	"strconv"
)

// Reason says why a flow's demand is in its region. Compute tracks, for every
// unit of a site's demand, the cause of its most recent move down the site's
// region order; a flow's Reason is the cause behind the larger part of it,
// ties going to the earlier constant.
type Reason uint8

const (
	// ReasonNearest: the demand is in the nearest region the site reaches
	// (rule 1).
	ReasonNearest Reason = iota
	// ReasonSpillCapacity: the demand left a nearer region because that
	// region was full (rule 4; with rule 6, full means at Lambda·Capacity).
	ReasonSpillCapacity
	// ReasonSpillHealth: the demand left a nearer region that spilled it
	// preemptively because fewer than SpillThreshold of its instances are
	// healthy (rule 5).
	ReasonSpillHealth
	// ReasonOverload: every region the site reaches was full, so the demand
	// was placed above Lambda·Capacity, in proportion to the capacity of
	// those regions. Happens only when some site reaches only part of the
	// regions.
	ReasonOverload

	// NumReasons is the number of Reasons, for arrays of counters indexed
	// by Reason.
	NumReasons = int(ReasonOverload) + 1
)

var reasonNames = [NumReasons]string{"nearest", "spill_capacity", "spill_health", "overload"}

// String returns the reason's stable snake_case name ("nearest",
// "spill_capacity", "spill_health", "overload"), suitable as a metric label.
func (r Reason) String() string {
	if int(r) < NumReasons {
		return reasonNames[r]
	}
	return "Reason(" + strconv.Itoa(int(r)) + ")"
}

// MarshalText returns String, so that JSON plans show names.
func (r Reason) MarshalText() ([]byte, error) {
	if int(r) >= NumReasons {
		return nil, fmt.Errorf("waterfall: unknown reason %d", r)
	}
	return []byte(r.String()), nil
}

// UnmarshalText parses a name returned by String.
func (r *Reason) UnmarshalText(b []byte) error {
	for i, n := range reasonNames {
		if n == string(b) {
			*r = Reason(i)
			return nil
		}
	}
	return fmt.Errorf("waterfall: unknown reason %q", b)
}

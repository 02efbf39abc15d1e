package waterfall

import (
	"math"
	"time"

	"github.com/spillway-lb/spillway/lb/backend"
	"github.com/spillway-lb/spillway/lb/loadaware"
)

// Choice is what Pick chose: a backend with one concurrency slot taken, and
// the plan cell it came from. The caller must call Done (once) when the
// request finishes.
type Choice struct {
	Backend *backend.Backend
	Region  string
	Group   string
	// Reason is the Reason of the plan flow the group came from.
	Reason Reason
	// Endpoint is Backend's load-aware state when the Picker chooses
	// inside groups by a loadaware.Chooser (NewPickerLoadAware): the
	// caller reports the answer's latency to it (Chooser.Observe). Nil
	// otherwise.
	Endpoint *loadaware.Endpoint
}

// Done releases the backend slot the Choice holds.
func (c Choice) Done() { c.Backend.Release() }

// Picker turns one site's plan row into backend choices. It is an immutable
// snapshot: NewPicker copies what it needs, and nothing in a Picker changes
// afterwards except its round-robin cursors and its Backends' counters, which
// are accessed atomically. Callers hold the current Picker in an
// atomic.Pointer[Picker], Load it once per request, and Store a new one when
// the plan, the health or the backend set changes. All methods are safe for
// concurrent use and never block.
type Picker struct {
	// Immutable after NewPicker.
	policy backend.Policy
	// chooser, when not nil, chooses inside groups instead of policy,
	// from the groups' endpoints (NewPickerLoadAware).
	chooser *loadaware.Chooser
	// bound[i] is the exclusive upper end of the random values that choose
	// groups[i] (cumulative plan shares scaled to 2^64); the last is
	// MaxUint64, which also takes the value MaxUint64 itself.
	bound  []uint64
	groups []pickGroup
	// last is the index of the last group with a positive share: Pick's
	// first choice is never beyond it (groups after it, of share 0, are
	// only fallbacks).
	last int
}

type pickGroup struct {
	// Immutable after NewPicker.
	region, group string
	reason        Reason
	// backends are the group's active backends, demoted its demoted ones
	// (config.Instance.Demoted): tried only when no active one takes the
	// request.
	backends []*backend.Backend
	demoted  []*backend.Backend
	// endpoints and dendpoints are the load-aware states of backends and
	// demoted, index for index, when the Picker has a chooser.
	endpoints, dendpoints []*loadaware.Endpoint

	// Accessed atomically, on a cache line of their own: the round-robin
	// cursors are written on every pick, the fields above only read.
	_       [64]byte
	cursor  backend.RoundRobin
	dcursor backend.RoundRobin // over demoted
	_       [48]byte
}

// NewPicker builds a Picker for row, a site's plan row (Plan.Row), whose
// group g may use backends[g]: the healthy backends of g only. Groups keep
// the row's order, which is the fallback order when a group is full, and
// are chosen with probability proportional to their Share; a group of
// share 0 is never a first choice, only a fallback (an overflow group). Groups without
// backends are left out and their share is spread over the others in
// proportion; if no group has a backend, or the row is empty, Pick returns
// ErrNoCapacity. policy chooses the backend inside a group; each group has
// its own round-robin cursor, starting at its first backend. NewPicker
// copies row and the backend slices (not the Backends). It is
// NewPickerDemoted without demoted backends.
func NewPicker(row []Flow, backends map[string][]*backend.Backend, policy backend.Policy) *Picker {
	return NewPickerDemoted(row, backends, nil, policy)
}

// NewPickerDemoted is NewPicker for groups that also hold demoted backends
// (config.Instance.Demoted: instances the autoscaler scaled down, or an
// operator's warm standby): group g's active backends are backends[g] and
// its demoted ones demoted[g], healthy ones only in both. Pick tries a
// group's demoted backends only when none of its active ones takes the
// request (see Pick). A group with demoted backends and no active one is
// kept, but only as a fallback, whatever its share: it has no planned
// capacity. When no group has a positive share, the shares are spread
// evenly over the groups with active backends (over every group if none
// has one). demoted may be nil.
func NewPickerDemoted(row []Flow, backends, demoted map[string][]*backend.Backend, policy backend.Policy) *Picker {
	p := &Picker{policy: policy}
	n := 0
	for _, f := range row {
		if len(backends[f.Group]) > 0 || len(demoted[f.Group]) > 0 {
			n++
		}
	}
	p.groups = make([]pickGroup, n)
	p.bound = make([]uint64, n)
	weights := make([]float64, 0, n)
	var total float64
	anyActive := false
	for _, f := range row {
		bs, ds := backends[f.Group], demoted[f.Group]
		if len(bs) == 0 && len(ds) == 0 {
			continue
		}
		g := &p.groups[len(weights)]
		g.region, g.group, g.reason = f.Region, f.Group, f.Reason
		g.backends = append([]*backend.Backend(nil), bs...)
		g.demoted = append([]*backend.Backend(nil), ds...)
		w := max(f.Share, 0)
		if len(bs) == 0 {
			w = 0 // demoted only: a fallback
		} else {
			anyActive = true
		}
		weights = append(weights, w)
		total += w
	}
	if total <= 0 || math.IsInf(total, 1) || total != total { // no usable shares: spread evenly
		total = 0
		for i := range weights {
			weights[i] = 0
			if !anyActive || len(p.groups[i].backends) > 0 {
				weights[i] = 1
				total++
			}
		}
	}
	var cum float64
	for i, w := range weights {
		cum += w
		p.bound[i] = scale64(cum / total)
		if w > 0 {
			p.last = i
		}
	}
	for i := p.last; i < n; i++ {
		p.bound[i] = math.MaxUint64
	}
	return p
}

// PickerGroup is one group a Picker chooses from, as Groups reports it.
type PickerGroup struct {
	Region, Group string
	Reason        Reason
	// Share is the probability that Pick chooses the group for a uniformly
	// random rnd, before it falls back to another group because this one is
	// full: the group's plan share, renormalised over the groups with
	// backends (exactly the width of its interval of rnd values).
	Share float64
	// Backends are the group's active backends, from which the Picker's
	// policy chooses one, and Demoted its demoted backends, tried only
	// when no active one takes a request. The slices must not be
	// modified.
	Backends []*backend.Backend
	Demoted  []*backend.Backend
}

// Groups returns the groups the Picker chooses from, in row order, with
// the probability of each: what Pick does on average, for callers that
// need the distribution rather than a choice (the simulator). Read-only;
// it allocates.
func (p *Picker) Groups() []PickerGroup {
	const two64 = 1 << 64
	out := make([]PickerGroup, len(p.groups))
	var lo uint64
	for i := range p.groups {
		g := &p.groups[i]
		// Pick chooses group i for rnd in [bound[i-1], bound[i]), and the
		// last group also for MaxUint64 itself.
		width := float64(p.bound[i] - lo)
		switch {
		case i == p.last:
			width = float64(math.MaxUint64-lo) + 1
		case i > p.last:
			width = 0
		}
		lo = p.bound[i]
		out[i] = PickerGroup{Region: g.region, Group: g.group, Reason: g.reason, Share: width / two64, Backends: g.backends, Demoted: g.demoted}
	}
	return out
}

// scale64 maps f in [0, 1] to [0, 2^64), saturating.
func scale64(f float64) uint64 {
	const two64 = 1 << 64
	if v := f * two64; v < two64 {
		return uint64(v)
	}
	return math.MaxUint64
}

// Pick chooses a backend for one request, given rnd, a uniformly random
// uint64 (callers pass rand.Uint64() or a seeded source in tests; the same
// rnd on the same state picks the same backend). It chooses a group with
// probability equal to its plan share, then a backend inside it by the
// Picker's policy (backend.Policy.Acquire), skipping backends at their
// concurrency limit; when every active backend of the group is full it
// tries the group's demoted backends (NewPickerDemoted) by the same
// policy, and when those are full too the row's other groups in plan order
// (nearest first), each the same way. A demoted backend is thus used
// before the request leaves its group: a local demoted instance keeps the
// request closer than the next region would. When soft limits
// (backend.Backend.SetSoftLimit) turn it away from every group, it tries
// again the same way under the configured limits only: soft limits move
// requests to another group, they never refuse one. The returned Choice
// holds one slot of its Backend: call Done when the request ends. Pick
// returns ErrAllBusy when every backend is at its configured limit and
// ErrNoCapacity when the Picker has no backend at all. Pick does not
// allocate.
func (p *Picker) Pick(rnd uint64) (Choice, error) {
	return p.PickAt(rnd, time.Time{})
}

// PickAt is Pick at now, the time at which a load-aware Picker
// (NewPickerLoadAware) reads its endpoints' costs; other Pickers ignore
// now. A load-aware Picker must be picked from with PickAt: through Pick
// it reads them at the zero time. PickAt does not allocate.
func (p *Picker) PickAt(rnd uint64, now time.Time) (Choice, error) {
	n := len(p.groups)
	if n == 0 {
		return Choice{}, ErrNoCapacity
	}
	// Binary search for the first bound above rnd, among the groups up to
	// the last with a share.
	lo, hi := 0, p.last
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if rnd < p.bound[m] {
			hi = m
		} else {
			lo = m + 1
		}
	}
	// Inside the group, use bits independent of those that chose it.
	inner := mix64(rnd)
	// First under every limit; when the backends' soft limits (preferences
	// set from measurements) turn the request away everywhere, again under
	// their configured limits only, from the group it chose.
	for _, hard := range [2]bool{false, true} {
		if c, ok := p.pickIn(lo, inner, hard, now); ok {
			return c, nil
		}
		for i := range n {
			if i == lo {
				continue
			}
			if c, ok := p.pickIn(i, inner, hard, now); ok {
				return c, nil
			}
		}
	}
	return Choice{}, ErrAllBusy
}

// pickIn tries to take a backend of group gi by the Picker's policy (or
// its chooser, at now), under the configured limits only when hard: an
// active backend, else a demoted one.
func (p *Picker) pickIn(gi int, rnd uint64, hard bool, now time.Time) (Choice, bool) {
	g := &p.groups[gi]
	if p.chooser != nil {
		return p.chooseIn(g, rnd, hard, now)
	}
	acquire := p.policy.Acquire
	if hard {
		acquire = p.policy.AcquireHard
	}
	bs := g.backends
	i, ok := acquire(bs, &g.cursor, rnd)
	if !ok {
		if len(g.demoted) == 0 {
			return Choice{}, false
		}
		bs = g.demoted
		if i, ok = acquire(bs, &g.dcursor, rnd); !ok {
			return Choice{}, false
		}
	}
	return Choice{Backend: bs[i], Region: g.region, Group: g.group, Reason: g.reason}, true
}

// mix64 is the SplitMix64 finalizer: a bijection on uint64 whose output bits
// each depend on all input bits.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

package routing

import (
	"math"
	"time"

	"github.com/spillway-lb/spillway/lb/backend"
)

// The picks beyond the policy's: a retry's backend (RetryPick), a tcp
// connection's spill to the nearest free backend (NearestFree), and whether
// a backend may keep its connections (Available).

// retryTier returns the preference tier of m as the backend of a retry
// after attempts on the backends tried (members of s's reach). After a
// failure that says nothing of the region (the backend took the request
// and failed before answering): 0 another zone of a region tried, 1 a
// region not tried, 2 a zone tried. After an unreachable backend (connect
// failure, per-try timeout), whose whole region may be cut off: 0 a
// region not tried, 1 another zone of a region tried, 2 a zone tried.
// newRegion reports whether m's region is not tried yet.
func (s *Service) retryTier(m *Member, tried []*backend.Backend, unreachable bool) (tier int, newRegion bool) {
	regionTried, zoneTried := false, false
	for _, b := range tried {
		i, ok := s.byBackend[b]
		if !ok {
			continue
		}
		t := &s.reach[i]
		if t.Region == m.Region {
			regionTried = true
			zoneTried = zoneTried || t.Zone == m.Zone
		}
	}
	switch {
	case zoneTried:
		return 2, false
	case !regionTried && unreachable, regionTried && !unreachable:
		return 0, !regionTried
	}
	return 1, !regionTried
}

// RetryPick picks the backend of another attempt of a request whose
// attempts went to tried (the last one, failed, included), and returns
// false when there is none. unreachable says the last attempt found its
// backend unreachable: connecting failed, or no response headers came
// within the route's per_try_timeout.
//
// The candidates are the service's scope minus tried, and after an
// unreachable backend also the farther regions of a planned policy's
// reach (Service.reach): the site's regions the plan row does not reach,
// nearest first, so that a retry leaves a region whose host or link is
// down even when the row has no other region. Among the available ones
// (not full, not ejected) it takes one of the best tier (retryTier),
// active before demoted members inside a tier — in the tier of regions not
// tried, of the nearest region (row order, then the site's order) — the
// first found from a position drawn from rnd, so that retries spread. The returned pick holds a slot and keeps failed's
// reason. It returns false for a drained service. It does not allocate.
func (s *Service) RetryPick(failed *Pick, tried []*backend.Backend, unreachable bool, rnd uint64, now time.Time) (Pick, bool) {
	cands := s.scope
	if unreachable {
		cands = s.reach
	}
	n := len(cands)
	if n == 0 || s.drained {
		return Pick{}, false
	}
	start := int(rnd % uint64(n))
	// A concurrent pick may take the chosen slot; look again a few times.
	for range 3 {
		best, bestKey := -1, math.MaxInt
		for j := range n {
			i := (start + j) % n
			m := &cands[i]
			if m.B == failed.Backend || containsBackend(tried, m.B) || m.B.Full() || (m.Host != nil && m.Host.Ejected(now)) {
				continue
			}
			tier, newRegion := s.retryTier(m, tried, unreachable)
			tier *= 2
			if m.Demoted {
				tier++ // after the tier's active members
			}
			key := tier * (n + 1)
			if newRegion {
				key += m.rank // the nearest region first
			}
			if key < bestKey {
				best, bestKey = i, key
			}
		}
		if best < 0 {
			return Pick{}, false
		}
		m := &cands[best]
		if m.B.TryAcquire() {
			return pickOf(m, failed.Reason), true
		}
	}
	return Pick{}, false
}

func containsBackend(bs []*backend.Backend, b *backend.Backend) bool {
	for _, x := range bs {
		if x == b {
			return true
		}
	}
	return false
}

// NearestFree takes a slot on the healthy backend of the service's pool,
// other than exclude, in the region with the lowest RTT in rtt (regions
// without an RTT last), active before demoted there, and with the fewest
// connections in flight (ties: pool order), and returns its pick under
// reason r. It returns
// ErrNoBackend when the pool has no backend but exclude, ErrAllBusy
// when every other one is full, and ErrDrained for a drained service.
func (s *Service) NearestFree(rtt map[string]float64, exclude string, r Reason) (Pick, error) {
	if s.drained {
		return Pick{}, ErrDrained
	}
	others := 0
	// A concurrent pick may take the chosen slot: look again a few times.
	for range 4 {
		best := -1
		others = 0
		for i, m := range s.pool {
			if m.B.Addr() == exclude {
				continue
			}
			others++
			if m.B.Full() {
				continue
			}
			if best < 0 {
				best = i
				continue
			}
			bm := s.pool[best]
			d := rttOf(rtt, m.Region) - rttOf(rtt, bm.Region)
			switch {
			case d < 0:
				best = i
			case d > 0:
			case m.Demoted != bm.Demoted:
				if !m.Demoted {
					best = i
				}
			case m.B.InFlight() < bm.B.InFlight():
				best = i
			}
		}
		if best < 0 {
			break
		}
		m := s.pool[best]
		if m.B.TryAcquire() {
			return Pick{Backend: m.B, Group: m.Group, Region: m.Region, Reason: r}, nil
		}
	}
	if others == 0 {
		return Pick{}, ErrNoBackend
	}
	return Pick{}, ErrAllBusy
}

// Available reports whether backend addr may keep the connections of
// service in cs: it is one of the service's instances and not unhealthy. A
// nil cs (no snapshot yet) keeps everything.
func Available(cs *Fleet, service, addr string) bool {
	if cs == nil {
		return true
	}
	if !cs.Healthy(addr) {
		return false
	}
	sc, ok := cs.Config.Service(service)
	if !ok {
		return false
	}
	for _, b := range sc.Backends {
		ref, ok := cs.Config.Group(b.Group)
		if !ok {
			continue
		}
		for _, in := range ref.Group.Instances {
			if in.Address == addr {
				return true
			}
		}
	}
	return false
}

package routing

import (
	"math"
	"time"

	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/lb/backend"
)

// The picks beyond the policy's: a retry's backend (RetryPick), a tcp
// connection's spill to the nearest free backend (NearestFree), and whether
// a backend may keep its connections (Available).

// retryTier returns the preference tier of m as the backend of a retry
// after attempts on the backends tried (members of s's scope): 0 another
// zone of a region tried, 1 a region not tried, 2 a zone tried. After one
// attempt: another zone of its region, another region, its zone.
func (s *Service) retryTier(m *Member, tried []*backend.Backend) int {
	regionTried, zoneTried := false, false
	for _, b := range tried {
		i, ok := s.byBackend[b]
		if !ok {
			continue
		}
		t := &s.scope[i]
		if t.Region == m.Region {
			regionTried = true
			zoneTried = zoneTried || t.Zone == m.Zone
		}
	}
	switch {
	case zoneTried:
		return 2
	case regionTried:
		return 0
	}
	return 1
}

// RetryPick picks the backend of another attempt of a request whose
// attempts went to tried (the last one, failed, included), among the
// service's scope minus tried: an available backend of the best tier
// (retryTier) — in tier 1, of the nearest region, the one whose backends
// come first in the scope — the first found from a position drawn from rnd,
// so that retries spread. The returned pick holds a slot and keeps failed's
// reason. It returns false when no backend is available, and for a drained
// service. It does not allocate.
func (s *Service) RetryPick(failed *Pick, tried []*backend.Backend, rnd uint64, now time.Time) (Pick, bool) {
	n := len(s.scope)
	if n == 0 || s.drained {
		return Pick{}, false
	}
	start := int(rnd % uint64(n))
	// A concurrent pick may take the chosen slot; look again a few times.
	for range 3 {
		best, bestKey := -1, math.MaxInt
		for j := range n {
			i := (start + j) % n
			m := &s.scope[i]
			if m.B == failed.Backend || containsBackend(tried, m.B) || m.B.Full() || (m.Host != nil && m.Host.Ejected(now)) {
				continue
			}
			tier := s.retryTier(m, tried)
			key := tier * (n + 1)
			if tier == 1 {
				key += m.rank
			}
			if key < bestKey {
				best, bestKey = i, key
			}
		}
		if best < 0 {
			return Pick{}, false
		}
		m := &s.scope[best]
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
// without an RTT last) and with the fewest connections in flight there
// (ties: pool order), and returns its pick under reason r. It returns
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
			if d := rttOf(rtt, m.Region) - rttOf(rtt, bm.Region); d < 0 || (d == 0 && m.B.InFlight() < bm.B.InFlight()) {
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
func Available(cs *snapshot.Snapshot, service, addr string) bool {
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

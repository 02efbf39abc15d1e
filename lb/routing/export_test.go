package routing

import "github.com/spillway-lb/spillway/lb/backend"

// Internals the external tests (package routing_test) use.
var (
	OutlierConfig    = outlierConfig
	AffinityConfig   = affinityConfig
	SessionCookieTTL = sessionCookieTTL
	PickOf           = pickOf
)

// ReachMember returns the member of the service's reach (scope, then the
// farther regions a retry of an unreachable backend may use) with address
// addr.
func (s *Service) ReachMember(addr string) (*Member, bool) {
	i, ok := s.byBackend[s.backendOf(addr)]
	if !ok {
		return nil, false
	}
	return &s.reach[i], true
}

func (s *Service) backendOf(addr string) *backend.Backend {
	for i := range s.reach {
		if s.reach[i].B.Addr() == addr {
			return s.reach[i].B
		}
	}
	return nil
}

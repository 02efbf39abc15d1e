package sim

import (
	"fmt"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/priority"
)

// priorityFlows returns the flows of envoy_priority: each site's regions
// in its region order (RegionOrder: those in its rtt_ms, nearest first) are
// its priority levels 0, 1, ...; each level receives the share of the
// site's demand lb/priority's Loads gives it from the levels' health
// (healthy over all instances of the region's groups that are not drained,
// overprovisioning 1.4), spread over the level's groups by their healthy
// instances. Capacity plays no part.
func (s *Scenario) priorityFlows() ([]Flow, error) {
	var flows []Flow
	for _, st := range s.Sites {
		if st.DemandRPS == 0 {
			continue
		}
		order := s.RegionOrder(st)
		levels := make([]priority.Level, len(order))
		for i, name := range order {
			for _, g := range s.region(name).Groups {
				if g.RatePerInstance > 0 && g.CapacityScaler > 0 {
					levels[i].Total += g.Instances
					levels[i].Healthy += g.Healthy
				}
			}
		}
		loads := priority.Loads(levels, priority.DefaultOverprovisioning)
		served := false
		for i, name := range order {
			if loads[i] == 0 {
				continue
			}
			served = true
			for _, g := range s.region(name).Groups {
				if g.Capacity() > 0 {
					flows = append(flows, Flow{
						Site:   st.Name,
						Region: name,
						Group:  g.Name,
						RPS:    st.DemandRPS * float64(loads[i]) / 100 * float64(g.Healthy) / float64(levels[i].Healthy),
					})
				}
			}
		}
		if !served {
			return nil, fmt.Errorf("site %q, policy %s: %w", st.Name, config.PolicyEnvoyPriority, ErrUnservable)
		}
	}
	return flows, nil
}

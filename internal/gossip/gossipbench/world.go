package gossipbench

import (
	"fmt"
	"math/rand/v2"

	"github.com/spillway-lb/spillway/internal/gossip"
)

// World is the size of the deployment whose gfe states the nodes publish.
type World struct {
	// Services is the number of backend services; every gfe publishes a
	// demand for each (its site receives traffic for all of them).
	Services int
	// Regions is the number of backend regions; every gfe publishes an
	// RTT to each (it probes them all).
	Regions int
	// LoadedGroups is the number of instance groups each gfe has load on
	// (publishes a GroupLoad for): with the waterfall a site sends each
	// service to its nearest region or two, so about one per service.
	LoadedGroups int
	// GFEsPerSite is how many gfes share a site name.
	GFEsPerSite int
}

// DefaultWorld is 20 services in 40 regions, each gfe loading one group
// per service, 5 gfes per site (200 sites at 1,000 nodes).
func DefaultWorld() World {
	return World{Services: 20, Regions: 40, LoadedGroups: 20, GFEsPerSite: 5}
}

func (w World) validate() error {
	if w.Services < 1 || w.Regions < 1 || w.LoadedGroups < 0 || w.GFEsPerSite < 1 {
		return fmt.Errorf("gossipbench: world needs services >= 1, regions >= 1, loaded groups >= 0 and gfes per site >= 1, got %+v", w)
	}
	return nil
}

// gfeState returns the state gfe number i publishes: the numbers a gfe's
// planner publishes every plan interval (internal/gfe: Demand, RTT, Load),
// smoothed measurements with all the digits a float64 carries, drawn from
// r. Capacity factors are omitted: a gfe lists only groups its own signals
// shrank, which a healthy world has none of.
func (w World) gfeState(i int, r *rand.Rand) gossip.NodeState {
	s := gossip.NodeState{
		Kind:   gossip.KindGFE,
		Site:   fmt.Sprintf("site-%03d", i/w.GFEsPerSite),
		Demand: make(map[string]float64, w.Services),
		RTT:    make(map[string]float64, w.Regions),
		Load:   make(map[string]gossip.GroupLoad, w.LoadedGroups),
	}
	for j := range w.Services {
		s.Demand[fmt.Sprintf("service-%02d", j)] = 10 + 990*r.Float64()
	}
	for j := range w.Regions {
		s.RTT[fmt.Sprintf("region-%02d", j)] = 1 + 250*r.Float64()
	}
	for j := range w.LoadedGroups {
		s.Load[fmt.Sprintf("service-%02d-region-%02d", j%w.Services, (i+j)%w.Regions)] = gossip.GroupLoad{
			InFlight: 50 * r.Float64(),
			Requests: 1000 * r.Float64(),
		}
	}
	return s
}

// drift returns s with every measurement moved by up to ±2%, as the next
// plan interval's smoothed numbers would be.
func drift(s gossip.NodeState, r *rand.Rand) gossip.NodeState {
	s = s.Clone()
	jitter := func(v float64) float64 { return v * (0.98 + 0.04*r.Float64()) }
	for k, v := range s.Demand {
		s.Demand[k] = jitter(v)
	}
	for k, v := range s.RTT {
		s.RTT[k] = jitter(v)
	}
	for k, l := range s.Load {
		l.InFlight, l.Requests = jitter(l.InFlight), jitter(l.Requests)
		s.Load[k] = l
	}
	return s
}

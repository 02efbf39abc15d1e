package edge

import (
	"slices"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/lb/waterfall"
)

// self is this node's own view, which overrides whatever gossip last carried
// about it (gossip lags by up to one publish).
type self struct {
	node   string
	site   string
	rtt    map[string]float64
	demand map[string]float64 // service -> rps
}

// buildWorld returns the planner input for service svc: one Region per
// region that holds one of svc's groups, with each group's healthy capacity,
// and one Site per edge site known from gossip (plus this node's), with the
// site's total demand for svc and its mean RTT to each region. A site whose
// gfes have measured no RTT to any of svc's regions is left out: the planner
// could not place its demand. buildWorld is pure.
func buildWorld(cfg *config.Config, svc *config.Service, unhealthy map[string]bool, states map[string]gossip.NodeState, me self) waterfall.World {
	var w waterfall.World
	regionIdx := map[string]int{}
	for i := range svc.Backends {
		b := &svc.Backends[i]
		ref, ok := cfg.Group(b.Group)
		if !ok {
			continue // validated away by config; kept safe
		}
		instances := len(ref.Group.Instances)
		healthy := 0
		for _, in := range ref.Group.Instances {
			if !unhealthy[in.Address] {
				healthy++
			}
		}
		g := waterfall.Group{
			Name:      ref.Group.Name,
			Zone:      ref.Zone.Name,
			Instances: instances,
			Healthy:   healthy,
			Capacity:  b.Capacity(svc.BalancingMode, healthy, instances),
		}
		ri, ok := regionIdx[ref.Region.Name]
		if !ok {
			ri = len(w.Regions)
			regionIdx[ref.Region.Name] = ri
			w.Regions = append(w.Regions, waterfall.Region{Name: ref.Region.Name})
		}
		w.Regions[ri].Groups = append(w.Regions[ri].Groups, g)
	}

	type acc struct {
		demand float64
		rttSum map[string]float64
		rttN   map[string]int
	}
	sites := map[string]*acc{}
	add := func(site string, demand float64, rtt map[string]float64) {
		a := sites[site]
		if a == nil {
			a = &acc{rttSum: map[string]float64{}, rttN: map[string]int{}}
			sites[site] = a
		}
		a.demand += demand
		for r, v := range rtt {
			if _, ok := regionIdx[r]; ok {
				a.rttSum[r] += v
				a.rttN[r]++
			}
		}
	}
	for name, st := range states {
		if st.Kind != gossip.KindGFE || name == me.node || st.Site == "" {
			continue
		}
		add(st.Site, st.Demand[svc.Name], st.RTT)
	}
	add(me.site, me.demand[svc.Name], me.rtt)

	names := make([]string, 0, len(sites))
	for n := range sites {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		a := sites[n]
		if len(a.rttN) == 0 {
			continue
		}
		rtt := make(map[string]float64, len(a.rttN))
		for r, k := range a.rttN {
			rtt[r] = a.rttSum[r] / float64(k)
		}
		w.Sites = append(w.Sites, waterfall.Site{Name: n, Demand: a.demand, RTT: rtt})
	}
	return w
}

// nearestRegion returns the region with the lowest RTT in rtt among those
// for which ok returns true (ties by name), or "" if none.
func nearestRegion(rtt map[string]float64, ok func(region string) bool) string {
	best, bestRTT := "", 0.0
	for r, v := range rtt {
		if !ok(r) {
			continue
		}
		if best == "" || v < bestRTT || (v == bestRTT && r < best) {
			best, bestRTT = r, v
		}
	}
	return best
}

package routing

import (
	"cmp"
	"math"
	"slices"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/waterfall"
)

// BuildWorld returns the planner input for service svc of fleet s: one
// Region per region that holds one of svc's groups, with each group's
// healthy capacity (config.Backend.Capacity of its healthy active
// instances, s.HealthyActiveCount, over its active ones: demoted
// instances count for nothing, and an empty autoscaled group has capacity
// 0 and no instances) times svc's
// TargetUtilization times its factor in factor (1 when absent: see
// mergeFactors),
// and one Site per edge site known from peers (plus me's), with the site's
// total demand for svc and its RTT to each region: the median over the
// site's gfes, me's own measurement breaking an even count at me's site
// (siteRTT), so that one lying gfe cannot move a site (the first security
// review, finding 1b). The RTTs are in Site.RTTByRegion, one per region of
// the World in its order, +Inf for a region none of the site's gfes has
// measured (the form the planner reads without a map per site; RTT is
// nil; World.SiteRTT gives them by name). A peer with me's node name is
// ignored (me is newer than what gossip carries about this node). A site
// whose gfes have measured no RTT to any of svc's regions is left out: the
// planner could not place its demand. BuildWorld is pure.
func BuildWorld(s *Fleet, svc *config.Service, peers []Peer, me Peer, factor map[string]float64) waterfall.World {
	cfg := s.Config
	var w waterfall.World
	regionIdx := map[string]int{}
	for i := range svc.Backends {
		b := &svc.Backends[i]
		ref, ok := cfg.Group(b.Group)
		if !ok {
			continue // validated away by config; kept safe
		}
		instances := ref.Group.ActiveInstances()
		healthy := s.HealthyActiveCount(ref.Group.Instances)
		g := waterfall.Group{
			Name:      ref.Group.Name,
			Zone:      ref.Zone.Name,
			Instances: instances,
			Healthy:   healthy,
			Capacity:  b.Capacity(svc.BalancingMode, healthy, instances) * svc.TargetUtilization * factorOf(factor, ref.Group.Name),
		}
		ri, ok := regionIdx[ref.Region.Name]
		if !ok {
			ri = len(w.Regions)
			regionIdx[ref.Region.Name] = ri
			w.Regions = append(w.Regions, waterfall.Region{Name: ref.Region.Name})
		}
		w.Regions[ri].Groups = append(w.Regions[ri].Groups, g)
	}

	// Per site: its demand and its gfes' RTT maps, in peer order (me
	// last). Nothing is allocated per (site, region) pair: a gfe plans a
	// thousand sites × a hundred regions every plan interval.
	type acc struct {
		demand float64
		rtts   []map[string]float64
	}
	sites := map[string]*acc{}
	add := func(site string, demand float64, rtt map[string]float64) {
		a := sites[site]
		if a == nil {
			a = &acc{}
			sites[site] = a
		}
		a.demand += demand
		if len(rtt) > 0 {
			a.rtts = append(a.rtts, rtt)
		}
	}
	for _, p := range peers {
		if p.Node == me.Node || p.Site == "" {
			continue
		}
		add(p.Site, p.Demand[svc.Name], p.RTT)
	}
	add(me.Site, me.Demand[svc.Name], me.RTT)

	names := make([]string, 0, len(sites))
	for n, a := range sites {
		if len(a.rtts) > 0 {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	nr := len(w.Regions)
	// Each site's RTTs, one row of arena; vs[ri*stride:] holds the
	// site's gfes' values for region ri (one slot spare for siteRTT's
	// own measurement), n[ri] how many.
	arena := make([]float64, len(names)*nr)
	var vs []float64
	n := make([]int, nr)
	for si, name := range names {
		a := sites[name]
		rtt := arena[si*nr : (si+1)*nr : (si+1)*nr]
		for ri := range rtt {
			rtt[ri] = math.Inf(1)
		}
		stride := len(a.rtts) + 1
		if len(a.rtts) > 1 {
			vs = slices.Grow(vs[:0], stride*nr)[:stride*nr]
			clear(n)
		}
		for _, m := range a.rtts {
			for r, v := range m {
				ri, ok := regionIdx[r]
				switch {
				case !ok:
				case len(a.rtts) == 1:
					rtt[ri] = v // the median of one value
				default:
					vs[ri*stride+n[ri]] = v
					n[ri]++
				}
			}
		}
		if len(a.rtts) > 1 {
			for ri := range rtt {
				if n[ri] == 0 {
					continue
				}
				own, hasOwn := math.NaN(), false
				if name == me.Site {
					own, hasOwn = me.RTT[w.Regions[ri].Name]
				}
				rtt[ri] = siteRTT(vs[ri*stride:ri*stride+n[ri]:(ri+1)*stride], own, hasOwn)
			}
		}
		if !slices.ContainsFunc(rtt, func(v float64) bool { return !math.IsInf(v, 1) }) {
			continue // measured only regions svc has no group in
		}
		w.Sites = append(w.Sites, waterfall.Site{Name: name, Demand: a.demand, RTTByRegion: rtt})
	}
	return w
}

// siteRTT combines a site's gfes' RTTs to one region (vs, in any order; it
// is sorted in place) into the site's RTT: their median, so that one gfe
// that lies (or measures nonsense) among three or more cannot move it
// beyond the honest ones' range. For this gfe's own site (hasOwn, with its
// own measurement own among vs) an even count is made odd by counting own
// twice, so that one liar among two gfes cannot move it at all: a gfe
// trusts its own measurement over one other claim. An even count at
// another site takes the mean of the two middle values.
func siteRTT(vs []float64, own float64, hasOwn bool) float64 {
	if len(vs)%2 == 0 && hasOwn {
		vs = append(vs, own)
	}
	slices.Sort(vs)
	m := len(vs) / 2
	if len(vs)%2 == 1 {
		return vs[m]
	}
	return (vs[m-1] + vs[m]) / 2
}

// NearestRegion returns the region with the lowest RTT in rtt among those
// for which ok returns true (ties by name), or "" if none.
func NearestRegion(rtt map[string]float64, ok func(region string) bool) string {
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

// byRTT returns a copy of ms sorted by the RTT of their region (nearest
// first; regions without an RTT last), keeping their order otherwise.
func byRTT(ms []Member, rtt map[string]float64) []Member {
	out := slices.Clone(ms)
	slices.SortStableFunc(out, func(a, b Member) int { return cmp.Compare(rttOf(rtt, a.Region), rttOf(rtt, b.Region)) })
	return out
}

// rttOf returns region's RTT in rtt, +Inf when it has none.
func rttOf(rtt map[string]float64, region string) float64 {
	if v, ok := rtt[region]; ok {
		return v
	}
	return math.Inf(1)
}

package waterfall

// The planner as it was before each site's regions were ordered lazily: one
// global sort of every (site, region) pair, then the passes over that order.
// It is the reference TestComputeMatchesReference holds Compute to (plans
// must be identical, bit for bit) and BenchmarkComputeReference times.

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// pair is one (site, region) reachability of the global order.
type pair struct {
	// rtt is math.Float64bits of the RTT: for finite numbers >= 0 the
	// bits order like the numbers, and integers compare faster.
	rtt  uint64
	site int32
	reg  int32
}

// refCompute is Compute before the lazy per-site order.
func refCompute(w World, cfg Config) (*Plan, error) {
	m, pairs, err := refNewModel(w, cfg)
	if err != nil {
		return nil, err
	}
	cells, unplaced := m.refWaterfall(pairs)
	return m.plan(m.denseRows(cells), false, unplaced), nil
}

// refNewModel is newModel before the lazy per-site order: it sorts every
// (site, region) pair once, globally, and returns them in the waterfall
// order with the model.
func refNewModel(w World, cfg Config) (*model, []pair, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := validate(w); err != nil {
		return nil, nil, err
	}
	m := &model{
		regions: make([]mRegion, len(w.Regions)),
		sites:   make([]mSite, len(w.Sites)),
	}

	// Regions and their groups, by name.
	regs := make([]*Region, len(w.Regions))
	for i := range w.Regions {
		regs[i] = &w.Regions[i]
	}
	slices.SortFunc(regs, func(a, b *Region) int { return strings.Compare(a.Name, b.Name) })
	ngroups := 0
	for _, r := range regs {
		ngroups += len(r.Groups)
	}
	m.groups = make([]mGroup, 0, ngroups)
	for ri, r := range regs {
		g0 := len(m.groups)
		var inst, healthy int
		for _, g := range r.Groups {
			m.groups = append(m.groups, mGroup{name: g.Name, zone: g.Zone, region: int32(ri), capacity: g.Capacity})
			inst += g.Instances
			healthy += g.Healthy
		}
		gs := m.groups[g0:]
		slices.SortFunc(gs, func(a, b mGroup) int { return strings.Compare(a.name, b.name) })
		// Sum capacity in name order so the total does not depend on input order.
		var capacity float64
		var active int32
		for _, g := range gs {
			capacity += g.capacity
			if g.capacity > 0 {
				active++
			}
		}
		h := 1.0
		if inst > 0 {
			h = float64(healthy) / float64(inst)
		}
		m.regions[ri] = mRegion{
			name: r.Name, g0: int32(g0), g1: int32(len(m.groups)), active: active,
			capacity: capacity, health: h, keep: keepFactor(h, cfg),
		}
	}

	// Sites by name, and every (site, region) pair the site reaches.
	sites := make([]*Site, len(w.Sites))
	for i := range w.Sites {
		sites[i] = &w.Sites[i]
	}
	slices.SortFunc(sites, func(a, b *Site) int { return strings.Compare(a.Name, b.Name) })
	pairs := make([]pair, 0, len(sites)*len(regs))
	reached := make([]bool, len(regs)) // reached by a site with demand
	for si, s := range sites {
		m.sites[si] = mSite{name: s.Name, demand: s.Demand}
		if len(s.RTT) == 0 {
			continue
		}
		for ri := range m.regions {
			if rtt, ok := s.RTT[m.regions[ri].name]; ok {
				pairs = append(pairs, pair{rtt: math.Float64bits(rtt), site: int32(si), reg: int32(ri)})
				if s.Demand > 0 {
					reached[ri] = true
				}
			}
		}
	}
	// Pairs were appended in (site, region) order; a stable sort by RTT
	// completes the order of rule 4.
	pairs = sortByRTT(pairs, make([]pair, len(pairs)))

	// Per-site region order: a counting sort of pairs by site keeps each
	// site's regions in (RTT, region name) order. The model holds it whole
	// (nothing lazy) and the RTT table Plans keep.
	nr := len(m.regions)
	m.rtt = make([]uint64, len(sites)*nr)
	for i := range m.rtt {
		m.rtt[i] = unreachable
	}
	m.ord = make([][]int32, len(sites))
	m.full = make([]bool, len(sites))
	for i := range m.full {
		m.full[i] = true
	}
	for _, p := range pairs {
		m.ord[p.site] = append(m.ord[p.site], p.reg)
		m.sites[p.site].reach++
		m.rtt[int(p.site)*nr+int(p.reg)] = p.rtt
	}

	// Rule 6. Sums run in name order, so λ does not depend on input order.
	var demand, capacity float64
	for _, s := range m.sites {
		demand += s.demand
	}
	for ri, r := range m.regions {
		if reached[ri] {
			capacity += r.capacity
		}
	}
	m.lambda = 1
	if capacity > 0 && demand > capacity {
		m.lambda = demand / capacity
	}
	return m, pairs, nil
}

// sortByRTT sorts ps by rtt, keeping equal keys in their order, and returns
// the sorted slice, which is ps or tmp (len(tmp) == len(ps)). It is an LSD
// radix sort over the key's 8 bytes that skips bytes every key shares; on
// BenchmarkCompute it took 40% off the time of slices.SortFunc on
// (rtt, site, region).
func sortByRTT(ps, tmp []pair) []pair {
	if len(ps) < 2 {
		return ps
	}
	for shift := 0; shift < 64; shift += 8 {
		var count [256]int
		for _, p := range ps {
			count[byte(p.rtt>>shift)]++
		}
		if count[byte(ps[0].rtt>>shift)] == len(ps) {
			continue
		}
		sum := 0
		for i, c := range count {
			count[i] = sum
			sum += c
		}
		for _, p := range ps {
			b := byte(p.rtt >> shift)
			tmp[count[b]] = p
			count[b]++
		}
		ps, tmp = tmp, ps
	}
	return ps
}

// refWaterfall is waterfall before the lazy per-site order: it runs rules 4–6 over the model and returns the site×region cells
// (index site·len(regions)+region) and each site's unplaced demand. Cells of
// sites without demand hold their idle row (fractions summing to 1).
//
// Pass 1 walks the (site, region) pairs in the global order of rule 4; each
// site still holding demand places min(keep·remaining, room) in the region,
// room being λ·capacity minus what the region already took (rules 5, 6).
// Pass 2 gives demand that pass 1 left over (spilled preemptively but
// finding no room farther away) back to the nearest regions with room,
// ignoring health, in the same order. Pass 3 places what still has no room
// (only when a site reaches some regions but not all) above λ·capacity in
// the regions the site reaches, in proportion to their capacity, and
// reports demand of sites that reach no capacity as unplaced.
func (m *model) refWaterfall(pairs []pair) ([]cell, []float64) {
	nr := len(m.regions)
	cells := make([]cell, len(m.sites)*nr)
	unplaced := make([]float64, len(m.sites))
	room := make([]float64, nr)
	eps := make([]float64, nr)
	for r, reg := range m.regions {
		room[r] = m.lambda * reg.capacity
		eps[r] = roomEps * room[r]
	}
	walkers := make([]walker, len(m.sites))
	for s, site := range m.sites {
		walkers[s] = walker{left: [...]float64{site.demand, 0, 0}, last: -1}
	}
	roomOf := func(r int32) float64 {
		if room[r] <= eps[r] {
			return 0
		}
		return room[r]
	}

	// walk runs one pass over the pairs; with health set, unhealthy regions
	// keep only their keep factor of what reaches them.
	walk := func(health bool) {
		for _, p := range pairs {
			w := &walkers[p.site]
			if w.remaining() <= 0 {
				continue
			}
			keep := 1.0
			if health {
				keep = m.regions[p.reg].keep
			}
			ci := int(p.site)*nr + int(p.reg)
			room[p.reg] -= w.step(&cells[ci], ci, roomOf(p.reg), keep, dustEps*m.sites[p.site].demand)
		}
	}
	// Pass 1: the waterfall with preemptive spill.
	walk(true)
	// Pass 2: leftovers return to the nearest regions with room.
	if slices.ContainsFunc(walkers, func(w walker) bool { return w.remaining() > 0 }) {
		walk(false)
	}

	// Pass 3: overload beyond λ, or unplaced.
	for s := range m.sites {
		w := &walkers[s]
		rem := w.remaining()
		if rem <= 0 {
			continue
		}
		if w.last >= 0 && rem <= residueEps*m.sites[s].demand {
			for i, v := range w.left {
				cells[w.last][i] += v
			}
			continue
		}
		if !m.spread(s, rem, func(_ int, r int32) *cell { return &cells[s*nr+int(r)] }) {
			unplaced[s] = rem
		}
	}

	// Idle rows: where a small demand at a site without demand would go.
	for s, site := range m.sites {
		if site.demand > 0 {
			continue
		}
		row := cells[s*nr : (s+1)*nr]
		w := walker{left: [...]float64{1, 0, 0}, last: -1}
		for _, health := range []bool{true, false} {
			for _, r := range m.siteReach(s) {
				free := 0.0
				if roomOf(r) > 0 {
					free = math.Inf(1) // a small demand takes no room
				}
				keep := 1.0
				if health {
					keep = m.regions[r].keep
				}
				w.step(&row[r], int(r), free, keep, dustEps)
			}
		}
		if rem := w.remaining(); rem > 0 {
			m.spread(s, rem, func(_ int, r int32) *cell { return &row[r] })
		}
	}
	return cells, unplaced
}

package waterfall

import (
	"math"
	"slices"
)

// Relative tolerances of the waterfall passes. They only absorb float64
// rounding noise; every test holds the plan to 1e-9.
const (
	// roomEps: a region whose room left is at most roomEps of its scaled
	// capacity counts as full, so that rounding leftovers do not draw
	// dust-sized flows.
	roomEps = 1e-12
	// dustEps: remaining demand of at most dustEps of the site's demand
	// after a take is added to that take instead of walking on.
	dustEps = 1e-12
	// residueEps: demand of at most residueEps of the site's demand that
	// found no room after both passes (rounding in λ·capacity) goes to the
	// site's last flow instead of becoming Overload flows.
	residueEps = 1e-10
)

// Compute returns the Waterfall-by-Region plan for w (docs/design.md §3, rules
// 1–6); see the package documentation for the algorithm and its guarantees.
//
// Compute is pure and deterministic: it reads only its arguments, changes
// neither, and returns the same Plan for the same World whatever the order of
// w's slices. It fails only on invalid input, with an error wrapping
// ErrInvalidWorld or ErrInvalidConfig that names every bad value by its path
// (sites[2].demand). A site that reaches no region with capacity does not
// fail the plan: its demand is reported in SiteLoad.Unplaced and it has no
// row, so a Picker built from that row returns ErrNoCapacity.
func Compute(w World, cfg Config) (*Plan, error) {
	m, err := newModel(w, cfg)
	if err != nil {
		return nil, err
	}
	rows, unplaced := m.waterfall()
	return m.plan(rows, true, unplaced), nil
}

// cell is the demand one site sends to one region (or, for a site without
// demand, the fraction of a small demand), by Reason.
type cell [NumReasons]float64

func (c *cell) total() float64 {
	return c[ReasonNearest] + c[ReasonSpillCapacity] + c[ReasonSpillHealth] + c[ReasonOverload]
}

// reason returns the Reason with the largest amount, ties to the lower one.
func (c *cell) reason() Reason {
	best := ReasonNearest
	for r := ReasonNearest + 1; int(r) < NumReasons; r++ {
		if c[r] > c[best] {
			best = r
		}
	}
	return best
}

// walker follows one site's remaining demand down the site's region order.
// left holds it by the cause of its most recent move: ReasonNearest until
// the first region is visited, then ReasonSpillCapacity or ReasonSpillHealth.
type walker struct {
	left [ReasonSpillHealth + 1]float64
	last int // index of the cell of the last take, -1 before any
}

func (w *walker) remaining() float64 {
	return w.left[ReasonNearest] + w.left[ReasonSpillCapacity] + w.left[ReasonSpillHealth]
}

// step visits one region: it places min(keep·remaining, room) into c, where
// dust (remaining demand of at most dust after the take) joins the take, and
// relabels what goes on: the (1−keep) share the region refuses is
// SpillHealth, the rest SpillCapacity. It returns the amount placed.
func (w *walker) step(c *cell, ci int, room, keep, dust float64) float64 {
	rem := w.remaining()
	if rem <= 0 {
		return 0
	}
	var t float64
	if room > 0 {
		t = min(keep*rem, room)
		if rem-t <= dust {
			t = rem
		}
	}
	if t > 0 {
		f := t / rem
		for i, v := range w.left {
			c[i] += v * f
		}
		w.last = ci
	}
	left := rem - t
	h := min((1-keep)*rem, left)
	w.left = [...]float64{0, left - h, h}
	return t
}

// waterfall runs rules 4–6 over the model and returns each site's cells and
// its unplaced demand. rows[s][i] is the cell of site s's i-th region in its
// order (siteReach); a row holds only the regions its walk visited, a
// prefix of the site's order. Cells of sites without demand hold their idle
// row (fractions summing to 1).
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
func (m *model) waterfall() ([][]cell, []float64) {
	nr := len(m.regions)
	// Most sites stop at their first or second region: each row starts in a
	// shared arena with room for two, and append moves the few that walk
	// farther.
	const rowCap = 2
	arena := make([]cell, rowCap*len(m.sites))
	rows := make([][]cell, len(m.sites))
	for s := range rows {
		rows[s] = arena[rowCap*s : rowCap*s : rowCap*(s+1)]
	}
	// fullRow makes site s's row as long as its order.
	fullRow := func(s int) []cell {
		n := int(m.sites[s].reach)
		if k := n - len(rows[s]); k > 0 {
			rows[s] = append(rows[s], make([]cell, k)...)
		}
		return rows[s]
	}
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

	// walk runs one pass over the pairs of the sites still holding demand,
	// in the global order (pairQueue); with health set, unhealthy regions
	// keep only their keep factor of what reaches them. A site leaves the
	// queue as soon as its demand is placed, so its farther regions are
	// never visited.
	q := pairQueue{m: m, cur: make([]int32, len(m.sites)), h: make([]queued, 0, len(m.sites))}
	walk := func(health bool) {
		q.start(func(s int) bool { return walkers[s].remaining() > 0 })
		for {
			s, i, r, ok := q.next()
			if !ok {
				return
			}
			w := &walkers[s]
			keep := 1.0
			if health {
				keep = m.regions[r].keep
			}
			if i == len(rows[s]) {
				rows[s] = append(rows[s], cell{})
			}
			room[r] -= w.step(&rows[s][i], i, roomOf(r), keep, dustEps*m.sites[s].demand)
			q.advance(w.remaining() <= 0)
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
				rows[s][w.last][i] += v
			}
			continue
		}
		row := fullRow(s)
		if !m.spread(s, rem, func(i int, _ int32) *cell { return &row[i] }) {
			unplaced[s] = rem
		}
	}

	// Idle rows: where a small demand at a site without demand would go.
	for s, site := range m.sites {
		if site.demand > 0 {
			continue
		}
		row := fullRow(s)
		w := walker{left: [...]float64{1, 0, 0}, last: -1}
		for _, health := range []bool{true, false} {
			for i, r := range m.siteReach(s) {
				free := 0.0
				if roomOf(r) > 0 {
					free = math.Inf(1) // a small demand takes no room
				}
				keep := 1.0
				if health {
					keep = m.regions[r].keep
				}
				w.step(&row[i], i, free, keep, dustEps)
			}
		}
		if rem := w.remaining(); rem > 0 {
			m.spread(s, rem, func(i int, _ int32) *cell { return &row[i] })
		}
	}
	return rows, unplaced
}

// spread adds amount to site s's cells as Overload, over the regions s
// reaches in proportion to their capacity; at returns the cell of the site's
// i-th region r. It reports false, adding nothing, when s reaches no
// capacity.
func (m *model) spread(s int, amount float64, at func(i int, r int32) *cell) bool {
	var total float64
	for _, r := range m.siteReach(s) {
		total += m.regions[r].capacity
	}
	if total <= 0 {
		return false
	}
	for i, r := range m.siteReach(s) {
		if c := m.regions[r].capacity; c > 0 {
			at(i, r)[ReasonOverload] += amount * (c / total)
		}
	}
	return true
}

// plan turns site×region cells into a Plan: it splits each cell over the
// region's groups in proportion to capacity (rule 2), names each flow's
// Reason, and sums the loads. Only plan and split know how a region's share
// becomes group flows. With byPos, rows[s][i] is the cell of site s's i-th
// region in its order and a row may stop short of the site's last region;
// without, rows[s][r] is the cell of region r (denseRows).
func (m *model) plan(rows [][]cell, byPos bool, unplaced []float64) *Plan {
	nr := len(m.regions)
	p := &Plan{
		Regions: make([]RegionLoad, nr),
		Groups:  make([]GroupLoad, len(m.groups)),
		Sites:   make([]SiteLoad, len(m.sites)),
		Lambda:  m.lambda,
		Orders:  &SiteOrders{regions: len(m.regions), rtt: m.rtt},
	}
	for r, reg := range m.regions {
		p.Regions[r] = RegionLoad{Name: reg.name, Capacity: reg.capacity, Health: reg.health, Keep: reg.keep}
	}
	for g, grp := range m.groups {
		p.Groups[g] = GroupLoad{Name: grp.name, Region: m.regions[grp.region].name, Zone: grp.zone, Capacity: grp.capacity}
	}
	// visited returns the regions of site s's row.
	visited := func(s int) []int32 {
		if !byPos {
			return m.siteReach(s)
		}
		return m.ord[s][:len(rows[s])]
	}
	cellOf := func(s, i int, r int32) *cell {
		if byPos {
			return &rows[s][i]
		}
		return &rows[s][r]
	}
	var nflows, nidle int
	for s, site := range m.sites {
		for i, r := range visited(s) {
			if cellOf(s, i, r).total() > 0 {
				if n := int(m.regions[r].active); site.demand > 0 {
					nflows += n
				} else {
					nidle += n
				}
			}
		}
	}
	p.Flows = make([]Flow, 0, nflows)
	if nidle > 0 {
		p.Idle = make([]Flow, 0, nidle)
	}

	for s, site := range m.sites {
		p.Sites[s] = SiteLoad{Name: site.name, Demand: site.demand, Unplaced: unplaced[s]}
		for i, r := range visited(s) {
			c := cellOf(s, i, r)
			tot := c.total()
			if tot <= 0 {
				continue
			}
			reason := c.reason()
			m.split(r, func(g int, frac float64) {
				f := Flow{Site: site.name, Region: m.regions[r].name, Group: m.groups[g].name, Reason: reason}
				if site.demand > 0 {
					f.Demand = tot * frac
					f.Share = tot / site.demand * frac
					p.Flows = append(p.Flows, f)
					p.Groups[g].Load += f.Demand
					p.Regions[r].Load += f.Demand
				} else {
					f.Share = tot * frac
					p.Idle = append(p.Idle, f)
				}
			})
		}
	}
	return p
}

// denseRows returns the rows of site×region cells (index
// site·len(regions)+region) for plan without byPos.
func (m *model) denseRows(cells []cell) [][]cell {
	nr := len(m.regions)
	rows := make([][]cell, len(m.sites))
	for s := range rows {
		rows[s] = cells[s*nr : (s+1)*nr]
	}
	return rows
}

// split calls emit for each group of region r with capacity, in name order,
// with the group's fraction of the region's capacity (rule 2).
func (m *model) split(r int32, emit func(g int, frac float64)) {
	reg := &m.regions[r]
	for g := reg.g0; g < reg.g1; g++ {
		if c := m.groups[g].capacity; c > 0 {
			emit(int(g), c/reg.capacity)
		}
	}
}

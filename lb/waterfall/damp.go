package waterfall

import (
	"cmp"
	"math"
	"slices"
	"strings"
)

// dampSnap: Damp returns next's row itself once every region share of the
// damped row is within dampSnap of next's, so repeated damping converges
// exactly instead of approaching next forever.
const dampSnap = 1e-9

// Damp returns the plan a gfe should use after prev when the planner now
// says next (rule 8): traffic that next moves back toward a site's nearer
// regions moves only a fraction alpha of the way per call, while traffic
// that next moves away, toward farther regions, moves at once; the site
// sends next's demand. Precisely, with a site's regions in its order
// (nearest first) and C(k) the share of its k nearest regions together,
//
//	C_d(k) = min(C_next(k), (1−α)·C_prev(k) + α·C_next(k))
//
// and each region's share is C_d(k) − C_d(k−1). Applied again and again
// towards the same next, Damp shrinks each gap C_next(k) − C_d(k) by the
// factor (1−α) per call, and returns next's row itself once every region's
// share is within dampSnap (1e-9) of next's.
//
// Guarantees, for the result d:
//   - spill is never slowed: for every k, a site's k nearest regions
//     together get no more of its traffic in d than in next; in particular
//     its nearest region never gets more than next gives it, so a region
//     that fills up is relieved in the very next plan;
//   - conservation: each site's flows in d sum to its demand in next
//     (SiteLoad.Demand − Unplaced), and its shares to 1;
//   - safety: d sends to a group only if next lists it with capacity and
//     the site still reaches its region; shares prev gave to regions that
//     lost all capacity or became unreachable are dropped at once and the
//     rest of prev's row rescaled, not damped;
//   - zone split: inside a region, d splits by next's group capacities
//     (rule 2);
//   - Lambda, Sites and Idle are next's (a site without demand takes next's
//     idle row undamped), and loads are recomputed from d's flows.
//
// A flow keeps the Reason next gives its region, or prev's when only prev
// sends there. A damped return can leave a farther region more traffic than
// next gives it for a few rounds (the region being returned from had room
// for it before); callers tighten capacity from local signals (backend
// 429/503, queueing, load reports) if that hurts.
//
// Damp reads each site's order from next (Plan.Orders): a Plan not made
// by Compute, ComputeMinRTT or Damp has none, and its rows are taken
// undamped. alpha is clamped to [0, 1]; alpha ≥ 1, NaN or a nil prev
// return next itself. Damp never modifies prev or next; the result may share storage
// with them. Damp is deterministic and does no I/O.
func Damp(prev, next *Plan, alpha float64) *Plan {
	if prev == nil || next == nil || !(alpha < 1) {
		return next
	}
	alpha = max(alpha, 0)
	d := &Plan{
		Flows:   make([]Flow, 0, len(next.Flows)),
		Regions: make([]RegionLoad, len(next.Regions)),
		Groups:  make([]GroupLoad, len(next.Groups)),
		Sites:   next.Sites,
		Idle:    next.Idle,
		Lambda:  next.Lambda,
		Orders:  next.Orders,
	}
	copy(d.Regions, next.Regions)
	for i := range d.Regions {
		d.Regions[i].Load = 0
	}
	copy(d.Groups, next.Groups)
	for i := range d.Groups {
		d.Groups[i].Load = 0
	}

	var ps, ns []float64 // per region of regs: prev's and next's share
	var regs []rankedRegion
	for si, site := range next.Sites {
		nrow := rowOf(next.Flows, site.Name)
		if len(nrow) == 0 {
			continue
		}
		prow := prev.Row(site.Name)
		regs = next.rowRegions(regs[:0], si, nrow, prow)
		ps, ns = ps[:0], ns[:0]
		var psum float64
		for _, x := range regs {
			reg := x.name
			var p, n float64
			if rl, ok := next.Region(reg); ok && rl.Capacity > 0 {
				p = regionShare(prow, reg)
				n = regionShare(nrow, reg)
			}
			ps, ns = append(ps, p), append(ns, n)
			psum += p
		}
		if psum <= 0 {
			d.Flows = append(d.Flows, nrow...)
			continue
		}
		// Damp the cumulative shares in the site's region order: the k
		// nearest regions together move a fraction alpha of the way toward
		// next when next gives them more (a return), but at once when next
		// gives them less (a spill outward).
		snap := true
		var cp, cn, cd float64 // cumulative shares of prev, next and d
		for i := range ps {
			cp += ps[i] / psum
			cn += ns[i]
			c := min(cn, (1-alpha)*cp+alpha*cn)
			ps[i], cd = max(c-cd, 0), c
			if math.Abs(ps[i]-ns[i]) > dampSnap {
				snap = false
			}
		}
		if snap {
			d.Flows = append(d.Flows, nrow...)
			continue
		}
		placed := site.Demand - site.Unplaced
		for i, x := range regs {
			reg := x.name
			share := ps[i]
			if share <= 0 {
				continue
			}
			reason := regionReason(nrow, reg)
			if ns[i] <= 0 {
				reason = regionReason(prow, reg)
			}
			rl, _ := next.Region(reg)
			for _, g := range next.RegionGroups(reg) {
				if g.Capacity <= 0 {
					continue
				}
				s := share * (g.Capacity / rl.Capacity)
				d.Flows = append(d.Flows, Flow{
					Site: site.Name, Region: reg, Group: g.Name,
					Demand: placed * s, Share: s, Reason: reason,
				})
			}
		}
	}
	d.sumLoads()
	return d
}

// rankedRegion is a region of a site's row with its place in the site's
// order: its RTT bits, then its index.
type rankedRegion struct {
	key  uint64
	r    int
	name string
}

// rowRegions appends to regs the regions of rows a and b of site s (index
// in p.Sites) that s still reaches in p, in s's order. Damp needs no other
// region: one that neither row sends to adds nothing to any cumulative
// share, so leaving it out changes no number. A Plan without an order (not
// made by this package) yields none, and Damp returns its row undamped.
func (p *Plan) rowRegions(regs []rankedRegion, s int, a, b []Flow) []rankedRegion {
	add := func(row []Flow) {
		for _, f := range row {
			if n := len(regs); n > 0 && regs[n-1].name == f.Region ||
				slices.ContainsFunc(regs, func(x rankedRegion) bool { return x.name == f.Region }) {
				continue
			}
			r, ok := slices.BinarySearchFunc(p.Regions, f.Region, func(rl RegionLoad, name string) int { return strings.Compare(rl.Name, name) })
			if !ok {
				continue
			}
			if k := p.key(s, r); k != unreachable {
				regs = append(regs, rankedRegion{k, r, f.Region})
			}
		}
	}
	add(a)
	add(b)
	slices.SortFunc(regs, func(x, y rankedRegion) int { return cmp.Or(cmp.Compare(x.key, y.key), cmp.Compare(x.r, y.r)) })
	return regs
}

// regionShare sums the shares row sends to region.
func regionShare(row []Flow, region string) float64 {
	var s float64
	for _, f := range row {
		if f.Region == region {
			s += f.Share
		}
	}
	return s
}

// regionReason returns the Reason of row's first flow to region.
func regionReason(row []Flow, region string) Reason {
	for _, f := range row {
		if f.Region == region {
			return f.Reason
		}
	}
	return ReasonNearest
}

// sumLoads sets every region's and group's Load from p.Flows.
func (p *Plan) sumLoads() {
	for _, f := range p.Flows {
		i, _ := slices.BinarySearchFunc(p.Groups, f, func(g GroupLoad, f Flow) int {
			return cmp.Or(strings.Compare(g.Region, f.Region), strings.Compare(g.Name, f.Group))
		})
		p.Groups[i].Load += f.Demand
		j, _ := slices.BinarySearchFunc(p.Regions, f.Region, func(r RegionLoad, name string) int {
			return strings.Compare(r.Name, name)
		})
		p.Regions[j].Load += f.Demand
	}
}

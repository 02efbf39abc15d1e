package waterfall

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestDampMatchesFullOrder holds Damp, which orders only the regions of a
// site's two rows, to refDamp, Damp as it was when every Plan carried each
// site's full region order: the damped plans must be identical, every float
// bit for bit, over random worlds whose successors move RTTs (so a site's
// order changes), capacity, health, demand and reachability.
func TestDampMatchesFullOrder(t *testing.T) {
	opt := cmp.Comparer(func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) })
	for seed := range uint64(500) {
		rng := rand.New(rand.NewPCG(seed, 9))
		w1 := randomWorld(rand.New(rand.NewPCG(seed, 0)))
		w2 := perturbed(w1, rng)
		for i := range w2.Sites {
			for r, v := range w2.Sites[i].RTT {
				if rng.IntN(3) == 0 {
					w2.Sites[i].RTT[r] = v * (0.5 + rng.Float64())
				}
			}
		}
		prev, next := mustCompute(t, w1), mustCompute(t, w2)
		for _, alpha := range []float64{0, rng.Float64(), 0.5} {
			want, got := refDamp(prev, next, alpha), Damp(prev, next, alpha)
			if diff := cmp.Diff(want, got, opt); diff != "" {
				t.Fatalf("seed %d α=%v: Damp differs from the full-order Damp (-full +Damp):\n%s", seed, alpha, diff)
			}
		}
	}
}

// refDamp is Damp before Plans stopped carrying each site's full region
// order: it walks next.SiteRegions, every region the site reaches.
func refDamp(prev, next *Plan, alpha float64) *Plan {
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

	var ps, ns []float64 // per region of the site's order: prev's and next's share
	for _, site := range next.Sites {
		nrow := rowOf(next.Flows, site.Name)
		if len(nrow) == 0 {
			continue
		}
		prow := prev.Row(site.Name)
		order := next.SiteRegions(site.Name)
		ps, ns = ps[:0], ns[:0]
		var psum float64
		for _, reg := range order {
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
		for i, reg := range order {
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

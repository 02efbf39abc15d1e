package waterfall

import (
	"cmp"
	"slices"
	"sort"
	"strings"
)

// Row returns site's row: its flows in plan order (nearest region first), or
// its Idle row when the site has no demand. It returns nil for a site that
// is not in the plan or reaches no region with capacity. The row shares the
// Plan's storage; do not modify it. Row does not allocate.
func (p *Plan) Row(site string) []Flow {
	if row := rowOf(p.Flows, site); row != nil {
		return row
	}
	return rowOf(p.Idle, site)
}

func rowOf(flows []Flow, site string) []Flow {
	i := sort.Search(len(flows), func(i int) bool { return flows[i].Site >= site })
	j := i
	for j < len(flows) && flows[j].Site == site {
		j++
	}
	if i == j {
		return nil
	}
	return flows[i:j:j]
}

// Site returns the summary of the named site.
func (p *Plan) Site(name string) (SiteLoad, bool) {
	i := sort.Search(len(p.Sites), func(i int) bool { return p.Sites[i].Name >= name })
	if i < len(p.Sites) && p.Sites[i].Name == name {
		return p.Sites[i], true
	}
	return SiteLoad{}, false
}

// Region returns the summary of the named region.
func (p *Plan) Region(name string) (RegionLoad, bool) {
	i := sort.Search(len(p.Regions), func(i int) bool { return p.Regions[i].Name >= name })
	if i < len(p.Regions) && p.Regions[i].Name == name {
		return p.Regions[i], true
	}
	return RegionLoad{}, false
}

// RegionGroups returns the groups of the named region, sorted by name. The
// slice shares the Plan's storage; do not modify it.
func (p *Plan) RegionGroups(region string) []GroupLoad {
	i := sort.Search(len(p.Groups), func(i int) bool { return strings.Compare(p.Groups[i].Region, region) >= 0 })
	j := i
	for j < len(p.Groups) && p.Groups[j].Region == region {
		j++
	}
	return p.Groups[i:j:j]
}

// SiteOrders is what a Plan keeps of its World to put a site's regions in
// order on demand: the model's dense RTT table (rtt[s·regions+r], site s
// and region r as indexed in Plan.Sites and Plan.Regions), never changed
// once the Plan is returned.
type SiteOrders struct {
	regions int
	rtt     []uint64
}

// Equal reports whether o and p hold the same RTTs, bit for bit (so that
// go-cmp compares Plans by content); nil holds none.
func (o *SiteOrders) Equal(p *SiteOrders) bool {
	if o == nil {
		o = &SiteOrders{}
	}
	if p == nil {
		p = &SiteOrders{}
	}
	return o.regions == p.regions && slices.Equal(o.rtt, p.rtt)
}

// key returns site s's RTT bits to region r, unreachable if s does not
// reach r or p has no order. Keys order like the site's region order, ties
// by region index.
func (p *Plan) key(s, r int) uint64 {
	if p.Orders == nil || s >= len(p.Sites) || r >= p.Orders.regions {
		return unreachable
	}
	return p.Orders.rtt[s*p.Orders.regions+r]
}

// SiteRegions returns the regions the named site reaches, nearest first
// (ascending RTT, ties by region name): the order of the site's row. It
// returns nil for a site not in the plan, or when p was not made by
// Compute, ComputeMinRTT or Damp. The order is put together on each call
// (O(regions · log regions), and a new slice the caller may keep): a Plan
// does not build it for every site, since a gfe needs it only for its own.
func (p *Plan) SiteRegions(site string) []string {
	s, ok := slices.BinarySearchFunc(p.Sites, site, func(sl SiteLoad, name string) int { return strings.Compare(sl.Name, name) })
	if !ok || p.Orders == nil {
		return nil
	}
	var rs []int
	for r := range p.Orders.regions {
		if p.key(s, r) != unreachable {
			rs = append(rs, r)
		}
	}
	slices.SortFunc(rs, func(a, b int) int { return cmp.Or(cmp.Compare(p.key(s, a), p.key(s, b)), cmp.Compare(a, b)) })
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = p.Regions[r].Name
	}
	return out
}

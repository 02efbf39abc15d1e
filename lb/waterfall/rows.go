package waterfall

import (
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

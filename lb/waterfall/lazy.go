package waterfall

// A site's order (its regions by ascending RTT, ties by region index =
// name: the order of a stable sort by RTT bits) is produced lazily, as far
// as a pass asks for it. Its first region costs one scan of the site's
// RTTs, its second another; a site asked for a third is put in order whole
// by siteOrder, so a site costs at most two scans and one sort of its
// regions, and a site that fits in its nearest region one scan.

// rttOf returns the RTT bits of site s to region r, or unreachable.
func (m *model) rttOf(s int, r int32) uint64 {
	return m.rtt[s*len(m.regions)+int(r)]
}

// regionAt returns the i-th region of site s's order, i < m.sites[s].reach.
func (m *model) regionAt(s, i int) int32 {
	if i < len(m.ord[s]) {
		return m.ord[s][i]
	}
	nr := len(m.regions)
	row := m.rtt[s*nr : (s+1)*nr]
	switch i {
	case 0:
		// The least bits, the lowest index among equal ones.
		best, at := unreachable, int32(-1)
		for r, b := range row {
			if b < best {
				best, at = b, int32(r)
			}
		}
		m.ord[s] = append(m.ord[s], at)
	case 1:
		// The least (bits, index) after the first region's.
		p := m.ord[s][0]
		pb := row[p]
		best, at := unreachable, int32(-1)
		for r, b := range row[:p] {
			if b > pb && b < best {
				best, at = b, int32(r)
			}
		}
		for r, b := range row[p+1:] {
			if b >= pb && b < best {
				best, at = b, p+1+int32(r)
			}
		}
		m.ord[s] = append(m.ord[s], at)
	default:
		m.siteReach(s)
	}
	return m.ord[s][i]
}

// siteReach returns the regions site s reaches, in its order.
func (m *model) siteReach(s int) []int32 {
	if m.full[s] {
		return m.ord[s]
	}
	m.full[s] = true
	n := int(m.sites[s].reach)
	if len(m.ord[s]) == n {
		return m.ord[s]
	}
	nr := len(m.regions)
	if m.sort == nil {
		m.sort = newSiteOrder(nr)
	}
	o := m.sort
	o.reset()
	for r, b := range m.rtt[s*nr : (s+1)*nr] {
		if b != unreachable {
			o.add(int32(r), b)
		}
	}
	m.ord[s], m.scratch = o.appendSorted(make([]int32, 0, n), m.scratch[:0])
	return m.ord[s]
}

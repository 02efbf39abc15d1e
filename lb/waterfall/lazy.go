package waterfall

// A site's order (its regions by ascending RTT, ties by region index =
// name: the order of a stable sort by RTT bits) is produced lazily, as far
// as a pass asks for it. Each of its first scanMax regions costs one scan
// of the site's RTTs; a site asked for more is put in order whole by
// siteOrder, so a site costs at most scanMax scans and one sort of its
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
	if i >= scanMax {
		m.siteReach(s)
		return m.ord[s][i]
	}
	// One scan per region of the order: the least (bits, index) after the
	// last region produced (the least of all for the first); the scan runs
	// in index order, so a tie goes to the lower index.
	for len(m.ord[s]) <= i {
		best, at := unreachable, int32(-1)
		if len(m.ord[s]) == 0 {
			for r, b := range row {
				if b < best {
					best, at = b, int32(r)
				}
			}
		} else {
			p := m.ord[s][len(m.ord[s])-1]
			pb := row[p]
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
		}
		m.ord[s] = append(m.ord[s], at)
	}
	return m.ord[s][i]
}

// orderPrefix makes site s's order at least n regions long (all of it if
// the site reaches fewer): the regions up to scanMax by one scan of the
// site's RTTs, keeping the least ones in a small sorted buffer, where
// regionAt would scan once per region; beyond scanMax the site is put in
// order whole. It produces exactly the order regionAt does.
func (m *model) orderPrefix(s, n int) {
	n = min(n, int(m.sites[s].reach))
	have := len(m.ord[s])
	switch {
	case have >= n:
		return
	case n > scanMax:
		m.siteReach(s)
		return
	case n-have == 1:
		m.regionAt(s, have)
		return
	}
	nr := len(m.regions)
	row := m.rtt[s*nr : (s+1)*nr]
	// after reports whether (b, r) comes after the last region produced
	// (all do when none is).
	pb, p := uint64(0), int32(-1)
	if have > 0 {
		p = m.ord[s][have-1]
		pb = row[p]
	}
	var buf [scanMax]struct {
		b uint64
		r int32
	}
	want, c := n-have, 0
	for r, b := range row {
		if b == unreachable || b < pb || b == pb && int32(r) <= p {
			continue
		}
		// (b, r) goes before buf[i] when b < buf[i].b: r ascends, so an
		// equal b is never before.
		if c == want && b >= buf[c-1].b {
			continue
		}
		i := min(c, want-1)
		for ; i > 0 && b < buf[i-1].b; i-- {
			buf[i] = buf[i-1]
		}
		buf[i].b, buf[i].r = b, int32(r)
		c = min(c+1, want)
	}
	for _, e := range buf[:c] {
		m.ord[s] = append(m.ord[s], e.r)
	}
}

// scanMax is how many regions of a site's order regionAt finds by scans
// before it sorts the site whole: a scan of R regions costs about what
// sorting them costs per log R.
const scanMax = 6

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

package waterfall

import (
	"math/bits"
	"slices"
)

// siteOrder sorts one site's regions into its order: ascending RTT, ties by
// region index (= name). It packs each region into one uint64, the RTT's
// bits with the low bits replaced by the region index, sorts those words
// with slices.Sort (no comparison callback), and re-sorts by the full RTT
// only the runs whose RTTs agree in every bit above the index. The runs are
// almost always of length 1, so a site of R regions costs one sort of R
// machine words.
type siteOrder struct {
	mask uint64   // the low bits that hold the region index
	keys []uint64 // this site's packed words
	full []uint64 // full RTT bits by region index, for the runs
}

func newSiteOrder(regions int) *siteOrder {
	mask := uint64(0)
	if regions > 1 {
		mask = 1<<bits.Len(uint(regions-1)) - 1
	}
	return &siteOrder{mask: mask, keys: make([]uint64, 0, regions), full: make([]uint64, regions)}
}

func (o *siteOrder) reset() { o.keys = o.keys[:0] }

// add adds region ri with RTT bits rtt.
func (o *siteOrder) add(ri int32, rtt uint64) {
	o.keys = append(o.keys, rtt&^o.mask|uint64(ri))
	o.full[ri] = rtt
}

// appendSorted appends the regions added since reset to reach, and their
// RTT bits to rtt, in the site's order.
func (o *siteOrder) appendSorted(reach []int32, rtt []uint64) ([]int32, []uint64) {
	keys := o.keys
	slices.Sort(keys)
	for i := 0; i < len(keys); {
		j := i + 1
		for j < len(keys) && keys[j]&^o.mask == keys[i]&^o.mask {
			j++
		}
		if j-i > 1 {
			// Equal above the index bits, so sorted by index: an insertion
			// sort by full RTT keeps equal RTTs in index order.
			run := keys[i:j]
			for a := 1; a < len(run); a++ {
				k := run[a]
				b := a
				for b > 0 && o.full[run[b-1]&o.mask] > o.full[k&o.mask] {
					run[b] = run[b-1]
					b--
				}
				run[b] = k
			}
		}
		i = j
	}
	for _, k := range keys {
		ri := int32(k & o.mask)
		reach = append(reach, ri)
		rtt = append(rtt, o.full[ri])
	}
	return reach, rtt
}

// pairQueue is the priority queue of the waterfall's passes: one entry per
// site still walking, keyed by the site's next (site, region) pair. Popping
// it yields the pairs of the sites in it in the global order of rule 4 —
// ascending RTT, ties by site name, then region name — because each site's
// regions are already in that order (model.reach) and distinct sites tie
// only on RTT.
type pairQueue struct {
	m   *model
	cur []int32 // per site, its next position in m.reach
	h   []queued
}

type queued struct {
	rtt  uint64 // m.rtt[cur[site]]
	site int32
}

func (a queued) less(b queued) bool {
	return a.rtt < b.rtt || a.rtt == b.rtt && a.site < b.site
}

// start fills q with every site for which walking is true and that reaches
// some region, each at its nearest region, in O(sites).
func (q *pairQueue) start(walking func(s int) bool) {
	q.h = q.h[:0]
	for s, site := range q.m.sites {
		if site.r1 > site.r0 && walking(s) {
			q.cur[s] = site.r0
			q.h = append(q.h, queued{q.m.rtt[site.r0], int32(s)})
		}
	}
	for i := len(q.h)/2 - 1; i >= 0; i-- {
		q.down(i)
	}
}

// next returns the site and region of the first pair, or ok false when the
// queue is empty.
func (q *pairQueue) next() (s int, r int32, ok bool) {
	if len(q.h) == 0 {
		return 0, 0, false
	}
	s = int(q.h[0].site)
	return s, q.m.reach[q.cur[s]], true
}

// advance moves the first site on to its next region, or drops it when
// done is true or it has no region left.
func (q *pairQueue) advance(done bool) {
	s := q.h[0].site
	q.cur[s]++
	if done || q.cur[s] >= q.m.sites[s].r1 {
		last := len(q.h) - 1
		q.h[0] = q.h[last]
		q.h = q.h[:last]
	} else {
		q.h[0].rtt = q.m.rtt[q.cur[s]]
	}
	if len(q.h) > 1 {
		q.down(0)
	}
}

func (q *pairQueue) down(i int) {
	h := q.h
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		j := l
		if r := l + 1; r < n && h[r].less(h[l]) {
			j = r
		}
		if !h[j].less(h[i]) {
			return
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}

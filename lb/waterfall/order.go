package waterfall

import (
	"math"
	"math/bits"
	"slices"
)

// siteOrder sorts one site's regions into its order: ascending RTT, ties by
// region index (= name), the order a stable sort by RTT bits gives. A site of
// R regions costs O(R) expected: a bucket sort over R buckets spanning the
// site's RTTs (the bucket of an RTT never decreases as the RTT grows, so the
// buckets are in order), then an insertion sort inside each bucket, of keys
// that pack the RTT's bits with the low bits replaced by the region index.
// Keys equal above the index bits are then put in full RTT order. A bucket
// of more than bucketMax regions is sorted with slices.Sort, so a site whose
// RTTs crowd together costs O(R log R), never O(R²).
type siteOrder struct {
	mask    uint64   // the low bits that hold the region index
	in      []uint64 // this site's packed keys, as added
	full    []uint64 // full RTT bits by region index
	keys    []uint64 // packed keys, sorted
	count   []int32  // bucket offsets
	buckets []int32  // bucket of each of in
}

// bucketMax is the largest bucket siteOrder sorts by insertion.
const bucketMax = 24

func newSiteOrder(regions int) *siteOrder {
	mask := uint64(0)
	if regions > 1 {
		mask = 1<<bits.Len(uint(regions-1)) - 1
	}
	return &siteOrder{
		mask: mask, in: make([]uint64, 0, regions), full: make([]uint64, regions),
		keys: make([]uint64, regions), count: make([]int32, regions+1), buckets: make([]int32, regions),
	}
}

func (o *siteOrder) reset() { o.in = o.in[:0] }

// add adds region ri with RTT bits rtt, in any order.
func (o *siteOrder) add(ri int32, rtt uint64) {
	o.in = append(o.in, rtt&^o.mask|uint64(ri))
	o.full[ri] = rtt
}

// appendSorted appends the regions added since reset to reach, and their
// RTT bits to rtt, in the site's order.
func (o *siteOrder) appendSorted(reach []int32, rtt []uint64) ([]int32, []uint64) {
	n := len(o.in)
	keys := o.keys[:n]
	if !o.bucketSort(keys) {
		copy(keys, o.in)
		slices.Sort(keys)
	}
	for i := 0; i < n; {
		j := i + 1
		for j < n && keys[j]&^o.mask == keys[i]&^o.mask {
			j++
		}
		if j-i > 1 {
			// Equal above the index bits, so in index order: an insertion
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

// bucketSort sorts the packed keys o.in into keys and reports true, or
// reports false when they do not suit it: a key whose sign bit is set (an
// RTT of -0, whose bits order after every positive number) or a span that
// is not a positive finite number. A packed key is a float64 too (only low
// mantissa bits differ from the RTT), and the buckets are spans of those.
func (o *siteOrder) bucketSort(keys []uint64) bool {
	n := len(o.in)
	if n < 2 {
		copy(keys, o.in)
		return true
	}
	lo, hi := o.in[0], o.in[0]
	for _, k := range o.in {
		lo, hi = min(lo, k), max(hi, k)
	}
	if hi>>63 != 0 {
		return false
	}
	flo := math.Float64frombits(lo)
	scale := float64(n) / (math.Float64frombits(hi) - flo)
	if !(scale > 0) || math.IsInf(scale, 1) {
		return false
	}
	count := o.count[:n+1]
	clear(count)
	bk := o.buckets[:n]
	last := float64(n - 1)
	for i, k := range o.in {
		// Monotone in the key: a subtraction, a multiplication by a
		// positive number and a truncation each keep the order.
		x := (math.Float64frombits(k) - flo) * scale
		b := n - 1
		if x < last {
			b = int(x)
		}
		bk[i] = int32(b)
		count[b+1]++
	}
	for b := 1; b <= n; b++ {
		count[b] += count[b-1]
	}
	for i, k := range o.in {
		b := bk[i]
		keys[count[b]] = k
		count[b]++
	}
	// count[b] is now the end of bucket b, and the start of bucket b+1.
	begin := int32(0)
	for b := 0; b < n; b++ {
		end := count[b]
		if end-begin > 1 {
			bucket := keys[begin:end]
			if len(bucket) > bucketMax {
				slices.Sort(bucket)
			} else {
				for a := 1; a < len(bucket); a++ {
					k := bucket[a]
					c := a
					for c > 0 && bucket[c-1] > k {
						bucket[c] = bucket[c-1]
						c--
					}
					bucket[c] = k
				}
			}
		}
		begin = end
	}
	return true
}

// pairQueue is the priority queue of the waterfall's passes: one entry per
// site still walking, keyed by the site's next (site, region) pair. Popping
// it yields the pairs of the sites in it in the global order of rule 4 —
// ascending RTT, ties by site name, then region name — because each site's
// regions come in that order (model.regionAt) and distinct sites tie only
// on RTT.
type pairQueue struct {
	m   *model
	cur []int32 // per site, its next position in its order
	h   []queued
}

type queued struct {
	rtt  uint64 // the RTT bits of the site's region at cur[site]
	site int32
}

func (a queued) less(b queued) bool {
	return a.rtt < b.rtt || a.rtt == b.rtt && a.site < b.site
}

// start fills q with every site for which walking is true and that reaches
// some region, each at its nearest region, in O(sites) plus what finding
// the nearest regions costs.
func (q *pairQueue) start(walking func(s int) bool) {
	q.h = q.h[:0]
	for s, site := range q.m.sites {
		if site.reach > 0 && walking(s) {
			q.cur[s] = 0
			q.h = append(q.h, queued{q.m.rttOf(s, q.m.regionAt(s, 0)), int32(s)})
		}
	}
	for i := len(q.h)/2 - 1; i >= 0; i-- {
		q.down(i)
	}
}

// next returns the site, the position in its order and the region of the
// first pair, or ok false when the queue is empty.
func (q *pairQueue) next() (s, i int, r int32, ok bool) {
	if len(q.h) == 0 {
		return 0, 0, 0, false
	}
	s = int(q.h[0].site)
	i = int(q.cur[s])
	return s, i, q.m.ord[s][i], true
}

// advance moves the first site on to its next region, or drops it when
// done is true or it has no region left.
func (q *pairQueue) advance(done bool) {
	s := q.h[0].site
	q.cur[s]++
	if done || q.cur[s] >= q.m.sites[s].reach {
		last := len(q.h) - 1
		q.h[0] = q.h[last]
		q.h = q.h[:last]
	} else {
		q.h[0].rtt = q.m.rttOf(int(s), q.m.regionAt(int(s), int(q.cur[s])))
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

// regionIndex finds a region's index by name, so that newModel can range
// over each site's RTT map (much cheaper than one map lookup per region):
// an open-addressing table over a hash of the name's length and first and
// last eight bytes. Collisions cost probes, never a wrong answer; the table
// has no seed, so it draws no random number.
type regionIndex struct {
	names []string
	slots []int32 // index+1 of the region whose name is here, 0 if empty
	mask  uint64
}

func newRegionIndex(names []string) *regionIndex {
	size := 4
	for size < 2*len(names) {
		size *= 2
	}
	x := &regionIndex{names: names, slots: make([]int32, size), mask: uint64(size - 1)}
	for i, n := range names {
		h := nameHash(n) & x.mask
		for x.slots[h] != 0 {
			h = (h + 1) & x.mask
		}
		x.slots[h] = int32(i + 1)
	}
	return x
}

// lookup returns the index of the region named name, or -1.
func (x *regionIndex) lookup(name string) int32 {
	h := nameHash(name) & x.mask
	for {
		v := x.slots[h]
		if v == 0 {
			return -1
		}
		if x.names[v-1] == name {
			return v - 1
		}
		h = (h + 1) & x.mask
	}
}

func nameHash(s string) uint64 {
	var a, b uint64
	if len(s) >= 8 {
		a = load64(s)
		b = load64(s[len(s)-8:])
	} else {
		for i := 0; i < len(s); i++ {
			a = a<<8 | uint64(s[i])
		}
	}
	h := (a*0x9E3779B97F4A7C15 ^ b*0xC2B2AE3D27D4EB4F) + uint64(len(s))
	h ^= h >> 29
	h *= 0xBF58476D1CE4E5B9
	return h ^ h>>32
}

func load64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

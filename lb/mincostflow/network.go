package mincostflow

// The solver: the network, its successive shortest paths and the splitting
// of overloaded sets (doc.go says what it guarantees).

import (
	"math"
	"slices"
)

// cost is an arc or path cost, ordered lexicographically: pen counts
// demand units sent above a keep bound (always an integer), rtt is
// milliseconds.
type cost struct{ pen, rtt float64 }

func (a cost) less(b cost) bool {
	return a.pen < b.pen || a.pen == b.pen && a.rtt < b.rtt
}

func (a cost) plus(b cost) cost  { return cost{a.pen + b.pen, a.rtt + b.rtt} }
func (a cost) minus(b cost) cost { return cost{a.pen - b.pen, a.rtt - b.rtt} }

var infCost = cost{math.Inf(1), math.Inf(1)}

// flowNet is the network of one Solve. Its code calls the sources sites and
// the destinations regions, their supply demand and the cost rtt, after the
// planner it was written for (lb/waterfall's min_rtt). Nodes are numbered
// sites [0, ns), regions [ns, ns+nr), sink ns+nr, in the Problem's order.
// Each arc of the Problem is an arc pair: tier 0 up to keep·demand at cost
// (0, rtt) and, when keep < 1, tier 1 for the rest at cost (1, rtt). Each region's arc to the sink carries up to its
// limit at cost 0; instead of storing that flow, a region with load above
// its limit holds the difference as excess and one below it has room.
//
// Nodes belong to components (comp): arcs join a site and a region only in
// the same component, and each component has a level, its regions' limit
// over capacity. Everything starts in component 0 at level λ; overloaded
// sets are split off into components of their own (split).
type flowNet struct {
	ns, nr int
	sink   int32

	// Arcs of site s: [a0[s], a0[s+1]), in the site's region order.
	a0     []int32
	aSite  []int32
	aReg   []int32 // region index (not node)
	aRTT   []float64
	u0, u1 []float64 // tier capacities
	f0, f1 []float64 // tier flows
	// users[r] lists the arcs into region r that may carry flow: every
	// arc with flow, in the order they got it, and perhaps some whose
	// flow went back to zero (dropped when next scanned). Its capacity is
	// the number of arcs into r, so appends never reallocate.
	users  [][]int32
	listed []bool // per arc: in its region's users

	demand   []float64 // per site
	capacity []float64 // per region
	arcEps   []float64 // per site: residuals at most this are zero
	limit    []float64 // per region: level·capacity
	load     []float64 // per region
	roomE    []float64 // per region: excess or room at most this is zero

	comp   []int32   // per node
	level  []float64 // per component
	packed []bool    // per component: its demand equals level·capacity

	// Dijkstra state, reused across phases.
	pot  []cost // node potentials, less off: reduced costs are ≥ 0
	off  cost   // added to every potential (reprice, foldOffset)
	dist []cost
	done []bool
	// stuck marks the regions whose excess ssp found no path for.
	stuck []bool
	// touched lists the nodes the last dijkstra gave a distance.
	touched []int32
	pred    []int32 // arc·2+tier that reached the node, region index for the sink, -1 for sources
	heap    []int32 // open nodes, a binary min-heap by (dist, node)
	pos     []int32 // per node: index in heap, -1 if not in it
}

// newFlowNet builds the network of p, which Solve has validated: one arc
// pair per arc of p, in p's order.
func newFlowNet(p Problem) *flowNet {
	ns, nr := len(p.Supply), len(p.Capacity)
	v := ns + nr + 1
	n := &flowNet{
		ns: ns, nr: nr, sink: int32(ns + nr),
		a0:       make([]int32, ns+1),
		demand:   slices.Clone(p.Supply),
		capacity: slices.Clone(p.Capacity),
		arcEps:   make([]float64, ns),
		limit:    make([]float64, nr),
		load:     make([]float64, nr),
		roomE:    make([]float64, nr),
		comp:     make([]int32, v),
		level:    []float64{p.Level},
		packed:   []bool{false},
		pot:      make([]cost, v),
		dist:     make([]cost, v),
		done:     make([]bool, v),
		stuck:    make([]bool, nr),
		pred:     make([]int32, v),
		pos:      make([]int32, v),
		users:    make([][]int32, nr),
		touched:  make([]int32, 0, v),
	}
	for i := range v {
		n.dist[i], n.pred[i], n.pos[i] = infCost, -1, -1
	}
	narcs := len(p.Arcs)
	n.aSite = make([]int32, 0, narcs)
	n.aReg = make([]int32, 0, narcs)
	n.aRTT = make([]float64, 0, narcs)
	f := make([]float64, 4*narcs)
	n.u0, n.u1, n.f0, n.f1 = f[:0:narcs], f[narcs:narcs:2*narcs], f[2*narcs:3*narcs], f[3*narcs:]
	count := make([]int32, nr+1)
	a := 0
	for s := range ns {
		n.a0[s] = int32(len(n.aSite))
		demand := n.demand[s]
		n.arcEps[s] = supplyEps * demand
		for ; a < narcs && int(p.Arcs[a].Source) == s; a++ {
			arc := p.Arcs[a]
			u0 := demand
			if arc.Keep < 1 {
				u0 = arc.Keep * demand
			}
			n.aSite = append(n.aSite, int32(s))
			n.aReg = append(n.aReg, arc.Dest)
			n.aRTT = append(n.aRTT, arc.Cost)
			n.u0 = append(n.u0, u0)
			n.u1 = append(n.u1, demand-u0)
			count[arc.Dest+1]++
		}
	}
	n.a0[ns] = int32(len(n.aSite))
	buf := make([]int32, len(n.aSite))
	var off int32
	for r := range nr {
		c := count[r+1]
		n.users[r] = buf[off : off : off+c]
		off += c
	}
	n.listed = make([]bool, len(n.aSite))
	return n
}

// maxPhasesPerArc bounds the augmentations of one solve (a guard against
// float rounding making progress vanishingly small; never reached in the
// tests, where a solve takes at most a few per arc).
const maxPhasesPerArc = 64

// solve computes the flows: successive shortest paths over every
// component that needs it, splitting off overloaded sets until every
// excess is placed.
func (n *flowNet) solve() {
	dirty := []bool{true}
	for {
		n.reset(dirty)
		if !n.ssp() {
			return
		}
		if dirty = n.split(); dirty == nil {
			return
		}
	}
}

// reset starts the components marked dirty afresh: each of their sites
// puts its demand in its cheapest arcs regardless of region limits (its
// own optimum), and potentials are set so that every residual arc has a
// reduced cost ≥ 0: 0 for regions and the sink, minus the marginal arc
// cost for sites.
func (n *flowNet) reset(dirty []bool) {
	for r := range n.nr {
		c := n.comp[n.ns+r]
		if !dirty[c] {
			continue
		}
		n.limit[r] = n.level[c] * n.capacity[r]
		n.roomE[r] = roomEps * n.limit[r]
		n.load[r] = 0
		n.pot[n.ns+r] = cost{}
		for _, p := range n.users[r] {
			n.listed[p] = false
		}
		n.users[r] = n.users[r][:0]
	}
	n.pot[n.sink] = cost{}
	for s := range n.ns {
		c := n.comp[s]
		if !dirty[c] || n.a0[s] == n.a0[s+1] {
			continue
		}
		rem := n.demand[s]
		var marginal cost
		last := int32(-1)
		for tier := range 2 {
			u, f := n.u0, n.f0
			if tier == 1 {
				u, f = n.u1, n.f1
			}
			for p := n.a0[s]; p < n.a0[s+1]; p++ {
				f[p] = 0
				if rem <= n.arcEps[s] || n.comp[n.ns+int(n.aReg[p])] != c || u[p] <= 0 {
					continue
				}
				t := min(u[p], rem)
				f[p] = t
				rem -= t
				marginal = cost{float64(tier), n.aRTT[p]}
				last = p
			}
		}
		if rem > 0 && last >= 0 { // rounding dust
			if marginal.pen == 0 {
				n.f0[last] += rem
			} else {
				n.f1[last] += rem
			}
		}
		for p := n.a0[s]; p < n.a0[s+1]; p++ {
			if x := n.f0[p] + n.f1[p]; x > 0 {
				r := n.aReg[p]
				n.load[r] += x
				n.use(p)
			}
		}
		n.pot[s] = cost{}.minus(marginal)
	}
}

// ssp pushes excess to regions with room along shortest residual paths
// until none is left, and reports whether some is stuck: no residual path
// leads from it to a region with room. Then n.done marks the nodes
// reachable from the stuck excess.
//
// Each phase searches from one region with excess, the first in index
// order that is not known to be stuck: a search from one region stops at
// the nearest room, where one from every region with excess would explore
// around all of them. Any region with excess will do as the source of a
// successive shortest path (the potentials stay valid, see reprice). A
// region whose search finds no room stays stuck for the rest of ssp:
// augmenting other paths only adds the reverses of their arcs, and a new
// path through one of those would have reached that path's room before.
// So when every region with excess is stuck, no excess can move, and one
// search from all of them together marks what split needs (should that
// search find room after all, its path is pushed and every region is
// searched again).
func (n *flowNet) ssp() (stuck bool) {
	defer n.foldOffset()
	limit := maxPhasesPerArc*(len(n.aSite)+n.nr+1) + n.nr
	from, anyStuck := 0, false
	clear(n.stuck)
	for range limit {
		// Augmenting never adds excess (it fills only room), so the
		// regions before from have none, or are stuck.
		for from < n.nr && !(n.load[from]-n.limit[from] > n.roomE[from] && !n.stuck[from]) {
			from++
		}
		if from == n.nr {
			if !anyStuck || !n.dijkstra(-1) {
				return anyStuck
			}
			// Some excess moves after all (not expected: float rounding
			// in a residual): push it, and search from each again.
			n.reprice()
			n.augment()
			clear(n.stuck)
			from, anyStuck = 0, false
			continue
		}
		if !n.dijkstra(from) {
			n.stuck[from], anyStuck = true, true
			continue
		}
		n.reprice()
		n.augment()
	}
	return false
}

// dijkstra finds shortest paths in reduced costs from region src, or from
// every region with excess when src < 0, stopping at the sink. It reports
// whether the sink was reached. Ties go to the lower node index.
func (n *flowNet) dijkstra(src int) (reached bool) {
	// Only the nodes the last search reached need their state reset.
	for _, v := range n.touched {
		n.dist[v] = infCost
		n.done[v] = false
		n.pred[v] = -1
		n.pos[v] = -1
	}
	n.touched = n.touched[:0]
	n.heap = n.heap[:0]
	for r := range n.nr {
		if r == src || src < 0 && n.load[r]-n.limit[r] > n.roomE[r] {
			v := int32(n.ns + r)
			n.dist[v] = cost{}
			n.touched = append(n.touched, v)
			n.fix(v)
		}
	}
	ns := int32(n.ns)
	for len(n.heap) > 0 {
		v := n.pop()
		n.done[v] = true
		if v == n.sink {
			return true
		}
		d, pv, cv := n.dist[v], n.pot[v], n.comp[v]
		if v < ns { // a site: forward arcs to its regions
			// Any path to the sink through arc (v, w) costs at least
			// toSink + (tier, rtt): regions with load have potential ≤
			// the sink's (reduced cost of the sink's reverse arc ≥ 0),
			// and the arc of a region with room to the sink costs
			// exactly the difference. The arcs come in ascending RTT,
			// so once that bound reaches the sink's tentative distance
			// the rest cannot shorten any path that matters: a node
			// they would reach sooner is still settled at no more than
			// the sink's distance, which is all reprice needs.
			toSink := d.plus(pv).minus(n.pot[n.sink])
			eps := n.arcEps[v]
			for p := n.a0[v]; p < n.a0[v+1]; p++ {
				if !toSink.plus(cost{0, n.aRTT[p]}).less(n.dist[n.sink]) {
					break
				}
				w := ns + n.aReg[p]
				if n.done[w] || n.comp[w] != cv {
					continue
				}
				base := pv.minus(n.pot[w])
				if n.u0[p]-n.f0[p] > eps {
					n.relax(w, d, base.plus(cost{0, n.aRTT[p]}), p<<1)
				}
				if n.u1[p]-n.f1[p] > eps {
					n.relax(w, d, base.plus(cost{1, n.aRTT[p]}), p<<1|1)
				}
				if r := w - ns; n.dist[w] != infCost && n.limit[r]-n.load[r] > n.roomE[r] {
					// Offer the sink the path through w now, so that the
					// bound above starts pruning early.
					n.relax(n.sink, n.dist[w], n.pot[w].minus(n.pot[n.sink]), r)
				}
			}
			continue
		}
		// A region: its arc to the sink if it has room, and reverse arcs
		// to the sites that send to it.
		r := v - ns
		if n.limit[r]-n.load[r] > n.roomE[r] && !n.done[n.sink] {
			n.relax(n.sink, d, pv.minus(n.pot[n.sink]), r)
		}
		users := n.users[r]
		kept := users[:0]
		for _, p := range users {
			s := n.aSite[p]
			eps := n.arcEps[s]
			f0, f1 := n.f0[p], n.f1[p]
			if f0 <= eps && f1 <= eps {
				n.listed[p] = false
				continue
			}
			kept = append(kept, p)
			if n.done[s] {
				continue
			}
			base := pv.minus(n.pot[s])
			if f0 > eps {
				n.relax(s, d, base.plus(cost{0, -n.aRTT[p]}), p<<1)
			}
			if f1 > eps {
				n.relax(s, d, base.plus(cost{-1, -n.aRTT[p]}), p<<1|1)
			}
		}
		n.users[r] = kept
	}
	return false
}

// relax offers w the distance d + rc through pred. Reduced costs are ≥ 0
// in exact arithmetic; rounding can make one slightly negative, which is
// taken as 0.
func (n *flowNet) relax(w int32, d, rc cost, pred int32) {
	if rc.pen == 0 && rc.rtt < 0 {
		rc.rtt = 0
	}
	nd := d.plus(rc)
	if nd.less(n.dist[w]) {
		if n.dist[w] == infCost {
			n.touched = append(n.touched, w)
		}
		n.dist[w] = nd
		n.pred[w] = pred
		n.fix(w)
	}
}

// reprice adds the distances of the last dijkstra to the potentials,
// capped at the sink's, so that reduced costs stay ≥ 0 and the path found
// has reduced cost 0. The sink's distance, which every node not settled
// gets, goes into n.off, which every potential carries (only differences
// of potentials are read until foldOffset): only the nodes the search
// settled are written.
func (n *flowNet) reprice() {
	dt := n.dist[n.sink]
	n.off = n.off.plus(dt)
	for _, v := range n.touched {
		if n.done[v] {
			n.pot[v] = n.pot[v].plus(n.dist[v].minus(dt))
		}
	}
}

// foldOffset adds n.off to every potential, so that pot holds them
// outright again (for reset, which sets some, and for Solution).
func (n *flowNet) foldOffset() {
	if n.off == (cost{}) {
		return
	}
	for v := range n.pot {
		n.pot[v] = n.pot[v].plus(n.off)
	}
	n.off = cost{}
}

// augment pushes the largest amount the path to the sink allows: the
// excess of its source, the room of its last region, the residual of
// every arc.
func (n *flowNet) augment() {
	ns := int32(n.ns)
	last := n.pred[n.sink]
	delta := n.limit[last] - n.load[last]
	v := ns + last
	for n.pred[v] >= 0 {
		p, tier := n.pred[v]>>1, n.pred[v]&1
		if v >= ns { // reached by a forward arc from its site
			if tier == 0 {
				delta = min(delta, n.u0[p]-n.f0[p])
			} else {
				delta = min(delta, n.u1[p]-n.f1[p])
			}
			v = n.aSite[p]
		} else { // reached by a reverse arc from its region
			if tier == 0 {
				delta = min(delta, n.f0[p])
			} else {
				delta = min(delta, n.f1[p])
			}
			v = ns + n.aReg[p]
		}
	}
	first := v - ns
	delta = min(delta, n.load[first]-n.limit[first])

	v = ns + last
	for n.pred[v] >= 0 {
		p, tier := n.pred[v]>>1, n.pred[v]&1
		if v >= ns {
			if tier == 0 {
				n.f0[p] += delta
			} else {
				n.f1[p] += delta
			}
			n.use(p)
			v = n.aSite[p]
		} else {
			if tier == 0 {
				n.f0[p] -= delta
			} else {
				n.f1[p] -= delta
			}
			v = ns + n.aReg[p]
		}
	}
	n.load[last] += delta
	n.load[first] -= delta
}

// split turns the stuck excess of the last ssp into components of their
// own and returns which components to solve again (nil if none).
//
// The nodes reachable from stuck excess (n.done) form closed sets: their
// sites reach only their regions (every arc of such a site has residual
// capacity in one tier or the other, unless the site sends it all its
// demand, and then the site was reached from that region), and their
// regions take demand only from their sites (a site sending to a reached
// region is reached through the reverse arc). In each component, that
// stuck part moves to a new component at level demand/capacity, the lowest
// at which it fits. When the component was itself split off earlier
// (packed: its demand fills its regions exactly), the rest moves too, to
// be solved again at its own level, which is no lower than the level the
// component was full at before (its regions were full then, and filled
// only by its own sites). In component 0 the rest keeps its plan at λ.
// Each split shrinks the sets, so solve ends.
func (n *flowNet) split() []bool {
	nc := len(n.level)
	type part struct{ demand, capacity float64 }
	stuck := make([]part, nc)
	rest := make([]part, nc)
	for v := range int(n.sink) {
		if v < n.ns && n.a0[v] == n.a0[v+1] {
			continue // a site with no arcs belongs to no set
		}
		c := n.comp[v]
		p := &rest[c]
		if n.done[v] {
			p = &stuck[c]
		}
		if v < n.ns {
			p.demand += n.demand[v]
		} else {
			p.capacity += n.capacity[v-n.ns]
		}
	}
	dirty := make([]bool, nc, 2*nc)
	toStuck := make([]int32, nc)
	toRest := make([]int32, nc)
	add := func(level float64) int32 {
		n.level = append(n.level, level)
		n.packed = append(n.packed, true)
		dirty = append(dirty, true)
		return int32(len(n.level) - 1)
	}
	for c := range nc {
		toStuck[c], toRest[c] = -1, -1
		if stuck[c].capacity <= 0 || n.packed[c] && rest[c].capacity <= 0 {
			// Nothing stuck here, or a whole packed component: its
			// excess is rounding only and stays where it is.
			continue
		}
		toStuck[c] = add(stuck[c].demand / stuck[c].capacity)
		if n.packed[c] && rest[c].demand > 0 {
			toRest[c] = add(rest[c].demand / rest[c].capacity)
		}
	}
	if len(dirty) == nc {
		return nil
	}
	for v := range n.sink {
		c := n.comp[v]
		if n.done[v] && toStuck[c] >= 0 {
			n.comp[v] = toStuck[c]
		} else if !n.done[v] && toRest[c] >= 0 {
			n.comp[v] = toRest[c]
		}
	}
	return dirty
}

// use lists arc p among its region's users if it is not already.
func (n *flowNet) use(p int32) {
	if !n.listed[p] {
		n.listed[p] = true
		r := n.aReg[p]
		n.users[r] = append(n.users[r], p)
	}
}

// The open nodes of dijkstra are a binary min-heap ordered by (dist, node
// index), with pos giving each node's place so that a shorter distance
// moves it up in place.

func (n *flowNet) before(a, b int32) bool {
	da, db := n.dist[a], n.dist[b]
	if da != db {
		return da.less(db)
	}
	return a < b
}

// fix puts v in the heap, or moves it up after its distance decreased.
func (n *flowNet) fix(v int32) {
	i := n.pos[v]
	if i < 0 {
		i = int32(len(n.heap))
		n.heap = append(n.heap, v)
	}
	for i > 0 {
		parent := (i - 1) / 2
		u := n.heap[parent]
		if !n.before(v, u) {
			break
		}
		n.heap[i] = u
		n.pos[u] = i
		i = parent
	}
	n.heap[i] = v
	n.pos[v] = i
}

// pop removes and returns the first node of the heap.
func (n *flowNet) pop() int32 {
	h := n.heap
	top := h[0]
	n.pos[top] = -1
	last := h[len(h)-1]
	h = h[:len(h)-1]
	n.heap = h
	if len(h) == 0 {
		return top
	}
	i := int32(0)
	for {
		c := 2*i + 1
		if c >= int32(len(h)) {
			break
		}
		if c+1 < int32(len(h)) && n.before(h[c+1], h[c]) {
			c++
		}
		if !n.before(h[c], last) {
			break
		}
		h[i] = h[c]
		n.pos[h[i]] = i
		i = c
	}
	h[i] = last
	n.pos[last] = i
	return top
}

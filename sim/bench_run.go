package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/hashing"
	"github.com/spillway-lb/spillway/lb/waterfall"
)

// overCapacityTolerance is how far above its capacity an instance's arrival
// rate may be before its requests count as served over capacity: 1%, so
// that a damped plan closing on a full region by ever smaller amounts does
// not count as overload.
const overCapacityTolerance = 0.01

// vip is the anycast address and port the synthetic clients connect to;
// every gfe serves the same one.
var vip = netip.AddrPortFrom(netip.AddrFrom4([4]byte{203, 0, 113, 10}), 443)

const tcp = 6

// topology is what every run of a Bench shares, read-only: the scenario's
// layout flattened into indexes, instance slots, the sites' RTT vectors and
// clients, and the planner's view of every step.
type topology struct {
	regions []string
	// Per group, in scenario order.
	groupNames []string
	groupIdx   map[string]int
	regionOf   []int
	rate       []float64 // rate_per_instance
	first      []int     // first instance slot
	nslots     []int     // slots: the most instances the group ever starts
	// Per instance slot.
	slotGroup []int
	slotIndex []int // index inside its group
	slotName  []string
	// Per site.
	rtt     [][]float64 // [site][region], ms
	reach   [][]bool
	nearest []int   // nearest region, -1 if none
	order   [][]int // reachable regions, nearest first (ties by name)
	clients [][]client
	// views[k] is the World the gfes see at step k (other sites' demand and
	// every group's state gossip delay behind); nil without planners.
	views []waterfall.World
}

// client is one synthetic client of a site: an address, its connections'
// source ports, and its share of the site's demand.
type client struct {
	addr   netip.Addr
	ports  []uint16
	weight float64
}

func (t *topology) slots() int { return len(t.slotGroup) }

// newTopology builds the shared state of a Bench run over tr.
func (s *Scenario) newTopology(tl *Timeline, tr *trace, policies []BenchPolicy) (*topology, error) {
	t := &topology{groupIdx: map[string]int{}}
	regionAt := map[string]int{}
	for ri, r := range s.Regions {
		regionAt[r.Name] = ri
		t.regions = append(t.regions, r.Name)
		for _, g := range r.Groups {
			t.groupIdx[g.Name] = len(t.groupNames)
			t.groupNames = append(t.groupNames, g.Name)
			t.regionOf = append(t.regionOf, ri)
			t.rate = append(t.rate, g.RatePerInstance)
		}
	}
	t.nslots = make([]int, len(t.groupNames))
	for k := range tr.steps {
		for g := range t.nslots {
			t.nslots[g] = max(t.nslots[g], tr.groups[k][g].Started, tr.seenGroups[k][g].Started)
		}
	}
	total := 0
	for _, n := range t.nslots {
		total += n
		if total > maxBenchInstances {
			return nil, fmt.Errorf("more than %d instances: %w", maxBenchInstances, ErrTooLarge)
		}
	}
	for g, n := range t.nslots {
		t.first = append(t.first, len(t.slotGroup))
		for j := range n {
			t.slotGroup = append(t.slotGroup, g)
			t.slotIndex = append(t.slotIndex, j)
			t.slotName = append(t.slotName, t.groupNames[g]+"/"+strconv.Itoa(j))
		}
	}

	for _, st := range s.Sites {
		rtt := make([]float64, len(s.Regions))
		reach := make([]bool, len(s.Regions))
		for name, v := range st.RTTms {
			rtt[regionAt[name]] = v
			reach[regionAt[name]] = true
		}
		var order []int
		for _, name := range s.regionOrder(st) {
			order = append(order, regionAt[name])
		}
		nearest := -1
		if len(order) > 0 {
			nearest = order[0]
		}
		t.rtt = append(t.rtt, rtt)
		t.reach = append(t.reach, reach)
		t.order = append(t.order, order)
		t.nearest = append(t.nearest, nearest)
	}

	var planners, hashes bool
	for _, p := range policies {
		planners = planners || p.Planner != nil
		hashes = hashes || p.Planner == nil && (p.Baseline == config.PolicyHash2 || p.Baseline == config.PolicyHash3 || p.Baseline == config.PolicyHash5)
	}
	if hashes {
		t.clients = make([][]client, len(s.Sites))
		for i := range s.Sites {
			t.clients[i] = newClients(tl, i)
		}
	}
	if planners {
		t.views = make([]waterfall.World, tr.steps)
		for k := range tr.steps {
			t.views[k] = s.view(tr, k)
		}
	}
	return t, nil
}

// newClients draws site i's synthetic clients from the timeline's seed:
// ClientsPerSite random IPv4 addresses with ConnectionsPerClient random
// ephemeral source ports each, client k (from 1) sending in proportion to
// k^−ClientSkew.
func newClients(tl *Timeline, site int) []client {
	m := tl.Model
	rng := rand.New(rand.NewPCG(tl.Seed, 0x636c69656e74<<16|uint64(site)))
	cs := make([]client, m.ClientsPerSite)
	var total float64
	for k := range cs {
		var a [4]byte
		v := rng.Uint32()
		a[0], a[1], a[2], a[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
		cs[k].addr = netip.AddrFrom4(a)
		cs[k].ports = make([]uint16, m.ConnectionsPerClient)
		for p := range cs[k].ports {
			cs[k].ports[p] = uint16(32768 + rng.IntN(60999-32768+1))
		}
		cs[k].weight = math.Pow(float64(k+1), -m.ClientSkew)
		total += cs[k].weight
	}
	for k := range cs {
		cs[k].weight /= total
	}
	return cs
}

// view returns the World the gfes see at step k: every group as it was
// gossip delay ago (started instances, healthy instances, capacity) and
// every site with its demand of then. A gfe replaces its own site's demand
// by the current one.
func (s *Scenario) view(tr *trace, k int) waterfall.World {
	w := waterfall.World{Regions: make([]waterfall.Region, 0, len(s.Regions)), Sites: make([]waterfall.Site, 0, len(s.Sites))}
	gi := 0
	for _, r := range s.Regions {
		wr := waterfall.Region{Name: r.Name, Groups: make([]waterfall.Group, 0, len(r.Groups))}
		for _, g := range r.Groups {
			st := tr.seenGroups[k][gi]
			gi++
			wr.Groups = append(wr.Groups, waterfall.Group{
				Name:      g.Name,
				Zone:      g.Zone,
				Instances: st.Started,
				Healthy:   st.Healthy,
				Capacity:  rateCapacity(st.Healthy, g.RatePerInstance, st.CapacityScaler),
			})
		}
		w.Regions = append(w.Regions, wr)
	}
	for i, st := range s.Sites {
		w.Sites = append(w.Sites, waterfall.Site{Name: st.Name, Demand: tr.seen[k][i], RTT: st.RTTms})
	}
	return w
}

// stepLP is the LP optimum of one step; ok is false when none exists.
type stepLP struct {
	ok  bool
	sol lpSolution
}

// solveSteps solves the LP of every step over the true demand and healthy
// capacity, reusing the previous step's solution when the inputs did not
// change.
func (t *topology) solveSteps(tr *trace) ([]stepLP, error) {
	out := make([]stepLP, tr.steps)
	var prevDemand, prevCap []float64
	for k := range tr.steps {
		capacity := t.regionCapacity(tr.groups[k])
		if k > 0 && slices.Equal(prevDemand, tr.demand[k]) && slices.Equal(prevCap, capacity) {
			out[k] = out[k-1]
			continue
		}
		prevDemand, prevCap = tr.demand[k], capacity
		sol, err := solveLP(lpProblem{demand: tr.demand[k], capacity: capacity, rtt: t.rtt, reach: t.reach})
		switch {
		case err == errLPInfeasible:
			out[k] = stepLP{}
		case err != nil:
			return nil, fmt.Errorf("step %d: %w", k, err)
		default:
			out[k] = stepLP{ok: true, sol: sol}
		}
	}
	return out, nil
}

// split is the share of a site's demand one instance slot receives.
type split struct {
	slot  int
	share float64
}

// runner runs one policy through a trace. It is used by one goroutine.
type runner struct {
	s      *Scenario
	tl     *Timeline
	tr     *trace
	topo   *topology
	lps    []stepLP
	pol    BenchPolicy
	cfg    waterfall.Config
	series bool

	backlog []float64         // per slot, requests
	lambda  []float64         // per slot, requests/s in the current step
	prev    []*waterfall.Plan // per site: the gfe's last (damped) plan
	splits  [][]split         // per site, the current step's split
	// Baseline splits depend only on the view of the groups; they are
	// rebuilt when it changes.
	splitsFor []groupState
	tables    map[string]*hashing.Maglev
	hist      *latencyHist
}

func newRunner(s *Scenario, tl *Timeline, tr *trace, topo *topology, lps []stepLP, p BenchPolicy, series bool) *runner {
	cfg := p.PlannerConfig
	if cfg == (waterfall.Config{}) {
		cfg = waterfall.DefaultConfig()
	}
	return &runner{
		s: s, tl: tl, tr: tr, topo: topo, lps: lps, pol: p, cfg: cfg, series: series,
		backlog: make([]float64, topo.slots()),
		lambda:  make([]float64, topo.slots()),
		prev:    make([]*waterfall.Plan, len(s.Sites)),
		splits:  make([][]split, len(s.Sites)),
		tables:  map[string]*hashing.Maglev{},
		hist:    newLatencyHist(),
	}
}

// run simulates every step and returns the policy's row.
func (r *runner) run() (BenchRow, error) {
	row := BenchRow{Policy: r.pol.Name, Scope: r.pol.Scope}
	if r.pol.Planner == nil {
		row.Scope = r.pol.scope()
	}
	var tot benchTotals
	st := r.newStepState()
	for k := range r.tr.steps {
		if err := r.decide(k); err != nil {
			return BenchRow{}, fmt.Errorf("step %d: %w", k, err)
		}
		r.arrive(k, &tot)
		r.queue(k, &tot, st)
		stepRouted := r.flow(k, &tot, st)
		r.oscillate(k, &tot, st)
		if r.series {
			row.Series = append(row.Series, r.seriesStep(k, stepRouted, st.regionLoad))
		}
	}
	return r.summarise(row, &tot)
}

// benchTotals are the sums over every step of a run that its BenchRow
// summarises. Counts are in requests.
type benchTotals struct {
	requests, routed, served, failed float64
	// overServed were served by an instance over its capacity; excess
	// arrived above an instance's capacity; cross were routed outside their
	// site's nearest region.
	overServed, excess, cross float64
	rttSum, latSum            float64 // requests × ms: routed by RTT, served by latency
	// lpRTT and lpRouted are rttSum and routed over the steps whose LP
	// optimum places demand.
	lpRTT, lpRouted float64
	osc             float64 // the steps' weighted share reversals; see oscillate
}

// stepState is a run's per-step working state, reused from step to step.
type stepState struct {
	regionLoad []float64 // per region, requests/s in the current step
	// Per site: its region shares this step, and the last step's shares
	// and change, for the oscillation measure.
	siteShares, prevShares, prevDelta [][]float64
	// Per slot, in the current step: whether the instance is over its
	// capacity, the share of its arrivals it accepts, and its requests'
	// mean queue wait and sojourn (service) in ms.
	over                  []bool
	accept, wait, sojourn []float64
}

// newStepState returns the working state for a run, with every site's
// shares zero and no previous step.
func (r *runner) newStepState() *stepState {
	nreg, nsites, nslots := len(r.topo.regions), len(r.s.Sites), r.topo.slots()
	st := &stepState{
		regionLoad: make([]float64, nreg),
		siteShares: make([][]float64, nsites),
		prevShares: make([][]float64, nsites),
		prevDelta:  make([][]float64, nsites),
		over:       make([]bool, nslots),
		accept:     make([]float64, nslots),
		wait:       make([]float64, nslots),
		sojourn:    make([]float64, nslots),
	}
	for si := range st.siteShares {
		st.siteShares[si] = make([]float64, nreg)
	}
	return st
}

// arrive counts step k's requests and sets r.lambda, every slot's arrival
// rate, from each site's demand and split. A site's demand fails whole
// when it has no split.
func (r *runner) arrive(k int, tot *benchTotals) {
	dt := r.tr.dt
	clear(r.lambda)
	for si, d := range r.tr.demand[k] {
		tot.requests += d * dt
		if d == 0 {
			continue
		}
		if len(r.splits[si]) == 0 {
			tot.failed += d * dt
			continue
		}
		for _, sp := range r.splits[si] {
			r.lambda[sp.slot] += d * sp.share
		}
	}
}

// queue runs every instance slot's queue through step k: arrivals at a
// slot that is not a healthy instance fail, and its backlog is lost; a
// healthy instance serves at its rate, drops what overflows its queue and
// sets its acceptance, wait, sojourn and over-capacity flag in st.
func (r *runner) queue(k int, tot *benchTotals, st *stepState) {
	t, m, dt := r.topo, r.tl.Model, r.tr.dt
	groups := r.tr.groups[k]
	for i := range r.lambda {
		lam, q := r.lambda[i], r.backlog[i]
		if lam == 0 && q == 0 {
			continue
		}
		g := t.slotGroup[i]
		gs := groups[g]
		if t.slotIndex[i] >= gs.Healthy {
			// Arrivals fail. The backlog is lost too, but its requests
			// were counted (as served) when they arrived.
			tot.failed += lam * dt
			r.backlog[i] = 0
			st.accept[i] = 0
			continue
		}
		mu := t.rate[g] / m.UtilizationAtCapacity
		qs := stepQueue(q, lam, mu, mu*m.MaxQueueMs/1000, dt)
		r.backlog[i] = qs.Backlog
		tot.failed += qs.Dropped
		st.accept[i] = 1
		if lam > 0 {
			st.accept[i] = 1 - qs.Dropped/(lam*dt)
		}
		st.wait[i], st.sojourn[i] = qs.WaitS*1000, qs.SojournS*1000
		c := rateCapacity(1, t.rate[g], gs.CapacityScaler) // this instance's
		st.over[i] = lam > c*(1+overCapacityTolerance)
		tot.excess += max(0, lam-c) * dt
	}
}

// flow follows every site's requests of step k along its split: it adds
// their RTT, their cross-region share and the latency of those served to
// tot, fills st.regionLoad and st.siteShares, and returns the requests
// routed in the step.
func (r *runner) flow(k int, tot *benchTotals, st *stepState) float64 {
	t, dt := r.topo, r.tr.dt
	var stepRouted, stepRTT float64
	clear(st.regionLoad)
	for si, d := range r.tr.demand[k] {
		clear(st.siteShares[si])
		if d == 0 {
			continue
		}
		for _, sp := range r.splits[si] {
			reqs := d * sp.share * dt
			if reqs == 0 {
				continue
			}
			region := t.regionOf[t.slotGroup[sp.slot]]
			rtt := t.rtt[si][region]
			stepRouted += reqs
			stepRTT += reqs * rtt
			st.regionLoad[region] += d * sp.share
			st.siteShares[si][region] += sp.share
			if region != t.nearest[si] {
				tot.cross += reqs
			}
			r.serve(reqs*st.accept[sp.slot], rtt, sp.slot, tot, st)
		}
	}
	tot.routed += stepRouted
	tot.rttSum += stepRTT
	if lp := r.lps[k]; lp.ok && lp.sol.Placed > 0 {
		tot.lpRTT += stepRTT
		tot.lpRouted += stepRouted
	}
	return stepRouted
}

// serve accounts ok requests served by slot at rtt ms: their latency (RTT,
// wait and sojourn) and whether the slot was over capacity.
func (r *runner) serve(ok, rtt float64, slot int, tot *benchTotals, st *stepState) {
	if ok <= 0 {
		return
	}
	tot.served += ok
	tot.latSum += ok * (rtt + st.wait[slot] + st.sojourn[slot])
	r.hist.addExp(ok, rtt+st.wait[slot], st.sojourn[slot])
	if st.over[slot] {
		tot.overServed += ok
	}
}

// oscillate adds step k's oscillation to tot: the zig-zags of each routed
// site's region shares, weighted by the site's part of the step's routed
// traffic. A site without demand or split restarts.
func (r *runner) oscillate(k int, tot *benchTotals, st *stepState) {
	nreg := len(r.topo.regions)
	var stepDemand float64
	for si, d := range r.tr.demand[k] {
		if len(r.splits[si]) > 0 {
			stepDemand += d
		}
	}
	for si, d := range r.tr.demand[k] {
		if d == 0 || len(r.splits[si]) == 0 {
			st.prevShares[si], st.prevDelta[si] = nil, nil // the site restarts
			continue
		}
		cur := st.siteShares[si]
		if prev := st.prevShares[si]; prev != nil {
			delta := st.prevDelta[si]
			if delta == nil {
				delta = make([]float64, nreg)
			}
			var zig float64
			for i := range cur {
				d1 := cur[i] - prev[i]
				if st.prevDelta[si] != nil && d1*delta[i] < 0 {
					zig += min(math.Abs(d1), math.Abs(delta[i]))
				}
				delta[i] = d1
			}
			tot.osc += zig * d / stepDemand
			st.prevDelta[si] = delta
		} else {
			st.prevShares[si] = make([]float64, nreg)
		}
		copy(st.prevShares[si], cur)
	}
}

// seriesStep returns step k's entry of the series: each region's share of
// the stepRouted requests, its load (regionLoad, requests/s) and its
// healthy capacity.
func (r *runner) seriesStep(k int, stepRouted float64, regionLoad []float64) SeriesStep {
	shares := make([]float64, len(regionLoad))
	for i, l := range regionLoad {
		shares[i] = ratio(l*r.tr.dt, stepRouted)
	}
	capacity := r.topo.regionCapacity(r.tr.groups[k])
	return SeriesStep{TS: r.tr.times[k], Shares: shares, LoadRPS: slices.Clone(regionLoad), CapacityRPS: capacity}
}

// regionCapacity returns every region's healthy capacity in requests/s
// with the groups in state groups.
func (t *topology) regionCapacity(groups []groupState) []float64 {
	capacity := make([]float64, len(t.regions))
	for g, st := range groups {
		capacity[t.regionOf[g]] += rateCapacity(st.Healthy, t.rate[g], st.CapacityScaler)
	}
	return capacity
}

// summarise fills row's measures from the run's totals and latency
// histogram. It fails with ErrOverflow when a total is not finite.
func (r *runner) summarise(row BenchRow, tot *benchTotals) (BenchRow, error) {
	row.Requests = tot.requests
	row.Routed = tot.routed
	row.Served = tot.served
	row.MeanMs = ratio(tot.latSum, tot.served)
	row.OverCapacity = ratio(tot.overServed, tot.served)
	row.Excess = ratio(tot.excess, tot.requests)
	row.ErrorRate = ratio(tot.failed, tot.requests)
	row.CrossRegion = ratio(tot.cross, tot.routed)
	row.MeanRTTMs = ratio(tot.rttSum, tot.routed)
	if tot.lpRouted > 0 && r.lpMean() > 0 {
		v := (tot.lpRTT / tot.lpRouted) / r.lpMean()
		row.RTTOverLP = &v
	}
	row.OscillationPP = 100 * tot.osc / 2
	for _, v := range []float64{tot.requests, tot.routed, tot.served, tot.failed, tot.overServed, tot.excess, tot.cross, tot.rttSum, tot.latSum, tot.lpRTT, r.lpMean(), tot.osc} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return BenchRow{}, ErrOverflow
		}
	}
	ps := CDFProbabilities()
	qs := r.hist.quantiles(append([]float64{0.5, 0.99}, ps...))
	row.P50Ms, row.P99Ms = qs[0], qs[1]
	for i, p := range ps {
		row.CDF = append(row.CDF, CDFPoint{P: p, Ms: qs[2+i]})
	}
	return row, nil
}

// lpMean returns the LP optimum's mean RTT over the steps that have one.
func (r *runner) lpMean() float64 {
	var cost, placed float64
	for _, lp := range r.lps {
		if lp.ok {
			cost += lp.sol.Cost
			placed += lp.sol.Placed
		}
	}
	return ratio(cost, placed)
}

// decide sets r.splits for step k.
func (r *runner) decide(k int) error {
	if r.pol.Planner != nil {
		return r.decidePlanned(k)
	}
	seen := r.tr.seenGroups[k]
	if r.splitsFor != nil && slices.Equal(r.splitsFor, seen) {
		return nil
	}
	r.splitsFor = seen
	for si := range r.s.Sites {
		sp, err := r.baselineSplit(si, seen)
		if err != nil {
			return err
		}
		r.splits[si] = sp
	}
	return nil
}

// decidePlanned runs every gfe's planner, damping and row for step k.
func (r *runner) decidePlanned(k int) error {
	t, tr := r.topo, r.tr
	w := t.views[k]
	var shared *waterfall.Plan
	damped := map[[2]*waterfall.Plan]*waterfall.Plan{}
	for si, st := range r.s.Sites {
		var plan *waterfall.Plan
		var err error
		if tr.demand[k][si] == tr.seen[k][si] {
			if shared == nil {
				if shared, err = r.pol.Planner(w, r.cfg); err != nil {
					return err
				}
			}
			plan = shared
		} else {
			own := waterfall.World{Regions: w.Regions, Sites: slices.Clone(w.Sites)}
			own.Sites[si].Demand = tr.demand[k][si]
			if plan, err = r.pol.Planner(own, r.cfg); err != nil {
				return err
			}
		}
		key := [2]*waterfall.Plan{r.prev[si], plan}
		d, ok := damped[key]
		if !ok {
			d = waterfall.Damp(r.prev[si], plan, r.tl.Damping)
			damped[key] = d
		}
		r.prev[si] = d
		r.splits[si] = r.rowSplit(d.Row(st.Name), tr.seenGroups[k])
	}
	return nil
}

// rowSplit returns the expected split of a waterfall.Picker built from row
// over the instances the view believes healthy: each group by its share,
// groups without healthy instances left out and the others scaled up in
// proportion (evenly when no share is usable), and inside a group evenly
// over its healthy instances (backend.PolicyRoundRobin, the gfe's policy
// inside a group). It is the distribution Pick gives for uniformly random
// rnd (TestRowSplitMatchesPicker).
func (r *runner) rowSplit(row []waterfall.Flow, seen []groupState) []split {
	t := r.topo
	type use struct {
		g int
		w float64
	}
	var uses []use
	var total float64
	for _, f := range row {
		g, ok := t.groupIdx[f.Group]
		if !ok || seen[g].Healthy == 0 {
			continue
		}
		w := max(f.Share, 0)
		uses = append(uses, use{g, w})
		total += w
	}
	if len(uses) == 0 {
		return nil
	}
	if !(total > 0) || math.IsInf(total, 0) {
		for i := range uses {
			uses[i].w = 1
		}
		total = float64(len(uses))
	}
	var out []split
	for _, u := range uses {
		n := min(seen[u.g].Healthy, t.nslots[u.g])
		for j := range n {
			out = append(out, split{slot: t.first[u.g] + j, share: u.w / total / float64(n)})
		}
	}
	return out
}

// pool returns the instance slots a baseline at site si balances over, given
// the view: the healthy instances of groups with capacity, in every region
// the site reaches (global) or in its nearest region that has one
// (nearest_region), in scenario order.
func (r *runner) pool(si int, seen []groupState) []int {
	t := r.topo
	inRegion := func(region int) []int {
		var slots []int
		for g, st := range seen {
			if t.regionOf[g] != region || st.Healthy == 0 || rateCapacity(1, t.rate[g], st.CapacityScaler) <= 0 {
				continue
			}
			for j := range min(st.Healthy, t.nslots[g]) {
				slots = append(slots, t.first[g]+j)
			}
		}
		return slots
	}
	if r.pol.scope() == config.HashScopeNearestRegion {
		for _, region := range t.order[si] {
			if slots := inRegion(region); len(slots) > 0 {
				return slots
			}
		}
		return nil
	}
	var slots []int
	for region := range t.regions {
		if t.reach[si][region] {
			slots = append(slots, inRegion(region)...)
		}
	}
	slices.Sort(slots)
	return slots
}

// baselineSplit returns site si's split under a baseline policy.
func (r *runner) baselineSplit(si int, seen []groupState) ([]split, error) {
	slots := r.pool(si, seen)
	if len(slots) == 0 {
		return nil, nil
	}
	out := make([]split, len(slots))
	if r.pol.Baseline == config.PolicyRoundRobin || r.pol.Baseline == config.PolicyLeastRequest {
		for i, s := range slots {
			out[i] = split{slot: s, share: 1 / float64(len(slots))}
		}
		return out, nil
	}
	tbl, err := r.table(slots)
	if err != nil {
		return nil, err
	}
	for i, s := range slots {
		out[i].slot = s
	}
	for _, c := range r.topo.clients[si] {
		switch r.pol.Baseline {
		case config.PolicyHash2, config.PolicyHash3:
			key := hashing.Key2(c.addr, vip.Addr())
			if r.pol.Baseline == config.PolicyHash3 {
				key = hashing.Key3(c.addr, vip.Addr(), tcp)
			}
			i, _ := tbl.Pick(key)
			out[i].share += c.weight
		case config.PolicyHash5:
			w := c.weight / float64(len(c.ports))
			for _, port := range c.ports {
				i, _ := tbl.Pick(hashing.Key5(c.addr, vip.Addr(), tcp, port, vip.Port()))
				out[i].share += w
			}
		}
	}
	return slices.DeleteFunc(out, func(s split) bool { return s.share == 0 }), nil
}

// table returns the Maglev table over slots, building it on first use.
func (r *runner) table(slots []int) (*hashing.Maglev, error) {
	var b strings.Builder
	for _, s := range slots {
		b.WriteString(strconv.Itoa(s))
		b.WriteByte(',')
	}
	key := b.String()
	if tbl, ok := r.tables[key]; ok {
		return tbl, nil
	}
	names := make([]string, len(slots))
	for i, s := range slots {
		names[i] = r.topo.slotName[s]
	}
	tbl, err := hashing.NewMaglev(hashing.DefaultConfig(), names)
	if err != nil {
		return nil, fmt.Errorf("maglev over %d backends: %w", len(names), err)
	}
	r.tables[key] = tbl
	return tbl, nil
}

package policybench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"

	"github.com/spillway-lb/spillway/internal/benchpolicy"
	"github.com/spillway-lb/spillway/sim"
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

// topology is what every policy's run of a Run shares, read-only: the scenario's
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
	// Per site.
	rtt     [][]float64 // [site][region], ms
	reach   [][]bool
	nearest []int   // nearest region, -1 if none
	order   [][]int // reachable regions, nearest first (ties by name)
	clients [][]client

	// The gfes' configs (see bench_gfe.go): region and group names that
	// config accepts (per region, per group), each region's groups, every
	// slot's instance address and back, and every site's RTT map under
	// the config's region names.
	regionCfg, groupCfg []string
	regionGroups        [][]int
	slotAddr            []string
	slotOf              map[string]int
	siteRTT             []map[string]float64
	// feedback is Timeline.Feedback: the gfes' services run the closed
	// loop.
	feedback bool
}

// client is one synthetic client of a site: an address, its connections'
// source ports, and its share of the site's demand.
type client struct {
	addr   netip.Addr
	ports  []uint16
	weight float64
}

func (t *topology) slots() int { return len(t.slotGroup) }

// newTopology builds the shared state of a Run over tr.
func newTopology(s *sim.Scenario, tl *sim.Timeline, tr *sim.Trace, policies []benchpolicy.Row) (*topology, error) {
	t := &topology{groupIdx: map[string]int{}, feedback: tl.Feedback}
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
	for k := range tr.Steps {
		for g := range t.nslots {
			t.nslots[g] = max(t.nslots[g], tr.Groups[k][g].Started, tr.SeenGroups[k][g].Started)
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
		for _, name := range s.RegionOrder(st) {
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

	hashes := slices.ContainsFunc(policies, func(p benchpolicy.Row) bool { return p.Policy.IsHash() })
	if hashes {
		t.clients = make([][]client, len(s.Sites))
		for i := range s.Sites {
			t.clients[i] = newClients(tl, i)
		}
	}
	t.setRouting(s)
	return t, nil
}

// newClients draws site i's synthetic clients from the timeline's seed:
// ClientsPerSite random IPv4 addresses with ConnectionsPerClient random
// ephemeral source ports each, client k (from 1) sending in proportion to
// k^−ClientSkew.
func newClients(tl *sim.Timeline, site int) []client {
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

// stepLP is the LP optimum of one step; ok is false when none exists.
type stepLP struct {
	ok  bool
	sol sim.LPSolution
}

// solveSteps solves the LP of every step over the true demand and healthy
// capacity, reusing the previous step's solution when the inputs did not
// change.
func (t *topology) solveSteps(tr *sim.Trace) ([]stepLP, error) {
	out := make([]stepLP, tr.Steps)
	var prevDemand, prevCap []float64
	for k := range tr.Steps {
		capacity := t.regionCapacity(tr.Groups[k])
		if k > 0 && slices.Equal(prevDemand, tr.Demand[k]) && slices.Equal(prevCap, capacity) {
			out[k] = out[k-1]
			continue
		}
		prevDemand, prevCap = tr.Demand[k], capacity
		sol, err := sim.SolveLP(sim.LPProblem{Demand: tr.Demand[k], Capacity: capacity, RTT: t.rtt, Reach: t.reach})
		switch {
		case err == sim.ErrLPInfeasible:
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
	s      *sim.Scenario
	tl     *sim.Timeline
	tr     *sim.Trace
	topo   *topology
	lps    []stepLP
	pol    benchpolicy.Row
	series bool

	gfes    *gfes
	backlog []float64 // per slot, requests
	lambda  []float64 // per slot, requests/s in the current step
	// Per site, the current step's split, and the share of its demand
	// sent where it fails before reaching an instance (a region the site
	// does not reach; everything when it has no split).
	splits [][]split
	lost   []float64
	hist   *latencyHist
}

func newRunner(s *sim.Scenario, tl *sim.Timeline, tr *sim.Trace, topo *topology, lps []stepLP, p benchpolicy.Row, series bool) *runner {
	return &runner{
		s: s, tl: tl, tr: tr, topo: topo, lps: lps, pol: p, series: series,
		gfes:    newGFEs(s, tl, topo, p),
		backlog: make([]float64, topo.slots()),
		lambda:  make([]float64, topo.slots()),
		splits:  make([][]split, len(s.Sites)),
		lost:    make([]float64, len(s.Sites)),
		hist:    newLatencyHist(),
	}
}

// run simulates every step and returns the policy's row.
func (r *runner) run() (Row, error) {
	row := Row{Policy: string(r.pol.Policy)}
	if !r.pol.Policy.IsPlanned() {
		row.Scope = scope(r.pol)
	}
	var tot benchTotals
	st := r.newStepState()
	if r.gfes.prober != nil {
		r.gfes.prober.bind(r.backlog)
	}
	for k := range r.tr.Steps {
		stepRouted, err := r.step(k, &tot, st)
		if err != nil {
			return Row{}, err
		}
		if r.series {
			row.Series = append(row.Series, r.seriesStep(k, stepRouted, st.regionLoad))
		}
	}
	return r.summarise(row, &tot)
}

// step simulates step k: the gfes decide, the requests arrive and queue,
// flow to the instances, tell the gfes what they ended in, and swing the
// shares. It returns the requests routed in the step.
func (r *runner) step(k int, tot *benchTotals, st *stepState) (float64, error) {
	if err := r.gfes.decide(k, r.tr, r.splits, r.lost); err != nil {
		return 0, fmt.Errorf("step %d: %w", k, err)
	}
	r.arrive(k, tot)
	r.queue(k, tot, st)
	stepRouted := r.flow(k, tot, st)
	r.signal(k, st)
	r.oscillate(k, tot, st)
	return stepRouted, nil
}

// benchTotals are the sums over every step of a run that its Row
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
	// capacity, the share of its arrivals it accepts, its requests' mean
	// queue wait and sojourn (service) in ms, and the utilization it
	// reports (Model.LoadReports).
	over                        []bool
	accept, wait, sojourn, util []float64
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
		util:       make([]float64, nslots),
	}
	for si := range st.siteShares {
		st.siteShares[si] = make([]float64, nreg)
	}
	return st
}

// arrive counts step k's requests and sets r.lambda, every slot's arrival
// rate, from each site's demand and split. The share of a site's demand
// that is lost (r.lost) fails.
func (r *runner) arrive(k int, tot *benchTotals) {
	dt := r.tr.StepS
	clear(r.lambda)
	for si, d := range r.tr.Demand[k] {
		tot.requests += d * dt
		if d == 0 {
			continue
		}
		tot.failed += d * r.lost[si] * dt
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
	t, m, dt := r.topo, r.tl.Model, r.tr.StepS
	groups := r.tr.Groups[k]
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
		mu := t.rate[g] / m.UtilizationAtCapacity / gs.ServiceFactor()
		bound := mu * m.MaxQueueMs / 1000
		// A slowdown (sim.EventSlowdown) shrinks the bound, in requests,
		// below the backlog: the surplus is lost as an unhealthy
		// instance's backlog is, counted as served when it arrived.
		q = min(q, bound)
		qs := stepQueue(q, lam, mu, bound, dt)
		r.backlog[i] = qs.Backlog
		tot.failed += qs.Dropped
		st.accept[i] = 1
		if lam > 0 {
			st.accept[i] = 1 - qs.Dropped/(lam*dt)
		}
		st.wait[i], st.sojourn[i] = qs.WaitS*1000, qs.SojournS*1000
		st.util[i] = reportedUtilization(q, lam, mu, dt, qs.WaitS)
		c := sim.RateCapacity(1, t.rate[g], gs.CapacityScaler) // this instance's
		st.over[i] = lam > c*(1+overCapacityTolerance)
		tot.excess += max(0, lam-c) * dt
	}
}

// reportedUtilization is the mean load report of an instance over a step
// that starts with backlog requests waiting, with arrival rate lambda,
// service rate mu and a mean wait of waitS seconds (stepQueue): the report
// of a rate-limited test backend (internal/testbackend), λ/μ while nothing
// waits and max(λ/μ, 1) plus the seconds of work waiting while requests
// do, averaged over the step.
func reportedUtilization(backlog, lambda, mu, dt, waitS float64) float64 {
	rho := lambda / mu
	var queued float64 // the share of the step with requests waiting
	switch r := lambda - mu; {
	case r > 0 || (r == 0 && backlog > 0):
		queued = 1
	case backlog > 0:
		queued = min(1, backlog/-r/dt)
	}
	return rho + queued*max(0, 1-rho) + waitS
}

// flow follows every site's requests of step k along its split: it adds
// their RTT, their cross-region share and the latency of those served to
// tot, fills st.regionLoad and st.siteShares, and returns the requests
// routed in the step.
func (r *runner) flow(k int, tot *benchTotals, st *stepState) float64 {
	t, dt := r.topo, r.tr.StepS
	var stepRouted, stepRTT float64
	clear(st.regionLoad)
	for si, d := range r.tr.Demand[k] {
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
	for si, d := range r.tr.Demand[k] {
		if len(r.splits[si]) > 0 {
			stepDemand += d
		}
	}
	for si, d := range r.tr.Demand[k] {
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
		shares[i] = ratio(l*r.tr.StepS, stepRouted)
	}
	capacity := r.topo.regionCapacity(r.tr.Groups[k])
	return SeriesStep{TS: r.tr.Times[k], Shares: shares, LoadRPS: slices.Clone(regionLoad), CapacityRPS: capacity}
}

// regionCapacity returns every region's healthy capacity in requests/s
// with the groups in state groups.
func (t *topology) regionCapacity(groups []sim.GroupState) []float64 {
	capacity := make([]float64, len(t.regions))
	for g, st := range groups {
		capacity[t.regionOf[g]] += sim.RateCapacity(st.Healthy, t.rate[g], st.CapacityScaler)
	}
	return capacity
}

// summarise fills row's measures from the run's totals and latency
// histogram. It fails with ErrOverflow when a total is not finite.
func (r *runner) summarise(row Row, tot *benchTotals) (Row, error) {
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
			return Row{}, sim.ErrOverflow
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

package policybench

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/benchpolicy"
	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/splitmix"
	"github.com/spillway-lb/spillway/lb/routing"
	"github.com/spillway-lb/spillway/sim"
)

// The simulated gfes run the gfe's own routing (lb/routing): each
// site's gfe is a routing.Builder, and every step it builds a routing table
// from a snapshot of what gossip has told it about the groups, the other
// sites' demand it has heard of and its own current demand. The site's
// split of its demand over instance slots is read from that table (split).
//
// The world the scenario describes becomes a config.Config with one
// service, benchService, under the policy of the row:
//
//   - every region with a started instance becomes a region, every group
//     with started instances a zone holding that one group (the scenario's
//     zones are informational; in the planner too);
//   - a group lists exactly its started instances, so that its healthy
//     fraction (docs/design.md §3 rule 5) is healthy/started; instance j of group
//     g is slot first[g]+j, at address slotAddr;
//   - the service's backend of a group has max_rate_per_instance = its
//     rate_per_instance and capacity_scaler = its current scaler (a rate of
//     0 becomes rate 1 with scaler 0: capacity 0 either way, but config
//     requires a positive rate);
//   - the first Healthy instances of a group are healthy in the snapshot
//     (snapshot.FromConfig), the others not;
//   - the service's feedback (the closed loop) is on as Timeline.Feedback
//     says, with the defaults of config.DefaultFeedback, and its
//     target_utilization is config.DefaultService's.
//
// Regions and groups get names that config accepts and that sort as the
// scenario's names do (so that ties broken by name break the same way):
// "r" and "g" followed by the rank of the scenario's name.

// benchService is the name of the one service every simulated gfe routes.
const benchService = "bench"

// benchEpoch is the wall-clock time of step 0 in the gfes' tables.
var benchEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// rankNames returns names a config accepts for names: prefix followed by the
// rank of each name in sorted order, zero-padded so that the new names sort
// as the old ones do.
func rankNames(prefix string, names []string) []string {
	idx := make([]int, len(names))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return strings.Compare(names[a], names[b]) })
	width := len(strconv.Itoa(max(len(names)-1, 0)))
	out := make([]string, len(names))
	for rank, i := range idx {
		out[i] = fmt.Sprintf("%s%0*d", prefix, width, rank)
	}
	return out
}

// setRouting fills t's names and addresses for the gfes' configs, and every
// site's RTT map under the config's region names.
func (t *topology) setRouting(s *sim.Scenario) {
	t.regionCfg = rankNames("r", t.regions)
	t.groupCfg = rankNames("g", t.groupNames)
	t.regionGroups = make([][]int, len(t.regions))
	for g, ri := range t.regionOf {
		t.regionGroups[ri] = append(t.regionGroups[ri], g)
	}
	t.slotOf = make(map[string]int, t.slots())
	for i := range t.slotGroup {
		addr := t.groupCfg[t.slotGroup[i]] + "-" + strconv.Itoa(t.slotIndex[i]) + ".sim:80"
		t.slotAddr = append(t.slotAddr, addr)
		t.slotOf[addr] = i
	}
	regionAt := map[string]int{}
	for ri, name := range t.regions {
		regionAt[name] = ri
	}
	for _, st := range s.Sites {
		rtt := make(map[string]float64, len(st.RTTms))
		for name, v := range st.RTTms {
			rtt[t.regionCfg[regionAt[name]]] = v
		}
		t.siteRTT = append(t.siteRTT, rtt)
	}
}

// config returns the gfes' configuration of the world in group states
// groups under policy p, or nil when no group has a started instance.
func (t *topology) config(p benchpolicy.Row, groups []sim.GroupState) (*config.Config, error) {
	svc := config.DefaultService()
	svc.Name = benchService
	svc.Policy = p.Policy
	svc.Feedback.Enabled = t.feedback
	if svc.Policy.IsHash() {
		svc.HashScope = scope(p)
	}
	var regions []config.Region
	for ri, gs := range t.regionGroups {
		var zones []config.Zone
		for _, g := range gs {
			st := groups[g]
			if st.Started == 0 {
				continue
			}
			instances := make([]config.Instance, st.Started)
			for j := range instances {
				instances[j].Address = t.slotAddr[t.first[g]+j]
			}
			zones = append(zones, config.Zone{Name: t.groupCfg[g], Groups: []config.Group{{Name: t.groupCfg[g], Instances: instances}}})
			b := config.DefaultBackend()
			b.Group = t.groupCfg[g]
			b.MaxRatePerInstance, b.CapacityScaler = t.rate[g], st.CapacityScaler
			if !(b.MaxRatePerInstance > 0) {
				b.MaxRatePerInstance, b.CapacityScaler = 1, 0
			}
			svc.Backends = append(svc.Backends, b)
		}
		if len(zones) > 0 {
			regions = append(regions, config.Region{Name: t.regionCfg[ri], Zones: zones})
		}
	}
	if len(regions) == 0 {
		return nil, nil
	}
	route := config.DefaultRoute()
	route.Service = benchService
	cfg, err := config.New(config.Config{Regions: regions, Services: []config.Service{svc}, Routes: []config.Route{route}})
	if err != nil {
		return nil, fmt.Errorf("the gfes' config: %w", err)
	}
	return cfg, nil
}

// gfes are one policy's gfes, one per site, and what they are built from.
// Owned by one runner.
type gfes struct {
	topo     *topology
	pol      benchpolicy.Row
	sites    []string // site names, by index
	builders []*routing.Builder
	// configs and snaps cache the config of every distinct started count
	// and scaler of the groups, and the snapshot of every distinct group
	// state, by stateKey.
	configs map[string]*config.Config
	snaps   map[string]*routing.Fleet
	// built is the group states of the last build; baselines build again
	// only when they change (their tables read nothing else that changes).
	built []sim.GroupState
	// tables holds every site's last table (for tests).
	tables []*routing.Table
	// counts is scratch: requests per slot while a split is summed.
	counts []float64
	// loop is the closed loop's state (bench_loop.go); nil for a
	// baseline, whose builds read no signals.
	loop *loop
	// prober answers the probes of policy prequal (prequal.go); nil for
	// every other policy.
	prober *simProber
}

func newGFEs(s *sim.Scenario, tl *sim.Timeline, topo *topology, p benchpolicy.Row) *gfes {
	g := &gfes{
		topo:    topo,
		pol:     p,
		configs: map[string]*config.Config{},
		snaps:   map[string]*routing.Fleet{},
		tables:  make([]*routing.Table, len(s.Sites)),
		counts:  make([]float64, topo.slots()),
	}
	if p.Policy.IsPlanned() {
		g.loop = newLoop(tl, len(s.Sites))
	}
	var prober routing.Prober
	if p.Policy == config.PolicyPrequal {
		g.prober = newSimProber(topo, tl)
		prober = g.prober
	}
	clk := clock.NewFake(benchEpoch) // never advanced: PickAt gets the time
	for si, st := range s.Sites {
		g.sites = append(g.sites, st.Name)
		// The tables draw random numbers only for round-robin starting
		// points and least-request choices, which no split reads; seeded,
		// so that a run repeats exactly.
		g.builders = append(g.builders, routing.NewBuilder(
			routing.Config{Node: nodeName(si), Site: st.Name, Damping: tl.Damping, HerdWindow: herdWindow(tl)},
			routing.Options{Now: clk.Now, Rand: splitmix.Sequence(tl.Seed ^ uint64(si)<<32), Prober: prober},
		))
	}
	return g
}

// herdWindow is the gfes' routing.Config.HerdWindow in a run of tl: the
// gossip delay (what the others believe of a site's demand is that old),
// at least one step.
func herdWindow(tl *sim.Timeline) time.Duration {
	return time.Duration(max(tl.GossipDelayS, tl.StepS) * float64(time.Second))
}

// nodeName is the gossip name of site si's gfe.
func nodeName(si int) string { return "gfe-" + strconv.Itoa(si) }

// stateKey returns a map key for group states; with started only, one
// for their started counts and scalers.
func stateKey(groups []sim.GroupState, startedOnly bool) string {
	b := make([]byte, 0, len(groups)*24)
	for _, st := range groups {
		b = strconv.AppendInt(b, int64(st.Started), 10)
		b = append(b, '/')
		if !startedOnly {
			b = strconv.AppendInt(b, int64(st.Healthy), 10)
			b = append(b, '/')
		}
		b = strconv.AppendUint(b, math.Float64bits(st.CapacityScaler), 16)
		b = append(b, ',')
	}
	return string(b)
}

// snapshot returns the fleet (the routing build's snapshot: config and
// instance health) of the world in group states groups, or nil when it
// has no started instance: the simulator's one translation of its state
// into the routing input.
func (g *gfes) snapshot(groups []sim.GroupState) (*routing.Fleet, error) {
	key := stateKey(groups, false)
	if cs, ok := g.snaps[key]; ok {
		return cs, nil
	}
	ckey := stateKey(groups, true)
	cfg, ok := g.configs[ckey]
	if !ok {
		var err error
		if cfg, err = g.topo.config(g.pol, groups); err != nil {
			return nil, err
		}
		g.configs[ckey] = cfg
	}
	var cs *routing.Fleet
	if cfg != nil {
		var unhealthy []string
		for gi, st := range groups {
			for j := st.Healthy; j < st.Started; j++ {
				unhealthy = append(unhealthy, g.topo.slotAddr[g.topo.first[gi]+j])
			}
		}
		cs = routing.FromConfig(strconv.Itoa(len(g.snaps)+1), cfg, unhealthy...)
	}
	g.snaps[key] = cs
	return cs, nil
}

// decide sets every site's split for step k from the tables its gfe
// builds: every step for a planned policy (its plan follows demand and is
// damped step by step), and only when the view of the groups changes for
// a baseline.
func (g *gfes) decide(k int, tr *sim.Trace, splits [][]split, lost []float64) error {
	seen := tr.SeenGroups[k]
	planned := g.pol.Policy.IsPlanned()
	if !planned && g.prober == nil && g.built != nil && slices.Equal(g.built, seen) {
		return nil
	}
	g.built = seen
	cs, err := g.snapshot(seen)
	if err != nil {
		return err
	}
	if g.loop != nil {
		defer g.loop.record(k, g.builders)
	}
	if cs == nil {
		for si := range splits {
			splits[si], lost[si] = nil, 1
		}
		return nil
	}
	now := benchEpoch.Add(time.Duration(tr.Times[k] * float64(time.Second)))
	var peers []routing.Peer
	if planned {
		peers = make([]routing.Peer, len(g.builders))
		for si := range peers {
			peers[si] = g.peer(si, tr.Seen[k][si])
			peers[si].Capacity = g.loop.heard(k, si)
		}
	}
	// A baseline of scope global has the same pool at every gfe (the pool
	// depends on the site only for hash scope nearest_region; see
	// TestBenchGlobalPoolShared): build one table for all.
	// Not envoy_priority (no scope: its levels follow the site) and not
	// prequal (each gfe keeps its own probe pool).
	shared := !planned && g.prober == nil && scope(g.pol) == config.HashScopeGlobal
	var tbl *routing.Table
	for si, b := range g.builders {
		if !shared || tbl == nil {
			var problems []error
			tbl, problems = b.Build(routing.Input{Fleet: cs, Peers: peers, Self: g.peer(si, tr.Heard[k][si]), Now: now})
			if len(problems) > 0 {
				return errors.Join(problems...)
			}
		}
		g.tables[si] = tbl
		splits[si], lost[si] = g.split(si, tbl.Services[benchService], now, tr, k)
	}
	return nil
}

// peer returns what site si's gfe tells the others (and itself): its site,
// RTT and a demand of demand requests/s (decide adds the capacity factors
// the others have heard of).
func (g *gfes) peer(si int, demand float64) routing.Peer {
	return routing.Peer{
		Node:   nodeName(si),
		Site:   g.sites[si],
		RTT:    g.topo.siteRTT[si],
		Demand: map[string]float64{benchService: demand},
	}
}

// split returns site si's split of its demand as svc picks at now, and the
// share of its demand sent to regions it does not reach (those requests
// fail: the site has no path there, which is why its rtt_ms has no entry).
//
//   - With a plan row (svc.Picker): each group of the row with the
//     probability the Picker chooses it, evenly over the group's backends
//     (round robin inside a group, as the gfe's Picker goes).
//   - envoy_priority (svc.Priorities): each level with its load, evenly
//     over the level's active members.
//   - Hashing: every connection of the site's synthetic clients picked by
//     the table itself (its Maglev over its pool, the policy's flow key), to
//     the anycast address vip.
//   - Prequal: prequalPicks picks by the table itself, each asking for
//     probes answered at once from the simulated instances (prequal.go).
//   - Otherwise (round_robin, least_request, and a planned policy whose
//     site has no plan row yet): evenly over the table's pool. Least
//     request's preference for backends with fewer requests in flight is
//     not modelled.
//
// A site with no backend to go to gets no split and loses everything.
func (g *gfes) split(si int, svc *routing.Service, now time.Time, tr *sim.Trace, k int) ([]split, float64) {
	t := g.topo
	counts := g.counts
	clear(counts)
	switch {
	case svc == nil:
		return nil, 1
	case svc.Picker() != nil:
		for _, grp := range svc.Picker().Groups() {
			for _, b := range grp.Backends {
				counts[t.slotOf[b.Addr()]] += grp.Share / float64(len(grp.Backends))
			}
		}
	case g.prober != nil:
		if !g.prober.split(svc, tr, k, tr.Demand[k][si], now, counts) {
			return nil, 1 // an empty pool
		}
	case svc.Priorities() != nil:
		for _, lv := range svc.Priorities() {
			for _, m := range lv.Members[:lv.Active] {
				counts[t.slotOf[m.B.Addr()]] += float64(lv.Load) / 100 / float64(lv.Active)
			}
		}
	case svc.Config().Policy.IsHash():
		for _, c := range t.clients[si] {
			w := c.weight / float64(len(c.ports))
			for _, port := range c.ports {
				pk, err := svc.PickAt(0, routing.Flow{Src: netip.AddrPortFrom(c.addr, port), Dst: vip}, now)
				if err != nil {
					return nil, 1 // an empty pool
				}
				counts[t.slotOf[pk.Backend.Addr()]] += w
				pk.Done()
			}
		}
	default:
		pool := svc.Pool()
		for _, m := range pool {
			counts[t.slotOf[m.B.Addr()]] += 1 / float64(len(pool))
		}
	}
	var out []split
	var lost float64
	for slot, share := range counts {
		switch {
		case share == 0:
		case !t.reach[si][t.regionOf[t.slotGroup[slot]]]:
			lost += share
		default:
			out = append(out, split{slot: slot, share: share})
		}
	}
	if len(out) == 0 {
		return nil, 1
	}
	return out, lost
}

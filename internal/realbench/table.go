package realbench

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/spillway-lb/spillway/internal/benchpolicy"
	"github.com/spillway-lb/spillway/internal/quantile"
	"github.com/spillway-lb/spillway/internal/topology"
	"github.com/spillway-lb/spillway/sim"
)

// Request is one measured request, as the table computation sees it.
type Request struct {
	// Site is the site whose gfe the request was sent to.
	Site string
	// Phase is the index of the phase (Config.Phases) it was sent in.
	Phase int
	// T is when it was sent, since the start of the measured part of the
	// run (the end of Warmup), on a clock shared by every site.
	T time.Duration
	// Source is the client address and port it was sent from.
	Source netip.AddrPort
	// Status is the HTTP status; 0 when no response came (transport
	// error or timeout).
	Status int
	// Region and Backend name the instance that answered (its
	// X-Spillway-Region and X-Spillway-Backend headers), whatever the
	// status; empty when the gfe answered itself or nothing answered.
	Region, Backend string
	// Latency is the time until the whole response was read, or until
	// the request failed.
	Latency time.Duration
}

// ok reports whether r was served (2xx).
func (r *Request) ok() bool { return r.Status/100 == 2 }

// Measurement is what one policy's run measured.
type Measurement struct {
	Policy benchpolicy.Row
	// Requests are the requests sent in the measured part.
	Requests []Request
	// Dropped counts requests the load generator did not send in the
	// measured part because too many were outstanding.
	Dropped int64
}

// Row is one policy's line of the table. Shares are fractions in [0, 1].
type Row struct {
	Policy string `json:"policy"`
	// Scope is "-" for the planned policies, as in `lbsim bench`.
	Scope string `json:"scope"`
	// Options are the service options the row turned on (keys load_aware
	// and shed, present when true).
	benchpolicy.Options
	// Requests is every request of the measured part, Sent + Dropped.
	// Sent = OK + Failed: OK were answered 2xx; Failed got another status
	// or no response. Routed got an answer from some backend (any
	// status).
	Requests int64 `json:"requests"`
	Sent     int64 `json:"sent"`
	OK       int64 `json:"ok"`
	Failed   int64 `json:"failed"`
	Dropped  int64 `json:"dropped"`
	Routed   int64 `json:"routed"`
	// MeanMs, P50Ms and P99Ms are the latency of served (2xx) requests
	// as the client measured it, ms (P50, P99: nearest rank).
	MeanMs float64 `json:"mean_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
	// OverCapacity is the share of served requests that an instance served
	// in a window (Config.Window) in which more requests arrived at it
	// than its capacity allows, by more than Config.Tolerance.
	OverCapacity float64 `json:"over_capacity"`
	// Excess is Σ over instances and windows of max(0, arrivals −
	// capacity·window), over Requests: the load beyond capacity.
	Excess float64 `json:"excess"`
	// ErrorRate is (Failed + Dropped) / Requests.
	ErrorRate float64 `json:"error_rate"`
	// CrossRegion is the share of routed requests answered by a region
	// other than the site's nearest.
	CrossRegion float64 `json:"cross_region"`
	// MeanRTTMs is the mean emulated RTT (site to the answering region)
	// of routed requests, ms.
	MeanRTTMs float64 `json:"mean_rtt_ms"`
	// RTTOverLP is MeanRTTMs over the LP optimum's mean RTT, each phase's
	// optimum weighted by the routed requests of the phase; null when
	// nothing was routed.
	RTTOverLP *float64 `json:"rtt_over_lp"`
	// Sources is the number of distinct client addresses and SourcePorts
	// the number of distinct address:port pairs among the requests that
	// got a connection (Connected).
	Sources     int   `json:"sources"`
	SourcePorts int   `json:"source_ports"`
	Connected   int64 `json:"connected"`
	// Phases breaks the run down by phase.
	Phases []PhaseRow `json:"phases"`
	// Series is the rate routed to each region in every window.
	Series []WindowLoad `json:"series"`
}

// WindowLoad is the load of one window (Config.Window) of a Row.
type WindowLoad struct {
	// TS is the start of the window since the start of the measured part,
	// s.
	TS float64 `json:"t_s"`
	// LoadRPS is the rate routed to each region (any answer, by send
	// time), requests/s.
	LoadRPS map[string]float64 `json:"load_rps"`
}

// PhaseRow is one phase of a Row.
type PhaseRow struct {
	Name   string  `json:"name"`
	Sent   int64   `json:"sent"`
	OK     int64   `json:"ok"`
	Failed int64   `json:"failed"`
	P99Ms  float64 `json:"p99_ms"`
	// OverCapacity and CrossRegion as in Row, over the phase's requests.
	OverCapacity float64 `json:"over_capacity"`
	CrossRegion  float64 `json:"cross_region"`
	// Sites holds each site's routed requests by region.
	Sites []SitePhase `json:"sites"`
	// LoadRPS is the rate routed to each region, requests/s.
	LoadRPS map[string]float64 `json:"load_rps"`
}

// SitePhase is one site's traffic in a phase.
type SitePhase struct {
	Site   string           `json:"site"`
	Sent   int64            `json:"sent"`
	OK     int64            `json:"ok"`
	Routed map[string]int64 `json:"routed"`
	// P99Ms is the p99 latency of the site's served (2xx) requests of the
	// phase, ms (nearest rank).
	P99Ms float64 `json:"p99_ms"`
	// Backends holds the site's routed requests by answering instance
	// ("region/instance"), and Failures its requests not answered 2xx by
	// status ("0": no answer).
	Backends map[string]int64 `json:"backends,omitempty"`
	Failures map[string]int64 `json:"failures,omitempty"`
}

// table holds what every row is computed against: the deployment, the
// phases and their LP optima. Immutable after newTable.
type table struct {
	rate    map[string]float64            // region -> capacity per instance, requests/s
	rtt     map[string]map[string]float64 // site -> region -> ms
	nearest map[string]string             // site -> region
	sites   []string
	regions []string
	phases  []Phase
	lpMean  []float64 // per phase, ms
	window  time.Duration
	tol     float64
}

// newTable prepares the computation for spec and cfg: each site's nearest
// region (least RTT, ties by name) and each phase's min-RTT optimum
// (sim.SolveMinRTT over the regions' configured capacity).
func newTable(spec topology.Spec, cfg *Config) (*table, error) {
	t := &table{
		rate: map[string]float64{}, rtt: map[string]map[string]float64{}, nearest: map[string]string{},
		phases: cfg.Phases, window: cfg.Window, tol: cfg.Tolerance,
	}
	var capacity []float64
	for _, r := range spec.Regions {
		t.regions = append(t.regions, r.Name)
		t.rate[r.Name] = r.Rate
		capacity = append(capacity, r.Rate*float64(r.Instances*len(r.Zones)))
	}
	var rtt [][]float64
	for _, s := range spec.Sites {
		t.sites = append(t.sites, s.Name)
		row := make([]float64, len(spec.Regions))
		t.rtt[s.Name] = map[string]float64{}
		best := ""
		for i, r := range spec.Regions {
			d, ok := s.RTT[r.Name]
			if !ok {
				return nil, fmt.Errorf("site %s: no RTT to region %s", s.Name, r.Name)
			}
			ms := float64(d) / float64(time.Millisecond)
			row[i] = ms
			t.rtt[s.Name][r.Name] = ms
			if best == "" || ms < t.rtt[s.Name][best] || (ms == t.rtt[s.Name][best] && r.Name < best) {
				best = r.Name
			}
		}
		t.nearest[s.Name] = best
		rtt = append(rtt, row)
	}
	for i, ph := range cfg.Phases {
		demand := make([]float64, len(t.sites))
		for j, s := range t.sites {
			demand[j] = ph.Demand[s]
		}
		opt, err := sim.SolveMinRTT(demand, capacity, rtt)
		if err != nil {
			return nil, fmt.Errorf("phase %d (%s): %w", i, ph.Name, err)
		}
		t.lpMean = append(t.lpMean, opt.MeanRTTMs)
	}
	return t, nil
}

// measured is the total measured time.
func (t *table) measured() time.Duration {
	var d time.Duration
	for _, ph := range t.phases {
		d += ph.Duration
	}
	return d
}

// row computes m's line of the table. It fails on a request from an unknown
// site, in an unknown phase, or answered by an unknown region.
func (t *table) row(m Measurement) (Row, error) {
	row := Row{Policy: string(m.Policy.Policy), Scope: string(m.Policy.Scope), Options: m.Policy.Options, Dropped: m.Dropped}
	if row.Scope == "" {
		row.Scope = "-"
	}
	tl := t.newTally()
	for i := range m.Requests {
		if err := tl.add(i, &m.Requests[i]); err != nil {
			return Row{}, err
		}
	}
	tl.seriesToRates()
	over, excess := tl.overCapacity()
	sums := tl.sum(&row, m.Requests, over)
	t.summarise(&row, sums, excess)
	t.finishPhases(tl.phases, sums)
	row.Phases = tl.phases
	row.Series = tl.series
	return row, nil
}

// windowKey names one backend ("region/backend") in one window.
type windowKey struct {
	backend string
	w       int
}

// rowTally is the first pass over a Measurement's requests: it checks each
// request and counts it by phase and site, by window and region, and by
// backend and window.
type rowTally struct {
	t        *table
	total    time.Duration // the measured time
	nw       int           // windows of t.window, the last possibly shorter
	siteIdx  map[string]int
	arrivals map[windowKey]int64
	rateOf   map[string]float64 // backend -> capacity, requests/s
	series   []WindowLoad       // per window; LoadRPS counts until seriesToRates
	phases   []PhaseRow
}

// newTally returns an empty tally over t's windows, phases and sites.
func (t *table) newTally() *rowTally {
	total := t.measured()
	nw := max(1, int((total+t.window-1)/t.window))
	tl := &rowTally{
		t: t, total: total, nw: nw, siteIdx: map[string]int{},
		arrivals: map[windowKey]int64{}, rateOf: map[string]float64{},
		series: make([]WindowLoad, nw), phases: make([]PhaseRow, len(t.phases)),
	}
	for w := range tl.series {
		tl.series[w] = WindowLoad{TS: (time.Duration(w) * t.window).Seconds(), LoadRPS: map[string]float64{}}
	}
	for i, s := range t.sites {
		tl.siteIdx[s] = i
	}
	for i := range tl.phases {
		tl.phases[i].Name = t.phases[i].Name
		tl.phases[i].LoadRPS = map[string]float64{}
		for _, s := range t.sites {
			tl.phases[i].Sites = append(tl.phases[i].Sites, SitePhase{Site: s, Routed: map[string]int64{}, Backends: map[string]int64{}, Failures: map[string]int64{}})
		}
	}
	return tl
}

// window returns the window r was sent in.
func (tl *rowTally) window(r *Request) int { return min(max(0, int(r.T/tl.t.window)), tl.nw-1) }

// windowLength returns the length of window w: t.window, or less for the
// last window.
func (tl *rowTally) windowLength(w int) time.Duration {
	return min(tl.t.window, tl.total-time.Duration(w)*tl.t.window)
}

// add checks request i, r, and counts it.
func (tl *rowTally) add(i int, r *Request) error {
	si, ok := tl.siteIdx[r.Site]
	if !ok {
		return fmt.Errorf("request %d: unknown site %q", i, r.Site)
	}
	if r.Phase < 0 || r.Phase >= len(tl.phases) {
		return fmt.Errorf("request %d: phase %d out of range", i, r.Phase)
	}
	if r.Region != "" {
		rate, ok := tl.t.rate[r.Region]
		if !ok {
			return fmt.Errorf("request %d: unknown region %q", i, r.Region)
		}
		tl.series[tl.window(r)].LoadRPS[r.Region]++
		if r.Backend != "" {
			id := r.Region + "/" + r.Backend
			tl.rateOf[id] = rate
			tl.arrivals[windowKey{id, tl.window(r)}]++
		}
	}
	ph := &tl.phases[r.Phase]
	ph.Sent++
	ph.Sites[si].Sent++
	if r.ok() {
		ph.OK++
		ph.Sites[si].OK++
	} else {
		ph.Failed++
		ph.Sites[si].Failures[strconv.Itoa(r.Status)]++
	}
	if r.Region != "" {
		ph.Sites[si].Routed[r.Region]++
		if r.Backend != "" {
			ph.Sites[si].Backends[r.Region+"/"+r.Backend]++
		}
	}
	return nil
}

// seriesToRates turns the series' counts into rates over each window's
// length.
func (tl *rowTally) seriesToRates() {
	for w := range tl.series {
		length := tl.windowLength(w).Seconds()
		for region := range tl.series[w].LoadRPS {
			tl.series[w].LoadRPS[region] /= length
		}
	}
}

// overCapacity returns the backend windows in which more requests arrived
// than the backend's capacity·window allows (beyond the tolerance), and
// the requests that arrived above capacity, summed over every backend
// window.
func (tl *rowTally) overCapacity() (map[windowKey]bool, float64) {
	over := map[windowKey]bool{}
	var excess float64
	for k, a := range tl.arrivals {
		c := tl.rateOf[k.backend] * tl.windowLength(k.w).Seconds()
		if float64(a) > c*(1+tl.t.tol) {
			over[k] = true
		}
		excess += max(0, float64(a)-c)
	}
	return over, excess
}

// rowSums are the second pass's sums over a row's requests, in total and
// per phase.
type rowSums struct {
	lat []float64 // served requests' latency, ms
	// latSum is the served requests' latency; rttSum and lpSum the routed
	// requests' RTT and their phase's LP mean RTT; ms.
	latSum, rttSum, lpSum float64
	overServed            int64 // served by a backend in an over-capacity window
	cross                 int64 // routed outside the site's nearest region
	// Per phase.
	phaseLat                           [][]float64
	sitePhaseLat                       [][][]float64 // by phase, then site (table.sites)
	phaseOver, phaseCross, phaseRouted []int64
	// The distinct client addresses and address:port pairs.
	sources map[netip.Addr]bool
	ports   map[netip.AddrPort]bool
}

// sum is the second pass over reqs: it counts them into row (Sent,
// Connected, Routed, OK, Failed) and returns the sums the measures are
// made of. over holds the over-capacity backend windows.
func (tl *rowTally) sum(row *Row, reqs []Request, over map[windowKey]bool) *rowSums {
	np := len(tl.phases)
	s := &rowSums{
		lat: make([]float64, 0, len(reqs)), phaseLat: make([][]float64, np), sitePhaseLat: make([][][]float64, np),
		phaseOver: make([]int64, np), phaseCross: make([]int64, np), phaseRouted: make([]int64, np),
		sources: map[netip.Addr]bool{}, ports: map[netip.AddrPort]bool{},
	}
	for i := range s.sitePhaseLat {
		s.sitePhaseLat[i] = make([][]float64, len(tl.t.sites))
	}
	for i := range reqs {
		r := &reqs[i]
		row.Sent++
		if r.Source.IsValid() {
			row.Connected++
			s.sources[r.Source.Addr()] = true
			s.ports[r.Source] = true
		}
		if r.Region != "" {
			row.Routed++
			s.addRouted(tl.t, r)
		}
		if !r.ok() {
			row.Failed++
			continue
		}
		row.OK++
		s.addServed(r, r.Backend != "" && over[windowKey{r.Region + "/" + r.Backend, tl.window(r)}])
		si := tl.siteIdx[r.Site]
		s.sitePhaseLat[r.Phase][si] = append(s.sitePhaseLat[r.Phase][si], float64(r.Latency)/float64(time.Millisecond))
	}
	return s
}

// addRouted counts the routed request r: its RTT, its phase's LP mean RTT
// and whether a region other than its site's nearest answered it.
func (s *rowSums) addRouted(t *table, r *Request) {
	s.phaseRouted[r.Phase]++
	s.rttSum += t.rtt[r.Site][r.Region]
	s.lpSum += t.lpMean[r.Phase]
	if r.Region != t.nearest[r.Site] {
		s.cross++
		s.phaseCross[r.Phase]++
	}
}

// addServed counts the served request r: its latency, and whether a
// backend served it in an over-capacity window (over).
func (s *rowSums) addServed(r *Request, over bool) {
	ms := float64(r.Latency) / float64(time.Millisecond)
	s.latSum += ms
	s.lat = append(s.lat, ms)
	s.phaseLat[r.Phase] = append(s.phaseLat[r.Phase], ms)
	if over {
		s.overServed++
		s.phaseOver[r.Phase]++
	}
}

// summarise sets row's measures from its counts and the sums s; excess is
// the requests that arrived above capacity.
func (t *table) summarise(row *Row, s *rowSums, excess float64) {
	row.Requests = row.Sent + row.Dropped
	row.MeanMs = ratio(s.latSum, float64(row.OK))
	slices.Sort(s.lat)
	row.P50Ms, row.P99Ms = quantile.Of(s.lat, 0.50), quantile.Of(s.lat, 0.99)
	row.OverCapacity = ratio(float64(s.overServed), float64(row.OK))
	row.Excess = ratio(excess, float64(row.Requests))
	row.ErrorRate = ratio(float64(row.Failed+row.Dropped), float64(row.Requests))
	row.CrossRegion = ratio(float64(s.cross), float64(row.Routed))
	row.MeanRTTMs = ratio(s.rttSum, float64(row.Routed))
	if row.Routed > 0 && s.lpSum > 0 {
		v := s.rttSum / s.lpSum
		row.RTTOverLP = &v
	}
	row.Sources, row.SourcePorts = len(s.sources), len(s.ports)
}

// finishPhases sets each phase's measures from the sums s: its P99
// latency, over-capacity and cross-region shares, and the rate its sites
// routed to each region.
func (t *table) finishPhases(phases []PhaseRow, s *rowSums) {
	for i := range phases {
		ph := &phases[i]
		slices.Sort(s.phaseLat[i])
		ph.P99Ms = quantile.Of(s.phaseLat[i], 0.99)
		ph.OverCapacity = ratio(float64(s.phaseOver[i]), float64(ph.OK))
		ph.CrossRegion = ratio(float64(s.phaseCross[i]), float64(s.phaseRouted[i]))
		for si := range ph.Sites {
			site := &ph.Sites[si]
			if si < len(s.sitePhaseLat[i]) {
				slices.Sort(s.sitePhaseLat[i][si])
				site.P99Ms = quantile.Of(s.sitePhaseLat[i][si], 0.99)
			}
			for region, n := range site.Routed {
				ph.LoadRPS[region] += float64(n) / t.phases[i].Duration.Seconds()
			}
		}
	}
}

// check verifies that row accounts for every request: Requests = Sent +
// Dropped, Sent = OK + Failed, Routed ≤ Sent, and per phase the sites'
// counts add up to the phase's and the phases' to the row's.
func (row *Row) check() error {
	if row.Requests != row.Sent+row.Dropped || row.Sent != row.OK+row.Failed || row.Routed > row.Sent {
		return fmt.Errorf("%s: requests %d, sent %d, dropped %d, ok %d, failed %d, routed %d do not add up",
			row.label(), row.Requests, row.Sent, row.Dropped, row.OK, row.Failed, row.Routed)
	}
	var sent, ok, routed int64
	for _, ph := range row.Phases {
		var ssent, sok int64
		for _, s := range ph.Sites {
			ssent += s.Sent
			sok += s.OK
			for _, n := range s.Routed {
				routed += n
			}
		}
		if ssent != ph.Sent || sok != ph.OK || ph.Sent != ph.OK+ph.Failed {
			return fmt.Errorf("%s, phase %s: sites' counts (sent %d, ok %d) do not add up to the phase's (sent %d, ok %d, failed %d)",
				row.label(), ph.Name, ssent, sok, ph.Sent, ph.OK, ph.Failed)
		}
		sent += ph.Sent
		ok += ph.OK
	}
	if sent != row.Sent || ok != row.OK || routed != row.Routed {
		return fmt.Errorf("%s: phases' counts (sent %d, ok %d, routed %d) do not add up to the row's (%d, %d, %d)",
			row.label(), sent, ok, routed, row.Sent, row.OK, row.Routed)
	}
	return nil
}

// label returns the row's POLICY cell: the policy and its options
// (benchpolicy.Row.Label).
func (row *Row) label() string { return row.Policy + row.Suffix() }

// ratio returns a/b, or 0 when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

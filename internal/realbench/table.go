package realbench

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

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
	Policy Policy
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
	row := Row{Policy: string(m.Policy.Name), Scope: string(m.Policy.Scope), Dropped: m.Dropped}
	if row.Scope == "" {
		row.Scope = "-"
	}
	total := t.measured()
	nw := max(1, int((total+t.window-1)/t.window))
	type key struct {
		backend string
		w       int
	}
	arrivals := map[key]int64{}
	series := make([]WindowLoad, nw)
	for w := range series {
		series[w] = WindowLoad{TS: (time.Duration(w) * t.window).Seconds(), LoadRPS: map[string]float64{}}
	}
	rateOf := map[string]float64{} // backend -> capacity
	window := func(r *Request) int { return min(max(0, int(r.T/t.window)), nw-1) }

	phases := make([]PhaseRow, len(t.phases))
	siteIdx := map[string]int{}
	for i, s := range t.sites {
		siteIdx[s] = i
	}
	for i := range phases {
		phases[i].Name = t.phases[i].Name
		phases[i].LoadRPS = map[string]float64{}
		for _, s := range t.sites {
			phases[i].Sites = append(phases[i].Sites, SitePhase{Site: s, Routed: map[string]int64{}})
		}
	}
	for i := range m.Requests {
		r := &m.Requests[i]
		si, ok := siteIdx[r.Site]
		if !ok {
			return Row{}, fmt.Errorf("request %d: unknown site %q", i, r.Site)
		}
		if r.Phase < 0 || r.Phase >= len(phases) {
			return Row{}, fmt.Errorf("request %d: phase %d out of range", i, r.Phase)
		}
		if r.Region != "" {
			rate, ok := t.rate[r.Region]
			if !ok {
				return Row{}, fmt.Errorf("request %d: unknown region %q", i, r.Region)
			}
			series[window(r)].LoadRPS[r.Region]++
			if r.Backend != "" {
				id := r.Region + "/" + r.Backend
				rateOf[id] = rate
				arrivals[key{id, window(r)}]++
			}
		}
		ph := &phases[r.Phase]
		ph.Sent++
		ph.Sites[si].Sent++
		if r.ok() {
			ph.OK++
			ph.Sites[si].OK++
		} else {
			ph.Failed++
		}
		if r.Region != "" {
			ph.Sites[si].Routed[r.Region]++
		}
	}

	// Over-capacity windows: capacity·window, the last window possibly
	// shorter.
	capOf := func(id string, w int) float64 {
		length := min(t.window, total-time.Duration(w)*t.window)
		return rateOf[id] * length.Seconds()
	}
	for w := range series {
		length := min(t.window, total-time.Duration(w)*t.window).Seconds()
		for region := range series[w].LoadRPS {
			series[w].LoadRPS[region] /= length
		}
	}
	over := map[key]bool{}
	var excess float64
	for k, a := range arrivals {
		c := capOf(k.backend, k.w)
		if float64(a) > c*(1+t.tol) {
			over[k] = true
		}
		excess += max(0, float64(a)-c)
	}

	var (
		lat                   = make([]float64, 0, len(m.Requests))
		phaseLat              = make([][]float64, len(phases))
		latSum, rttSum, lpSum float64
		overServed, cross     int64
		phaseOver, phaseCross = make([]int64, len(phases)), make([]int64, len(phases))
		phaseRouted           = make([]int64, len(phases))
		sources               = map[netip.Addr]bool{}
		ports                 = map[netip.AddrPort]bool{}
	)
	for i := range m.Requests {
		r := &m.Requests[i]
		row.Sent++
		if r.Source.IsValid() {
			row.Connected++
			sources[r.Source.Addr()] = true
			ports[r.Source] = true
		}
		if r.Region != "" {
			row.Routed++
			phaseRouted[r.Phase]++
			rttSum += t.rtt[r.Site][r.Region]
			lpSum += t.lpMean[r.Phase]
			if r.Region != t.nearest[r.Site] {
				cross++
				phaseCross[r.Phase]++
			}
		}
		if !r.ok() {
			row.Failed++
			continue
		}
		row.OK++
		ms := float64(r.Latency) / float64(time.Millisecond)
		latSum += ms
		lat = append(lat, ms)
		phaseLat[r.Phase] = append(phaseLat[r.Phase], ms)
		if r.Backend != "" && over[key{r.Region + "/" + r.Backend, window(r)}] {
			overServed++
			phaseOver[r.Phase]++
		}
	}
	row.Requests = row.Sent + row.Dropped
	row.MeanMs = ratio(latSum, float64(row.OK))
	slices.Sort(lat)
	row.P50Ms, row.P99Ms = percentile(lat, 50), percentile(lat, 99)
	row.OverCapacity = ratio(float64(overServed), float64(row.OK))
	row.Excess = ratio(excess, float64(row.Requests))
	row.ErrorRate = ratio(float64(row.Failed+row.Dropped), float64(row.Requests))
	row.CrossRegion = ratio(float64(cross), float64(row.Routed))
	row.MeanRTTMs = ratio(rttSum, float64(row.Routed))
	if row.Routed > 0 && lpSum > 0 {
		v := rttSum / lpSum
		row.RTTOverLP = &v
	}
	row.Sources, row.SourcePorts = len(sources), len(ports)
	for i := range phases {
		ph := &phases[i]
		slices.Sort(phaseLat[i])
		ph.P99Ms = percentile(phaseLat[i], 99)
		ph.OverCapacity = ratio(float64(phaseOver[i]), float64(ph.OK))
		ph.CrossRegion = ratio(float64(phaseCross[i]), float64(phaseRouted[i]))
		for _, s := range ph.Sites {
			for region, n := range s.Routed {
				ph.LoadRPS[region] += float64(n) / t.phases[i].Duration.Seconds()
			}
		}
	}
	row.Phases = phases
	row.Series = series
	return row, nil
}

// check verifies that row accounts for every request: Requests = Sent +
// Dropped, Sent = OK + Failed, Routed ≤ Sent, and per phase the sites'
// counts add up to the phase's and the phases' to the row's.
func (row *Row) check() error {
	if row.Requests != row.Sent+row.Dropped || row.Sent != row.OK+row.Failed || row.Routed > row.Sent {
		return fmt.Errorf("%s: requests %d, sent %d, dropped %d, ok %d, failed %d, routed %d do not add up",
			row.Policy, row.Requests, row.Sent, row.Dropped, row.OK, row.Failed, row.Routed)
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
				row.Policy, ph.Name, ssent, sok, ph.Sent, ph.OK, ph.Failed)
		}
		sent += ph.Sent
		ok += ph.OK
	}
	if sent != row.Sent || ok != row.OK || routed != row.Routed {
		return fmt.Errorf("%s: phases' counts (sent %d, ok %d, routed %d) do not add up to the row's (%d, %d, %d)",
			row.Policy, sent, ok, routed, row.Sent, row.OK, row.Routed)
	}
	return nil
}

// percentile returns the nearest-rank p-th percentile of sorted, 0 when it
// is empty (as loadgen.Result.Percentile).
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// ratio returns a/b, or 0 when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

package realbench

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/benchpolicy"
	"github.com/spillway-lb/spillway/internal/topology"
)

// Result is a whole run: the deployment and story it measured, and one row
// per policy. Its JSON form is what `lbbench --json` prints.
type Result struct {
	// Net is the deployment's 127.Net.0.0/16 on loopback.
	Net int `json:"net"`
	// Lab, when set, is the network (10.77.0.0/16) of the lab's
	// network-namespace hosts the deployment ran on instead of loopback
	// (lbbench --lab; Options.Lab).
	Lab     string       `json:"lab,omitempty"`
	Regions []RegionInfo `json:"regions"`
	Sites   []SiteInfo   `json:"sites"`
	// WarmupS is the unmeasured load before each policy's phases, s.
	WarmupS float64     `json:"warmup_s"`
	Phases  []PhaseInfo `json:"phases"`
	// SourcesPerSite client addresses per site, a new connection per
	// request.
	SourcesPerSite int `json:"sources_per_site"`
	// WindowS and Tolerance define OVER_CAP and EXCESS (Config.Window,
	// Config.Tolerance).
	WindowS   float64 `json:"window_s"`
	Tolerance float64 `json:"tolerance"`
	// Headroom is the rate the backends serve over their declared
	// capacity (Config.Headroom).
	Headroom float64 `json:"headroom"`
	Rows     []Row   `json:"rows"`
	// StartupS is the time to build (when needed) and start the
	// deployment, WallS the whole run's, s.
	StartupS float64 `json:"startup_s"`
	WallS    float64 `json:"wall_s"`
	// LoadAvg is the machine's 1-minute load average during the run.
	LoadAvg LoadAvg `json:"load_avg"`
}

// RegionInfo is one region of the deployment.
type RegionInfo struct {
	Name      string `json:"name"`
	Instances int    `json:"instances"`
	// RatePerInstance is each instance's capacity, requests/s; CapacityRPS
	// the region's.
	RatePerInstance float64 `json:"rate_per_instance"`
	CapacityRPS     float64 `json:"capacity_rps"`
}

// SiteInfo is one site of the deployment.
type SiteInfo struct {
	Name string `json:"name"`
	// Nearest is the region with the least RTT (ties by name).
	Nearest string             `json:"nearest"`
	RTTMs   map[string]float64 `json:"rtt_ms"`
}

// PhaseInfo is one phase of the story with its optimum.
type PhaseInfo struct {
	Name      string             `json:"name"`
	DurationS float64            `json:"duration_s"`
	DemandRPS map[string]float64 `json:"demand_rps"`
	// LPMeanRTTMs is the mean RTT of the phase's min-RTT optimum, ms.
	LPMeanRTTMs float64 `json:"lp_mean_rtt_ms"`
}

// LoadAvg summarises the 1-minute load average sampled every 5 s.
type LoadAvg struct {
	Samples int     `json:"samples"`
	Mean    float64 `json:"mean"`
	Max     float64 `json:"max"`
}

func newResult(spec topology.Spec, cfg *Config, tab *table) *Result {
	r := &Result{
		Net: cfg.Net, WarmupS: cfg.Warmup.Seconds(), SourcesPerSite: cfg.SourcesPerSite,
		WindowS: cfg.Window.Seconds(), Tolerance: cfg.Tolerance, Headroom: cfg.Headroom,
	}
	for _, reg := range spec.Regions {
		n := reg.Instances * len(reg.Zones)
		r.Regions = append(r.Regions, RegionInfo{Name: reg.Name, Instances: n, RatePerInstance: reg.Rate, CapacityRPS: reg.Rate * float64(n)})
	}
	for _, s := range tab.sites {
		r.Sites = append(r.Sites, SiteInfo{Name: s, Nearest: tab.nearest[s], RTTMs: tab.rtt[s]})
	}
	for i, ph := range cfg.Phases {
		r.Phases = append(r.Phases, PhaseInfo{Name: ph.Name, DurationS: ph.Duration.Seconds(), DemandRPS: ph.Demand, LPMeanRTTMs: tab.lpMean[i]})
	}
	return r
}

// WriteJSON writes r as one indented JSON object.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// legend explains the table's columns for a window and tolerance;
// WriteTable prints it under the table.
func legend(windowS, tol float64) string {
	return fmt.Sprintf(`MEAN/P50/P99_MS: latency of served (2xx) requests as the client measured it: a new TCP connection,
the gfe, the emulated RTT, queueing and service at the backend. OVER_CAP: served requests that an
instance served in a %g s window in which more requests arrived at it (any answer, counted by send time)
than its declared capacity allows, by more than %s. EXCESS: arrivals above declared capacity, summed
over instances and windows, over all requests. ERRORS: requests not answered 2xx (backend queue full,
gfe errors, timeouts) or not sent. CROSS_REGION: answered requests from outside the site's nearest
region. RTT/LP: mean emulated RTT of answered requests over the min-RTT LP optimum's for the same
phases. REQUESTS: requests in the measured part. OSC_PP is not measured.`, windowS, pct(tol))
}

// WriteTable writes r as a header, one row per policy (the columns of
// `lbsim bench` but OSC_PP, which a real run cannot measure honestly), the
// legend, the comparison of waterfall with every hashing row, and the run's
// wall time and load.
func (r *Result) WriteTable(w io.Writer) error {
	var b strings.Builder
	var capacity []string
	for _, reg := range r.Regions {
		capacity = append(capacity, fmt.Sprintf("%s %d x %g req/s", reg.Name, reg.Instances, reg.RatePerInstance))
	}
	where := fmt.Sprintf("on loopback (127.%d.0.0/16)", r.Net)
	if r.Lab != "" {
		where = fmt.Sprintf("on the lab's hosts (network namespaces, %s)", r.Lab)
	}
	fmt.Fprintf(&b, "real benchmark %s: 1 control plane, %d gfes, backends %s declared", where, len(r.Sites), strings.Join(capacity, ", "))
	if r.Headroom == 1 {
		b.WriteString(" and enforced\n")
	} else {
		fmt.Fprintf(&b, ", serving %g x that\n", r.Headroom)
	}
	fmt.Fprintf(&b, "per policy: %gs warmup, then", r.WarmupS)
	for i, ph := range r.Phases {
		sep := ","
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(&b, "%s %s %gs (%s; LP mean RTT %.1f ms)", sep, ph.Name, ph.DurationS, demandString(r.Sites, ph.DemandRPS), ph.LPMeanRTTMs)
	}
	fmt.Fprintf(&b, "\nclients: %d addresses per site, a new connection per request\n\n", r.SourcesPerSite)
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "POLICY\tSCOPE\tMEAN_MS\tP50_MS\tP99_MS\tOVER_CAP\tEXCESS\tERRORS\tCROSS_REGION\tRTT/LP\tREQUESTS\t")
	for _, row := range r.Rows {
		lp := "-"
		if row.RTTOverLP != nil {
			lp = fmt.Sprintf("%.2f", *row.RTTOverLP)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t%s\t%d\t\n",
			row.label(), row.Scope, row.MeanMs, row.P50Ms, row.P99Ms,
			pct(row.OverCapacity), pct(row.Excess), pct(row.ErrorRate), pct(row.CrossRegion), lp, row.Requests)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	b.Reset()
	fmt.Fprintf(&b, "\n%s\n", legend(r.WindowS, r.Tolerance))
	if len(r.Rows) > 0 {
		lo := 1.0
		for _, row := range r.Rows {
			lo = min(lo, ratio(float64(row.SourcePorts), float64(row.Connected)))
		}
		fmt.Fprintf(&b, "client address:port pairs: at least %s of connected requests had their own, in every row\n", pct(lo))
	}
	if c, ok := r.comparison(); ok {
		fmt.Fprintf(&b, "\n%s\n", c)
	}
	b.WriteString(wallLine(r.WallS, r.StartupS, "build and start", r.LoadAvg))
	_, err := io.WriteString(w, b.String())
	return err
}

// wallLine is the tables' last line: the run's wall time, its start-up
// (named startup) and the machine's load average during it; "" for a
// result without a wall time (one read back from older JSON).
func wallLine(wallS, startupS float64, startup string, la LoadAvg) string {
	if !(wallS > 0) {
		return ""
	}
	return fmt.Sprintf("\nwall time %s (%s %s); load average (1 min) during the run: mean %.2f, max %.2f (%d samples)\n",
		time.Duration(wallS*float64(time.Second)).Round(time.Second), startup,
		time.Duration(startupS*float64(time.Second)).Round(100*time.Millisecond), la.Mean, la.Max, la.Samples)
}

// comparison asks the question of `lbsim bench` (benchpolicy.Compare) of
// the measured rows: does waterfall serve fewer requests over capacity, and
// with a lower p99, than every hashing row?
func (r *Result) comparison() (benchpolicy.Comparison, bool) {
	rows := make([]benchpolicy.Scored, len(r.Rows))
	for i, row := range r.Rows {
		scope := config.HashScope(row.Scope)
		if row.Scope == "-" {
			scope = ""
		}
		rows[i] = benchpolicy.Scored{Row: benchpolicy.Row{Policy: config.Policy(row.Policy), Scope: scope, Options: row.Options}, OverCapacity: row.OverCapacity, P99Ms: row.P99Ms}
	}
	return benchpolicy.Compare(rows)
}

func demandString(sites []SiteInfo, d map[string]float64) string {
	var parts []string
	for _, s := range sites {
		parts = append(parts, fmt.Sprintf("%s %g", s.Name, d[s.Name]))
	}
	var extra []string
	for name := range d {
		found := false
		for _, s := range sites {
			found = found || s.Name == name
		}
		if !found {
			extra = append(extra, fmt.Sprintf("%s %g", name, d[name]))
		}
	}
	sort.Strings(extra)
	return strings.Join(append(parts, extra...), ", ") + " req/s"
}

func pct(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }

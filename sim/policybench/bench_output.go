package policybench

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/benchpolicy"
)

// WriteTable writes r as a header line, one table row per policy, a legend,
// and the comparison of waterfall with every hashing row (Comparison).
func (r *Result) WriteTable(w io.Writer) error {
	name := r.Scenario
	if name == "" {
		name = "scenario"
	}
	steps := "steps"
	if r.Steps == 1 {
		steps = "step"
	}
	// The closed loop is on, with load reports, unless the header says.
	var loop string
	switch {
	case !r.Feedback:
		loop = ", feedback off"
	case !r.LoadReports:
		loop = ", no load reports"
	}
	if _, err := fmt.Fprintf(w, "%s: %d %s of %gs, gossip delay %gs, demand smoothing %gs, damping %g%s, seed %d; %d sites, %d regions, %d instances; %.0f requests; LP optimum mean RTT %.1f ms\n\n",
		name, r.Steps, steps, r.StepS, r.GossipDelayS, r.DemandSmoothingS, r.Damping, loop, r.Seed, r.Sites, len(r.Regions), r.Instances, r.Requests, r.LP.MeanRTTMs); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "POLICY\tSCOPE\tMEAN_MS\tP50_MS\tP99_MS\tOVER_CAP\tEXCESS\tERRORS\tCROSS_REGION\tRTT/LP\tOSC_PP\t")
	for _, row := range r.Policies {
		scope := string(row.Scope)
		if scope == "" {
			scope = "-"
		}
		lp := "-"
		if row.RTTOverLP != nil {
			lp = fmt.Sprintf("%.2f", *row.RTTOverLP)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t%s\t%.1f\t\n",
			row.Policy, scope, row.MeanMs, row.P50Ms, row.P99Ms,
			pct(row.OverCapacity), pct(row.Excess), pct(row.ErrorRate), pct(row.CrossRegion), lp, row.OscillationPP)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if _, err := fmt.Fprint(w, `
MEAN/P50/P99_MS: latency of served requests (RTT + queueing + service). OVER_CAP: served requests
served by an instance loaded >1% above its capacity. EXCESS: load above capacity, share of requests.
ERRORS: failed requests (unroutable, queue full, instance down). CROSS_REGION: routed requests
outside the site's nearest region. RTT/LP: mean RTT over the min-RTT linear-program optimum's.
OSC_PP: back-and-forth swing of the sites' region shares, percentage points. least_request is
modelled as an even split (see sim.Scenario.Bench), so it matches round_robin.
`); err != nil {
		return err
	}
	c, ok := r.Comparison()
	if !ok {
		return nil
	}
	_, err := fmt.Fprintf(w, "\n%s\n", c)
	return err
}

func pct(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }

// Comparison compares the waterfall row with every hash2, hash3 and hash5
// row (benchpolicy.Compare). ok is false when r lacks either.
func (r *Result) Comparison() (c benchpolicy.Comparison, ok bool) {
	rows := make([]benchpolicy.Scored, len(r.Policies))
	for i, row := range r.Policies {
		rows[i] = benchpolicy.Scored{Row: benchpolicy.Row{Policy: config.Policy(row.Policy), Scope: row.Scope}, OverCapacity: row.OverCapacity, P99Ms: row.P99Ms}
	}
	return benchpolicy.Compare(rows)
}

// WriteSeriesCSV writes the region series of every row that has one, one
// line per (policy, step, region), with the header
// policy,scope,t_s,region,share,load_rps,capacity_rps.
func (r *Result) WriteSeriesCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write([]string{"policy", "scope", "t_s", "region", "share", "load_rps", "capacity_rps"}); err != nil {
		return err
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', 8, 64) }
	for _, row := range r.Policies {
		for _, st := range row.Series {
			for i, region := range r.Regions {
				if err := cw.Write([]string{row.Policy, string(row.Scope), f(st.TS), region, f(st.Shares[i]), f(st.LoadRPS[i]), f(st.CapacityRPS[i])}); err != nil {
					return err
				}
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

package policybench

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spillway-lb/spillway/config"
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

// Comparison is how waterfall fared against every hashing row: the question
// the benchmark exists to answer.
type Comparison struct {
	// Rows is the number of hashing rows (hash2, hash3, hash5, any scope).
	Rows int
	// FewerOverCapacity and LowerP99 count the hashing rows waterfall beat
	// on OverCapacity and on P99Ms (strictly).
	FewerOverCapacity, LowerP99 int
	// Exceptions describe each hashing row waterfall did not beat, and on
	// what.
	Exceptions []string
}

// Comparison compares the waterfall row with every hash2, hash3 and hash5
// row. ok is false when r lacks either.
func (r *Result) Comparison() (c Comparison, ok bool) {
	var wf *Row
	for i := range r.Policies {
		if r.Policies[i].Policy == string(config.PolicyWaterfall) {
			wf = &r.Policies[i]
		}
	}
	if wf == nil {
		return Comparison{}, false
	}
	for _, row := range r.Policies {
		switch config.Policy(row.Policy) {
		case config.PolicyHash2, config.PolicyHash3, config.PolicyHash5:
		default:
			continue
		}
		c.Rows++
		if wf.OverCapacity < row.OverCapacity {
			c.FewerOverCapacity++
		} else {
			c.Exceptions = append(c.Exceptions, fmt.Sprintf("over-capacity: %s %s %s waterfall %s", row.ID(), pct(row.OverCapacity), relation(row.OverCapacity, wf.OverCapacity), pct(wf.OverCapacity)))
		}
		if wf.P99Ms < row.P99Ms {
			c.LowerP99++
		} else {
			c.Exceptions = append(c.Exceptions, fmt.Sprintf("p99: %s %.1f ms %s waterfall %.1f ms", row.ID(), row.P99Ms, relation(row.P99Ms, wf.P99Ms), wf.P99Ms))
		}
	}
	return c, c.Rows > 0
}

func relation(a, b float64) string {
	if a == b {
		return "="
	}
	return "<"
}

// String summarises c in one line, then one line per exception.
func (c Comparison) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "waterfall vs hashing: fewer over-capacity requests than %d of %d hashing rows, lower p99 than %d of %d",
		c.FewerOverCapacity, c.Rows, c.LowerP99, c.Rows)
	for _, e := range c.Exceptions {
		b.WriteString("\n  not better on ")
		b.WriteString(e)
	}
	return b.String()
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

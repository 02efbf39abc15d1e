package realbench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteTable writes r as a header (deployment, antagonists, phases,
// deadline, the minimum cross-region share), one row per policy whose
// cells are the median over the repetitions with [minimum–maximum] for
// the latencies and errors, the legend, and the run's wall time and load.
func (r *StoryResult) WriteTable(w io.Writer) error {
	var b strings.Builder
	var capacity []string
	var total float64
	for _, reg := range r.Regions {
		capacity = append(capacity, fmt.Sprintf("%s %d x %g", reg.Name, reg.Instances, reg.RatePerInstance))
		total += reg.CapacityRPS
	}
	where := fmt.Sprintf("on loopback (127.%d.0.0/16)", r.Net)
	if r.Lab != "" {
		where = fmt.Sprintf("on the lab's hosts (%s)", r.Lab)
	}
	fmt.Fprintf(&b, "real benchmark, story %s, %s: 1 control plane, %d gfes, backends %s req/s (%g req/s in all)\n",
		r.Story, where, len(r.Sites), strings.Join(capacity, ", "), total)
	fmt.Fprintf(&b, "antagonists: half of every region's instances serve %gx slower for %g%% of every %gs (seeded per instance)\n",
		r.Antagonist.Slowdown, 100*r.Antagonist.Duty, r.Antagonist.PeriodS)
	var loads []string
	for _, ph := range r.StoryPhases {
		loads = append(loads, ph.Name)
	}
	if len(r.StoryPhases) > 0 {
		ph := r.StoryPhases[0]
		fmt.Fprintf(&b, "per run: %gs warmup, then %s of capacity, %gs each, open loop (demand %s)\n",
			r.WarmupS, strings.Join(loads, " "), ph.DurationS, shareString(r.Sites, ph.DemandRPS))
	}
	fmt.Fprintf(&b, "deadline %gs: a request unanswered by then counts as %gs; %d repetition(s), policies interleaved (order rotated per repetition)\n",
		r.TimeoutS, r.TimeoutS, r.Reps)
	fmt.Fprintf(&b, "minimum necessary cross-region share (LP over the declared capacities): %s\n", pct(r.MinCrossRegion))
	b.WriteString("cells: median over the repetitions, [min-max] where shown\n\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"POLICY", "SCOPE", "MEAN_MS", "P50_MS", "P99_MS", "P999_MS", "P99<=0.95x", "P99>0.95x", "ERRORS", "ERR<=0.95x", "DEADLINE", "CROSS_REGION", "OVER_CAP", "RTT/LP"}
	for _, reg := range r.Regions {
		head = append(head, "UTIL_"+reg.Name)
	}
	fmt.Fprintln(tw, strings.Join(append(head, "REQUESTS"), "\t")+"\t")
	for _, row := range r.Rows {
		cells := []string{row.Policy + row.Suffix(), row.Scope,
			rangeCell(row.MeanMs, row.Min.MeanMs, row.Max.MeanMs, r.Reps, num),
			num(row.P50Ms),
			rangeCell(row.P99Ms, row.Min.P99Ms, row.Max.P99Ms, r.Reps, num),
			rangeCell(row.P999Ms, row.Min.P999Ms, row.Max.P999Ms, r.Reps, num),
			num(row.P99WithinMs), num(row.P99OverMs),
			rangeCell(row.ErrorRate, row.Min.ErrorRate, row.Max.ErrorRate, r.Reps, pct),
			pct(row.ErrorRateWithin), pct(row.DeadlineMissed),
			fmt.Sprintf("%s (%+.1fpp)", pct(row.CrossRegion), 100*(row.CrossRegion-r.MinCrossRegion)),
			pct(row.OverCapacity), fmt.Sprintf("%.2f", row.RTTOverLP),
		}
		for _, u := range row.Utilization {
			cells = append(cells, fmt.Sprintf("%.2f/%.2f", u.Max, u.Mean))
		}
		fmt.Fprintln(tw, strings.Join(append(cells, fmt.Sprintf("%.0f", row.Requests)), "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	b.Reset()
	fmt.Fprintf(&b, "\n%s\n", storyLegend(r.TimeoutS))
	b.WriteString(wallLine(r.WallS, r.StartupS, "build and start", r.LoadAvg))
	_, err := io.WriteString(w, b.String())
	return err
}

// storyLegend explains StoryResult's columns for a deadline of timeoutS.
func storyLegend(timeoutS float64) string {
	return fmt.Sprintf(`MEAN/P50/P99/P999_MS: latency as the client measured it of requests served (2xx) and of those
unanswered within the %g s deadline, counted as %g s; P99<=0.95x and P99>0.95x: the same p99 over the
phases up to 0.95x of capacity and above it. ERRORS: requests not answered 2xx or not sent (ERR<=0.95x:
in the phases up to 0.95x); DEADLINE: requests unanswered within the deadline. CROSS_REGION: answered
requests from outside the site's nearest region (in brackets: points above the minimum necessary).
OVER_CAP and RTT/LP as in the default story. UTIL_<region>: requests routed to the region per 1 s window
over its declared capacity, max/mean over the windows.`, timeoutS, timeoutS)
}

// num formats a latency, ms.
func num(v float64) string { return fmt.Sprintf("%.1f", v) }

// rangeCell formats a median with its [min-max] when there are several
// repetitions.
func rangeCell(med, lo, hi float64, reps int, f func(float64) string) string {
	if reps < 2 {
		return f(med)
	}
	return fmt.Sprintf("%s [%s-%s]", f(med), f(lo), f(hi))
}

// shareString gives each site's share of the demand d, in the sites'
// order.
func shareString(sites []SiteInfo, d map[string]float64) string {
	var total float64
	for _, v := range d {
		total += v
	}
	var parts []string
	for _, s := range sites {
		parts = append(parts, fmt.Sprintf("%s %.0f%%", s.Name, 100*ratio(d[s.Name], total)))
	}
	return strings.Join(parts, ", ")
}

package realbench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes r as one indented JSON object.
func (r *AutoscaleResult) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes r as the setting, one line per row in the scorecard's
// columns where the real system has them, the targets each row misses,
// every row's timeline in windows of 5 s, and the run's wall time and
// load.
func (r *AutoscaleResult) WriteTable(w io.Writer) error {
	c := r.Config
	var b strings.Builder
	fmt.Fprintf(&b, "real autoscaler story on loopback (127.%d.0.0/16), a fresh deployment per row\n", r.Net)
	fmt.Fprintf(&b, "us-east, %g ms from nyc, autoscaled: 1 to %d testbackend processes the control plane's process provider starts,\n", c.NearRTTMs, c.MaxInstances)
	fmt.Fprintf(&b, "  each with a %g s cold start (--startup-delay) and %d slots of %g ms, declared %g req/s\n", c.ColdStartS, c.Slots, c.RequestMs, c.NearRateRPS)
	fmt.Fprintf(&b, "eu-west, %g ms from nyc, the buffer (cloudrun+waterfall only): %d fixed instances of %g req/s, requests of %g ms\n",
		c.BufferRTTMs, c.BufferInstances, c.BufferRateRPS, c.RequestMs)
	fmt.Fprintf(&b, "load at nyc: %g req/s for %gs, the step to %g req/s for %gs", c.BaseRPS, c.BaseS, c.StepRPS, c.StepS)
	if c.AfterS > 0 {
		fmt.Fprintf(&b, ", %g req/s for %gs", c.BaseRPS, c.AfterS)
	}
	fmt.Fprintf(&b, "\nnear group's block: %s\n\n", c.Block)
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "load\tcold (s)\tautoscaler\tinstance-s\tpeak\tp50 (ms)\tp99 (ms)\tfailed\twaited\tspilled\tbuffer share\tto capacity (s)\tback near (s)\tcold starts/1k\trequests\t")
	for _, row := range r.Rows {
		waited := fmt.Sprint(row.Waited)
		if row.Waited < 0 {
			waited = "?"
		}
		back := "-"
		if row.BackNearS != nil {
			back = seconds(*row.BackNearS)
		}
		fmt.Fprintf(tw, "%s\t%g\t%s\t%.0f\t%d\t%.0f\t%.0f\t%d\t%s\t%d\t%s\t%s\t%s\t%.2f\t%d\t\n",
			row.Load, row.ColdStartS, row.Autoscaler, row.InstanceS, row.Peak, row.P50Ms, row.P99Ms, row.Failed, waited,
			row.Spilled, pct(row.BufferShare), seconds(row.TimeToCapacityS), back, row.ColdStartsPer1k, row.Requests)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	b.Reset()
	fmt.Fprintf(&b, "\n%s\n", autoscaleLegend(c))
	for _, row := range r.Rows {
		if len(row.Missed) == 0 {
			fmt.Fprintf(&b, "%s: every target met\n", row.Autoscaler)
		}
		for _, m := range row.Missed {
			fmt.Fprintf(&b, "%s: target missed: %s\n", row.Autoscaler, strings.TrimPrefix(m, row.Autoscaler+": "))
		}
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	for _, row := range r.Rows {
		if err := writeTimeline(w, &row, c.WindowS, 5); err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, wallLine(r.WallS, r.StartupS, "start and ready", r.LoadAvg))
	return err
}

// autoscaleLegend explains the columns and the targets.
func autoscaleLegend(c AutoscaleInfo) string {
	return fmt.Sprintf(`instance-s: the near instances' run time within the load, from the process provider's start to its stop record
(starting and demoted instances included); peak: the most at once. p50/p99: the step's requests answered 2xx, as the
client measured them. failed: requests not answered 2xx or not sent, whole load. waited: requests the gfe held in
its pending queue. spilled: requests eu-west answered; buffer share: its share of the step's. to capacity: from the
step until the gfe's healthy near instances hold the step's concurrency in their slots (%g req/s x (%g + %g) ms).
back near: from the step until every later window of the step has >= %.0f%% of its requests from us-east ("-": no
buffer). Targets: step p99 <= 2 x (%g + %g) = %g ms, 0 failed, back near <= to capacity + %gs (a cold start) + 10s.
The scorecard's oracle, overshoot and post-panic dip have no counterpart here, nor its kpa rows: the real system runs
no Knative autoscaler.`, c.StepRPS, c.RequestMs, c.NearRTTMs, 100*c.NearShare, c.RequestMs, c.BufferRTTMs,
		2*(c.RequestMs+c.BufferRTTMs), c.ColdStartS)
}

// writeTimeline writes row's timeline, its windows (of window s) summed
// every at a time.
func writeTimeline(w io.Writer, row *AutoscaleRow, window float64, every int) error {
	if _, err := fmt.Fprintf(w, "\n%s timeline (instances at the end of each line):\n", row.Autoscaler); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "t (s)\tsent\tus-east\teu-west\tfailed\tmax p99 (ms)\trunning\thealthy\trecommended\t")
	for i := 0; i < len(row.Series); i += every {
		var sent, near, buf, failed int64
		var p99 float64
		last := row.Series[min(len(row.Series), i+every)-1]
		for _, win := range row.Series[i:min(len(row.Series), i+every)] {
			sent, near, buf, failed = sent+win.Sent, near+win.Near, buf+win.Buffer, failed+win.Failed
			p99 = max(p99, win.P99Ms)
		}
		fmt.Fprintf(tw, "%g-%g\t%d\t%s\t%s\t%d\t%.0f\t%d\t%d\t%d\t\n", row.Series[i].TS, last.TS+window,
			sent, pct(ratio(float64(near), float64(near+buf))), pct(ratio(float64(buf), float64(near+buf))), failed, p99, last.Running, last.Healthy, last.Recommended)
	}
	return tw.Flush()
}

// seconds formats a time in seconds, "never" for a negative one.
func seconds(v float64) string {
	if v < 0 {
		return "never"
	}
	return fmt.Sprintf("%.1f", v)
}

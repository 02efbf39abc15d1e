package autoscalebench

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteTable prints the scorecard as a table, one row per (load,
// cold start, autoscaler).
func WriteTable(w io.Writer, rs []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "load\tcold (s)\tautoscaler\tinstance-s\t÷ oracle\tpeak\tovershoot\tp50 (ms)\tp99 (ms)\tp99 all (ms)\tfailed\twaited\tspilled\tto capacity (s)\tpost-panic dip\tcold starts/1k\t")
	for _, r := range rs {
		ttc := "never"
		if r.TimeToCapacityS >= 0 {
			ttc = fmt.Sprintf("%.1f", r.TimeToCapacityS)
		}
		dip := "-"
		if r.PostPanicDip != nil {
			dip = fmt.Sprintf("%.2f", *r.PostPanicDip)
		}
		all := "failed"
		if r.P99AllMs != nil {
			all = fmt.Sprintf("%.0f", *r.P99AllMs)
		}
		fmt.Fprintf(tw, "%s\t%g\t%s\t%.0f\t%.2f\t%d\t%.2f\t%.0f\t%.0f\t%s\t%d\t%d\t%d\t%s\t%s\t%.2f\t\n",
			r.Load, r.ColdStartS, r.Autoscaler, r.InstanceS, r.OracleRatio, r.Peak, r.Overshoot, r.P50Ms, r.P99Ms, all,
			r.Failed, r.Waited, r.Spilled, ttc, dip, r.ColdStartsPer1k)
	}
	return tw.Flush()
}

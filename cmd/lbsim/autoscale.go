package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spillway-lb/spillway/sim/autoscalebench"
)

// runAutoscale is `lbsim autoscale --trace FILE [--json]`: it replays an
// autoscale trace (autoscalebench.ParseTrace) through lb/autoscale and prints one
// line per tick (autoscalebench.RunTrace).
func runAutoscale(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lbsim autoscale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		tracePath = fs.String("trace", "", "autoscale trace YAML `file` (required)")
		asJSON    = fs.Bool("json", false, "print one JSON object per tick (JSON Lines) instead of a table")
	)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: lbsim autoscale --trace FILE [--json]")
		fs.PrintDefaults()
	}
	usageErr, code, ok := parseArgs(fs, args, stderr)
	if !ok {
		return code
	}
	if *tracePath == "" {
		return usageErr("--trace is required")
	}
	tr, err := autoscalebench.LoadTrace(*tracePath)
	if err != nil {
		printErrAs(stderr, "lbsim autoscale", err)
		return exitUsage
	}
	ticks := autoscalebench.RunTrace(tr)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		for _, t := range ticks {
			if err = enc.Encode(t); err != nil {
				break
			}
		}
	} else {
		err = writeTicks(stdout, ticks)
	}
	if err != nil {
		printErrAs(stderr, "lbsim autoscale", fmt.Errorf("write output: %w", err))
		return exitFail
	}
	return exitOK
}

// writeTicks prints the ticks as a table.
func writeTicks(w io.Writer, ticks []autoscalebench.TraceTick) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "t_s\trunning\trecommended\tdriver\tcpu\tconcurrency\tact\tdemoted\tstopped\t")
	for _, t := range ticks {
		fmt.Fprintf(tw, "%g\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t\n",
			t.T, t.Running, t.Recommended, t.Driver, t.Drivers.CPU, t.Drivers.Concurrency, t.Drivers.ACT, t.Demoted, t.Stopped)
	}
	return tw.Flush()
}

// runAutoscaleBench is `lbsim autoscale-bench [--json]`: the autoscaler
// scorecard (autoscalebench.Run; the model is in its doc). --json
// prints {"rows": [...]}.
func runAutoscaleBench(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lbsim autoscale-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, `print one JSON object {"rows": [...]} instead of a table`)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: lbsim autoscale-bench [--json]")
		fs.PrintDefaults()
	}
	if _, code, ok := parseArgs(fs, args, stderr); !ok {
		return code
	}
	rs := autoscalebench.Run(autoscalebench.DefaultModel())
	rows := struct {
		Rows []autoscalebench.Row `json:"rows"`
	}{rs}
	table := func(w io.Writer) error { return autoscalebench.WriteTable(w, rs) }
	if err := writeOutput(stdout, *asJSON, rows, table); err != nil {
		printErrAs(stderr, "lbsim autoscale-bench", fmt.Errorf("write output: %w", err))
		return exitFail
	}
	return exitOK
}

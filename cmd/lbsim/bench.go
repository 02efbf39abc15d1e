package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spillway-lb/spillway/internal/benchpolicy"
	"github.com/spillway-lb/spillway/sim"
	"github.com/spillway-lb/spillway/sim/policybench"
)

func runBench(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lbsim bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var ids []string
	for _, p := range benchpolicy.Defaults() {
		ids = append(ids, p.ID())
	}
	var (
		scenarioPath = fs.String("scenario", "", "scenario YAML `file` (required)")
		asJSON       = fs.Bool("json", false, "print one JSON object instead of a table")
		seriesPath   = fs.String("series", "", "write every step's region shares per policy to this CSV `file`")
		policyList   = fs.String("policies", "", "comma-separated `list` of rows to run (default all): "+strings.Join(ids, ", ")+"; a bare hash2 means both scopes; prequal (Prequal's probes, global) runs only when named")
		steps        = fs.Int("steps", 0, "stop after `N` steps (0: the whole timeline)")
	)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: lbsim bench --scenario FILE [--json] [--series FILE.csv] [--policies LIST] [--steps N]")
		fs.PrintDefaults()
	}
	usageErr, code, ok := parseArgs(fs, args, stderr)
	if !ok {
		return code
	}
	if *scenarioPath == "" {
		return usageErr("--scenario is required")
	}
	if *steps < 0 {
		return usageErr("--steps: must be >= 0, got %d", *steps)
	}
	policies, err := benchpolicy.Select(*policyList)
	if err != nil {
		return usageErr("--policies: %v", err)
	}
	for _, p := range policies {
		if p.Any() {
			return usageErr("--policies: %s: %v", p.ID(), policybench.ErrOptionNotModelled)
		}
	}

	scen, err := sim.LoadScenario(*scenarioPath)
	if err != nil {
		printCmdErr(stderr, "bench", err)
		return exitUsage
	}
	res, err := policybench.Run(scen, policybench.Options{Policies: policies, MaxSteps: *steps, Series: *seriesPath != ""})
	if err != nil {
		printCmdErr(stderr, "bench", err)
		return exitFail
	}
	res.Scenario = filepath.Base(*scenarioPath)
	if *seriesPath != "" {
		if err := writeSeries(*seriesPath, res); err != nil {
			printCmdErr(stderr, "bench", err)
			return exitFail
		}
		for i := range res.Policies {
			res.Policies[i].Series = nil // in the CSV file, not on stdout
		}
	}
	if err := writeOutput(stdout, *asJSON, res, res.WriteTable); err != nil {
		printCmdErr(stderr, "bench", fmt.Errorf("write output: %w", err))
		return exitFail
	}
	return exitOK
}

func writeSeries(path string, res *policybench.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("series: %w", err)
	}
	if err := res.WriteSeriesCSV(f); err != nil {
		f.Close()
		return fmt.Errorf("series %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("series %s: %w", path, err)
	}
	return nil
}

// printCmdErr prints err with every line prefixed by "lbsim CMD: ".
func printCmdErr(w io.Writer, cmd string, err error) {
	for line := range strings.SplitSeq(err.Error(), "\n") {
		fmt.Fprintf(w, "lbsim %s: %s\n", cmd, line)
	}
}

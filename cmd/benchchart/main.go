// Command benchchart draws the charts of BENCHMARKS.md as SVG from the
// simulation behind `lbsim bench`: it runs policybench.Run in process,
// with the same scenario file and policies, and charts the result, so a
// chart never holds a number typed in by hand.
//
//	benchchart --scenario FILE --kind shares|utilization|cdf --out FILE.svg [--policies LIST]
//
// Kinds:
//
//   - shares: one stacked-area panel per policy, each region's share of all
//     requests routed in each step (policybench.Row.Series), in percent.
//   - utilization: one panel per policy, each region's load over its
//     capacity in each step, in percent, with the 100% line.
//   - cdf: one panel, the latency distribution of served requests of every
//     policy (policybench.Row.CDF) on a logarithmic axis in ms.
//
// The policies are benchpolicy.Defaults without least_request, which
// the simulation models exactly like round_robin; --policies picks rows by
// ID (hash2/nearest_region) or name (hash2: both scopes), as `lbsim bench`
// does. bench/charts.sh regenerates every chart into docs/bench/.
//
// Exit status: 0 on success, 1 when the simulation or the output fails, 2
// for usage errors and bad scenario files.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/benchpolicy"
	"github.com/spillway-lb/spillway/internal/svgchart"
	"github.com/spillway-lb/spillway/sim"
	"github.com/spillway-lb/spillway/sim/policybench"
)

const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// kinds maps each --kind to the function that builds its figure.
func kinds() map[string]func(*policybench.Result) (*svgchart.Figure, error) {
	return map[string]func(*policybench.Result) (*svgchart.Figure, error){
		"shares":      sharesFigure,
		"utilization": utilizationFigure,
		"cdf":         cdfFigure,
	}
}

// run is main without the process: it returns the exit status.
func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("benchchart", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		scenarioPath = fs.String("scenario", "", "scenario YAML `file` (required)")
		kind         = fs.String("kind", "", "chart to draw: shares, utilization or cdf (required)")
		outPath      = fs.String("out", "", "SVG `file` to write (required)")
		policyList   = fs.String("policies", "", "comma-separated `list` of policy IDs or names (default: every default bench policy but least_request)")
	)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: benchchart --scenario FILE --kind shares|utilization|cdf --out FILE.svg [--policies LIST]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "benchchart: "+format+"\n", a...)
		fs.Usage()
		return exitUsage
	}
	switch {
	case fs.NArg() > 0:
		return usageErr("unexpected argument %q", fs.Arg(0))
	case *scenarioPath == "":
		return usageErr("--scenario is required")
	case *outPath == "":
		return usageErr("--out is required")
	}
	build, ok := kinds()[*kind]
	if !ok {
		return usageErr("--kind: want shares, utilization or cdf, got %q", *kind)
	}
	policies, err := selectPolicies(*policyList)
	if err != nil {
		return usageErr("--policies: %v", err)
	}

	scen, err := sim.LoadScenario(*scenarioPath)
	if err != nil {
		printErr(stderr, err)
		return exitUsage
	}
	res, err := policybench.Run(scen, policybench.Options{Policies: policies, Series: *kind != "cdf"})
	if err != nil {
		printErr(stderr, err)
		return exitFail
	}
	res.Scenario = filepath.Base(*scenarioPath)
	fig, err := build(res)
	if err != nil {
		printErr(stderr, err)
		return exitFail
	}
	var buf bytes.Buffer
	if err := fig.WriteSVG(&buf); err != nil {
		printErr(stderr, err)
		return exitFail
	}
	if err := os.WriteFile(*outPath, buf.Bytes(), 0o644); err != nil {
		printErr(stderr, fmt.Errorf("write chart: %w", err))
		return exitFail
	}
	return exitOK
}

// selectPolicies returns the rows benchpolicy.Select names in the
// comma-separated list; for "", every default row but least_request
// (modelled as round_robin, so its chart would repeat round_robin's).
func selectPolicies(list string) ([]benchpolicy.Row, error) {
	if list != "" {
		return benchpolicy.Select(list)
	}
	return slices.DeleteFunc(benchpolicy.Defaults(), func(r benchpolicy.Row) bool { return r.Policy == config.PolicyLeastRequest }), nil
}

// printErr prints err with every line prefixed by "benchchart: ".
func printErr(w io.Writer, err error) {
	for line := range strings.SplitSeq(err.Error(), "\n") {
		fmt.Fprintf(w, "benchchart: %s\n", line)
	}
}

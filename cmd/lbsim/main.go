// Command lbsim runs Spillway's load-balancing policies over a scenario file.
//
//	lbsim plan --scenario FILE --policy POLICY [--scope global|nearest_region] [--json]
//	lbsim bench --scenario FILE [--json] [--series FILE.csv] [--policies LIST] [--steps N]
//	lbsim autoscale --trace FILE [--json]
//	lbsim autoscale-bench [--json]
//	lbsim gossip --nodes N [--json]
//
// plan prints the steady-state flows of one policy (waterfall, min_rtt,
// round_robin, least_request, envoy_priority, hash2, hash3, hash5) from every site to every
// instance group, and each region's capacity, load and utilization. The
// model of each policy and the scenario format are documented in package
// sim.
//
// bench runs every policy through the scenario's timeline, a time-stepped
// simulation of the gfes (gossip delay, plan damping), their pickers and
// the backends' queues (policybench.Run), and prints one row per policy:
// latency (mean, p50, p99), requests served over capacity, errors,
// cross-region share, mean RTT over the linear-program optimum, and
// oscillation.
//
// autoscale replays an autoscale trace (a group's autoscaling block and its
// CPU, concurrency, requests and ACT per tick; autoscalebench.ParseTrace) through the
// autoscaler's rules (lb/autoscale) and prints, per tick, the instances
// running, the recommendation, the driver that set it and each driver's
// count, and the demoted and stopped instances (autoscalebench.RunTrace).
//
// autoscale-bench prints the autoscaler scorecard (autoscalebench.Run):
// an oracle, Knative's KPA with and without its activator, and the Cloud
// Run rules alone and with the waterfall as their buffer, on step, ramp,
// spike, flash, diurnal and sporadic loads with 1s and 25s cold starts;
// per row instance-seconds and their ratio to the oracle, peak and
// overshoot, latency percentiles, requests failed and waited, time to
// capacity, the post-panic dip and cold starts per 1,000 requests. It is a
// deterministic simulation: no wall clock, the same rows everywhere.
//
// gossip starts N real gossip nodes in this process (package gossipbench:
// the daemons' gossip configuration, state codec and seals, over an
// in-memory network that counts bytes), publishes changes and kills a node,
// and prints the spread of a change (p50, p99, p99.99), the bytes each node
// sends per second (all, and state messages), and the time until every node
// notices the dead one.
//
// Exit status: 0 on success, 1 when the plan cannot be computed, 2 for usage
// errors and bad scenario files.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/version"
	"github.com/spillway-lb/spillway/sim"
)

const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: lbsim <command> [flags]

commands:
  plan   print the flows of one policy on a scenario
         lbsim plan --scenario FILE --policy POLICY [--scope global|nearest_region] [--json]
  bench  simulate every policy through the scenario's timeline and compare them
         lbsim bench --scenario FILE [--json] [--series FILE.csv] [--policies LIST] [--steps N]
  autoscale  replay an autoscale trace through the autoscaler's rules, one line per tick
         lbsim autoscale --trace FILE [--json]
  autoscale-bench  the autoscaler scorecard: oracle, KPA and the Cloud Run rules alone and with the waterfall
         lbsim autoscale-bench [--json]
  gossip  run N gossip nodes in this process: spread of a change, bytes per node, failure detection
         lbsim gossip --nodes N [--json]

Run "lbsim plan -h" or "lbsim bench -h" for the flags of a command,
"lbsim --version" for the build.
`

// run is main without the process: it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "plan":
		return runPlan(args[1:], stdout, stderr)
	case "bench":
		return runBench(args[1:], stdout, stderr)
	case "autoscale":
		return runAutoscale(args[1:], stdout, stderr)
	case "autoscale-bench":
		return runAutoscaleBench(args[1:], stdout, stderr)
	case "gossip":
		return runGossip(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, version.Line("lbsim"))
		return exitOK
	default:
		fmt.Fprintf(stderr, "lbsim: unknown command %q\n\n%s", args[0], usage)
		return exitUsage
	}
}

func runPlan(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lbsim plan", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		scenarioPath = fs.String("scenario", "", "scenario YAML `file` (required)")
		policyName   = fs.String("policy", "", "`policy`, one of: "+names(config.Policies())+" (required)")
		scopeName    = fs.String("scope", "", "`scope` of the baseline policies: "+names(config.HashScopes())+" (default global; not valid with waterfall, min_rtt or envoy_priority)")
		asJSON       = fs.Bool("json", false, "print one JSON object instead of tables")
	)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: lbsim plan --scenario FILE --policy POLICY [--scope SCOPE] [--json]")
		fs.PrintDefaults()
	}
	usageErr, code, ok := parseArgs(fs, args, stderr)
	if !ok {
		return code
	}
	if *scenarioPath == "" {
		return usageErr("--scenario is required")
	}
	if *policyName == "" {
		return usageErr("--policy is required")
	}
	policy, err := config.ParsePolicy(*policyName)
	if err != nil {
		return usageErr("--policy: %v", err)
	}
	var scope config.HashScope
	if *scopeName != "" {
		if scope, err = config.ParseHashScope(*scopeName); err != nil {
			return usageErr("--scope: %v", err)
		}
		if policy.OrdersRegions() {
			return usageErr("--scope: %v", sim.ErrScopeNotApplicable)
		}
	}

	scen, err := sim.LoadScenario(*scenarioPath)
	if err != nil {
		printErr(stderr, err)
		return exitUsage
	}
	res, err := scen.ExpectedFlows(policy, scope)
	if err != nil {
		printErr(stderr, err)
		return exitFail
	}
	if err := writeOutput(stdout, *asJSON, res, res.WriteTable); err != nil {
		printErr(stderr, fmt.Errorf("write output: %w", err))
		return exitFail
	}
	return exitOK
}

// writeOutput prints a command's result on w: v as indented JSON with
// asJSON, else the table that table writes.
func writeOutput(w io.Writer, asJSON bool, v any, table func(io.Writer) error) error {
	if !asJSON {
		return table(w)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printErr prints err with every line prefixed, so that each problem of a
// bad scenario file stands on its own line.
func printErr(w io.Writer, err error) { printErrAs(w, "lbsim plan", err) }

// printErrAs is printErr with the command's name as the prefix.
func printErrAs(w io.Writer, cmd string, err error) {
	for line := range strings.SplitSeq(err.Error(), "\n") {
		fmt.Fprintf(w, "%s: %s\n", cmd, line)
	}
}

func names[T ~string](list []T) string {
	s := make([]string, len(list))
	for i, v := range list {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
}

// parseArgs parses args into fs (named "lbsim CMD", with its Usage set) and
// refuses positional arguments. When ok is false the command returns code:
// exitOK for -h, exitUsage otherwise, the problem and the usage printed.
// usageErr prints a usage problem the command finds itself, with the
// usage, and returns exitUsage.
func parseArgs(fs *flag.FlagSet, args []string, stderr io.Writer) (usageErr func(format string, a ...any) int, code int, ok bool) {
	usageErr = func(format string, a ...any) int {
		fmt.Fprintf(stderr, fs.Name()+": "+format+"\n", a...)
		fs.Usage()
		return exitUsage
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return usageErr, exitOK, false
		}
		return usageErr, exitUsage, false // the flag package has printed the error and usage
	}
	if fs.NArg() > 0 {
		return usageErr, usageErr("unexpected argument %q", fs.Arg(0)), false
	}
	return usageErr, 0, true
}

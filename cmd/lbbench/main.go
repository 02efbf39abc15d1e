// Command lbbench is the real benchmark: it starts a Spillway deployment on
// loopback (control plane, three gfes, test backends in three regions with
// emulated RTT), drives every policy in turn through a steady phase and a
// flash crowd from many client addresses, and prints the `lbsim bench`
// table from the measured traffic. See internal/realbench.
//
// With --autoscale it runs the autoscaler's story instead
// (realbench.RunAutoscale): per row a fresh deployment of site nyc in
// front of us-east, autoscaled by the control plane's process provider
// with real testbackend processes and a real cold start, and, for the
// cloudrun+waterfall row, eu-west as the buffer; a step load at nyc; the
// scorecard's columns (`lbsim autoscale-bench`) from the measured traffic.
//
// With --lab (as root, with iproute2) the same deployment runs on the
// network-namespace hosts of package lab instead of loopback — control
// planes, gfes, backends and each site's load generator on hosts of their
// own, talking over the lab's bridge — with 64 client addresses per site
// (lab.ClientAddrs); the lab is torn down afterwards.
//
// With --story uneven it runs the uneven story instead of the flash crowd
// (realbench.UnevenStory): four regions of uneven capacity, half of every
// region's instances slowed by a time-varying antagonist, skewed demand
// ramping from 0.5x to 2x of capacity, a 5 s deadline, every policy run
// --reps times interleaved, the median and range reported.
//
//	lbbench [--story flash|uneven] [--reps N] [--quick] [--scale F] [--headroom H] [--policies LIST] [--json] [--net N | --lab] [--bins DIR] [-v]
//	lbbench --autoscale [--quick] [--scale F] [--autoscalers LIST] [--json] [--net N] [--bins DIR] [-v]
//	lbbench --render FILE.json   (any of their --json output)
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/spillway-lb/spillway/internal/benchpolicy"
	"github.com/spillway-lb/spillway/internal/lab"
	"github.com/spillway-lb/spillway/internal/realbench"
)

func main() {
	quick := flag.Bool("quick", false, "short run (2 s warmup, 3 s steady, 5 s flash crowd per policy) instead of the full one (3 s, 6 s, 12 s)")
	scale := flag.Float64("scale", 1, "multiply the warmup and every phase's duration by `F`")
	policyList := flag.String("policies", "", "comma-separated `list` of rows (default all 10): waterfall, min_rtt, round_robin, least_request (p2c), hashN/global, hashN/nearest_region; a bare hashN means both scopes; a planned policy may add +load_aware, +shed or +load_aware+shed (waterfall+load_aware); also selectable: envoy_priority, prequal (Prequal's probes)")
	asJSON := flag.Bool("json", false, "print the result as JSON instead of a table")
	headroom := flag.Float64("headroom", 1, "rate each backend instance really serves over its declared capacity (`H`; 1.25 is lbsim bench's utilization_at_capacity 0.8)")
	net := flag.Int("net", 40, "second octet of the deployment's loopback addresses (127.NET.0.0/16)")
	bins := flag.String("bins", "", "`DIR` holding prebuilt gfe, controlplane and testbackend binaries, and loadgen with --lab (default: build them)")
	verbose := flag.Bool("v", false, "print every process's logs on stderr")
	onLab := flag.Bool("lab", false, "run the deployment on the lab's network-namespace hosts (needs root and iproute2; namespaces splb-*) instead of loopback")
	autoscale := flag.Bool("autoscale", false, "run the autoscaler's story (a step at nyc, us-east autoscaled with real cold starts, eu-west as the buffer) instead of the policies")
	autoscalers := flag.String("autoscalers", "", "with --autoscale, the comma-separated `list` of rows (default both): "+strings.Join(realbench.Autoscalers(), ", "))
	render := flag.String("render", "", "print the table of a `FILE` written by --json, without running anything")
	story := flag.String("story", "flash", "the load `story`: flash (steady, then a flash crowd at nyc) or uneven (four uneven regions, antagonists, skewed demand ramping to 2x capacity, repeated)")
	reps := flag.Int("reps", 0, "repetitions of every policy with --story uneven, interleaved (default 5, 2 with --quick)")
	flag.Parse()
	if *render != "" {
		if err := renderFile(*render); err != nil {
			fmt.Fprintln(os.Stderr, "lbbench:", err)
			os.Exit(1)
		}
		return
	}
	if *autoscale {
		if *onLab || *policyList != "" || *headroom != 1 || *story != "flash" || *reps != 0 {
			fmt.Fprintln(os.Stderr, "lbbench: --autoscale runs on loopback with its own rows: no --lab, --policies, --headroom, --story or --reps")
			os.Exit(2)
		}
		if err := runAutoscale(*quick, *scale, *autoscalers, *asJSON, *net, *bins, *verbose); err != nil {
			fmt.Fprintln(os.Stderr, "lbbench:", err)
			os.Exit(1)
		}
		return
	}
	if *story == "uneven" {
		if err := runStory(*quick, *scale, *headroom, *reps, *policyList, *asJSON, *net, *bins, *verbose, *onLab); err != nil {
			fmt.Fprintln(os.Stderr, "lbbench:", err)
			os.Exit(1)
		}
		return
	}
	if *story != "flash" {
		fmt.Fprintf(os.Stderr, "lbbench: --story: want flash or uneven, got %q\n", *story)
		os.Exit(2)
	}
	if *reps != 0 {
		fmt.Fprintln(os.Stderr, "lbbench: --reps: only with --story uneven")
		os.Exit(2)
	}
	if err := run(*quick, *scale, *headroom, *policyList, *asJSON, *net, *bins, *verbose, *onLab); err != nil {
		fmt.Fprintln(os.Stderr, "lbbench:", err)
		os.Exit(1)
	}
}

func renderFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var kind struct {
		Kind  string `json:"kind"`
		Story string `json:"story"`
	}
	if err := json.Unmarshal(b, &kind); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	if kind.Story != "" {
		var res realbench.StoryResult
		if err := json.Unmarshal(b, &res); err != nil {
			return fmt.Errorf("decode %s: %w", path, err)
		}
		return res.WriteTable(os.Stdout)
	}
	if kind.Kind == realbench.AutoscaleKind {
		var res realbench.AutoscaleResult
		if err := json.Unmarshal(b, &res); err != nil {
			return fmt.Errorf("decode %s: %w", path, err)
		}
		return res.WriteTable(os.Stdout)
	}
	var res realbench.Result
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	return res.WriteTable(os.Stdout)
}

func run(quick bool, scale, headroom float64, policyList string, asJSON bool, net int, bins string, verbose, onLab bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cfg := realbench.DefaultConfig()
	if quick {
		cfg = realbench.QuickConfig()
	}
	if scale <= 0 {
		return fmt.Errorf("--scale: must be > 0, got %g", scale)
	}
	cfg.Scale(scale)
	cfg.Net = net
	cfg.Headroom = headroom
	ps, err := benchpolicy.Select(policyList)
	if err != nil {
		return fmt.Errorf("--policies: %w", err)
	}
	cfg.Policies = ps

	opts, cleanup, err := options(&cfg, bins, verbose, onLab)
	if err != nil {
		return err
	}
	defer cleanup()
	res, err := realbench.Run(ctx, cfg, opts)
	if err != nil {
		return err
	}
	var out io.Writer = os.Stdout
	if asJSON {
		return res.WriteJSON(out)
	}
	return res.WriteTable(out)
}

// runStory runs the uneven story (realbench.UnevenStory) and prints its
// table or JSON.
func runStory(quick bool, scale, headroom float64, reps int, policyList string, asJSON bool, net int, bins string, verbose, onLab bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	st := realbench.UnevenStory(quick)
	if scale <= 0 {
		return fmt.Errorf("--scale: must be > 0, got %g", scale)
	}
	if headroom != 1 {
		return fmt.Errorf("--headroom: the uneven story's capacity is its instances' slots and service time, not a rate (got %g)", headroom)
	}
	st.Scale(scale)
	st.Net = net
	if reps != 0 {
		st.Reps = reps
	}
	if policyList != "" {
		ps, err := benchpolicy.Select(policyList)
		if err != nil {
			return fmt.Errorf("--policies: %w", err)
		}
		st.Policies = ps
	}
	opts, cleanup, err := options(&st.Config, bins, verbose, onLab)
	if err != nil {
		return err
	}
	defer cleanup()
	res, err := realbench.RunStory(ctx, st, opts)
	if err != nil {
		return err
	}
	if asJSON {
		return res.WriteJSON(os.Stdout)
	}
	return res.WriteTable(os.Stdout)
}

// options returns the run's options: a temporary directory, the prebuilt
// binaries of bins, the processes' logs on stderr with verbose, and with
// onLab the lab's hosts (cfg's sources per site capped to the lab's client
// addresses). cleanup removes what it made.
func options(cfg *realbench.Config, bins string, verbose, onLab bool) (opts realbench.Options, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "spillway-lbbench-")
	if err != nil {
		return opts, nil, err
	}
	var downs []func() error
	cleanup = func() {
		for _, down := range slices.Backward(downs) {
			_ = down()
		}
		os.RemoveAll(dir)
	}
	opts = realbench.Options{Dir: dir, Progress: os.Stderr}
	if verbose {
		opts.Tee = os.Stderr
	}
	if bins != "" {
		opts.Bins = map[string]string{}
		for _, n := range []string{"gfe", "controlplane", "testbackend"} {
			opts.Bins[n] = filepath.Join(bins, n)
		}
		if onLab {
			// Each site's load runs on its client host, as a process.
			opts.Bins["loadgen"] = filepath.Join(bins, "loadgen")
		}
	}
	if onLab {
		if err := lab.RequireIP(); err != nil {
			cleanup()
			return opts, nil, err
		}
		cfg.SourcesPerSite = min(cfg.SourcesPerSite, lab.ClientAddrs)
		lcfg := lab.Config{Prefix: "splb-", StateDir: dir, Bins: opts.Bins, Tee: opts.Tee}
		fmt.Fprintf(os.Stderr, "the deployment runs on the lab's hosts (%s, namespaces %s*)\n", lab.DefaultNetwork, lcfg.Prefix)
		opts.Lab = lab.DefaultNetwork.String()
		var down func() error
		opts.Start, down = lab.Starter(lcfg)
		downs = append(downs, down)
	}
	return opts, cleanup, nil
}

func runAutoscale(quick bool, scale float64, rows string, asJSON bool, net int, bins string, verbose bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cfg := realbench.DefaultAutoscaleConfig()
	if quick {
		cfg = realbench.QuickAutoscaleConfig()
	}
	if scale <= 0 {
		return fmt.Errorf("--scale: must be > 0, got %g", scale)
	}
	cfg.Scale(scale)
	cfg.Net = net
	if rows != "" {
		cfg.Autoscalers = nil
		for r := range strings.SplitSeq(rows, ",") {
			if r = strings.TrimSpace(r); r != "" {
				cfg.Autoscalers = append(cfg.Autoscalers, r)
			}
		}
	}
	dir, err := os.MkdirTemp("", "spillway-lbbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	opts := realbench.Options{Dir: dir, Progress: os.Stderr}
	if verbose {
		opts.Tee = os.Stderr
	}
	if bins != "" {
		opts.Bins = map[string]string{}
		for _, n := range []string{"gfe", "controlplane", "testbackend"} {
			opts.Bins[n] = filepath.Join(bins, n)
		}
	}
	res, err := realbench.RunAutoscale(ctx, cfg, opts)
	if err != nil {
		return err
	}
	if asJSON {
		return res.WriteJSON(os.Stdout)
	}
	return res.WriteTable(os.Stdout)
}

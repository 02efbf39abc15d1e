package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"

	"github.com/spillway-lb/spillway/internal/gossip/gossipbench"
)

func runGossip(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lbsim gossip", flag.ContinueOnError)
	fs.SetOutput(stderr)
	w := gossipbench.DefaultWorld()
	var o gossipbench.Options
	fs.IntVar(&o.Nodes, "nodes", 0, "`N` gossip nodes to run in this process (required, >= 3)")
	fs.IntVar(&w.Services, "services", w.Services, "backend `services`: each node publishes a demand for each")
	fs.IntVar(&w.Regions, "regions", w.Regions, "backend `regions`: each node publishes an RTT to each")
	fs.IntVar(&w.LoadedGroups, "loaded-groups", w.LoadedGroups, "instance `groups` each node publishes its load on")
	fs.StringVar(&o.Profile, "profile", "", "gossip timing `profile` (gossip.profile; default: what the daemons select)")
	fs.BoolVar(&o.Unsealed, "unsealed", false, "do not seal states (daemons with TLS files seal them)")
	fs.BoolVar(&o.Unverified, "unverified", false, "seal states but verify no seal: a sealed cluster's bytes without the CPU of N² signature checks in one process")
	fs.BoolVar(&o.Unshared, "unshared", false, "give every node its own decoded states and certificate cache, as N processes would (memory grows as N² states)")
	fs.BoolVar(&o.Unencrypted, "unencrypted", false, "run without a gossip key (daemons beyond loopback must have one)")
	fs.IntVar(&o.Changes, "changes", 10, "`changes` to publish, one at a time, to measure the spread")
	fs.DurationVar(&o.PublishInterval, "publish-interval", 0, "every node also re-publishes a drifted state every `interval` during the window (0: only the changes)")
	fs.DurationVar(&o.Window, "window", 60e9, "steady-state `window` over which bytes are counted")
	fs.IntVar(&o.BusyCores, "busy-cores", 0, "run `k` busy loops (child processes) during the run")
	fs.DurationVar(&o.Timeout, "timeout", 20*60e9, "bound the whole `run`: forming, the window and failure detection")
	fs.Uint64Var(&o.Seed, "seed", 1, "random `seed` of the states, publishers and victim")
	asJSON := fs.Bool("json", false, "print one JSON object instead of a table")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to `file`")
	memProfile := fs.String("memprofile", "", "write a heap profile to `file` once the cluster formed")
	gcPercent := fs.Int("gogc", 200, "the process's GC target `percent` (GOGC; the environment's GOGC wins): N nodes' garbage while forming is most of a default collector's CPU")
	memLimit := fs.Int64("memlimit", 12<<30, "the process's soft memory limit in `bytes` (GOMEMLIMIT; the environment's wins), which collects sooner than --gogc near it")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: lbsim gossip --nodes N [--json] [flags]")
		fs.PrintDefaults()
	}
	usageErr, code, ok := parseArgs(fs, args, stderr)
	if !ok {
		return code
	}
	if o.Nodes < 3 {
		return usageErr("--nodes: must be at least 3, got %d", o.Nodes)
	}
	o.World = w
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(*gcPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" && *memLimit > 0 {
		debug.SetMemoryLimit(*memLimit)
	}
	if !*quiet {
		o.Progress = stderr
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			printErrAs(stderr, "lbsim gossip", err)
			return exitFail
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			printErrAs(stderr, "lbsim gossip", err)
			return exitFail
		}
		defer pprof.StopCPUProfile()
	}
	if *memProfile != "" {
		f, err := os.Create(*memProfile)
		if err != nil {
			printErrAs(stderr, "lbsim gossip", err)
			return exitFail
		}
		defer f.Close()
		o.HeapProfile = f
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := gossipbench.Run(ctx, o)
	if err != nil {
		printErrAs(stderr, "lbsim gossip", err)
		if res.Nodes == 0 {
			return exitFail
		}
	}
	if err := writeOutput(stdout, *asJSON, res, res.WriteTable); err != nil {
		printErrAs(stderr, "lbsim gossip", fmt.Errorf("write output: %w", err))
		return exitFail
	}
	return exitOK
}

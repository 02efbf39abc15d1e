// Command idlebench measures what idle keep-alive connections cost one gfe
// (BENCHMARKS.md §8, "15,000 idle connections"; see internal/idlebench): a
// real gfe, control plane and test backend on loopback, 15,000 connections
// that each made one request held open by a second process of this binary
// (idlebench hold) from 100 client addresses, and a steady load beside
// them; it reports the gfe's RSS per idle connection, its idle CPU, and
// the steady load's p99 with and without the idle connections.
//
//	idlebench [--conns N] [--per-source K] [--rate R] [--load D] [--window D] [--poller MODE] [--json] [--net N] [--bins DIR] [-v]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spillway-lb/spillway/internal/idlebench"
	"github.com/spillway-lb/spillway/internal/testkit"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "hold" {
		if err := idlebench.Hold(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "idlebench hold:", err)
			os.Exit(1)
		}
		return
	}
	var o idlebench.Options
	flag.IntVar(&o.Conns, "conns", 15000, "idle connections to open (each process here may hold 20,000 descriptors)")
	flag.IntVar(&o.PerSource, "per-source", 150, "idle connections per client address (at most the listener's max_connections_per_client, 256 by default)")
	flag.Float64Var(&o.Rate, "rate", 500, "steady load beside them, requests/s")
	flag.DurationVar(&o.Load, "load", 10e9, "how long the steady load is measured, with and without")
	flag.DurationVar(&o.Window, "window", 10e9, "how long the gfe's idle CPU is measured, with and without")
	flag.StringVar(&o.Poller, "poller", "auto", "the gfe's --poller mode: auto, on or off")
	flag.DurationVar(&o.ClientKeepAlive, "client-keepalive", 0, "the idle connections' TCP keep-alive idle time on the client side (0: Go's default, 15s; negative: none)")
	flag.StringVar(&o.Dir, "dir", "", "`DIR` for binaries, config and logs, kept afterwards (default: a temporary directory, removed)")
	flag.IntVar(&o.Net, "net", 173, "second octet of the deployment's loopback addresses (127.NET.0.0/16)")
	flag.StringVar(&o.HeapProfile, "heap-profile", "", "write the gfe's heap profile, taken with the idle connections open, to `FILE`")
	flag.StringVar(&o.CPUProfile, "cpu-profile", "", "write the gfe's CPU profile over the steady load beside the idle connections to `FILE`")
	flag.DurationVar(&o.PlanInterval, "plan-interval", 0, "the gfe's --plan-interval (0: the test deployments' 250ms; the gfe's default is 500ms)")
	flag.DurationVar(&o.RTTInterval, "rtt-interval", 0, "the gfe's --rtt-interval (0: the test deployments' 250ms; the gfe's default is 1s)")
	flag.IntVar(&o.Rounds, "rounds", 1, "run the steady load without and with the idle connections N times (after the first, they close and open anew each round)")
	flag.StringVar(&o.TraceDir, "trace-dir", "", "write the gfe's runtime traces of the first seconds of each phase to `DIR` (idle-without, load-without, idle-with, load-with .trace)")
	twin := flag.Bool("twin", false, "instead: two gfes under the same steady load at once, one holding the idle connections (roles alternating by round; --rounds, at least 2), and the ratio of their p99s")
	asJSON := flag.Bool("json", false, "print the result as JSON")
	bins := flag.String("bins", "", "`DIR` holding prebuilt gfe, controlplane and testbackend binaries (default: build them)")
	verbose := flag.Bool("v", false, "print every process's logs on stderr")
	flag.Parse()
	if err := run(o, *asJSON, *twin, *bins, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "idlebench:", err)
		os.Exit(1)
	}
}

func run(o idlebench.Options, asJSON, twin bool, bins string, verbose bool) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	o.Holder = self
	o.Log = os.Stderr
	if verbose {
		o.Tee = os.Stderr
	}
	if bins != "" {
		o.Bins = map[string]string{}
		for _, b := range []string{"gfe", "controlplane", "testbackend"} {
			o.Bins[b] = filepath.Join(bins, b)
		}
	}
	// One deployment at a time on this machine (Ctrl-C while waiting ends
	// the command at once).
	unlock, err := testkit.LockDeployments()
	if err != nil {
		return err
	}
	defer unlock()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if twin {
		r, err := idlebench.RunTwin(ctx, o)
		if r != nil {
			output(r, asJSON, func() { idlebench.WriteTwin(os.Stdout, r) })
		}
		return err
	}
	r, err := idlebench.Run(ctx, o)
	if r != nil {
		output(r, asJSON, func() { idlebench.WriteTable(os.Stdout, r) })
	}
	return err
}

// output prints v as indented JSON, or calls table.
func output(v any, asJSON bool, table func()) {
	if !asJSON {
		table()
		return
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

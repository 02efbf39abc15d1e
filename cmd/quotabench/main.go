// Command quotabench measures the quota targets (docs/design.md §7;
// BENCHMARKS.md §6) on a real deployment on loopback — three gfes, two
// control planes, one redis-server — and exits non-zero when one is missed
// (see internal/quotabench): accuracy over a whole minute window for 100
// consumers offered ten times their limit, then Redis and control planes
// stalled and killed under that load, then 1% injected errors. About 3
// minutes.
//
//	quotabench [--consumers N] [--offered X] [--skip-faults] [--net N] [-v]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spillway-lb/spillway/internal/quotabench"
	"github.com/spillway-lb/spillway/internal/redisserver"
	"github.com/spillway-lb/spillway/internal/testkit"
)

func main() {
	consumers := flag.Int("consumers", 100, "number of consumers, limits 60..6000/min")
	offered := flag.Float64("offered", 10, "load offered to each consumer, in times its limit")
	skipFaults := flag.Bool("skip-faults", false, "measure accuracy only")
	net := flag.Int("net", 61, "second octet of the deployment's loopback addresses (127.NET.0.0/16)")
	verbose := flag.Bool("v", false, "print every process's logs on stderr")
	flag.Parse()
	if err := run(*consumers, *offered, *skipFaults, *net, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "quotabench:", err)
		os.Exit(1)
	}
	fmt.Println("every target met")
}

func run(consumers int, offered float64, skipFaults bool, net int, verbose bool) error {
	if err := testkit.EnsureTools(redisserver.Tools); err != nil {
		return err
	}
	// One deployment at a time on this machine: its timing is what the
	// targets are about. (Ctrl-C while waiting ends the command at once.)
	unlock, err := testkit.LockDeployments()
	if err != nil {
		return err
	}
	defer unlock()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	o := quotabench.Options{Net: net, Consumers: consumers, Offered: offered, SkipFaults: skipFaults, Out: os.Stdout}
	if verbose {
		o.Tee = os.Stderr
	}
	return quotabench.Run(ctx, o)
}

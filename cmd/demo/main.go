// Command demo starts a local Spillway deployment — one control plane, three
// gfes at three sites, test backends in three regions of two zones — as
// separate processes on loopback, and drives traffic through a short story
// (steady state, flash crowd, unhealthy region, global overload, recovery,
// then per-consumer quota, then the autoscaler on a deployment of its own),
// printing per phase where each site's traffic went and each region's
// utilization, in the global overload phase what the gfes shed and the
// admitted requests' p99 per site (the service sheds global overload), in
// the quota phase what a greedy and a polite consumer got, and in the
// autoscaler phase a timeline of the load's regions and the autoscaled
// region's instances; it exits 1 when the shedding's, the quota's or the
// autoscaler phase's expectations fail. With --keep-running it then leaves the deployment up and
// prints the admin URLs until Ctrl-C.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spillway-lb/spillway/internal/demo"
	"github.com/spillway-lb/spillway/internal/topology"
)

func main() {
	keep := flag.Bool("keep-running", false, "after the story, keep the deployment running until Ctrl-C and print its admin URLs")
	verbose := flag.Bool("v", false, "print every process's logs")
	net := flag.Int("net", 10, "second octet of the deployment's loopback addresses (127.NET.0.0/16)")
	settle := flag.Duration("settle", 5*time.Second, "time each phase runs before it is measured")
	measure := flag.Duration("measure", 6*time.Second, "time each phase is measured")
	phases := flag.String("phases", "", "run only these phases of the story, by number, comma-separated (\"1,4\": steady state and global overload, about 30 s); the quota and autoscaler phases (6, 7) run only when named. Default: all seven")
	flag.Parse()
	only, err := demo.ParsePhases(*phases, len(demo.Story())+2)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo: --phases:", err)
		os.Exit(2)
	}
	err = run(*keep, *verbose, *net, *settle, *measure, only)
	switch {
	case errors.Is(err, errInterrupted):
		fmt.Fprintln(os.Stderr, "\ndemo: interrupted; every process it started has been stopped")
		os.Exit(130)
	case err != nil:
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// errInterrupted is what run returns when Ctrl-C (or SIGTERM) ends the story
// early; the deferred Stop has stopped every process by then.
var errInterrupted = errors.New("interrupted")

// run runs the story's phases that only names (every phase when nil).
func run(keep, verbose bool, net int, settle, measure time.Duration, only map[int]bool) error {
	want := func(i int) bool { return only == nil || only[i] }
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	dir, err := os.MkdirTemp("", "spillway-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	var tee io.Writer
	if verbose {
		tee = os.Stderr
	}
	fmt.Printf("building and starting: 1 control plane, 3 gfes (nyc, lon, tokyo), backends in us-east, eu-west, asia-east (in %s)\n", dir)
	t0 := time.Now()
	spec := topology.Demo(net)
	spec.Shed, spec.ShedAdmit = true, demo.ShedAdmit // the product's answer to global overload: demo.CheckOverload
	spec.EditConfig = func(yaml string) string { return yaml + demo.QuotaConfig }
	c, err := topology.Start(ctx, spec, topology.Options{Dir: dir, Tee: tee})
	if err != nil {
		return err
	}
	defer c.Stop()
	fmt.Printf("up in %v; config %s\n", time.Since(t0).Round(time.Millisecond), c.ConfigPath)

	story := demo.Story()
	var checks []error
	for i, ph := range story {
		if !want(i + 1) {
			continue
		}
		// The plan is read half way through the measured window.
		plannedc := make(chan map[string]demo.RegionPlan, 1)
		go func() {
			time.Sleep(settle + measure/2)
			p, err := demo.Planned(ctx, c)
			if err != nil {
				fmt.Fprintln(os.Stderr, "demo: reading /status:", err)
			}
			plannedc <- p
		}()
		res, err := demo.RunPhase(ctx, c, ph, settle, measure)
		if ctx.Err() != nil {
			return errInterrupted
		}
		if err != nil {
			return fmt.Errorf("phase %q: %w", ph.Name, err)
		}
		planned := <-plannedc
		demo.Print(os.Stdout, i+1, len(story)+2, ph, res, planned, measure)
		if ph.Overload {
			checks = append(checks, demo.CheckOverload(res))
		}
	}
	if want(len(story) + 1) {
		qs, err := demo.RunQuota(ctx, c, measure)
		if ctx.Err() != nil {
			return errInterrupted
		}
		if err != nil {
			return fmt.Errorf("quota phase: %w", err)
		}
		demo.PrintQuota(os.Stdout, len(story)+1, len(story)+2, qs, measure)
		checks = append(checks, demo.CheckQuota(qs))
	}
	if !keep {
		c.Stop() // the autoscaler phase has a deployment of its own
	}
	if want(len(story) + 2) {
		ws, err := runAutoscale(ctx, dir, tee, net+1, c.Bins)
		if ctx.Err() != nil {
			return errInterrupted
		}
		if err != nil {
			return fmt.Errorf("autoscaler phase: %w", err)
		}
		demo.PrintAutoscale(os.Stdout, len(story)+2, len(story)+2, ws)
		checks = append(checks, demo.CheckAutoscale(ws))
	}
	if err := errors.Join(checks...); err != nil {
		return err
	}
	if keep {
		fmt.Println("\nthe deployment keeps running; Ctrl-C stops every process.")
		for _, g := range c.GFEs {
			fmt.Printf("  gfe %-12s proxy %s  status page %s/  (JSON %s/status, %s/metrics)\n", g.Name, g.URL, g.Admin, g.Admin, g.Admin)
		}
		for i, a := range c.CPAddrs {
			fmt.Printf("  control plane %d  gRPC %s  status page %s/\n", i+1, a, c.Spec.ControlPlaneAdmin(i))
		}
		<-ctx.Done()
	}
	fmt.Println("\ndone; stopping every process")
	return nil
}

// runAutoscale runs the autoscaler phase on a deployment of its own in
// 127.net.0.0/16 (demo.AutoscaleSpec), with the binaries already built.
func runAutoscale(ctx context.Context, dir string, tee io.Writer, net int, bins map[string]string) ([]demo.AutoscaleWindow, error) {
	fmt.Printf("\nstarting the autoscaler phase's deployment: nyc, us-east autoscaled (1 to 4 instances), eu-west as the buffer\n")
	dir = filepath.Join(dir, "autoscale")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	c, err := topology.Start(ctx, demo.AutoscaleSpec(net), topology.Options{Dir: dir, Tee: tee, Bins: bins})
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	return demo.RunAutoscale(ctx, c, 25*time.Second, 20*time.Second, 5*time.Second)
}

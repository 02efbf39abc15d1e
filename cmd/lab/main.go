// Command lab runs Spillway on several hosts on one machine — network
// namespaces joined by a bridge — with the real binaries, mutual TLS and
// gossip encryption (package lab). It needs root and iproute2.
//
//	lab up      clean what a crashed run left, build, start, print the URLs,
//	            and run until Ctrl-C (or SIGTERM), then tear everything down
//	lab down    kill the lab's processes and remove its namespaces and links
//	lab status  list the lab's namespaces and what each gfe reports
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spillway-lb/spillway/internal/lab"
)

func main() {
	fs := flag.NewFlagSet("lab", flag.ExitOnError)
	state := fs.String("state", "/tmp/spillway-lab", "directory of the lab's binaries, config, certificates, gossip key and pid file")
	prefix := fs.String("prefix", "spl-", "prefix of every namespace the lab makes")
	verbose := fs.Bool("v", false, "print every process's logs")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: lab [flags] up|down|status")
		fs.PrintDefaults()
	}
	fs.Parse(os.Args[1:])
	if fs.NArg() != 1 {
		fs.Usage()
		os.Exit(2)
	}
	cfg := lab.Config{Prefix: *prefix, StateDir: *state}
	if *verbose {
		cfg.Tee = os.Stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var err error
	switch fs.Arg(0) {
	case "up":
		err = up(ctx, cfg, os.Stdout)
	case "down":
		err = lab.Clean(context.Background(), cfg)
	case "status":
		err = lab.Status(ctx, cfg, os.Stdout)
	default:
		fs.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err) // errors of package lab start with "lab: "
		os.Exit(1)
	}
}

// up brings the lab up, prints it, waits for ctx and tears it down. It
// records itself as the lab's owner, so that `lab down` from another shell
// stops it as Ctrl-C would (it then tears down and exits 0).
func up(ctx context.Context, cfg lab.Config, out io.Writer) error {
	if err := lab.RequireIP(); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return err
	}
	fmt.Fprintf(out, "building and starting the lab in %s (Ctrl-C tears it down)…\n", cfg.StateDir)
	start := time.Now()
	l, err := lab.Up(ctx, cfg)
	if err != nil {
		return err
	}
	release, err := lab.RecordOwner(cfg.StateDir)
	if err != nil {
		l.Down(context.Background())
		return err
	}
	defer release()
	fmt.Fprintf(out, "up in %v\n", time.Since(start).Round(100*time.Millisecond))
	l.Describe(out)
	if err := l.Wait(ctx); err != nil {
		// Someone else (lab down, or another lab up that cleaned first)
		// may own the namespaces now: stop only this run's processes.
		l.Stop()
		return fmt.Errorf("%w; stopped this run's processes, left the namespaces to `lab down`", err)
	}
	fmt.Fprintln(out, "\ntearing down…")
	if err := l.Down(context.Background()); err != nil {
		return fmt.Errorf("tear down: %w", err)
	}
	fmt.Fprintln(out, "done: no namespace, link or process of the lab is left")
	return nil
}

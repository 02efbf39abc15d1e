// Command testbackend serves one or more emulated backend instances with
// real capacity limits and user-space network delay, for Spillway's tests,
// demo and benchmarks. Each instance speaks HTTP/1.1 + h2c + WebSocket
// (proto=http, the default), HTTP/2 over TLS (proto=h2), gRPC with the
// health and Echo services (proto=grpc) or raw TCP echo (proto=tcp), and
// reports its real load the ORCA way (an Endpoint-Load-Metrics header, gRPC
// per-call trailers and OpenRcaService; --load-reports=false turns them
// off); --admin adds a process admin listener that toggles health, reads
// stats and closes connections of any instance. See package internal/testbackend for
// the model and the flags; run with -h for usage, --version for the build.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/spillway-lb/spillway/internal/testbackend"
	"github.com/spillway-lb/spillway/internal/version"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run wires flags, logger, signals and the server; it returns the exit code:
// 0 after a clean shutdown (or -h), 2 for a bad command line, 1 otherwise.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := testbackend.ParseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if errors.Is(err, testbackend.ErrVersion) {
		fmt.Fprintln(stdout, version.Line("testbackend"))
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "testbackend: %v\n(run with -h for usage)\n", err)
		return 2
	}
	logger := zerolog.New(stderr).With().Timestamp().Logger()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	srv, err := testbackend.New(cfg, testbackend.Options{Logger: logger})
	if err != nil {
		logger.Error().Err(err).Msg("start failed")
		return 1
	}
	if err := srv.Run(ctx); err != nil {
		logger.Error().Err(err).Msg("serve failed")
		return 1
	}
	return 0
}

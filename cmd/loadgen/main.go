// Command loadgen is the open-loop HTTP load generator of internal/loadgen
// in a process of its own: it reads a loadgen.Config as JSON on stdin, sends
// the load, and writes the loadgen.Result as JSON on stdout. SIGINT or
// SIGTERM ends the schedule early; outstanding requests finish and the
// result is still written. The end-to-end tests and the real benchmark run
// it through loadgen.Exec. "loadgen --version" prints the build instead.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spillway-lb/spillway/internal/loadgen"
	"github.com/spillway-lb/spillway/internal/version"
)

func main() {
	if len(os.Args) == 2 && (os.Args[1] == "--version" || os.Args[1] == "-version") {
		fmt.Println(version.Line("loadgen"))
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := loadgen.Main(ctx, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

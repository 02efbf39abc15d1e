package testkit

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/proc"
)

// BuildTimeout bounds building the commands for a test binary. A cold build
// of the gfe, the control plane and the test backend takes about a minute
// on an idle two-core machine, and several times that while other test
// binaries compile and run beside it.
const BuildTimeout = 10 * time.Minute

// RunWithBinaries is a TestMain: it builds the commands names (directories
// under cmd/) once into a temporary directory, stores their paths by name
// in *bins, runs the package's tests, removes the directory and exits with
// the tests' code. A failed build exits 1 with the compiler's output.
func RunWithBinaries(m *testing.M, bins *map[string]string, names ...string) {
	os.Exit(runWithBinaries(m, bins, names))
}

func runWithBinaries(m *testing.M, bins *map[string]string, names []string) int {
	dir, err := os.MkdirTemp("", "spillway-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), BuildTimeout)
	built, err := proc.Build(ctx, dir, false, names...)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*bins = built
	return m.Run()
}

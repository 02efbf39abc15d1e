package testkit

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
// the tests' code. A failed build exits 1 with the compiler's output. The
// tests run under a lock shared by every package that uses it (see
// LockDeployments): one package of deployments at a time.
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
	unlock, err := LockDeployments()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer unlock()
	return m.Run()
}

// LockDeployments takes a lock that every test package running whole
// deployments of real processes holds while its tests run, so that go test
// (which runs packages in parallel) runs them one at a time: two of them at
// once starve each other's processes of CPU on a 2-core machine, and their
// timing (queueing, probes, convergence) stops meaning what the tests
// assert. It waits for the lock and returns its release.
func LockDeployments() (func(), error) {
	unlock, err := lockFile(filepath.Join(os.TempDir(), "spillway-deployment-tests.lock"))
	if err != nil {
		return nil, fmt.Errorf("deployment test lock: %w", err)
	}
	return unlock, nil
}

package gfetest

import (
	"os"
	"testing"

	"github.com/spillway-lb/spillway/internal/gfe/poller"
)

// MainWithPoller runs m's tests with the process's poller pinned on
// (poller.Shared), then exits: the fast path's tests use it as their
// TestMain. In the gfe the poller turns on only under load, which tests
// do not make, and the path it takes is the one to test.
func MainWithPoller(m *testing.M) {
	pl, err := poller.Shared()
	if err != nil {
		panic(err)
	}
	pl.SetMode(poller.On)
	os.Exit(m.Run())
}

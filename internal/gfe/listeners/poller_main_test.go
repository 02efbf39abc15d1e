package listeners

import (
	"os"
	"testing"

	"github.com/spillway-lb/spillway/internal/gfe/poller"
)

// TestMain runs the package's tests with the fast path's poller on: in
// the gfe it turns on only under load, which the tests do not make, and
// the path it takes is the one to test.
func TestMain(m *testing.M) {
	pl, err := poller.Shared()
	if err != nil {
		panic(err)
	}
	pl.SetMode(poller.On)
	os.Exit(m.Run())
}

package rtt

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves goroutines behind: a gRPC
// connection or an HTTP connection the prober did not close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

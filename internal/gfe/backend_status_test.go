package gfe

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway-lb/spillway/internal/gfe/status"
	"github.com/spillway-lb/spillway/lb/backend"
	"github.com/spillway-lb/spillway/lb/routing"
)

// TestBackendStatusSoftLimit: /status shows each instance's soft limit
// (lb/routing "Overflow at pick time") next to its in-flight count, and
// none (0, left out of the JSON) for an instance without one.
func TestBackendStatusSoftLimit(t *testing.T) {
	a, b := backend.New("10.0.0.1:80", 8), backend.New("10.0.0.2:80", 0)
	a.SetSoftLimit(4)
	if !a.TryAcquire() {
		t.Fatal("TryAcquire on an idle backend failed")
	}
	defer a.Release()
	got := backendStatus([]routing.Member{{B: b, Group: "g"}, {B: a, Group: "g"}}, time.Unix(0, 0))
	want := map[string][]status.BackendStatus{"g": {
		{Address: "10.0.0.1:80", InFlight: 1, MaxConcurrency: 8, SoftLimit: 4},
		{Address: "10.0.0.2:80"},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("backendStatus (-want +got):\n%s", diff)
	}
}

package controlplane

import (
	"testing"

	"github.com/spillway-lb/spillway/internal/autoscale/controller"
	"github.com/spillway-lb/spillway/internal/gossip"
)

// TestGFELoadACT: the gfes' loads on a group are summed, and their ACT
// limits averaged weighted by their requests in flight (plainly when none
// has any); gfes at the ceiling (no ACT) and other kinds do not count.
func TestGFELoadACT(t *testing.T) {
	gfe := func(inFlight, act float64) gossip.NodeState {
		return gossip.NodeState{Kind: gossip.KindGFE, Load: map[string]gossip.GroupLoad{"g": {InFlight: inFlight, Requests: 10, ACT: act}}}
	}
	for _, tt := range []struct {
		name   string
		states map[string]gossip.NodeState
		want   controller.Load
	}{
		{"weighted by in flight", map[string]gossip.NodeState{"a": gfe(3, 2), "b": gfe(1, 6), "c": gfe(4, 0)},
			controller.Load{InFlight: 8, Requests: 30, ACT: 3}},
		{"none in flight: plain mean", map[string]gossip.NodeState{"a": gfe(0, 2), "b": gfe(0, 4)},
			controller.Load{Requests: 20, ACT: 3}},
		{"no ACT reported", map[string]gossip.NodeState{"a": gfe(2, 0), "cp": {Kind: gossip.KindControlPlane}},
			controller.Load{InFlight: 2, Requests: 10}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := gfeLoad(&gossip.Snapshot{States: tt.states}, "g"); got != tt.want {
				t.Errorf("gfeLoad = %+v, want %+v", got, tt.want)
			}
		})
	}
}

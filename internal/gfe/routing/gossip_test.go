package routing_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway-lb/spillway/internal/gfe/routing"
	"github.com/spillway-lb/spillway/internal/gossip"
)

// TestGossipPeers: the table build reads the gossip states of gfes only.
func TestGossipPeers(t *testing.T) {
	snap := &gossip.Snapshot{States: map[string]gossip.NodeState{
		"gfe-lon": {Node: "gfe-lon", Kind: gossip.KindGFE, Site: "lon", Demand: map[string]float64{"web": 30}, RTT: map[string]float64{"eu-west": 5}},
		"cp":      {Node: "cp", Kind: gossip.KindControlPlane, Groups: []gossip.GroupState{{Group: "east", Region: "us-east"}}},
	}}
	want := []routing.Peer{{Node: "gfe-lon", Site: "lon", Demand: map[string]float64{"web": 30}, RTT: map[string]float64{"eu-west": 5}}}
	if d := cmp.Diff(want, routing.GossipPeers(snap)); d != "" {
		t.Errorf("peers mismatch (-want +got):\n%s", d)
	}
	if got := routing.GossipPeers(nil); len(got) != 0 {
		t.Errorf("GossipPeers(nil) = %v, want none", got)
	}
}

package routinginput_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/internal/routinginput"
	"github.com/spillway-lb/spillway/lb/routing"
)

// TestGossipPeers: the table build reads the gossip states of gfes, and
// the xDS clients' demand a control plane gossips as one peer per site
// without an RTT.
func TestGossipPeers(t *testing.T) {
	snap := &gossip.Snapshot{States: map[string]gossip.NodeState{
		"gfe-lon": {Node: "gfe-lon", Kind: gossip.KindGFE, Site: "lon", Demand: map[string]float64{"web": 30}, RTT: map[string]float64{"eu-west": 5}},
		"cp":      {Node: "cp", Kind: gossip.KindControlPlane, Groups: []gossip.GroupState{{Group: "east", Region: "us-east"}}, SiteDemand: map[string]map[string]float64{"lon": {"web": 12}}},
	}}
	want := []routing.Peer{
		{Node: "cp/xds/lon", Site: "lon", Demand: map[string]float64{"web": 12}},
		{Node: "gfe-lon", Site: "lon", Demand: map[string]float64{"web": 30}, RTT: map[string]float64{"eu-west": 5}},
	}
	got := routinginput.Peers(snap)
	slices.SortFunc(got, func(a, b routing.Peer) int { return strings.Compare(a.Node, b.Node) })
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("peers mismatch (-want +got):\n%s", d)
	}
	if got := routinginput.Peers(nil); len(got) != 0 {
		t.Errorf("Peers(nil) = %v, want none", got)
	}
}

package controlplane

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/lb/health"
)

// TestUnvouchedControlPlanesIgnored replays finding 1(a) of the first
// security review (SECURITY.md): a process joins the gossip cluster (same
// protocol, real memberlist on loopback) as twelve control-plane replicas
// that report every instance of every group unhealthy. The replica's
// --replicas list does not name them, so it keeps checking every group itself
// and serves every healthy instance healthy. Without the list the twelve took
// about 12/13 of the groups and marked their healthy instances unhealthy.
func TestUnvouchedControlPlanesIgnored(t *testing.T) {
	tp := manyGroups(20)
	clk := clock.NewFake(epoch)
	a := startDaemon(t, "cp-a", writeFile(t, t.TempDir(), "a.yaml", tp.yaml()), nil, clk, newWorld(), false)
	allHealthy := func(s *State) bool {
		if !s.Ready || len(s.Health) != 40 {
			return false
		}
		for _, ih := range s.Health {
			if ih.Status != health.StatusHealthy || ih.Source != "cp-a" {
				return false
			}
		}
		return true
	}
	waitState(t, a.d.State, "ready, every instance healthy by its own checks", allHealthy)

	// The attacker: twelve gossip members, each claiming to be a control
	// plane whose groups are all down.
	var lie gossip.NodeState
	lie.Kind = gossip.KindControlPlane
	for _, g := range tp.groups {
		lie.Groups = append(lie.Groups, gossip.GroupState{Group: g.name, Region: "r1", Instances: len(g.addrs), Healthy: 0})
	}
	for i := range 12 {
		startGossipMember(t, fmt.Sprintf("cp-evil-%02d", i), a.d.GossipAddr(), gossip.Options{}, lie)
	}
	waitUntil(t, "cp-a's gossip holds the twelve fake replicas' states", func() bool {
		return len(a.d.node.Snapshot().States) == 13
	})
	waitUntil(t, "cp-a's health manager saw them", func() bool { return metricValue(t, a.d.m.unvouched) == 12 })

	members, owned := a.d.Ownership()
	if !slices.Equal(members, []string{"cp-a"}) || len(owned) != 20 {
		t.Errorf("ownership: control planes %v, cp-a owns %d of 20 groups; want only cp-a, owning all", members, len(owned))
	}
	st, _ := a.d.State()
	if !allHealthy(st) {
		t.Errorf("the fake replicas changed the served health:\n%s", describeState(st))
	}
	// Checks keep running on cp-a's own schedule, and stay its own.
	clk.Advance(3 * time.Second)
	st, _ = a.d.State()
	if !allHealthy(st) {
		t.Errorf("after 3s of checks the served health changed:\n%s", describeState(st))
	}
}

// startGossipMember runs a gossip node named name (same protocol, real
// memberlist on loopback) that joins seed and publishes s, until the test
// ends.
func startGossipMember(t *testing.T, name, seed string, opts gossip.Options, s gossip.NodeState) *gossip.Node {
	t.Helper()
	cfg := gossip.DefaultConfig()
	cfg.Name = name
	cfg.BindPort = 0
	cfg.Seeds = []string{seed}
	cfg.UDPBufferSize = 8192
	cfg.LeaveTimeout = 200 * time.Millisecond
	// The members never probe anyone during the test, so that none leaves
	// a probe goroutine behind (goleak).
	cfg.ProbeInterval, cfg.ProbeTimeout = time.Hour, time.Second
	n, err := gossip.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Publish(s); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("gossip member %s: %v", name, err)
		}
	})
	return n
}

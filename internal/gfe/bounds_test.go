package gfe

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/internal/snapshot"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) count(substr string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Count(s.b.String(), substr)
}

// TestClampedGossipIsCountedAndLogged: a peer gossiping demand 1e9 and an RTT
// of a day is clamped every plan (the first security review, finding 1c);
// every clamp counts in spillway_gfe_gossip_clamped_total{field}, and the log
// gets one line a minute, not one per plan.
func TestClampedGossipIsCountedAndLogged(t *testing.T) {
	g := &fakeGossip{node: "gfe-nyc", states: map[string]gossip.NodeState{}}
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	logs := &syncBuffer{}
	cfg := DefaultConfig()
	cfg.Node, cfg.Site = "gfe-nyc", "nyc"
	e, err := New(cfg, Options{Gossip: g, Clock: clk, Logger: zerolog.New(logs), Rand: gfetest.Rand()})
	if err != nil {
		t.Fatal(err)
	}
	e.rtt.Set("us-east", 5)
	e.rtt.Set("eu-west", 80)
	if err := e.ApplySnapshot(snapshot.FromConfig("v1", gfetest.TwoRegionConfig(t, "waterfall", []string{"127.0.0.1:1"}, []string{"127.0.0.1:2"}, 100))); err != nil {
		t.Fatal(err)
	}
	g.set(gossip.NodeState{Node: "gfe-evil", Kind: gossip.KindGFE, Site: "evil",
		Demand: map[string]float64{"web": 1e9}, RTT: map[string]float64{"us-east": 86_400_000, "eu-west": 1}})
	const msg = "implausible gossiped value clamped"
	for range 10 { // 5 s of plans
		clk.Advance(500 * time.Millisecond)
		e.step(clk.Now())
	}
	if n := logs.count(msg); n != 1 {
		t.Errorf("%d log lines about clamped values in 5 s of plans, want 1", n)
	}
	for field, min := range map[string]float64{"rtt": 10, "demand": 10, "demand_rise": 1} {
		if got := counterValue(t, e.reg, "spillway_gfe_gossip_clamped_total", field); got < min {
			t.Errorf("spillway_gfe_gossip_clamped_total{field=%q} = %v, want at least %v", field, got, min)
		}
	}
	clk.Advance(time.Minute)
	e.step(clk.Now())
	if n := logs.count(msg); n != 2 {
		t.Errorf("%d log lines after another minute, want 2", n)
	}
	if n := logs.count(`"clamped_since_last_log":`); n != 2 || logs.count(`"clamped_since_last_log":0`) != 1 {
		t.Errorf("the second line does not say how many clamps were not logged:\n%s", logs.b.String())
	}
}

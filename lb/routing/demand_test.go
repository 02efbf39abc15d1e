package routing_test

import (
	"math"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/internal/snapshot"
)

// TestDemandUnits: a service's demand is in the unit its capacity counts.
// 100 requests/s, each lasting 50 ms, are a demand of 100 for a RATE
// service (requests/s) and of 5 for a CONNECTION service (requests in
// flight, like the tcp proxy's open connections), on the fake clock.
func TestDemandUnits(t *testing.T) {
	addrs := []string{"127.0.0.1:1", "127.0.0.1:2"}
	tests := []struct {
		name    string
		cfg     *config.Config
		service string
		want    float64
	}{
		{"RATE: requests per second", gfetest.TwoRegionConfig(t, "round_robin", addrs[:1], addrs[1:], 100), "web", 100},
		{"CONNECTION: requests in flight", gfetest.TCPConfig(t, "round_robin", gfetest.Instances(addrs...), nil, 0), "db", 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := gfetest.NewPlanner(gfetest.Rand()) // DemandSmoothing 1s
			p.Apply(snapshot.FromConfig("v1", tt.cfg))
			p.Step()
			m := p.Table().Services[tt.service].Meters()
			start := p.Clock.Now()
			var ends []time.Time // of the requests in flight, in order
			var got float64
			for i := range 1000 { // one request every 10 ms for 10 s
				now := start.Add(time.Duration(i) * 10 * time.Millisecond)
				p.Clock.AdvanceTo(now)
				for len(ends) > 0 && !ends[0].After(now) {
					m.Ended()
					ends = ends[1:]
				}
				m.Started()
				ends = append(ends, now.Add(50*time.Millisecond))
				if i%10 == 5 { // every 100 ms, between arrivals
					got = p.Builder.Demand(now)[tt.service]
				}
			}
			if math.Abs(got-tt.want) > 0.01*tt.want {
				t.Errorf("demand of %s = %v, want %v", tt.service, got, tt.want)
			}
		})
	}
}

// TestDemandStepShowsInOnePlanInterval: a step in this site's demand from
// 160 to 320 requests/s shows in full in the plan built one plan interval
// (250 ms) after it, spilling what us-east (200 req/s, planned at the
// default target utilization 0.95) cannot take; the
// step back down decays with the 1 s time constant (fast attack, slow
// decay), on the fake clock.
func TestDemandStepShowsInOnePlanInterval(t *testing.T) {
	east := []string{"127.0.0.1:1", "127.0.0.1:2"}
	p := gfetest.NewPlanner(gfetest.Rand()) // DemandSmoothing 1s, damping 1
	p.Apply(snapshot.FromConfig("v1", gfetest.TwoRegionConfig(t, "waterfall", east, []string{"127.0.0.1:3", "127.0.0.1:4", "127.0.0.1:5"}, 100)))
	p.Step()
	m := p.Table().Services["web"].Meters()
	const interval = 250 * time.Millisecond
	start := p.Clock.Now()
	// run sends rate requests/s evenly from `from` for d, building a table
	// every interval, and returns the plan's nyc demand and us-east share
	// at the end.
	run := func(from time.Time, rate float64, d time.Duration) (demand, east float64) {
		gap := time.Duration(float64(time.Second) / rate)
		next := from
		for at := from.Add(interval); !at.After(from.Add(d)); at = at.Add(interval) {
			for ; next.Before(at); next = next.Add(gap) {
				p.Clock.AdvanceTo(next)
				m.Started()
				m.Ended()
			}
			p.Clock.AdvanceTo(at)
			p.Step()
		}
		plan := p.Table().Services["web"].Plan()
		for _, s := range plan.Sites {
			if s.Name == "nyc" {
				demand = s.Demand
			}
		}
		for _, f := range plan.Row("nyc") {
			if f.Region == "us-east" {
				east += f.Share
			}
		}
		return demand, east
	}
	if d, e := run(start, 160, 3*time.Second); math.Abs(d-160) > 1e-6 || e != 1 {
		t.Fatalf("steady 160 req/s: plan demand %v, us-east share %v; want 160, 1", d, e)
	}
	step := start.Add(3 * time.Second)
	if d, e := run(step, 320, interval); math.Abs(d-320) > 1e-6 || math.Abs(e-190.0/320) > 1e-9 {
		t.Errorf("one interval after a step to 320 req/s: plan demand %v, us-east share %v; want 320, %v", d, e, 190.0/320)
	}
	run(step.Add(interval), 320, 3*time.Second)
	down := step.Add(interval + 3*time.Second)
	want := 160 + 160*math.Exp(-1)
	if d, _ := run(down, 160, time.Second); math.Abs(d-want) > 1e-6 {
		t.Errorf("1 s after a step down to 160 req/s: plan demand %v, want %v (1 s time constant)", d, want)
	}
}

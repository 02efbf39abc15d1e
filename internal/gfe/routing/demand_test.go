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

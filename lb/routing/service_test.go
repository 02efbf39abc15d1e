package routing_test

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/lb/routing"
)

// TestServicePicker: Service.Picker is the waterfall Picker that Pick uses,
// over this site's plan row and the pool's backends, and nil when Pick
// uses none (a baseline, or a site without a plan row yet).
func TestServicePicker(t *testing.T) {
	east, west := []string{"127.0.0.1:1", "127.0.0.1:2"}, []string{"127.0.0.1:3", "127.0.0.1:4"}
	tests := []struct {
		name   string
		policy string
		rtt    map[string]float64
		// wantGroups maps group → its backends in the Picker; nil = no Picker.
		wantGroups map[string][]string
	}{
		{"baseline", "round_robin", map[string]float64{"us-east": 5, "eu-west": 80}, nil},
		{"no plan row without an RTT", "waterfall", nil, nil},
		// 127.0.0.1:3 is unhealthy: the Picker holds the pool's backends.
		{"waterfall", "waterfall", map[string]float64{"us-east": 5, "eu-west": 80}, map[string][]string{"east": east}},
		{"min_rtt", "min_rtt", map[string]float64{"us-east": 90, "eu-west": 5}, map[string][]string{"west": {"127.0.0.1:4"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := routing.FromConfig("v1", gfetest.TwoRegionConfig(t, tt.policy, east, west, 100), "127.0.0.1:3")
			b := routing.NewBuilder(routing.Config{Node: "gfe-nyc", Site: "nyc", Damping: 1}, routing.Options{Now: time.Now, Rand: gfetest.Rand()})
			tbl, problems := b.Build(routing.Input{Fleet: cs, Self: routing.Peer{Node: "gfe-nyc", Site: "nyc", RTT: tt.rtt, Demand: map[string]float64{"web": 50}}, Now: time.Unix(1_000_000, 0)})
			if len(problems) > 0 {
				t.Fatalf("Build: %v", problems)
			}
			p := tbl.Services["web"].Picker()
			if tt.wantGroups == nil {
				if p != nil {
					t.Fatalf("Picker() = %v, want nil", p.Groups())
				}
				return
			}
			if p == nil {
				t.Fatal("Picker() = nil, want one")
			}
			got := map[string][]string{}
			for _, g := range p.Groups() {
				if g.Share == 0 {
					continue
				}
				for _, be := range g.Backends {
					got[g.Group] = append(got[g.Group], be.Addr())
				}
			}
			if diff := cmp.Diff(tt.wantGroups, got); diff != "" {
				t.Errorf("Picker groups (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDrainedGroupLeavesPool: a group with capacity_scaler 0 gets no new
// traffic from a baseline policy (the pool leaves it out) and, for hashing
// with scope nearest_region, does not count as the nearest region's.
func TestDrainedGroupLeavesPool(t *testing.T) {
	east, west := []string{"127.0.0.1:1", "127.0.0.1:2"}, []string{"127.0.0.1:3", "127.0.0.1:4"}
	for _, tt := range []struct {
		policy, scope string
		drain         string
		want          []string
	}{
		{"round_robin", "", "", []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:4"}},
		{"round_robin", "", "west", east},
		{"hash5", "global", "east", west},
		{"hash5", "nearest_region", "", east},
		{"hash5", "nearest_region", "east", west},
		{"least_request", "", "west", east},
	} {
		t.Run(tt.policy+"/"+tt.scope+"/drain "+tt.drain, func(t *testing.T) {
			c := *gfetest.TwoRegionConfig(t, tt.policy, east, west, 100)
			c.Services = slices.Clone(c.Services)
			c.Services[0].HashScope = config.HashScope(tt.scope)
			c.Services[0].Backends = slices.Clone(c.Services[0].Backends)
			for i := range c.Services[0].Backends {
				if c.Services[0].Backends[i].Group == tt.drain {
					c.Services[0].Backends[i].CapacityScaler = 0
				}
			}
			cfg, err := config.New(c)
			if err != nil {
				t.Fatal(err)
			}
			b := routing.NewBuilder(routing.Config{Node: "gfe-nyc", Site: "nyc", Damping: 1}, routing.Options{Now: time.Now, Rand: gfetest.Rand()})
			tbl, problems := b.Build(routing.Input{Fleet: routing.FromConfig("v1", cfg), Self: routing.Peer{Node: "gfe-nyc", Site: "nyc", RTT: map[string]float64{"us-east": 5, "eu-west": 80}}, Now: time.Unix(1_000_000, 0)})
			if len(problems) > 0 {
				t.Fatalf("Build: %v", problems)
			}
			var got []string
			for _, m := range tbl.Services["web"].Pool() {
				got = append(got, m.B.Addr())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("pool %v, want %v", got, tt.want)
			}
		})
	}
}

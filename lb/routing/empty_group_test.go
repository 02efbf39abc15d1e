package routing_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/routing"
)

// emptyEastConfig is us-east's group east, autoscaled and without
// instances (scaling from zero), and eu-west's group west with two
// instances of 100 req/s.
func emptyEastConfig(t *testing.T, policy string) *config.Config {
	t.Helper()
	y := fmt.Sprintf(`regions:
  - name: us-east
    zones:
      - name: us-east-b
        groups:
          - name: east
            instances: []
            autoscaling: {max_instances: 5}
  - name: eu-west
    zones:
      - name: eu-west-b
        groups:
          - name: west
            instances:
              - {address: 127.0.0.1:4}
              - {address: 127.0.0.1:5}
services:
  - name: web
    policy: %s
    backends:
      - {group: east, max_rate_per_instance: 100}
      - {group: west, max_rate_per_instance: 100}
routes:
  - {host: "*", path_prefix: /, service: web}
`, policy)
	c, err := config.Parse([]byte(y), "empty.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestEmptyAutoscaledGroup: an autoscaled group without instances has
// capacity 0 and no share of the plan; the site next to it sends every
// request to the other region, whatever the policy.
func TestEmptyAutoscaledGroup(t *testing.T) {
	tests := []struct {
		policy     string
		wantReason routing.Reason
	}{
		{"waterfall", routing.ReasonSpillCapacity},
		{"min_rtt", routing.ReasonSpillCapacity},
		{"round_robin", routing.ReasonPolicy},
		{"least_request", routing.ReasonPolicy},
		{"hash5", routing.ReasonPolicy},
	}
	for _, tt := range tests {
		t.Run(tt.policy, func(t *testing.T) {
			cs := routing.FromConfig("v1", emptyEastConfig(t, tt.policy))
			if err := routing.CheckPlannable(cs); err != nil {
				t.Fatalf("CheckPlannable: %v", err)
			}
			svc := buildNYC(t, cs).Services["web"]
			if config.Policy(tt.policy).IsPlanned() {
				for _, g := range svc.Capacity() {
					want := 0.0
					if g.Group == "west" {
						want = 200
					}
					if g.Declared != want || g.Healthy != map[string]int{"east": 0, "west": 2}[g.Group] {
						t.Errorf("Capacity() %s: declared %v, healthy %d; want %v", g.Group, g.Declared, g.Healthy, want)
					}
				}
				row := svc.Plan().Row("nyc")
				var east, west float64
				for _, f := range row {
					switch f.Group {
					case "east":
						east += f.Share
					case "west":
						west += f.Share
					}
				}
				if east != 0 || west != 1 {
					t.Errorf("nyc's row: east share %v, west %v; want 0, 1", east, west)
				}
			}
			for i := range 50 {
				pk, err := svc.Pick(uint64(i), routing.Flow{})
				if err != nil {
					t.Fatalf("pick %d: %v", i, err)
				}
				if pk.Group != "west" || pk.Reason != tt.wantReason {
					t.Errorf("pick %d: group %s reason %v, want west %v", i, pk.Group, pk.Reason, tt.wantReason)
				}
				pk.Done()
			}
		})
	}
}

// TestOnlyEmptyGroups: a service whose every group is autoscaled and empty
// (at zero) plans and builds, and its picks fail with ErrNoBackend: no
// backend yet, not busy (the gfe's pending queue waits for one).
func TestOnlyEmptyGroups(t *testing.T) {
	for _, policy := range []string{"waterfall", "min_rtt", "round_robin", "least_request", "hash2"} {
		t.Run(policy, func(t *testing.T) {
			y := fmt.Sprintf(`regions:
  - name: us-east
    zones:
      - name: us-east-b
        groups:
          - name: east
            autoscaling: {max_instances: 5}
services:
  - name: web
    policy: %s
    backends:
      - {group: east, max_rate_per_instance: 100}
routes:
  - {host: "*", path_prefix: /, service: web}
`, policy)
			c, err := config.Parse([]byte(y), "zero.yaml")
			if err != nil {
				t.Fatal(err)
			}
			cs := routing.FromConfig("v1", c)
			if err := routing.CheckPlannable(cs); err != nil {
				t.Fatalf("CheckPlannable: %v", err)
			}
			svc := buildNYC(t, cs).Services["web"]
			if svc.Healthy() != 0 {
				t.Errorf("Healthy() = %d, want 0", svc.Healthy())
			}
			if _, err := svc.Pick(1, routing.Flow{}); !errors.Is(err, routing.ErrNoBackend) {
				t.Errorf("Pick: %v, want ErrNoBackend", err)
			}
			if _, err := svc.NearestFree(nil, "", routing.ReasonPolicy); !errors.Is(err, routing.ErrNoBackend) {
				t.Errorf("NearestFree: %v, want ErrNoBackend", err)
			}
		})
	}
}

package routing_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/routing"
)

// checkConfig is a valid config: service web over groups a (region r1)
// and b (region r2), each with n instances at rate per instance.
func checkConfig(t *testing.T, policy string, n int, rate float64) *config.Config {
	t.Helper()
	inst := func(base int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "{address: \"10.0.%d.%d:80\"},", base+i>>8, i&0xff)
		}
		return strings.TrimSuffix(b.String(), ",")
	}
	y := fmt.Sprintf(`
regions:
  - {name: r1, zones: [{name: z1, groups: [{name: a, instances: [%s]}]}]}
  - {name: r2, zones: [{name: z2, groups: [{name: b, instances: [%s]}]}]}
services:
  - name: web
    policy: %s
    backends: [{group: a, max_rate_per_instance: %g}, {group: b, max_rate_per_instance: %g}]
routes: [{service: web}]
`, inst(0), inst(100), policy, rate, rate)
	c, err := config.Parse([]byte(y), "check.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCheckPlannable: the largest config validation allows plans; one
// whose capacities overflow, per group or only in their sum, is refused
// with the service's name.
func TestCheckPlannable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy string
		n      int
		rate   float64 // set past validation when above its bound
		want   string  // "" = plannable
	}{
		{"largest valid rate, waterfall", "waterfall", 1000, 1e9, ""},
		{"largest valid, min_rtt", "min_rtt", 10_000, 1e9, ""},
		{"group capacity +Inf", "waterfall", 2, 1e308, "service web: backends[0] (group a): capacity is +Inf"},
		{"only the sum is +Inf", "min_rtt", 1, 1e308, "service web: total capacity is +Inf"},
		{"baseline policy too", "round_robin", 1, 1e308, "service web: total capacity is +Inf"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := checkConfig(t, tc.policy, min(tc.n, 10_000), min(tc.rate, 1e9))
			c.Services[0].Backends[0].MaxRatePerInstance = tc.rate
			c.Services[0].Backends[1].MaxRatePerInstance = tc.rate
			err := routing.CheckPlannable(routing.FromConfig("v", c))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("CheckPlannable = %v, want nil", err)
			case tc.want != "" && (err == nil || err.Error() != tc.want):
				t.Fatalf("CheckPlannable = %v, want %q", err, tc.want)
			}
		})
	}
}

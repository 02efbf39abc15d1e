package policybench

import (
	"flag"
	"testing"

	"github.com/spillway-lb/spillway/sim"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/ and configs/scenarios/large.yaml")

// mustParse parses a scenario written inline in a test.
func mustParse(t *testing.T, yamlText string) *sim.Scenario {
	t.Helper()
	s, err := sim.ParseScenario([]byte(yamlText), "test.yaml")
	if err != nil {
		t.Fatalf("ParseScenario: %v", err)
	}
	return s
}

// tinyRegions is sim's timeline tests' two-region, one-group-each layout,
// in flow style; append a timeline.
const tinyRegions = "regions: [{name: us-east, groups: [{name: us-east-b, instances: 10, healthy: 10, rate_per_instance: 100}]},\n" +
	"  {name: eu-west, groups: [{name: eu-west-b, instances: 10, healthy: 10, rate_per_instance: 100}]}]\n" +
	"sites: [{name: nyc, demand_rps: 500, rtt_ms: {us-east: 5, eu-west: 80}}, {name: lon, demand_rps: 300, rtt_ms: {eu-west: 5, us-east: 80}}]\n"

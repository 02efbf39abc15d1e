package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/snapshot"
)

func TestControlState(t *testing.T) {
	c, err := config.Parse([]byte(`regions:
  - name: r1
    zones:
      - name: z1
        groups:
          - name: g1
            instances:
              - address: 127.0.0.1:1
              - address: 127.0.0.1:2
              - address: 127.0.0.1:3
services:
  - name: web
    backends:
      - {group: g1, max_rate_per_instance: 10}
routes:
  - {host: "*", path_prefix: /, service: web}
`), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cs := controlState(&snapshot.Snapshot{Version: "v7", Config: c, Health: map[string]snapshot.InstanceHealth{
		"127.0.0.1:1": {Address: "127.0.0.1:1", Healthy: true},
		"127.0.0.1:2": {Address: "127.0.0.1:2", Healthy: false},
		// 127.0.0.1:3 has no verdict yet: not healthy.
	}})
	want := map[string]bool{"127.0.0.1:2": true, "127.0.0.1:3": true}
	if d := cmp.Diff(want, cs.Unhealthy); d != "" || cs.Version != "v7" || cs.Config != c {
		t.Errorf("controlState: version %q, unhealthy diff (-want +got):\n%s", cs.Version, d)
	}
}

func TestParseFlagsEnvOverride(t *testing.T) {
	t.Setenv("SPILLWAY_GFE_SITE", "lon")
	t.Setenv("SPILLWAY_GFE_PLAN_INTERVAL", "2s")
	v, err := parseFlags([]string{"--node", "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := v.GetString("site"); got != "lon" {
		t.Errorf("site = %q, want lon from SPILLWAY_GFE_SITE", got)
	}
	if got := v.GetDuration("plan-interval").String(); got != "2s" {
		t.Errorf("plan-interval = %s, want 2s from the environment", got)
	}
	if got := v.GetString("node"); got != "n1" {
		t.Errorf("node = %q, want n1 from the flag", got)
	}
	if _, err := parseFlags([]string{"--bogus"}); err == nil {
		t.Error("parseFlags(--bogus) succeeded, want an error")
	}
}

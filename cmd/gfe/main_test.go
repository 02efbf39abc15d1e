package main

import (
	"testing"
)

func TestParseFlagsEnvOverride(t *testing.T) {
	t.Setenv("SPILLWAY_GFE_SITE", "lon")
	t.Setenv("SPILLWAY_GFE_PLAN_INTERVAL", "2s")
	v, _, err := parseFlags([]string{"--node", "n1"})
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
	if _, _, err := parseFlags([]string{"--bogus"}); err == nil {
		t.Error("parseFlags(--bogus) succeeded, want an error")
	}
}

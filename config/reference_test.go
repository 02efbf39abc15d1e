package config

import (
	"reflect"
	"testing"
	"time"
)

// TestSchema: Schema lists every key once in schema order, with the
// defaults Load fills in: a service's nested sections, a listener's by
// protocol, an optional section's once present.
func TestSchema(t *testing.T) {
	keys := Schema()
	byPath := map[string]SchemaKey{}
	for i, k := range keys {
		if _, dup := byPath[k.Path]; dup {
			t.Errorf("%s listed twice", k.Path)
		}
		byPath[k.Path] = k
		if i == 0 && k.Path != "regions" {
			t.Errorf("first key %s, want regions", k.Path)
		}
	}
	for _, tc := range []struct {
		path string
		want any
	}{
		{"services[].feedback.confirm_utilization", 0.8},
		{"services[].policy", PolicyWaterfall},
		{"services[].health_check.interval", 5 * time.Second},
		{"services[].backends[].capacity_scaler", 1.0},
		{"routes[].host", "*"},
		{"regions[].zones[].groups[].autoscaling.cold_start", 10 * time.Second},
		{"quota.charges[].cost", int64(1)},
		{"listeners[].protocol", ListenerProtocol("")},
	} {
		k, ok := byPath[tc.path]
		if !ok {
			t.Errorf("no key %s", tc.path)
			continue
		}
		if got := k.Default.Interface(); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: default %v, want %v", tc.path, got, tc.want)
		}
	}
	idle := byPath["listeners[].idle_timeout"]
	if got := idle.ByProtocol[ListenerTCP].Interface(); got != 10*time.Minute {
		t.Errorf("listeners[].idle_timeout: tcp default %v, want 10m", got)
	}
	if got := idle.ByProtocol[ListenerHTTPS].Interface(); got != 90*time.Second {
		t.Errorf("listeners[].idle_timeout: https default %v, want 90s", got)
	}
	if !byPath["regions[].zones[].groups[].autoscaling"].Optional {
		t.Error("autoscaling is not marked optional")
	}
	if k := byPath["services[].feedback"]; k.Owner != reflect.TypeFor[Service]() || k.Field != "Feedback" {
		t.Errorf("services[].feedback: owner %v field %s, want Service.Feedback", k.Owner, k.Field)
	}
}

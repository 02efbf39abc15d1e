package config

import (
	"math"
	"strings"
	"testing"
)

// TestEmptyAutoscaledGroups: an autoscaled group may have an empty or no
// instances list; it has capacity 0.
func TestEmptyAutoscaledGroups(t *testing.T) {
	c := loadT(t, "testdata/autoscaling_empty.good.yaml")
	tests := []struct {
		group           string
		wantInstances   int
		wantActive      int
		wantNilList     bool
		healthy         int
		wantCapacityRPS float64
	}{
		{group: "g1", wantInstances: 0, wantActive: 0, healthy: 0, wantCapacityRPS: 0},
		{group: "g2", wantInstances: 0, wantActive: 0, wantNilList: true, healthy: 0, wantCapacityRPS: 0},
		{group: "g3", wantInstances: 3, wantActive: 2, healthy: 2, wantCapacityRPS: 20},
		{group: "g4", wantInstances: 2, wantActive: 1, healthy: 1, wantCapacityRPS: 10},
	}
	for _, tt := range tests {
		t.Run(tt.group, func(t *testing.T) {
			ref, ok := c.Group(tt.group)
			if !ok {
				t.Fatalf("Group(%s) not found", tt.group)
			}
			if got := len(ref.Group.Instances); got != tt.wantInstances {
				t.Errorf("len(Instances) = %d, want %d", got, tt.wantInstances)
			}
			if got := ref.Group.Instances == nil; got != tt.wantNilList {
				t.Errorf("Instances == nil is %v, want %v", got, tt.wantNilList)
			}
			if got := ref.Group.ActiveInstances(); got != tt.wantActive {
				t.Errorf("ActiveInstances() = %d, want %d", got, tt.wantActive)
			}
			got, ok := c.GroupCapacity("web", tt.group, tt.healthy)
			if !ok || math.Abs(got-tt.wantCapacityRPS) > 1e-9 {
				t.Errorf("GroupCapacity(web, %s, %d) = %v, %v; want %v, true", tt.group, tt.healthy, got, ok, tt.wantCapacityRPS)
			}
		})
	}
}

// TestGroupCapacityDemoted: demoted instances count for nothing in a
// group's capacity, neither in healthy (the caller's count) nor in the
// group's size (which matters for a per-group limit, max_rate).
func TestGroupCapacityDemoted(t *testing.T) {
	const yaml = `
regions:
  - name: r1
    zones:
      - name: z1
        groups:
          - name: g
            instances:
              - {address: 127.0.0.1:9001}
              - {address: 127.0.0.1:9002}
              - {address: 127.0.0.1:9003, demoted: true}
services:
  - name: per-instance
    backends: [{group: g, max_rate_per_instance: 100}]
  - name: per-group
    backends: [{group: g, max_rate: 300}]
routes:
  - service: per-instance
`
	c, err := Parse([]byte(yaml), "demoted.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		service string
		healthy int // healthy active instances, as callers count them
		want    float64
	}{
		// 3 healthy, 1 of them demoted: the capacity of 2.
		{"per instance, both active healthy", "per-instance", 2, 200},
		{"per instance, one active healthy", "per-instance", 1, 100},
		{"per instance, healthy clamped to the active", "per-instance", 3, 200},
		// max_rate is spread over the 2 active instances, not 3.
		{"per group, both active healthy", "per-group", 2, 300},
		{"per group, one active healthy", "per-group", 1, 150},
		{"per group, none healthy", "per-group", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := c.GroupCapacity(tt.service, "g", tt.healthy)
			if !ok || math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("GroupCapacity(%s, g, %d) = %v, %v; want %v, true", tt.service, tt.healthy, got, ok, tt.want)
			}
		})
	}
}

// TestMarshalDemoted: demoted: true survives Marshal and Parse (the control
// plane serves Marshal's YAML to the gfes); false is left out; an empty
// autoscaled group stays empty.
func TestMarshalDemoted(t *testing.T) {
	c := loadT(t, "testdata/autoscaling_empty.good.yaml")
	out, err := Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(out), "demoted: true"); got != 2 {
		t.Errorf("Marshal wrote %d × demoted: true, want 2:\n%s", got, out)
	}
	if strings.Contains(string(out), "demoted: false") {
		t.Errorf("Marshal wrote demoted: false, want it left out:\n%s", out)
	}
	back, err := Parse(out, "m.yaml")
	if err != nil {
		t.Fatalf("Parse(Marshal): %v\n%s", err, out)
	}
	var demoted []string
	for _, g := range back.Groups() {
		for _, in := range g.Group.Instances {
			if in.Demoted {
				demoted = append(demoted, in.Address)
			}
		}
	}
	if want := "127.0.0.1:9033,127.0.0.1:9042"; strings.Join(demoted, ",") != want {
		t.Errorf("demoted after round trip = %v, want %s", demoted, want)
	}
	for _, name := range []string{"g1", "g2"} {
		if ref, ok := back.Group(name); !ok || len(ref.Group.Instances) != 0 {
			t.Errorf("group %s after round trip: found %v, %d instances; want found, 0", name, ok, len(ref.Group.Instances))
		}
	}
}

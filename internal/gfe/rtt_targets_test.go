package gfe

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/gfe/rtt"
	"github.com/spillway-lb/spillway/internal/snapshot"
)

// targetsConfig has four regions of one group each (a..d, instances
// 10.0.<n>.1 and .2) and services over them: tcp over a; grpc over b,
// then https over b and c (b's first service is grpc); group d is in no
// service.
const targetsConfig = `regions:
  - name: ra
    zones: [{name: ra-1, groups: [{name: a, instances: [{address: "10.0.1.1:80"}, {address: "10.0.1.2:80"}]}]}]
  - name: rb
    zones: [{name: rb-1, groups: [{name: b, instances: [{address: "10.0.2.1:80"}, {address: "10.0.2.2:80"}]}]}]
  - name: rc
    zones: [{name: rc-1, groups: [{name: c, instances: [{address: "10.0.3.1:80"}, {address: "10.0.3.2:80"}]}]}]
  - name: rd
    zones: [{name: rd-1, groups: [{name: d, instances: [{address: "10.0.4.1:80"}, {address: "10.0.4.2:80"}]}]}]
services:
  - name: raw
    health_check: {protocol: tcp}
    backends: [{group: a, max_rate_per_instance: 10}]
  - name: rpc
    health_check: {protocol: grpc}
    backends: [{group: b, max_rate_per_instance: 10}]
  - name: web
    health_check: {protocol: https, path: /healthz}
    backends: [{group: b, max_rate_per_instance: 10}, {group: c, max_rate_per_instance: 10}]
routes:
  - {host: "*", path_prefix: /, service: web}
`

func TestRTTRegionTargets(t *testing.T) {
	cfg, err := config.Parse([]byte(targetsConfig), "targets.yaml")
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	tests := []struct {
		name      string
		unhealthy []string
		want      map[string]rtt.Target
	}{
		{
			name: "all healthy: first instance, protocol of the group's first service",
			want: map[string]rtt.Target{
				"ra": {Addr: "10.0.1.1:80", Protocol: config.HealthTCP},
				"rb": {Addr: "10.0.2.1:80", Protocol: config.HealthGRPC},
				"rc": {Addr: "10.0.3.1:80", Protocol: config.HealthHTTPS},
				"rd": {Addr: "10.0.4.1:80", Protocol: config.HealthHTTP},
			},
		},
		{
			name:      "first healthy instance; a region with none keeps its first",
			unhealthy: []string{"10.0.1.1:80", "10.0.3.1:80", "10.0.3.2:80"},
			want: map[string]rtt.Target{
				"ra": {Addr: "10.0.1.2:80", Protocol: config.HealthTCP},
				"rb": {Addr: "10.0.2.1:80", Protocol: config.HealthGRPC},
				"rc": {Addr: "10.0.3.1:80", Protocol: config.HealthHTTPS},
				"rd": {Addr: "10.0.4.1:80", Protocol: config.HealthHTTP},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &Daemon{}
			d.control.Store(snapshot.FromConfig("v1", cfg, tt.unhealthy...))
			if diff := cmp.Diff(tt.want, d.regionTargets()); diff != "" {
				t.Errorf("regionTargets() mismatch (-want +got):\n%s", diff)
			}
		})
	}
	if got := (&Daemon{}).regionTargets(); got != nil {
		t.Errorf("regionTargets() before any snapshot = %v, want nil", got)
	}
}

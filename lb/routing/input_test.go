package routing_test

import (
	"slices"
	"testing"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/routing"
)

// TestHealthyActiveCount: HealthyCount counts every healthy instance,
// HealthyActiveCount only those not demoted.
func TestHealthyActiveCount(t *testing.T) {
	ins := []config.Instance{
		{Address: "10.0.0.1:80"},
		{Address: "10.0.0.2:80"},
		{Address: "10.0.0.3:80", Demoted: true},
		{Address: "10.0.0.4:80", Demoted: true},
	}
	tests := []struct {
		name       string
		unhealthy  []string
		instances  []config.Instance
		wantAll    int
		wantActive int
	}{
		{"all healthy", nil, ins, 4, 2},
		{"an active one down", []string{"10.0.0.1:80"}, ins, 3, 1},
		{"a demoted one down", []string{"10.0.0.4:80"}, ins, 3, 2},
		{"no instances", nil, nil, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &routing.Fleet{Health: map[string]routing.InstanceHealth{}}
			for _, in := range ins {
				s.Health[in.Address] = routing.InstanceHealth{Address: in.Address, Healthy: !slices.Contains(tt.unhealthy, in.Address)}
			}
			if got := s.HealthyCount(tt.instances); got != tt.wantAll {
				t.Errorf("HealthyCount = %d, want %d", got, tt.wantAll)
			}
			if got := s.HealthyActiveCount(tt.instances); got != tt.wantActive {
				t.Errorf("HealthyActiveCount = %d, want %d", got, tt.wantActive)
			}
		})
	}
}

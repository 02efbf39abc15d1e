package gossip

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func gfeState() NodeState {
	return NodeState{
		Node:    "gfe-1",
		Kind:    KindGFE,
		Site:    "paris",
		Version: 7,
		Demand:  map[string]float64{"web": 120.5},
		RTT:     map[string]float64{"eu-west": 4.2, "us-east": 81},
		Load:    map[string]GroupLoad{"eu-west-b": {InFlight: 3.5, Requests: 40, Pending: 2}},
	}
}

func cpState() NodeState {
	return NodeState{
		Node:    "cp-1",
		Kind:    KindControlPlane,
		Version: 3,
		Groups: []GroupState{
			{Group: "eu-west-b", Region: "eu-west", Zone: "b", Instances: 4, Healthy: 3,
				HealthyInstances: []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"}},
		},
		SiteDemand: map[string]map[string]float64{"paris": {"web": 40}},
		Leases:     map[string]uint64{"eu-west-b": 4},
		Autoscaled: map[string][]AutoscaledInstance{"eu-west-b": {{Address: "10.0.0.9:80"}, {Address: "10.0.0.8:80", Demoted: true}}},
	}
}

func TestValidateRemote(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*NodeState)
		base    func() NodeState
		wantErr []string // substrings, each naming a field path
	}{
		{name: "valid gfe", base: gfeState},
		{name: "valid control plane", base: cpState},
		{name: "missing node and version", base: gfeState, mutate: func(s *NodeState) { s.Node, s.Version = "", 0 },
			wantErr: []string{"state.node: required", "state.version: must be > 0"}},
		{name: "unknown kind", base: gfeState, mutate: func(s *NodeState) { s.Kind = "proxy" },
			wantErr: []string{`state.kind: must be "gfe" or "controlplane", got "proxy"`}},
		{name: "gfe without site", base: gfeState, mutate: func(s *NodeState) { s.Site = "" },
			wantErr: []string{`state.site: required for kind "gfe"`}},
		{name: "bad numbers", base: gfeState, mutate: func(s *NodeState) {
			s.Demand["web"] = math.NaN()
			s.RTT["eu-west"] = -1
		}, wantErr: []string{
			`state.demand["web"]: must be finite and >= 0, got NaN`,
			`state.rtt_ms["eu-west"]: must be finite and >= 0, got -1`,
		}},
		{name: "bad group", base: cpState, mutate: func(s *NodeState) {
			s.Groups[0] = GroupState{Instances: -1, Healthy: 2}
		}, wantErr: []string{
			"state.groups[0].group: required",
			"state.groups[0].region: required",
			"state.groups[0].instances: must be >= 0, got -1",
			"state.groups[0].healthy: must be in [0, instances=-1], got 2",
		}},
		{name: "healthy instances disagree with healthy", base: cpState, mutate: func(s *NodeState) {
			s.Groups[0].HealthyInstances = []string{"10.0.0.1:80", ""}
		}, wantErr: []string{
			"state.groups[0].healthy_instances: must list healthy=3 addresses, got 2",
			"state.groups[0].healthy_instances[1]: empty address",
		}},
		{name: "bad leases", base: cpState, mutate: func(s *NodeState) {
			s.Leases = map[string]uint64{"": 1, "eu-west-b": 0}
		}, wantErr: []string{
			"state.leases: empty lease name",
			`state.leases["eu-west-b"]: term must be > 0`,
		}},
		{name: "leases of a gfe", base: gfeState, mutate: func(s *NodeState) {
			s.Leases = map[string]uint64{"eu-west-b": 1}
		}, wantErr: []string{`state.leases: only for kind "controlplane", got kind "gfe"`}},
		{name: "healthy instances left out", base: cpState, mutate: func(s *NodeState) {
			s.Groups[0].HealthyInstances = nil
		}},
		{name: "bad site demand", base: cpState, mutate: func(s *NodeState) {
			s.SiteDemand = map[string]map[string]float64{"": {"web": 1}, "nyc": {"web": -2}}
		}, wantErr: []string{
			"state.site_demand: empty site name",
			`state.site_demand["nyc"]["web"]: must be finite and >= 0, got -2`,
		}},
		{name: "bad autoscaled", base: cpState, mutate: func(s *NodeState) {
			s.Autoscaled = map[string][]AutoscaledInstance{"": {{Address: "a:1"}}, "g": {{Address: ""}}}
		}, wantErr: []string{
			"state.autoscaled: empty group name",
			`state.autoscaled["g"][0].address: required`,
		}},
		{name: "autoscaled of a gfe", base: gfeState, mutate: func(s *NodeState) {
			s.Autoscaled = map[string][]AutoscaledInstance{"g": {{Address: "a:1"}}}
		}, wantErr: []string{`state.autoscaled: only for kind "controlplane", got kind "gfe"`}},
		{name: "bad load", base: gfeState, mutate: func(s *NodeState) {
			s.Load = map[string]GroupLoad{"": {}, "eu-west-b": {InFlight: math.NaN(), Requests: -1, Pending: math.Inf(1)}}
		}, wantErr: []string{
			"state.load: empty group name",
			`state.load["eu-west-b"].in_flight: must be finite and >= 0, got NaN`,
			`state.load["eu-west-b"].rps: must be finite and >= 0, got -1`,
			`state.load["eu-west-b"].pending: must be finite and >= 0, got +Inf`,
		}},
		{name: "load of a control plane", base: cpState, mutate: func(s *NodeState) {
			s.Load = map[string]GroupLoad{"eu-west-b": {Requests: 1}}
		}, wantErr: []string{`state.load: only for kind "gfe", got kind "controlplane"`}},
		{name: "zero load is valid", base: gfeState, mutate: func(s *NodeState) {
			s.Load = map[string]GroupLoad{"eu-west-b": {}}
		}},
		{name: "site demand of a gfe", base: gfeState, mutate: func(s *NodeState) {
			s.SiteDemand = map[string]map[string]float64{"nyc": {"web": 1}}
		}, wantErr: []string{`state.site_demand: only for kind "controlplane", got kind "gfe"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.base()
			if tt.mutate != nil {
				tt.mutate(&s)
			}
			err := s.validateRemote()
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("validateRemote() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidState) {
				t.Fatalf("validateRemote() = %v, want an error wrapping ErrInvalidState", err)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("validateRemote() = %q, want it to contain %q", err, want)
				}
			}
		})
	}
}

func TestCloneSharesNothing(t *testing.T) {
	for _, orig := range []NodeState{gfeState(), cpState(), {Node: "empty"}} {
		c := orig.Clone()
		if diff := cmp.Diff(orig, c); diff != "" {
			t.Fatalf("Clone() differs (-orig +clone):\n%s", diff)
		}
		want := orig.Clone()
		// Scribble over every map and slice of the clone.
		for k := range c.Demand {
			c.Demand[k] = -1
		}
		for k := range c.RTT {
			c.RTT[k] = -1
		}
		for _, m := range c.SiteDemand {
			for k := range m {
				m[k] = -1
			}
		}
		for k := range c.Leases {
			c.Leases[k] = 99
		}
		for _, ins := range c.Autoscaled {
			for i := range ins {
				ins[i].Address = "scribbled"
			}
		}
		for k := range c.Load {
			c.Load[k] = GroupLoad{InFlight: -1}
		}
		for i := range c.Groups {
			c.Groups[i].Healthy = -1
			for j := range c.Groups[i].HealthyInstances {
				c.Groups[i].HealthyInstances[j] = "scribbled"
			}
		}
		if diff := cmp.Diff(want, orig); diff != "" {
			t.Errorf("changing the clone changed the original (-want +got):\n%s", diff)
		}
	}
}

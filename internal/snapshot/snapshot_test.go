package snapshot

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/routing"
	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

func TestFromProto(t *testing.T) {
	since := epoch.Add(-time.Hour)
	tests := []struct {
		name    string
		mutate  func(*pb.Snapshot)
		want    map[string]routing.InstanceHealth
		wantErr []string
	}{
		{
			name: "valid",
			mutate: func(m *pb.Snapshot) {
				m.Health[1].Since = timestamppb.New(since)
			},
			want: map[string]routing.InstanceHealth{
				"127.0.0.1:9001": {Group: "g1", Address: "127.0.0.1:9001", Healthy: true},
				"127.0.0.1:9002": {Group: "g1", Address: "127.0.0.1:9002", Detail: "refused", Since: since},
			},
		},
		{
			name:   "an instance left out is not listed",
			mutate: func(m *pb.Snapshot) { m.Health = m.Health[:1] },
			want: map[string]routing.InstanceHealth{
				"127.0.0.1:9001": {Group: "g1", Address: "127.0.0.1:9001", Healthy: true},
			},
		},
		{
			name: "every problem at once",
			mutate: func(m *pb.Snapshot) {
				m.Version = ""
				m.Health = append(m.Health,
					&pb.InstanceHealth{},
					&pb.InstanceHealth{Group: "g9", Address: "127.0.0.1:9001"},
					&pb.InstanceHealth{Group: "g1", Address: "127.0.0.1:9001"},
				)
			},
			wantErr: []string{
				"snapshot.version: required",
				"snapshot.health[2].group: required",
				"snapshot.health[2].address: required",
				`snapshot.health[3].address: duplicate instance "127.0.0.1:9001"`,
				`snapshot.health[4].address: duplicate instance "127.0.0.1:9001"`,
			},
		},
		{
			name:   "unknown group",
			mutate: func(m *pb.Snapshot) { m.Health[0].Group = "g9" },
			wantErr: []string{
				`snapshot.health[0].group: unknown instance group "g9"`,
			},
		},
		{
			name: "config problems keep their file and path",
			mutate: func(m *pb.Snapshot) {
				m.ConfigYaml = []byte(strings.Replace(string(m.ConfigYaml), "max_rate_per_instance: 100", "max_rate_per_instance: -1", 1))
			},
			wantErr: []string{"snapshot.config_yaml: cp.yaml: services[0].backends[0].max_rate_per_instance"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := push("v1", "1", 100, false)
			m.GeneratedAt = timestamppb.New(epoch)
			if tt.mutate != nil {
				tt.mutate(m)
			}
			got, err := FromProto(m)
			if len(tt.wantErr) > 0 {
				if got != nil || err == nil {
					t.Fatalf("FromProto() = %v, %v; want an error", got, err)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("FromProto() error = %v, want it to contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("FromProto() = %v", err)
			}
			if got.Version != "v1" || got.Source != "cp.yaml" || got.ControlPlane != "cp-test" || !got.GeneratedAt.Equal(epoch) {
				t.Errorf("FromProto() = %+v, want v1 from cp-test built at epoch", got)
			}
			if diff := cmp.Diff(tt.want, got.Health, cmpopts.EquateApproxTime(0)); diff != "" {
				t.Errorf("Health mismatch (-want +got):\n%s", diff)
			}
		})
	}
	_, err := FromProto(&pb.Snapshot{Version: "v", ConfigYaml: []byte("regions: [")})
	if !errors.Is(err, config.ErrInvalid) || len(config.FieldErrors(err)) != 1 {
		t.Errorf("FromProto(bad yaml) = %v, want one config.FieldError matching ErrInvalid", err)
	}
}

// FuzzFromProto checks that FromProto never panics and that what it accepts
// is consistent: every listed instance belongs to the configuration.
func FuzzFromProto(f *testing.F) {
	f.Add("v1", push("v", "1", 100, true).ConfigYaml, "g1", "127.0.0.1:9001", true)
	f.Add("", []byte("regions: ["), "", "", false)
	f.Add("v2", push("v", "1", 1, true).ConfigYaml, "g9", "127.0.0.1:9002", false)
	f.Fuzz(func(t *testing.T, version string, yaml []byte, group, addr string, healthy bool) {
		m := &pb.Snapshot{Version: version, Nonce: "1", ConfigYaml: yaml,
			Health: []*pb.InstanceHealth{{Group: group, Address: addr, Healthy: healthy}}}
		s, err := FromProto(m)
		if err != nil {
			return
		}
		for a, ih := range s.Health {
			ref, ok := s.Config.Group(ih.Group)
			if !ok || !hasInstance(ref.Group, a) {
				t.Fatalf("accepted %s in %s, which the config does not have", a, ih.Group)
			}
		}
	})
}

// TestFromProtoToleratesFieldsOfANewerRelease: a control plane one release
// ahead sends fields this gfe does not know; the snapshot is accepted (so
// the gfe ACKs it and follows its health) with those fields named, where
// an operator's file with the same fields is refused.
func TestFromProtoToleratesFieldsOfANewerRelease(t *testing.T) {
	m := push("v2", "1", 100, false)
	m.ConfigYaml = []byte(strings.Replace(string(m.ConfigYaml), "        max_rate_per_instance: 100\n",
		"        max_rate_per_instance: 100\n        warmup: 30s\n", 1) + "tracing: {sample: 0.5}\n")
	got, err := FromProto(m)
	if err != nil {
		t.Fatalf("FromProto(fields of a newer release) = %v, want it accepted", err)
	}
	if want := []string{"services[0].backends[0].warmup", "tracing"}; !slices.Equal(got.UnknownFields, want) {
		t.Errorf("UnknownFields = %q, want %q", got.UnknownFields, want)
	}
	if got.Healthy("127.0.0.1:9002") || !got.Healthy("127.0.0.1:9001") || got.Config.Services[0].Backends[0].MaxRatePerInstance != 100 {
		t.Errorf("FromProto applied %+v, want 9001 healthy, 9002 not, rate 100", got.Health)
	}
	if _, err := config.Parse(m.ConfigYaml, "operator.yaml"); err == nil {
		t.Error("config.Parse accepted the unknown fields; an operator's file must stay strict")
	}
	if plain, err := FromProto(push("v1", "1", 100, false)); err != nil || plain.UnknownFields != nil {
		t.Errorf("FromProto(known fields) = %v, %v; want no unknown field", plain.UnknownFields, err)
	}
}

func TestFromConfig(t *testing.T) {
	full, err := FromProto(push("v1", "1", 100, false))
	if err != nil {
		t.Fatal(err)
	}
	s := FromConfig("file:x.yaml", full.Config)
	if s.Version != "file:x.yaml" || len(s.Health) != 2 || !s.Healthy("127.0.0.1:9001") || !s.Healthy("127.0.0.1:9002") || s.Healthy("127.0.0.1:1") {
		t.Errorf("FromConfig = %+v, want both instances of g1 healthy and nothing else", s)
	}
	if s := FromConfig("v", full.Config, "127.0.0.1:9002"); !s.Healthy("127.0.0.1:9001") || s.Healthy("127.0.0.1:9002") {
		t.Errorf("FromConfig(9002 unhealthy): Healthy(9001, 9002) = %v, %v; want true, false", s.Healthy("127.0.0.1:9001"), s.Healthy("127.0.0.1:9002"))
	}
	if full.Healthy("127.0.0.1:9002") || !full.Healthy("127.0.0.1:9001") {
		t.Errorf("pushed snapshot: Healthy(9001, 9002) = %v, %v; want true, false", full.Healthy("127.0.0.1:9001"), full.Healthy("127.0.0.1:9002"))
	}
}

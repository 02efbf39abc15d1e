package snapshot

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/spillway-lb/spillway/config"
	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

// Snapshot is one validated control-plane snapshot in domain terms: the
// parsed configuration and the health of its instances. A Snapshot is
// immutable once made (FromProto, AllHealthy): the cpclient hands the same
// pointer to its Apply callback and Current, the gfe plans from it, and
// nobody modifies it (or the Config it holds, which is read-only as every
// *config.Config).
type Snapshot struct {
	// Version identifies the content; equal versions mean equal content,
	// whichever control plane sent them.
	Version string
	// Config is the operator configuration, parsed with
	// config.ParseSnapshot.
	Config *config.Config
	// UnknownFields are the paths of the fields of the pushed
	// configuration that this build does not know (a control plane of a
	// newer release): left out of Config, which holds everything else.
	// Nil when there are none, and for FromConfig.
	UnknownFields []string
	// Health maps instance address (unique across the configuration) to its
	// health. An instance of Config missing from Health is not healthy (the
	// control plane has not checked it yet).
	Health map[string]InstanceHealth
	// Source is the configuration's name in error messages (the control
	// plane's config file).
	Source string
	// ControlPlane is the id of the replica that built the snapshot.
	ControlPlane string
	// GeneratedAt is when the replica built it, for staleness only; never
	// use it to order snapshots.
	GeneratedAt time.Time
}

// InstanceHealth is the control plane's verdict on one instance.
type InstanceHealth struct {
	// Group and Address identify the instance, as in Config.
	Group   string
	Address string
	// Healthy is true when the instance passes health checks and may take
	// traffic.
	Healthy bool
	// Since is when the instance entered its current state; zero if unknown.
	Since time.Time
	// Detail says why it is not healthy, for operators; empty when healthy.
	Detail string
}

// Healthy reports whether the instance at addr may take traffic: false for
// an address the snapshot does not list. This is the only question anyone
// downstream asks about health; the control plane's third state (unknown,
// no verdict yet) reaches a gfe as not healthy.
func (s *Snapshot) Healthy(addr string) bool { return s.Health[addr].Healthy }

// HealthyCount returns how many of instances are Healthy.
func (s *Snapshot) HealthyCount(instances []config.Instance) int {
	n := 0
	for _, in := range instances {
		if s.Healthy(in.Address) {
			n++
		}
	}
	return n
}

// HealthyActiveCount returns how many of instances are Healthy and not
// Demoted: the count a group's capacity is planned from
// (config.GroupCapacity, config.Backend.Capacity with
// config.Group.ActiveInstances as the group's size).
func (s *Snapshot) HealthyActiveCount(instances []config.Instance) int {
	n := 0
	for _, in := range instances {
		if !in.Demoted && s.Healthy(in.Address) {
			n++
		}
	}
	return n
}

// FromConfig returns a Snapshot of cfg under version in which every
// instance is healthy but those at the addresses in unhealthy: what a gfe
// serves from a config file of its own, with no control plane to check
// health (and, in tests, any health one wants).
func FromConfig(version string, cfg *config.Config, unhealthy ...string) *Snapshot {
	s := &Snapshot{Version: version, Config: cfg, Source: cfg.Source(), Health: map[string]InstanceHealth{}}
	for _, g := range cfg.Groups() {
		for _, in := range g.Group.Instances {
			s.Health[in.Address] = InstanceHealth{Group: g.Group.Name, Address: in.Address, Healthy: !slices.Contains(unhealthy, in.Address)}
		}
	}
	return s
}

// FromProto validates a pushed snapshot and converts it. Every problem is
// returned, joined, each naming its field path ("snapshot.health[2].group:
// ..."); configuration problems keep their *config.FieldError (naming the
// config source and field path) inside, so config.FieldErrors and
// errors.Is(err, config.ErrInvalid) work on the result. A configuration
// field this build does not know is not a problem (tolerant on the wire):
// it is left out and named in UnknownFields. The nonce is not looked at:
// it belongs to the stream, not the content.
func FromProto(m *pb.Snapshot) (*Snapshot, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if m.GetVersion() == "" {
		bad("snapshot.version: required")
	}
	source := m.GetConfigSource()
	if source == "" {
		source = "snapshot"
	}
	cfg, unknown, err := config.ParseSnapshot(m.GetConfigYaml(), source)
	if err != nil {
		errs = append(errs, fmt.Errorf("snapshot.config_yaml: %w", err))
	}
	s := &Snapshot{
		Version:       m.GetVersion(),
		Config:        cfg,
		UnknownFields: unknown,
		Health:        make(map[string]InstanceHealth, len(m.GetHealth())),
		Source:        m.GetConfigSource(),
		ControlPlane:  m.GetControlPlaneId(),
	}
	if ts := m.GetGeneratedAt(); ts != nil {
		s.GeneratedAt = ts.AsTime()
	}
	for i, h := range m.GetHealth() {
		path := fmt.Sprintf("snapshot.health[%d]", i)
		if h.GetGroup() == "" {
			bad("%s.group: required", path)
		}
		if h.GetAddress() == "" {
			bad("%s.address: required", path)
		}
		if h.GetGroup() == "" || h.GetAddress() == "" {
			continue
		}
		if _, dup := s.Health[h.GetAddress()]; dup {
			bad("%s.address: duplicate instance %q", path, h.GetAddress())
			continue
		}
		if cfg != nil {
			ref, ok := cfg.Group(h.GetGroup())
			if !ok {
				bad("%s.group: unknown instance group %q", path, h.GetGroup())
				continue
			}
			if !hasInstance(ref.Group, h.GetAddress()) {
				bad("%s.address: %q is not an instance of group %q", path, h.GetAddress(), h.GetGroup())
				continue
			}
		}
		ih := InstanceHealth{Group: h.GetGroup(), Address: h.GetAddress(), Healthy: h.GetHealthy(), Detail: h.GetDetail()}
		if ts := h.GetSince(); ts != nil {
			ih.Since = ts.AsTime()
		}
		s.Health[ih.Address] = ih
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

func hasInstance(g *config.Group, addr string) bool {
	for _, in := range g.Instances {
		if in.Address == addr {
			return true
		}
	}
	return false
}

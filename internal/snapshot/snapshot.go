package snapshot

import (
	"errors"
	"fmt"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/routing"
	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

// Snapshot is one validated control-plane snapshot in domain terms: the
// routing world it carries (routing.Fleet: version, parsed configuration
// and the health of its instances) and where it came from. A Snapshot is
// immutable once made (FromProto, FromConfig): the cpclient hands the same
// pointer to its Apply callback and Current, the gfe plans from its Fleet,
// and nobody modifies it (or the Config it holds, which is read-only as
// every *config.Config).
type Snapshot struct {
	// Fleet is what the routing build reads: Version (equal versions mean
	// equal content, whichever control plane sent them), Config (parsed
	// with config.ParseSnapshot) and Health (by instance address; an
	// instance missing from it is not healthy: the control plane has not
	// checked it yet), with its Healthy, HealthyCount and
	// HealthyActiveCount.
	routing.Fleet
	// UnknownFields are the paths of the fields of the pushed
	// configuration that this build does not know (a control plane of a
	// newer release): left out of Config, which holds everything else.
	// Nil when there are none, and for FromConfig.
	UnknownFields []string
	// Source is the configuration's name in error messages (the control
	// plane's config file).
	Source string
	// ControlPlane is the id of the replica that built the snapshot.
	ControlPlane string
	// GeneratedAt is when the replica built it, for staleness only; never
	// use it to order snapshots.
	GeneratedAt time.Time
}

// FromConfig returns a Snapshot of cfg under version in which every
// instance is healthy but those at the addresses in unhealthy
// (routing.FromConfig): what a gfe serves from a config file of its own,
// with no control plane to check health (and, in tests, any health one
// wants).
func FromConfig(version string, cfg *config.Config, unhealthy ...string) *Snapshot {
	return &Snapshot{Fleet: *routing.FromConfig(version, cfg, unhealthy...), Source: cfg.Source()}
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
		Fleet: routing.Fleet{
			Version: m.GetVersion(),
			Config:  cfg,
			Health:  make(map[string]routing.InstanceHealth, len(m.GetHealth())),
		},
		UnknownFields: unknown,
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
		ih := routing.InstanceHealth{Group: h.GetGroup(), Address: h.GetAddress(), Healthy: h.GetHealthy(), Detail: h.GetDetail()}
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

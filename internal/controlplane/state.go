package controlplane

import (
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/spillway-lb/spillway/lb/health"
	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

// InstanceHealth is the served verdict on one backend instance: this
// replica's own check for the groups it owns, another replica's gossip for
// the others.
type InstanceHealth struct {
	// Group and Address identify the instance, as in the configuration.
	Group   string `json:"group"`
	Address string `json:"address"`
	// Status is healthy, unhealthy, or unknown (no verdict yet: not
	// checked by anyone so far). Only healthy takes traffic.
	Status health.Status `json:"status"`
	// Since is when the served status last changed; zero if it has held
	// since this replica first learnt it.
	Since time.Time `json:"since"`
	// Detail says why the instance is not healthy (the last failed probe,
	// or which replica reported it); empty when healthy.
	Detail string `json:"detail,omitempty"`
	// Source is the node name of the replica whose check decided Status
	// ("" for unknown).
	Source string `json:"source,omitempty"`
}

// Healthy reports whether the instance takes traffic.
func (h InstanceHealth) Healthy() bool { return h.Status == health.StatusHealthy }

// State is everything the control plane serves at one moment: the
// configuration and the health of every instance in it, under one version.
// A State is immutable once stored; readers may keep it.
type State struct {
	// Config is the configuration served.
	Config *LoadedConfig
	// Health has one entry per instance of every group in Config, sorted by
	// group then address (groups and instances in file order would differ
	// between replicas after a reorder; sorting keeps versions equal).
	Health []InstanceHealth
	// Version identifies the content: "<config hash>-<health hash>", the
	// second part hashing each instance's (group, address, healthy). Two
	// replicas serving the same configuration and health have the same
	// Version, so a gfe that reconnects elsewhere is not pushed again.
	Version string
	// Ready is false until the startup health view has settled (every
	// instance has a verdict, or its first probe is certainly over); no
	// snapshot is pushed and /readyz fails before that.
	Ready bool
	// At is when this State was built.
	At time.Time

	// pbHealth is Health as proto messages, built once and shared
	// (read-only) by every push of this State.
	pbHealth []*pb.InstanceHealth
	// healthHash is Version's second part.
	healthHash string
}

// newState builds a State; it computes Version and the proto form.
func newState(cfg *LoadedConfig, hs []InstanceHealth, ready bool, at time.Time) *State {
	h := sha256.New()
	pbh := make([]*pb.InstanceHealth, len(hs))
	for i, ih := range hs {
		flag := "0"
		if ih.Healthy() {
			flag = "1"
		}
		h.Write([]byte(ih.Group + "\x00" + ih.Address + "\x00" + flag + "\n"))
		m := &pb.InstanceHealth{Group: ih.Group, Address: ih.Address, Healthy: ih.Healthy(), Detail: ih.Detail}
		if !ih.Since.IsZero() {
			m.Since = timestamppb.New(ih.Since)
		}
		pbh[i] = m
	}
	hh := hex.EncodeToString(h.Sum(nil))[:8]
	return &State{
		Config:     cfg,
		Health:     hs,
		Version:    cfg.Hash + "-" + hh,
		Ready:      ready,
		At:         at,
		pbHealth:   pbh,
		healthHash: hh,
	}
}

// versionAs is the Version of s as a gfe sent the configuration's form f
// sees it: Version itself for the canonical form, else the same health
// part after f's own hash, so that two replicas sending the same form send
// the same version and a form's version changes with health as Version
// does.
func (s *State) versionAs(f *wireForm) string {
	if f.hash == s.Config.Hash {
		return s.Version
	}
	return f.hash + "-" + s.healthHash
}

// snapshot returns the proto Snapshot of s with nonce, for one push to a
// gfe sent the configuration's form f (canonicalForm for one that reads
// every field). It carries the configuration's secrets only when
// withSecrets is true (the stream is authenticated by mutual TLS);
// otherwise they are redacted. It shares s's and f's read-only bytes and
// health messages.
func (s *State) snapshot(f *wireForm, nonce, node string, withSecrets bool) *pb.Snapshot {
	yaml := f.redacted
	if withSecrets {
		yaml = f.yaml
	}
	return &pb.Snapshot{
		Version:        s.versionAs(f),
		Nonce:          nonce,
		ConfigYaml:     yaml,
		ConfigSource:   s.Config.Source,
		Health:         s.pbHealth,
		GeneratedAt:    timestamppb.New(s.At),
		ControlPlaneId: node,
	}
}

// hub holds the current State and wakes everyone waiting for the next one.
// One goroutine (the health manager's loop) stores; any number read. Safe
// for concurrent use.
type hub struct {
	mu sync.Mutex
	// Guarded by mu.
	cur     *State
	changed chan struct{} // closed and replaced by each Store
}

func newHub() *hub { return &hub{changed: make(chan struct{})} }

// Load returns the current State (nil before the first Store) and a channel
// that is closed when a newer State is stored.
func (h *hub) Load() (*State, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cur, h.changed
}

// Store makes s current and wakes the waiters.
func (h *hub) Store(s *State) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cur = s
	close(h.changed)
	h.changed = make(chan struct{})
}

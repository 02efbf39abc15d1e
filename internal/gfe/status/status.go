// Package status holds the JSON document a gfe serves on /status: the
// node, its plan row, planned region loads, group health and capacity, the
// sites' demand and the routing decisions of every service. It holds only
// types, so that tools reading /status (internal/topology, e2e tests,
// benchmarks) do not import the gfe itself.
//
// Figures are in each service's demand unit: requests/s for RATE and
// UTILIZATION services, concurrent connections (or requests in flight) for
// CONNECTION services. The JSON names end in _rps for history.
package status

import (
	"time"

	"github.com/spillway-lb/spillway/internal/version"
)

// Status is the JSON document /status serves.
type Status struct {
	Node string `json:"node"`
	// Version is the build of the gfe binary serving this page.
	Version       version.Info       `json:"version"`
	Site          string             `json:"site"`
	Ready         bool               `json:"ready"`
	ConfigVersion string             `json:"config_version"`
	RTTms         map[string]float64 `json:"rtt_ms"`
	Members       []string           `json:"gossip_members"`
	Services      []ServiceStatus    `json:"services"`
	// ControlPlane is the state of the snapshot stream from the control
	// planes; nil for a gfe that serves a local config file only.
	ControlPlane *StreamStatus `json:"control_plane,omitempty"`
	// UnknownFields are the configuration fields of the snapshot being
	// served that this build does not know (a control plane of a newer
	// release): applied without them.
	UnknownFields []string `json:"snapshot_unknown_fields,omitempty"`
}

// StreamStatus is the gfe's side of its snapshot stream (cpclient.Status).
type StreamStatus struct {
	// Connected is the control plane whose stream is open, "" while none
	// is.
	Connected string `json:"connected"`
	// Serving is the version of the snapshot being served.
	Serving string `json:"serving"`
	// Pushes, Acks and Nacks count snapshots received, accepted and
	// refused since start.
	Pushes uint64 `json:"pushes"`
	Acks   uint64 `json:"acks"`
	Nacks  uint64 `json:"nacks"`
	// NacksInARow counts the snapshots refused since the last accepted
	// one; Refusing is NacksInARow > 0: the gfe serves an older snapshot
	// than the control plane's and does not follow its health changes.
	NacksInARow uint64 `json:"nacks_in_a_row"`
	Refusing    bool   `json:"refusing"`
	// LastNack is the last refusal's error and LastNackAt its time (kept
	// after the gfe accepts a snapshot again).
	LastNack   string     `json:"last_nack,omitempty"`
	LastNackAt *time.Time `json:"last_nack_at,omitempty"`
}

// ServiceStatus is one service in Status.
type ServiceStatus struct {
	Name      string           `json:"name"`
	Policy    string           `json:"policy"`
	DemandRPS float64          `json:"demand_rps"`
	Plan      []ShareStatus    `json:"plan"`
	Regions   []RegionStatus   `json:"regions"`
	Groups    []GroupStatus    `json:"groups"`
	Sites     []SiteStatus     `json:"sites"`
	Decisions map[string]int64 `json:"decisions"`
	Failures  int64            `json:"failures"`
	// Ejected lists the backends passive outlier detection has ejected.
	Ejected []EjectedStatus `json:"ejected"`
	// HerdGuard says the plan assumed the neighbours of a group with
	// unexplained load to be rising with this site (routing.Service.Herd).
	HerdGuard bool `json:"herd_guard"`
	// Pending is how many of the service's requests wait in the gfe's
	// pending queue now (routing.Meters.Pending): 0 unless the service has
	// an autoscaled group and no free backend.
	Pending int64 `json:"pending"`
	// Priorities are an envoy_priority service's priority levels at this
	// site, priority 0 first (routing.Service.Priorities); absent for
	// every other policy.
	Priorities []PriorityStatus `json:"priorities,omitempty"`
}

// PriorityStatus is one priority level of an envoy_priority service.
type PriorityStatus struct {
	// Regions are the level's regions (several only for the last level,
	// of the regions this gfe has no RTT to).
	Regions []string `json:"regions"`
	// Healthy counts the level's instances that take requests (healthy,
	// not ejected), Instances all of them (of groups not drained).
	Healthy   int `json:"healthy"`
	Instances int `json:"instances"`
	// LoadPercent is the percent of the service's requests the level
	// receives (Envoy's priority load, from health alone).
	LoadPercent int `json:"load_percent"`
}

// EjectedStatus is one backend ejected by outlier detection.
type EjectedStatus struct {
	Group   string    `json:"group"`
	Address string    `json:"address"`
	Until   time.Time `json:"until"`
	Reason  string    `json:"reason"`
}

// ShareStatus is one cell of this site's current plan row.
type ShareStatus struct {
	Region string  `json:"region"`
	Group  string  `json:"group"`
	Share  float64 `json:"share"`
	Reason string  `json:"reason"`
}

// RegionStatus is a region's planned load across all sites.
type RegionStatus struct {
	Name string `json:"name"`
	// CapacityRPS is what the plan fills the region up to: the sum of its
	// groups' CapacityRPS.
	CapacityRPS float64 `json:"capacity_rps"`
	LoadRPS     float64 `json:"load_rps"`
	Utilization float64 `json:"utilization"`
	// DeclaredRPS and EffectiveRPS are the sums of the region's groups'
	// (see GroupStatus).
	DeclaredRPS  float64 `json:"declared_rps"`
	EffectiveRPS float64 `json:"effective_rps"`
	// Instances and Healthy are summed over the region's groups; Health
	// is the healthy fraction h the plan used, and Keep the share of the
	// demand reaching the region it keeps (rule 5: below 1 when h is under
	// the spill threshold).
	Instances int     `json:"instances"`
	Healthy   int     `json:"healthy"`
	Health    float64 `json:"health"`
	Keep      float64 `json:"keep"`
}

// GroupStatus is a group's health and capacity as planned.
type GroupStatus struct {
	Name   string `json:"name"`
	Region string `json:"region"`
	Zone   string `json:"zone"`
	// Instances and Healthy count the group's active instances, those
	// its capacity counts: demoted ones are left out (their backends show
	// Demoted), and an autoscaled group at zero shows 0 of 0.
	Instances int `json:"instances"`
	Healthy   int `json:"healthy"`
	// CapacityRPS is what the plan fills the group up to:
	// DeclaredRPS × the service's target_utilization × Factor.
	CapacityRPS float64 `json:"capacity_rps"`
	// DeclaredRPS is the configured capacity of the healthy instances.
	DeclaredRPS float64 `json:"declared_rps"`
	// EffectiveRPS is DeclaredRPS × Factor: what local signals leave.
	EffectiveRPS float64 `json:"effective_rps"`
	// Factor is the effective-capacity factor the plan used (the lowest
	// any gfe gossips), OwnFactor this gfe's own.
	Factor    float64 `json:"factor"`
	OwnFactor float64 `json:"own_factor"`
	// Signal is what last shrank this gfe's own factor or holds it down
	// (lb/capacity: rejections, connect_errors, load_report, in_flight,
	// queueing; none at factor 1), seen at SignalAt.
	Signal   string     `json:"signal"`
	SignalAt *time.Time `json:"signal_at,omitempty"`
	// InFlight is the requests this gfe has in flight to the group.
	InFlight int64 `json:"in_flight"`
	// Backends are the group's healthy instances this gfe may send to
	// (its plan row's groups), in address order; unhealthy instances are
	// only counted (Instances − Healthy).
	Backends []BackendStatus `json:"backends,omitempty"`
}

// BackendStatus is one healthy instance as this gfe uses it.
type BackendStatus struct {
	Address  string `json:"address"`
	InFlight int64  `json:"in_flight"`
	// MaxConcurrency is the instance's concurrency limit, 0 if unlimited.
	MaxConcurrency int64 `json:"max_concurrency"`
	// ACTLimit is the instance's adaptive concurrency limit (Adaptive
	// Concurrency Tuning of an autoscaled group, from the CPU it reports),
	// absent when it has none.
	ACTLimit int64 `json:"act_limit,omitempty"`
	// SoftLimit is the instance's soft concurrency limit (Little's law
	// over its planned rate, lb/routing "Overflow at pick time"): the
	// requests this gfe keeps in flight to it before a pick overflows to
	// the next group; absent when it has none.
	SoftLimit int64 `json:"soft_limit,omitempty"`
	// Ejected is whether passive outlier detection has ejected it.
	Ejected bool `json:"ejected"`
	// Demoted is whether the instance is demoted (config.Instance.Demoted):
	// out of its group's capacity, taking only overflow.
	Demoted bool `json:"demoted,omitempty"`
}

// SiteStatus is a site's demand as this node sees it from gossip, and
// where the plan sends it.
type SiteStatus struct {
	Name      string  `json:"name"`
	DemandRPS float64 `json:"demand_rps"`
	// RTTms is the site's RTT to each region it reaches, in milliseconds,
	// as the plan used it (the median over the site's gfes).
	RTTms map[string]float64 `json:"rtt_ms,omitempty"`
	// Flows is the site's plan row summed per region, nearest region
	// first (the site's RTT order, ties by name): every region the site
	// sends to. A site without demand shows the row a small demand would
	// get (LoadRPS 0, Share set).
	Flows []FlowStatus `json:"flows,omitempty"`
	// UnplacedRPS is the demand the plan could send nowhere (the site
	// reaches no region with capacity).
	UnplacedRPS float64 `json:"unplaced_rps,omitempty"`
}

// FlowStatus is the part of a site's demand the plan sends to one region.
type FlowStatus struct {
	Region  string  `json:"region"`
	LoadRPS float64 `json:"load_rps"`
	// Share is LoadRPS as a fraction of the site's demand; a site's
	// shares sum to 1.
	Share float64 `json:"share"`
	// Reason is why the demand is in this region: nearest,
	// spill_capacity, spill_health or overload (lb/waterfall Reason).
	Reason string `json:"reason"`
}

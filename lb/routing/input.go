package routing

import (
	"slices"
	"time"

	"github.com/spillway-lb/spillway/config"
)

// The routing build's input: one typed world, which every source of it
// translates into once. A control plane's snapshot stream
// (internal/snapshot.FromProto, and the xDS export's own State) gives the
// Fleet; gossip (internal/routinginput.Peers) gives the Peers; the daemon
// gives Self and Now; the simulator (sim) and the tests make all four
// directly. Units are in every field's doc: demand is in each service's
// demand unit (config.BalancingMode), RTT in milliseconds, capacity
// factors are fractions of a group's declared capacity, times are
// instants.

// Input is what one table is built from: the world as this node sees it at
// Now.
type Input struct {
	// Fleet is the configuration and instance health to route by.
	// Required.
	Fleet *Fleet
	// Peers are the other nodes' states, from gossip: every site's gfes'
	// demand, RTT and capacity factors, and a control plane's xDS clients'
	// demand as peers without RTT. Their order does not matter; a peer
	// named Self.Node is ignored (Self is newer).
	Peers []Peer
	// Self is this node's own view: Node, Site, RTT and Demand, which
	// override whatever gossip last carried about it (gossip lags by up to
	// one publish). Its Capacity is not read: this node's own factors are
	// the Builder's (Factors), from the signals of its Backends. The xDS
	// export, which serves no site of its own, gives only Node.
	Self Peer
	// Now is the instant of the build (outlier ejections, expired hosts,
	// demand meters, the herd window); Build reads no clock.
	Now time.Time
}

// Peer is what one node tells the others by gossip, as the table build
// reads it: its site, its demand per service, its RTT per region and its
// effective-capacity factors.
type Peer struct {
	// Node is the node's gossip name, unique across the cluster (a control
	// plane's xDS demand: "<node>/xds/<site>").
	Node string
	// Site is the node's edge site; a peer without one is ignored.
	Site string
	// Demand maps service name to the node's smoothed demand, in the
	// service's demand unit: requests/s, or open connections or requests
	// in flight for CONNECTION-mode services
	// (config.BalancingMode.Concurrent). A service it does not list has
	// demand 0.
	Demand map[string]float64
	// RTT maps region name to the node's round trip to it, in
	// milliseconds (the minimum of its recent probes). A region it does
	// not list is unmeasured: the node's site is planned only to regions
	// some gfe of the site measured.
	RTT map[string]float64
	// Capacity maps service name and group name to the node's own
	// effective-capacity factor of the group (lb/capacity): the fraction
	// of the group's declared capacity it found the group to serve, in
	// (0, 1). A group it does not list is at 1.
	Capacity map[string]map[string]float64
}

// Fleet is the part of a control-plane snapshot the routing build reads:
// the services, regions, zones, groups and instances of one configuration
// and which instances may take traffic, under one version. A Fleet is
// immutable once made (the snapshot's FromProto, the xDS export, FromConfig):
// the tables built from it keep pointing at its Config, and nobody modifies
// either.
type Fleet struct {
	// Version identifies the content; equal versions mean equal content,
	// whichever control plane made them. The tables carry it
	// (Table.Version).
	Version string
	// Config is the operator configuration: per service its policy,
	// balancing mode (the unit of demand and capacity), backends with
	// their per-instance capacities and capacity_scaler, spill, feedback,
	// outlier detection and affinity; per region, zone and group its
	// instances with their address, max_concurrency and demoted flag.
	// Read-only, as every *config.Config.
	Config *config.Config
	// Health maps instance address (unique across Config) to its health.
	// An instance of Config missing from Health is not healthy (no verdict
	// on it yet).
	Health map[string]InstanceHealth
}

// InstanceHealth is the control plane's verdict on one instance.
type InstanceHealth struct {
	// Group and Address identify the instance, as in Config.
	Group   string
	Address string
	// Healthy is true when the instance passes health checks and may take
	// traffic. It is all the routing build reads.
	Healthy bool
	// Since is the instant the instance entered its current state; zero if
	// unknown. For operators (/status) only.
	Since time.Time
	// Detail says why it is not healthy, for operators; empty when healthy.
	Detail string
}

// FromConfig returns a Fleet of cfg under version in which every instance
// is healthy but those at the addresses in unhealthy: what a gfe routes by
// from a config file of its own, with no control plane to check health
// (and, in tests and the simulator, any health one wants).
func FromConfig(version string, cfg *config.Config, unhealthy ...string) *Fleet {
	f := &Fleet{Version: version, Config: cfg, Health: map[string]InstanceHealth{}}
	for _, g := range cfg.Groups() {
		for _, in := range g.Group.Instances {
			f.Health[in.Address] = InstanceHealth{Group: g.Group.Name, Address: in.Address, Healthy: !slices.Contains(unhealthy, in.Address)}
		}
	}
	return f
}

// Healthy reports whether the instance at addr may take traffic: false for
// an address f does not list. This is the only question anyone downstream
// asks about health; the control plane's third state (unknown, no verdict
// yet) reaches a gfe as not healthy.
func (f *Fleet) Healthy(addr string) bool { return f.Health[addr].Healthy }

// HealthyCount returns how many of instances are Healthy.
func (f *Fleet) HealthyCount(instances []config.Instance) int {
	n := 0
	for _, in := range instances {
		if f.Healthy(in.Address) {
			n++
		}
	}
	return n
}

// HealthyActiveCount returns how many of instances are Healthy and not
// Demoted: the count a group's capacity is planned from
// (config.GroupCapacity, config.Backend.Capacity with
// config.Group.ActiveInstances as the group's size).
func (f *Fleet) HealthyActiveCount(instances []config.Instance) int {
	n := 0
	for _, in := range instances {
		if !in.Demoted && f.Healthy(in.Address) {
			n++
		}
	}
	return n
}

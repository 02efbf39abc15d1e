package gossip

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
)

// Kind says which daemon publishes a NodeState.
type Kind string

// The kinds of node that take part in gossip.
const (
	// KindGFE is an edge node (cmd/gfe). It publishes Site, Demand and RTT.
	KindGFE Kind = "gfe"
	// KindControlPlane is a control plane replica (cmd/controlplane). It
	// publishes Groups: the health of the groups whose checks it owns.
	KindControlPlane Kind = "controlplane"
)

// NodeState is what one node tells every other node about itself. The owner
// publishes a complete NodeState each time (there are no partial updates), and
// a receiver keeps only the state with the highest Version per Node.
//
// Demand is in the backend service's unit of demand, the unit its capacity
// is counted in (config.BalancingMode): requests/s, or for CONNECTION
// services connections or requests open at once. A state carries only what
// some receiver reads: gfes read Site, Demand and RTT; control planes read
// Groups.
//
// A NodeState returned by this package (from Snapshot or a Changes-driven
// read) is shared and must not be modified; use Clone or Node.States for a
// copy you may change. A nil map and an empty map mean the same thing.
type NodeState struct {
	// Node is the memberlist node name of the publisher. Publish sets it to
	// Config.Name; a received state must name its publisher.
	Node string `json:"node"`
	// Kind is KindGFE or KindControlPlane.
	Kind Kind `json:"kind"`
	// Site is the edge site of a gfe (required for KindGFE, empty otherwise).
	Site string `json:"site,omitempty"`
	// Addr is the publisher's gossip address ("ip:port", as memberlist
	// advertises it). Publish sets it once Run has started memberlist. A
	// node that holds this state while memberlist does not list the
	// publisher yet joins Addr to close the gap (see Node).
	Addr string `json:"addr,omitempty"`
	// Version orders the states of one Node: a receiver replaces its copy
	// only with a strictly higher Version. Publish sets it to
	// max(previous+1, wall clock in Unix nanoseconds), so versions keep
	// increasing across a restart of the same node name as long as the
	// clock did not step back by more than the time since the last publish.
	Version uint64 `json:"version"`
	// Sealed says the state carried a seal this node verified: it was
	// signed with the key of a certificate the trusted roots vouch for and
	// that names Node (see seal.go). Set by the receiving Node, never sent;
	// this node's own state is Sealed when it has a Sealer. With a
	// Verifier and without Config.AcceptUnsealed every state a Snapshot
	// holds, but this node's own, is Sealed.
	Sealed bool `json:"-"`

	// Demand maps backend service name to the demand arriving at this gfe
	// for that service, in demand units per second (requests/s), smoothed
	// by the publisher. A missing service has no demand.
	Demand map[string]float64 `json:"demand,omitempty"`
	// RTT maps region name to this gfe's smoothed round trip to the
	// region's backends, in milliseconds. A missing region is unreachable.
	RTT map[string]float64 `json:"rtt_ms,omitempty"`
	// Capacity maps backend service name and instance group name to this
	// gfe's effective-capacity factor of the group, in (0, 1]: the share of
	// the group's planned capacity that its own requests' signals leave it
	// (docs/design.md §3 rule 8, lb/capacity). A group not listed is at 1.
	// Every gfe plans a group with the lowest factor any gfe publishes.
	Capacity map[string]map[string]float64 `json:"capacity,omitempty"`
	// Load maps instance group name to this gfe's load on the group: what
	// the autoscaler samples (summed over the gfes). Only KindGFE. A gfe
	// lists the groups it sent a request to, had one in flight to, or had
	// one waiting for over the last publish interval; a group not listed
	// has no load from this gfe, so a group that just went idle simply
	// drops out (readers treat absence as zero).
	Load map[string]GroupLoad `json:"load,omitempty"`

	// Groups is the capacity and health of the instance groups a control
	// plane replica checks. With several replicas each publishes the groups
	// it checks; consumers merge them.
	Groups []GroupState `json:"groups,omitempty"`

	// SiteDemand maps edge site and backend service name to the demand
	// of the xDS clients this control plane replica serves at that site,
	// in requests/s, from their load reports (LRS): clients that send to
	// backends directly, bypassing the gfes. Only KindControlPlane; site
	// names are non-empty. Consumers add it to the site's gfes' demand.
	SiteDemand map[string]map[string]float64 `json:"site_demand,omitempty"`
	// Leases maps the name of each lease a control plane replica holds to
	// its term (package internal/autoscale/lease): a claim that the
	// replica renews by publishing newer states, and drops by publishing
	// one without it. Only KindControlPlane; terms are > 0.
	Leases map[string]uint64 `json:"leases,omitempty"`
	// Autoscaled maps instance group name to the instances that this
	// control plane replica's autoscaler runs for the group (it holds the
	// group's lease; package internal/autoscale/controller): instances
	// started, not yet stopped, and not draining. Every replica adds them
	// to the group in the configuration it serves. Only KindControlPlane;
	// group names and addresses are non-empty.
	Autoscaled map[string][]AutoscaledInstance `json:"autoscaled,omitempty"`
}

// GroupLoad is the load one gfe puts on one instance group over its last
// publish interval (the gfe's PlanInterval), in the three quantities the
// autoscaler's rules read (lb/autoscale.Sample). Every field is finite and
// >= 0.
type GroupLoad struct {
	// InFlight is the mean number of this gfe's requests in flight to the
	// group's instances over the interval (requests): the mean of samples
	// taken at least ten times per interval.
	InFlight float64 `json:"in_flight"`
	// Requests is the rate at which this gfe's requests (attempts) to the
	// group's instances ended over the interval (requests/s), answered or
	// failed.
	Requests float64 `json:"rps"`
	// Pending is the number of this gfe's requests waiting in its pending
	// queue for the group at publish time (requests): those of the
	// services whose capacity requests name the group.
	Pending float64 `json:"pending"`
	// Spilled is the demand of this gfe's site that the plan sends past the
	// group, to regions farther than the group's, while the group is the one
	// its services' capacity requests name (in the services' demand units;
	// requests/s in RATE mode): load the group would take if it had the
	// capacity. The autoscaler counts it as concurrency (docs/design.md §6
	// and §3 rule 7: the waterfall is the buffer while a region scales up).
	Spilled float64 `json:"spilled,omitempty"`
	// ACT is the mean adaptive concurrency limit (Adaptive Concurrency
	// Tuning) this gfe holds on the group's instances, in requests, when
	// it is below max_concurrency_per_instance; absent (0) when every
	// instance is at its ceiling. The controller's ACT driver uses it.
	ACT float64 `json:"act,omitempty"`
}

// AutoscaledInstance is one instance an autoscaler started.
type AutoscaledInstance struct {
	// Address is where the instance serves, host:port.
	Address string `json:"address"`
	// Demoted says the autoscaler scaled the instance down: it gets
	// traffic only when the group's other instances are busy
	// (config.Instance.Demoted).
	Demoted bool `json:"demoted,omitempty"`
}

// GroupState is the health of one instance group as the control plane
// that checks it sees it. The gfes get health from their snapshot, and
// capacity from the configuration, not from here.
type GroupState struct {
	// Group is the instance group name.
	Group string `json:"group"`
	// Region and Zone locate the group.
	Region string `json:"region"`
	Zone   string `json:"zone,omitempty"`
	// Instances is the number of instances in the group, healthy or not.
	Instances int `json:"instances"`
	// Healthy is how many of Instances pass health checks
	// (0 <= Healthy <= Instances).
	Healthy int `json:"healthy"`
	// HealthyInstances lists the addresses (host:port, as in the
	// configuration) of the instances counted in Healthy, sorted, so that
	// every control plane can rebuild per-instance health for the groups
	// another replica checks. An instance not listed is not healthy (failing,
	// or not checked yet by this publisher). When not empty its length equals
	// Healthy; empty with Healthy > 0 means the publisher did not say which
	// instances are healthy.
	HealthyInstances []string `json:"healthy_instances,omitempty"`
}

// ErrInvalidState is wrapped by the errors Publish returns for a state that
// fails validation, and is how received states are classified as invalid.
var ErrInvalidState = errors.New("gossip: invalid node state")

// validate checks everything but Node and Version (which Publish assigns).
// The error wraps ErrInvalidState and joins one error per bad field, each
// naming the field path and the value.
func (s *NodeState) validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(format, args...))
	}
	switch s.Kind {
	case KindGFE:
		if s.Site == "" {
			bad("state.site: required for kind %q", s.Kind)
		}
	case KindControlPlane:
	default:
		bad("state.kind: must be %q or %q, got %q", KindGFE, KindControlPlane, s.Kind)
	}
	checkRate := func(path string, m map[string]float64) {
		for _, k := range sortedKeys(m) {
			if v := m[k]; !finiteNonNeg(v) {
				bad("%s[%q]: must be finite and >= 0, got %v", path, k, v)
			}
		}
	}
	checkRate("state.demand", s.Demand)
	checkRate("state.rtt_ms", s.RTT)
	if len(s.SiteDemand) > 0 && s.Kind != KindControlPlane {
		bad("state.site_demand: only for kind %q, got kind %q", KindControlPlane, s.Kind)
	}
	for _, site := range sortedKeys(s.SiteDemand) {
		if site == "" {
			bad("state.site_demand: empty site name")
		}
		checkRate(fmt.Sprintf("state.site_demand[%q]", site), s.SiteDemand[site])
	}
	for _, svc := range sortedKeys(s.Capacity) {
		for _, g := range sortedKeys(s.Capacity[svc]) {
			if v := s.Capacity[svc][g]; !(v > 0 && v <= 1) {
				bad("state.capacity[%q][%q]: must be in (0, 1], got %v", svc, g, v)
			}
		}
	}
	for i, g := range s.Groups {
		if g.Group == "" {
			bad("state.groups[%d].group: required", i)
		}
		if g.Region == "" {
			bad("state.groups[%d].region: required", i)
		}
		if g.Instances < 0 {
			bad("state.groups[%d].instances: must be >= 0, got %d", i, g.Instances)
		}
		if g.Healthy < 0 || g.Healthy > g.Instances {
			bad("state.groups[%d].healthy: must be in [0, instances=%d], got %d", i, g.Instances, g.Healthy)
		}
		if n := len(g.HealthyInstances); n > 0 && n != g.Healthy {
			bad("state.groups[%d].healthy_instances: must list healthy=%d addresses, got %d", i, g.Healthy, n)
		}
		for j, a := range g.HealthyInstances {
			if a == "" {
				bad("state.groups[%d].healthy_instances[%d]: empty address", i, j)
			}
		}
	}
	if len(s.Leases) > 0 && s.Kind != KindControlPlane {
		bad("state.leases: only for kind %q, got kind %q", KindControlPlane, s.Kind)
	}
	for _, name := range sortedKeys(s.Leases) {
		if name == "" {
			bad("state.leases: empty lease name")
		}
		if s.Leases[name] == 0 {
			bad("state.leases[%q]: term must be > 0", name)
		}
	}
	if len(s.Load) > 0 && s.Kind != KindGFE {
		bad("state.load: only for kind %q, got kind %q", KindGFE, s.Kind)
	}
	for _, g := range sortedKeys(s.Load) {
		if g == "" {
			bad("state.load: empty group name")
		}
		l := s.Load[g]
		for _, f := range []struct {
			name string
			v    float64
		}{{"in_flight", l.InFlight}, {"rps", l.Requests}, {"pending", l.Pending}, {"spilled", l.Spilled}, {"act", l.ACT}} {
			if !finiteNonNeg(f.v) {
				bad("state.load[%q].%s: must be finite and >= 0, got %v", g, f.name, f.v)
			}
		}
	}
	if len(s.Autoscaled) > 0 && s.Kind != KindControlPlane {
		bad("state.autoscaled: only for kind %q, got kind %q", KindControlPlane, s.Kind)
	}
	for _, g := range sortedKeys(s.Autoscaled) {
		if g == "" {
			bad("state.autoscaled: empty group name")
		}
		for i, in := range s.Autoscaled[g] {
			if in.Address == "" {
				bad("state.autoscaled[%q][%d].address: required", g, i)
			}
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidState, errors.Join(errs...))
}

// validateRemote is validate plus the fields a received state must carry.
func (s *NodeState) validateRemote() error {
	var errs []error
	if s.Node == "" {
		errs = append(errs, errors.New("state.node: required"))
	}
	if s.Version == 0 {
		errs = append(errs, errors.New("state.version: must be > 0"))
	}
	if err := s.validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil
	}
	if len(errs) == 1 && errors.Is(errs[0], ErrInvalidState) {
		return errs[0]
	}
	return fmt.Errorf("%w: %w", ErrInvalidState, errors.Join(errs...))
}

// Clone returns a deep copy of s that shares no maps or slices with it.
func (s NodeState) Clone() NodeState {
	c := s
	c.Demand = maps.Clone(s.Demand)
	c.RTT = maps.Clone(s.RTT)
	if s.Capacity != nil {
		c.Capacity = make(map[string]map[string]float64, len(s.Capacity))
		for svc, m := range s.Capacity {
			c.Capacity[svc] = maps.Clone(m)
		}
	}
	if s.SiteDemand != nil {
		c.SiteDemand = make(map[string]map[string]float64, len(s.SiteDemand))
		for site, m := range s.SiteDemand {
			c.SiteDemand[site] = maps.Clone(m)
		}
	}
	c.Leases = maps.Clone(s.Leases)
	c.Load = maps.Clone(s.Load)
	if s.Autoscaled != nil {
		c.Autoscaled = make(map[string][]AutoscaledInstance, len(s.Autoscaled))
		for g, ins := range s.Autoscaled {
			c.Autoscaled[g] = slices.Clone(ins)
		}
	}
	c.Groups = slices.Clone(s.Groups)
	for i := range c.Groups {
		c.Groups[i].HealthyInstances = slices.Clone(s.Groups[i].HealthyInstances)
	}
	return c
}

func finiteNonNeg(v float64) bool {
	return !math.IsNaN(v) && !math.IsInf(v, 0) && v >= 0
}

// sortedKeys returns m's keys in order, so that errors come out the same way
// every run.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

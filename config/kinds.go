package config

// The enumerations of the schema (config.go): policies, hash scopes,
// balancing modes, affinity types, health-check and listener protocols, with
// their lists and parsers.

import (
	"fmt"
	"slices"

	"github.com/spillway-lb/spillway/lb/affinity"
)

// Policy is a backend service's load-balancing policy: how a gfe picks a
// backend for a request (docs/design.md §4).
type Policy string

// The load-balancing policies.
const (
	// PolicyWaterfall is Waterfall by Region (docs/design.md §3): nearest
	// region first, spill by capacity. The default.
	PolicyWaterfall Policy = "waterfall"
	// PolicyMinRTT plans regions under the same constraints as waterfall
	// (capacity, preemptive spill, uniform overload, zones split by
	// capacity) but takes the assignment of least total RTT
	// (waterfall.ComputeMinRTT): a site whose next region is almost as
	// close steps aside for one whose alternatives are far.
	PolicyMinRTT Policy = "min_rtt"
	// PolicyRoundRobin cycles over all healthy instances of all groups.
	PolicyRoundRobin Policy = "round_robin"
	// PolicyLeastRequest picks the less loaded of two random healthy
	// instances (power of two choices) over every region: the P2C
	// baseline, what Envoy, Istio and HAProxy default to.
	PolicyLeastRequest Policy = "least_request"
	// PolicyEnvoyPriority is Envoy's priority model as a baseline: the
	// site's regions by RTT are priorities 0, 1, ... (nearest first), each
	// takes a share of the requests by the health of the priorities alone
	// (lb/priority: overprovisioning factor 1.4, no capacity spill, no
	// panic threshold), and inside a priority least_request picks.
	PolicyEnvoyPriority Policy = "envoy_priority"
	// PolicyHash2 hashes (source IP, destination IP) onto a Maglev table.
	PolicyHash2 Policy = "hash2"
	// PolicyHash3 hashes (source IP, destination IP, protocol).
	PolicyHash3 Policy = "hash3"
	// PolicyHash5 hashes the 5-tuple: 3-tuple plus source and destination port.
	PolicyHash5 Policy = "hash5"
)

// Policies lists every valid Policy, in documentation order.
func Policies() []Policy {
	return []Policy{PolicyWaterfall, PolicyMinRTT, PolicyRoundRobin, PolicyLeastRequest,
		PolicyEnvoyPriority,
		PolicyHash2, PolicyHash3, PolicyHash5,
		PolicyPrequal}
}

// ParsePolicy returns the Policy named s, or an error listing the valid
// names (for command-line flags; config files are checked by Load).
func ParsePolicy(s string) (Policy, error) {
	p := Policy(s)
	if !slices.Contains(Policies(), p) {
		return "", fmt.Errorf("unknown policy %q (want one of %s)", s, joinNames(Policies()))
	}
	return p, nil
}

// IsPlanned reports whether p sends each request by a plan of regions
// computed from RTT, capacity and health (waterfall, min_rtt), rather than
// over a flat pool of instances. Spill applies only to these policies.
func (p Policy) IsPlanned() bool {
	return p == PolicyWaterfall || p == PolicyMinRTT
}

// OrdersRegions reports whether p chooses among regions itself, by the
// site's RTT (waterfall, min_rtt, envoy_priority), rather than picking
// over a pool whose extent a scope sets (round_robin, least_request and
// the hash policies: global, or for hashing nearest_region). The
// benchmarks and lbsim plan take no scope for such a policy.
func (p Policy) OrdersRegions() bool {
	return p.IsPlanned() || p == PolicyEnvoyPriority
}

// IsHash reports whether p is one of the flow-hashing policies, the only ones
// a HashScope applies to.
func (p Policy) IsHash() bool {
	return p == PolicyHash2 || p == PolicyHash3 || p == PolicyHash5
}

// HashScope says which backends a hashing policy hashes over.
type HashScope string

// The hashing scopes.
const (
	// HashScopeGlobal hashes over the healthy instances of every group of the
	// service, wherever they are. The default for hash policies.
	HashScopeGlobal HashScope = "global"
	// HashScopeNearestRegion hashes over the healthy instances of the
	// nearest region (by the gfe's RTT) that has any.
	HashScopeNearestRegion HashScope = "nearest_region"
)

// HashScopes lists every valid HashScope, the default first.
func HashScopes() []HashScope { return []HashScope{HashScopeGlobal, HashScopeNearestRegion} }

// ParseHashScope returns the HashScope named s, or an error listing the
// valid names.
func ParseHashScope(s string) (HashScope, error) {
	sc := HashScope(s)
	if !slices.Contains(HashScopes(), sc) {
		return "", fmt.Errorf("unknown scope %q (want one of %s)", s, joinNames(HashScopes()))
	}
	return sc, nil
}

// BalancingMode says what a backend's capacity counts (docs/design.md §2),
// and so in which unit a gfe measures demand: the planner compares the two,
// so they are always in the same unit (Backend.Capacity, Concurrent).
type BalancingMode string

// The balancing modes.
const (
	// ModeRate counts requests per second, for capacity and demand. The
	// default.
	ModeRate BalancingMode = "RATE"
	// ModeConnection counts concurrent connections (L4) or in-flight
	// requests (L7), for capacity and demand: a gfe's demand is the mean
	// number of connections or requests it has open, not a rate.
	ModeConnection BalancingMode = "CONNECTION"
	// ModeUtilization limits each instance to a utilization, in (0,1], of
	// the rate it serves at full utilization; capacity and demand are in
	// requests per second.
	ModeUtilization BalancingMode = "UTILIZATION"
)

// Concurrent reports whether demand and capacity under m count things open
// at once (connections, requests in flight) rather than requests per
// second.
func (m BalancingMode) Concurrent() bool { return m == ModeConnection }

// AffinityType is the kind of session affinity of a service (docs/design.md
// §4). It is lb/affinity's Mode, which defines the modes and their behaviour;
// the names below spell them for the schema.
type AffinityType = affinity.Mode

// The session affinity types (see affinity.Mode's constants).
const (
	AffinityNone              = affinity.ModeNone
	AffinityClientIP          = affinity.ModeClientIP
	AffinityClientIPProto     = affinity.ModeClientIPProto
	AffinityClientIPPortProto = affinity.ModeClientIPPortProto
	AffinityGeneratedCookie   = affinity.ModeGeneratedCookie
	AffinityHTTPCookie        = affinity.ModeHTTPCookie
	AffinityHeader            = affinity.ModeHeader
)

// HealthProtocol is the protocol of an active health check.
type HealthProtocol string

// The health check protocols.
const (
	// HealthHTTP sends GET Path over plain HTTP; 2xx is healthy. The default.
	HealthHTTP HealthProtocol = "http"
	// HealthHTTPS is HealthHTTP over TLS (certificates are not verified:
	// backends are addressed by IP).
	HealthHTTPS HealthProtocol = "https"
	// HealthTCP is healthy when a TCP connection opens.
	HealthTCP HealthProtocol = "tcp"
	// HealthGRPC calls grpc.health.v1.Health/Check for GRPCService;
	// SERVING is healthy. It also declares the service a gRPC one: its
	// gRPC calls over HTTP/2 are not bounded by their route's timeout.
	HealthGRPC HealthProtocol = "grpc"
)

// ListenerProtocol is what a listener speaks to clients.
type ListenerProtocol string

// The listener protocols.
const (
	// ListenerHTTP serves plain-text HTTP/1.1 and HTTP/2 with prior
	// knowledge (h2c) on the same port; routes pick the service.
	ListenerHTTP ListenerProtocol = "http"
	// ListenerHTTPS serves TLS, offering h2 and http/1.1 by ALPN; routes
	// pick the service.
	ListenerHTTPS ListenerProtocol = "https"
	// ListenerTCP is an L4 proxy: each accepted connection is spliced to one
	// instance of the listener's Service.
	ListenerTCP ListenerProtocol = "tcp"
)

// ListenerProtocols lists every valid ListenerProtocol, in documentation
// order.
func ListenerProtocols() []ListenerProtocol {
	return []ListenerProtocol{ListenerHTTP, ListenerHTTPS, ListenerTCP}
}

package config

import "time"

// Config is the whole operator configuration: where backends live (Regions),
// what routes point at (Services) and how requests find a service (Routes).
//
// A *Config returned by Load, Parse or New is read-only: callers must not
// write to it, to any slice or struct reachable from it, or shallow-copy it
// and modify the copy. It is then safe for concurrent use by any number of
// goroutines, and its lookup helpers (Service, Group, Route, GroupCapacity)
// answer from an index built once at load time. A reload produces a new
// *Config; it never changes an old one.
type Config struct {
	// Regions where backends live, each with its zones and instance groups.
	// Required: at least one region. Region, zone and group names are each
	// unique across the file.
	Regions []Region `mapstructure:"regions"`
	// Services are the backend services routes point at. Names are unique.
	Services []Service `mapstructure:"services"`
	// Routes map (host, path prefix) to a service. Required: at least one.
	// See (*Config).Route for how a request picks one.
	Routes []Route `mapstructure:"routes"`

	// Set by Load, Parse and New; never decoded.
	source string // file name used in error messages
	idx    *index // lookup tables; nil for a Config built by hand
}

// Region is a geographic region: the unit the waterfall planner fills and
// spills (DESIGN §3). Its zeros are not defaults: every field is required.
type Region struct {
	// Name identifies the region in gossip, RTT vectors and metrics, e.g.
	// "us-east". Required, unique, lower-case [a-z0-9._-], at most 63 bytes.
	Name string `mapstructure:"name"`
	// Zones of the region. Required: at least one.
	Zones []Zone `mapstructure:"zones"`
}

// Zone is a failure domain inside a region. Inside a region, traffic is split
// over the zones' groups in proportion to their capacity (DESIGN §3 rule 2).
type Zone struct {
	// Name of the zone, e.g. "us-east-b". Required, unique across the file
	// (not only within its region), same syntax as Region.Name.
	Name string `mapstructure:"name"`
	// Groups are the instance groups in this zone. Required: at least one.
	Groups []Group `mapstructure:"groups"`
}

// Group is an instance group: a set of backend instances in one zone. Services
// refer to groups by name in their backends.
type Group struct {
	// Name of the group, e.g. "us-east-b-web". Required, unique across the
	// file, same syntax as Region.Name.
	Name string `mapstructure:"name"`
	// Instances of the group. Required: at least one. Addresses are unique
	// across the file.
	Instances []Instance `mapstructure:"instances"`
}

// Instance is one backend process.
type Instance struct {
	// Address is where the instance listens, as host:port (IPv6 hosts in
	// brackets, "[::1]:9101"). The host is an IP address or a DNS name;
	// the port is 1..65535. Required, unique across the file.
	Address string `mapstructure:"address"`
	// MaxConcurrency is the most requests this instance may have in flight
	// at once (Cloud Run concurrency, DESIGN §4). Requests beyond it wait in
	// the gfe's pending queue. Default 0, which means unlimited; negative is
	// invalid.
	MaxConcurrency int `mapstructure:"max_concurrency"`
}

// Policy is a backend service's load-balancing policy: how a gfe picks a
// backend for a request (DESIGN §4).
type Policy string

// The load-balancing policies.
const (
	// PolicyWaterfall is Waterfall by Region (DESIGN §3): nearest region
	// first, spill by capacity. The default.
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
	// instances (power of two choices).
	PolicyLeastRequest Policy = "least_request"
	// PolicyHash2 hashes (source IP, destination IP) onto a Maglev table.
	PolicyHash2 Policy = "hash2"
	// PolicyHash3 hashes (source IP, destination IP, protocol).
	PolicyHash3 Policy = "hash3"
	// PolicyHash5 hashes the 5-tuple: 3-tuple plus source and destination port.
	PolicyHash5 Policy = "hash5"
)

// Policies lists every valid Policy, in documentation order.
func Policies() []Policy {
	return []Policy{PolicyWaterfall, PolicyMinRTT, PolicyRoundRobin, PolicyLeastRequest, PolicyHash2, PolicyHash3, PolicyHash5}
}

// IsPlanned reports whether p sends each request by a plan of regions
// computed from RTT, capacity and health (waterfall, min_rtt), rather than
// over a flat pool of instances. Spill applies only to these policies.
func (p Policy) IsPlanned() bool {
	return p == PolicyWaterfall || p == PolicyMinRTT
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

// BalancingMode says what a backend's capacity counts (DESIGN §2).
type BalancingMode string

// The balancing modes.
const (
	// ModeRate counts requests per second. The default.
	ModeRate BalancingMode = "RATE"
	// ModeConnection counts concurrent connections (L4) or in-flight
	// requests (L7).
	ModeConnection BalancingMode = "CONNECTION"
	// ModeUtilization counts backend utilization as reported by the backend,
	// in [0,1] per instance.
	ModeUtilization BalancingMode = "UTILIZATION"
)

// AffinityType is the kind of session affinity of a service (DESIGN §4).
type AffinityType string

// The session affinity types.
const (
	// AffinityNone: every request is balanced on its own. The default.
	AffinityNone AffinityType = "none"
	// AffinityClientIP pins a client IP to a backend.
	AffinityClientIP AffinityType = "client_ip"
	// AffinityClientIPProto pins (client IP, protocol).
	AffinityClientIPProto AffinityType = "client_ip_proto"
	// AffinityClientIPPortProto pins (client IP, client port, protocol).
	AffinityClientIPPortProto AffinityType = "client_ip_port_proto"
	// AffinityGeneratedCookie makes the gfe issue a signed cookie named
	// CookieName that pins the client to its backend for CookieTTL.
	AffinityGeneratedCookie AffinityType = "generated_cookie"
	// AffinityHTTPCookie hashes the value of the client's own cookie
	// CookieName; the gfe issues it (with CookieTTL) when absent.
	AffinityHTTPCookie AffinityType = "http_cookie"
	// AffinityHeader hashes the value of request header HeaderName.
	AffinityHeader AffinityType = "header"
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
	// SERVING is healthy.
	HealthGRPC HealthProtocol = "grpc"
)

// Service is a backend service: what a route points at (DESIGN §2).
type Service struct {
	// Name of the service, e.g. "web". Required, unique, same syntax as
	// Region.Name.
	Name string `mapstructure:"name"`
	// Policy picks a backend for each request. Default waterfall.
	Policy Policy `mapstructure:"policy"`
	// HashScope says what hash policies hash over: global (default) or
	// nearest_region. Only valid with a hash policy. After load it is
	// "global" or "nearest_region" for hash policies and "" otherwise.
	HashScope HashScope `mapstructure:"hash_scope"`
	// BalancingMode says what backend capacity counts: RATE (default),
	// CONNECTION or UTILIZATION. It decides which limit each backend must set.
	BalancingMode BalancingMode `mapstructure:"balancing_mode"`
	// Backends are the instance groups this service sends traffic to, each
	// with its capacity. Required: at least one; a group appears at most once.
	Backends []Backend `mapstructure:"backends"`
	// SessionAffinity keeps a client on one backend while it stays healthy.
	// Default type none.
	SessionAffinity SessionAffinity `mapstructure:"session_affinity"`
	// HealthCheck is the active health check of this service's instances.
	// Defaults as in DefaultHealthCheck.
	HealthCheck HealthCheck `mapstructure:"health_check"`
	// Spill tunes preemptive spill out of unhealthy regions (DESIGN §3 rule 5).
	// Defaults as in DefaultSpill.
	Spill Spill `mapstructure:"spill"`
}

// Backend is one instance group used by a service, with the capacity the
// service may put on it. Which limit to set depends on the service's
// BalancingMode: RATE takes exactly one of MaxRatePerInstance and MaxRate,
// CONNECTION exactly one of MaxConnectionsPerInstance and MaxConnections,
// UTILIZATION takes MaxUtilization. A zero limit is unset; limits of the other
// modes must stay unset.
type Backend struct {
	// Group is the name of the instance group. Required; must name a group
	// under regions.
	Group string `mapstructure:"group"`
	// MaxRatePerInstance is the RATE capacity of each healthy instance, in
	// requests per second. 0 = unset; otherwise > 0.
	MaxRatePerInstance float64 `mapstructure:"max_rate_per_instance"`
	// MaxRate is the RATE capacity of the whole group, in requests per second,
	// when all its instances are healthy; it shrinks in proportion to the
	// healthy fraction. 0 = unset; otherwise > 0.
	MaxRate float64 `mapstructure:"max_rate"`
	// MaxConnectionsPerInstance is the CONNECTION capacity of each healthy
	// instance, in concurrent connections. 0 = unset; otherwise > 0.
	MaxConnectionsPerInstance int `mapstructure:"max_connections_per_instance"`
	// MaxConnections is the CONNECTION capacity of the whole group when all
	// its instances are healthy, shrinking with the healthy fraction.
	// 0 = unset; otherwise > 0.
	MaxConnections int `mapstructure:"max_connections"`
	// MaxUtilization is the UTILIZATION target of each instance, in (0,1]:
	// the group is full when its healthy instances average this utilization.
	// 0 = unset.
	MaxUtilization float64 `mapstructure:"max_utilization"`
	// CapacityScaler multiplies the group's capacity, in [0,1]. Default 1.
	// 0 drains the group: it gets no new traffic, but stays configured.
	CapacityScaler float64 `mapstructure:"capacity_scaler"`
}

// SessionAffinity configures how a service keeps a client on one backend.
// Affinity holds only while the pinned backend is healthy.
type SessionAffinity struct {
	// Type of affinity. Default none.
	Type AffinityType `mapstructure:"type"`
	// CookieName is the cookie that carries affinity. Required for
	// generated_cookie and http_cookie, invalid for other types. Must be an
	// RFC 6265 token.
	CookieName string `mapstructure:"cookie_name"`
	// CookieTTL is the lifetime of a cookie the gfe issues (Max-Age, and the
	// expiry signed into a generated cookie). Only for the cookie types.
	// Default 0: a session cookie that lasts until the browser closes (a
	// generated cookie's signature then never expires). Negative is invalid.
	CookieTTL time.Duration `mapstructure:"cookie_ttl"`
	// HeaderName is the request header whose value carries affinity.
	// Required for header, invalid for other types. Must be an HTTP token.
	HeaderName string `mapstructure:"header_name"`
}

// HealthCheck configures active health checking of a service's instances
// (DESIGN §5). An instance turns healthy after HealthyThreshold consecutive
// passes and unhealthy after UnhealthyThreshold consecutive failures.
type HealthCheck struct {
	// Protocol of the check: http (default), https, tcp or grpc.
	Protocol HealthProtocol `mapstructure:"protocol"`
	// Path requested by http and https checks; must start with "/".
	// Default "/healthz". Ignored by tcp and grpc.
	Path string `mapstructure:"path"`
	// Port to check, 1..65535. Default 0: the instance's own port.
	Port int `mapstructure:"port"`
	// GRPCService is the service name sent in grpc.health.v1 requests.
	// Default "": the server's overall health. Ignored by other protocols.
	GRPCService string `mapstructure:"grpc_service"`
	// Interval between two checks of one instance, as a duration string
	// ("5s"). Default 5s; must be > 0. Lower detects failures sooner at the
	// cost of probe load.
	Interval time.Duration `mapstructure:"interval"`
	// Timeout of one check. Default 1s; must be > 0 and < Interval.
	Timeout time.Duration `mapstructure:"timeout"`
	// HealthyThreshold is the number of consecutive passes that make an
	// unhealthy instance healthy. Default 2; must be >= 1.
	HealthyThreshold int `mapstructure:"healthy_threshold"`
	// UnhealthyThreshold is the number of consecutive failures that make a
	// healthy instance unhealthy. Default 3; must be >= 1.
	UnhealthyThreshold int `mapstructure:"unhealthy_threshold"`
	// Jitter is the fraction of Interval by which each check may move at
	// random, so that checks of many instances spread out instead of firing
	// together. Default 0.1; must be in [0,1). 0 = no jitter.
	Jitter float64 `mapstructure:"jitter"`
}

// Spill tunes preemptive spill (DESIGN §3 rule 5): a region whose healthy
// fraction h is below Threshold keeps at most min(1, Slope·h) of the demand
// that reaches it, and the rest spills to the next-nearest region.
type Spill struct {
	// Threshold is the healthy fraction below which a region spills
	// preemptively, in [0,1]. Default 0.5. 0 disables preemptive spill.
	Threshold float64 `mapstructure:"threshold"`
	// Slope is how much demand a region keeps per unit of healthy fraction
	// below Threshold; must be > 0. Default 2 (h = 0.4 keeps 80%).
	Slope float64 `mapstructure:"slope"`
}

// Route sends requests for a host and path prefix to a service.
type Route struct {
	// Host the route matches: an exact host name or IP ("api.example.com"),
	// a wildcard "*.example.com" (any name ending in ".example.com", not
	// "example.com" itself), or "*" (any host). Matched case-insensitively,
	// without the request's port. Default "*".
	Host string `mapstructure:"host"`
	// PathPrefix the request path must start with (plain string prefix:
	// "/api" matches "/api", "/api/v1" and "/apiary"; write "/api/" to
	// match only below /api/). Must start with "/". Default "/".
	PathPrefix string `mapstructure:"path_prefix"`
	// Service is the name of the backend service. Required; must name a
	// service under services.
	Service string `mapstructure:"service"`
}

// DefaultService returns a Service with every default set: waterfall,
// RATE, no affinity, DefaultHealthCheck and DefaultSpill. Name and Backends
// are left empty.
func DefaultService() Service {
	return Service{
		Policy:          PolicyWaterfall,
		BalancingMode:   ModeRate,
		SessionAffinity: DefaultSessionAffinity(),
		HealthCheck:     DefaultHealthCheck(),
		Spill:           DefaultSpill(),
	}
}

// DefaultBackend returns a Backend with capacity_scaler 1 and no limit set.
func DefaultBackend() Backend {
	return Backend{CapacityScaler: 1}
}

// DefaultSessionAffinity returns affinity of type none.
func DefaultSessionAffinity() SessionAffinity {
	return SessionAffinity{Type: AffinityNone}
}

// DefaultHealthCheck returns the default health check: GET /healthz on the
// instance's port every 5s, 1s timeout, healthy after 2 passes, unhealthy
// after 3 failures, 10% jitter.
func DefaultHealthCheck() HealthCheck {
	return HealthCheck{
		Protocol:           HealthHTTP,
		Path:               "/healthz",
		Interval:           5 * time.Second, // Caddy and GCP both default to 5s.
		Timeout:            1 * time.Second, // well under a LAN probe interval
		HealthyThreshold:   2,
		UnhealthyThreshold: 3, // tolerate two lost probes
		Jitter:             0.1,
	}
}

// DefaultSpill returns the preemptive spill of DESIGN §3 rule 5: below half
// healthy, keep 2h of the demand.
func DefaultSpill() Spill {
	return Spill{Threshold: 0.5, Slope: 2}
}

// DefaultRoute returns a route matching every host and path, with no service.
func DefaultRoute() Route {
	return Route{Host: "*", PathPrefix: "/"}
}

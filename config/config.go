package config

import (
	"time"
)

// Config is the whole operator configuration: where backends live (Regions),
// what routes point at (Services), how requests find a service (Routes) and
// which ports a gfe serves them on (Listeners).
//
// A *Config returned by Load, Parse or New is read-only: callers must not
// write to it, to any slice or struct reachable from it, or shallow-copy it
// and modify the copy. It is then safe for concurrent use by any number of
// goroutines, and its lookup helpers (Service, Group, Route, Listener,
// GroupCapacity)
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
	// Listeners are the ports a gfe serves, each with its protocol.
	// Optional: with none, the gfe serves only its --listen address (plain
	// HTTP, with the http defaults of DefaultListener). Names and ports are
	// unique. Defaults as in DefaultListener for each entry's protocol.
	Listeners []Listener `mapstructure:"listeners"`
	// Quota is per-consumer quota (see Quota). Optional: without metrics no
	// request is charged.
	Quota Quota `mapstructure:"quota"`

	// Set by Load, Parse and New; never decoded.
	source string // file name used in error messages
	idx    *index // lookup tables; nil for a Config built by hand
}

// Region is a geographic region: the unit the waterfall planner fills and
// spills (docs/design.md §3). Its zeros are not defaults: every field is
// required.
type Region struct {
	// Name identifies the region in gossip, RTT vectors and metrics, e.g.
	// "us-east". Required, unique, lower-case [a-z0-9._-], at most 63 bytes.
	Name string `mapstructure:"name"`
	// Zones of the region. Required: at least one.
	Zones []Zone `mapstructure:"zones"`
}

// Zone is a failure domain inside a region. Inside a region, traffic is split
// over the zones' groups in proportion to their capacity (docs/design.md §3
// rule 2).
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
	// Instances of the group. Required: at least one, at most 10000,
	// unless the group is autoscaled (Autoscaling.Enabled): then it may be
	// empty or absent, the group scaling from zero, and the control plane
	// adds the instances it starts to the configuration it serves. An
	// empty group has capacity 0: the planner gives its share to the
	// other groups. Addresses are unique across the file.
	Instances []Instance `mapstructure:"instances"`
	// Autoscaling is the group's autoscaler (docs/design.md §6). Optional: off
	// unless max_instances is set. Defaults as in DefaultAutoscaling.
	Autoscaling Autoscaling `mapstructure:"autoscaling"`
}

// Instance is one backend process.
type Instance struct {
	// Address is where the instance listens, as host:port (IPv6 hosts in
	// brackets, "[::1]:9101"). The host is an IP address or a DNS name;
	// the port is 1..65535. Required, unique across the file.
	Address string `mapstructure:"address"`
	// MaxConcurrency is the most requests this instance may have in flight at
	// once (Cloud Run concurrency, docs/design.md §4). Requests beyond it
	// wait in the gfe's pending queue. Default 0, which means unlimited; at
	// most 1000000; negative is invalid.
	MaxConcurrency int `mapstructure:"max_concurrency"`
	// Demoted marks an instance the group keeps for overflow only. The
	// autoscaler sets it, in the configuration the control plane serves,
	// on the instances it scaled down before it stops them (docs/design.md §6);
	// an operator may set it too, for a warm standby. A demoted instance
	// gets a request only when every healthy non-demoted instance of its
	// group is at its concurrency limit (configured or soft), and it
	// counts for nothing in the group's capacity (ActiveInstances,
	// GroupCapacity). It is health-checked like any other. Default false.
	Demoted bool `mapstructure:"demoted"`
}

// ActiveInstances returns how many of g's instances are not Demoted: the
// instances its capacity counts.
func (g *Group) ActiveInstances() int {
	n := 0
	for _, in := range g.Instances {
		if !in.Demoted {
			n++
		}
	}
	return n
}

// Service is a backend service: what a route points at (docs/design.md §2).
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
	// Spill tunes preemptive spill out of unhealthy regions (docs/design.md
	// §3 rule 5). Defaults as in DefaultSpill.
	Spill Spill `mapstructure:"spill"`
	// OutlierDetection ejects instances that fail real requests (passive
	// health checking, next to the active HealthCheck). Defaults as in
	// DefaultOutlierDetection.
	OutlierDetection OutlierDetection `mapstructure:"outlier_detection"`
	// TargetUtilization is the headroom of the plan: the fraction of each
	// group's capacity the planner fills before it spills to the next
	// region, in (0, 1]. Default 0.95. Below 1 it keeps a region that the
	// plan fills from running at exactly its limit, where any burst makes
	// a queue that never drains; 1 plans with the declared capacity as is.
	// Rule 6's uniform overload starts when demand exceeds this fraction of
	// the global capacity.
	TargetUtilization float64 `mapstructure:"target_utilization"`
	// Feedback tunes how a gfe's own requests shrink a group's effective
	// capacity (docs/design.md §3 rule 8; lb/capacity). Defaults as in
	// DefaultFeedback.
	Feedback Feedback `mapstructure:"feedback"`
	// MaxPendingRequests is the most requests of this service that wait
	// at once in a gfe's pending queue (a service with an autoscaled
	// group), in 1..1000000. Default DefaultMaxPendingRequests (1000):
	// 100 requests/s through a 10 s cold start. A request beyond it is
	// answered 429 at once, with the Retry-After of a wait that ran out.
	// The gfe also bounds its whole queue (gfe --pending-max).
	MaxPendingRequests int `mapstructure:"max_pending_requests"`
	// LoadAware is how a planned policy (waterfall, min_rtt) chooses an
	// instance inside the group the plan chose (lb/loadaware). Defaults as
	// in DefaultLoadAware: off, round robin inside the group as before.
	LoadAware LoadAware `mapstructure:"load_aware"`
	// Overload is what a gfe does when the service's global demand exceeds
	// its capacity (docs/design.md §3 rule 6; lb/shed). Defaults as in
	// DefaultOverload: off, the excess queues at the backends as before.
	Overload Overload `mapstructure:"overload"`
	// Prequal is where and how fast a gfe probes the instances of a
	// service with policy prequal. Defaults as in DefaultPrequal.
	Prequal Prequal `mapstructure:"prequal"`
}

// LoadAware configures the load-aware choice of an instance inside a
// group of a planned policy: the power of two choices by requests in
// flight × peak-EWMA latency × ORCA utilization, with slow start for new
// and returning instances (lb/loadaware, docs/design.md §3). Baseline
// policies ignore it.
type LoadAware struct {
	// Enabled turns the load-aware choice on. Default false: round robin
	// inside the group (no benchmark has chosen a default yet).
	Enabled bool `mapstructure:"enabled"`
	// SlowStart is the window over which a new or returning instance's
	// share ramps up to a full one; 0 turns slow start off. Default 30s;
	// at most 1h.
	SlowStart time.Duration `mapstructure:"slow_start"`
	// Decay is the time constant of the latency estimate (peak EWMA) and
	// of the fading of utilization reports. Default 1s; in [1ms, 1m].
	Decay time.Duration `mapstructure:"decay"`
	// ProbeAfter is how long a latency estimate lives without a new
	// answer: an instance not heard from for longer gets one probe
	// request, so that a slow instance that recovered gets its share
	// back. Default 2s; in [1ms, 1h].
	ProbeAfter time.Duration `mapstructure:"probe_after"`
	// UtilizationWeight is how much a reported utilization ρ counts: the
	// cost is multiplied by 1 + weight·ρ/(1−ρ). Default 1; 0 ignores load
	// reports; in [0, 100].
	UtilizationWeight float64 `mapstructure:"utilization_weight"`
}

// Overload configures fast shedding in global overload: when the plan
// says the service's global demand exceeds its capacity (λ > 1), every
// gfe refuses 1 − admit/λ of its arrivals at once with 503 and
// Retry-After, the same share at every site, so that the admitted
// requests keep their uncongested latency (lb/shed, docs/design.md §3).
// Planned policies only.
type Overload struct {
	// Shed turns the shedding on. Default false: the excess is sent on
	// and queues at the backends' limits.
	Shed bool `mapstructure:"shed"`
	// RetryAfter is the Retry-After a refused request is answered with,
	// rounded up to whole seconds. Default 1s; in [1s, 1h].
	RetryAfter time.Duration `mapstructure:"retry_after"`
	// Admit is the load admitted in overload, as a fraction of the plan's
	// capacity (which already includes target_utilization): the gfes refuse
	// 1 − admit·capacity/demand of their arrivals whenever that is
	// positive, so below 1 they start refusing once demand exceeds admit ×
	// capacity, before the plan itself is in overload, and never below it.
	// Default 1; in (0, 1].
	Admit float64 `mapstructure:"admit"`
	// MaxShed is the largest share of its arrivals a gfe refuses for
	// global overload, however high the plan's demand: the plan's λ counts
	// the demand the peers gossip, which a gossip-key holder can inflate
	// up to the plausibility bounds (twice the declared capacity per
	// site), and without this cap such a lie has every gfe refuse most of
	// its real users. Above λ = admit/(1 − max_shed) (1.8× capacity at
	// admit 0.9) the admitted excess queues at the backends instead.
	// Default 0.5; in (0, 1].
	MaxShed float64 `mapstructure:"max_shed"`
}

// Feedback configures the local signals of a service (lb/capacity): what
// counts as overload, how far a group's effective capacity shrinks and how
// fast it comes back.
type Feedback struct {
	// Enabled turns the local signals on. Default true. Off, every group
	// is planned at its declared capacity.
	Enabled bool `mapstructure:"enabled"`
	// RejectFraction is the fraction of requests refused for capacity (429,
	// 503, gRPC UNAVAILABLE/RESOURCE_EXHAUSTED) or left unanswered above
	// which a group is overloaded, in (0, 1). Default 0.01.
	RejectFraction float64 `mapstructure:"reject_fraction"`
	// QueueDelay is how far a group's mean latency must rise above its
	// baseline (the lowest in the last minute) to count as queueing.
	// Default 40ms; in [1ms, 1m].
	QueueDelay time.Duration `mapstructure:"queue_delay"`
	// Decrease is the fraction of its load an overloaded group keeps, in
	// (0, 1). Default 0.95 (less when the signal asks for more).
	Decrease float64 `mapstructure:"decrease"`
	// Hold is the least time between two shrinks of one group. Default 1s.
	Hold time.Duration `mapstructure:"hold"`
	// RecoverDelay is how long a group's capacity stays shrunk after its
	// last signal. Default 2s.
	RecoverDelay time.Duration `mapstructure:"recover_delay"`
	// RecoverRate is how much of its capacity a group gets back per
	// second after RecoverDelay, in (0, 1]. Default 0.1.
	RecoverRate float64 `mapstructure:"recover_rate"`
	// MinFactor is the smallest fraction of its capacity a group is ever
	// planned with, in (0, 1]. Default 0.1.
	MinFactor float64 `mapstructure:"min_factor"`
	// MaxShrink is the largest fraction of its effective capacity a group
	// loses in one shrink, in (0, 1]. Default 0.25 (a gfe's idea of a
	// group's load can lag the other gfes'; deeper cuts take a few holds).
	MaxShrink float64 `mapstructure:"max_shrink"`
	// ConfirmUtilization is, for groups whose instances send load
	// reports (endpoint-load-metrics, ORCA), the mean reported
	// utilization below which latency above the baseline and requests in
	// flight at the concurrency limits do not shrink the group: the
	// backend says it is not full, so the delay comes from elsewhere (the
	// network, a busy gfe machine). In [0, 2]. Default 0.8 (below it a
	// backend queues little; lb/capacity.Config); 0 believes latency and
	// in-flight whatever the reports say.
	ConfirmUtilization float64 `mapstructure:"confirm_utilization"`
}

// OutlierDetection configures passive health checking: a gfe ejects an
// instance from balancing after a run of consecutive failures of real
// requests, for BaseEjectionTime times the number of times it has been
// ejected, capped at MaxEjectionTime, and never ejects more than
// MaxEjectionPercent of an instance group's instances at once. An ejected instance
// comes back by itself when its ejection time is over. Either trigger may be
// disabled with 0; with both 0 nothing is ever ejected.
type OutlierDetection struct {
	// Consecutive5xx is the number of consecutive 5xx responses (or, for
	// gRPC, failing statuses the gfe maps to 5xx) from one instance that
	// eject it. Default 5; 0 disables this trigger; negative is invalid.
	Consecutive5xx int `mapstructure:"consecutive_5xx"`
	// ConsecutiveConnectFailures is the number of consecutive failures to
	// connect to one instance (refused, reset or timed out before a
	// connection opened) that eject it. Default 3; 0 disables this trigger;
	// negative is invalid.
	ConsecutiveConnectFailures int `mapstructure:"consecutive_connect_failures"`
	// BaseEjectionTime is how long a first ejection lasts, as a duration
	// string; the n-th consecutive ejection of an instance lasts
	// n × BaseEjectionTime, up to MaxEjectionTime. Default 30s; must be > 0.
	BaseEjectionTime time.Duration `mapstructure:"base_ejection_time"`
	// MaxEjectionTime caps the length of one ejection. Default 300s; must be
	// >= BaseEjectionTime.
	MaxEjectionTime time.Duration `mapstructure:"max_ejection_time"`
	// MaxEjectionPercent is the largest share of the healthy instances of
	// each of the service's instance groups, in percent (0..100), that may
	// be ejected at the same time (rounded down); an instance that would
	// exceed it stays in, and at least one instance of every group always
	// stays in. Default 50; 0 means never eject (only counts are kept), 100
	// allows ejecting all but one instance of a group.
	MaxEjectionPercent int `mapstructure:"max_ejection_percent"`
}

// Backend is one instance group used by a service, with the capacity the
// service may put on it. Which limit to set depends on the service's
// BalancingMode: RATE takes exactly one of MaxRatePerInstance and MaxRate,
// CONNECTION exactly one of MaxConnectionsPerInstance and MaxConnections,
// UTILIZATION takes both MaxUtilization and UtilizationRatePerInstance. A
// zero limit is unset; limits of the other modes must stay unset.
type Backend struct {
	// Group is the name of the instance group. Required; must name a group
	// under regions.
	Group string `mapstructure:"group"`
	// MaxRatePerInstance is the RATE capacity of each healthy instance, in
	// requests per second. 0 = unset; otherwise in (0, 1e9].
	MaxRatePerInstance float64 `mapstructure:"max_rate_per_instance"`
	// MaxRate is the RATE capacity of the whole group, in requests per second,
	// when all its instances are healthy; it shrinks in proportion to the
	// healthy fraction. 0 = unset; otherwise in (0, 1e9].
	MaxRate float64 `mapstructure:"max_rate"`
	// MaxConnectionsPerInstance is the CONNECTION capacity of each healthy
	// instance, in concurrent connections. 0 = unset; otherwise in
	// 1..1e9.
	MaxConnectionsPerInstance int `mapstructure:"max_connections_per_instance"`
	// MaxConnections is the CONNECTION capacity of the whole group when all
	// its instances are healthy, shrinking with the healthy fraction.
	// 0 = unset; otherwise in 1..1e9.
	MaxConnections int `mapstructure:"max_connections"`
	// MaxUtilization is the UTILIZATION target of each instance, in (0,1]:
	// the group is full when its healthy instances average this utilization.
	// 0 = unset.
	MaxUtilization float64 `mapstructure:"max_utilization"`
	// UtilizationRatePerInstance is, under UTILIZATION, the requests per
	// second one instance serves at full (100%) utilization: it turns
	// MaxUtilization into a capacity in requests/s, the unit of demand.
	// Required with MaxUtilization, in (0, 1e9]; 0 = unset.
	UtilizationRatePerInstance float64 `mapstructure:"utilization_rate_per_instance"`
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
	// CookieSecret is the secret every gfe derives the HMAC-SHA256 key of
	// generated cookies from (one key per service: HMAC-SHA256(secret,
	// "spillway affinity cookie key v1" ‖ 0x00 ‖ service name)), so that a
	// cookie issued by one gfe verifies on every other. Required for
	// generated_cookie, invalid for other types. At least 32 bytes of random
	// data, for example the output of `openssl rand -base64 32`. It reaches
	// the gfes inside the control plane's snapshot; keep it out of the file
	// with SPILLWAY_SERVICES_<i>_SESSION_AFFINITY_COOKIE_SECRET. Never shown
	// in validation messages.
	CookieSecret string `mapstructure:"cookie_secret"`
	// PreviousCookieSecret, when set, still verifies generated cookies but
	// no longer signs them, for rotation: move cookie_secret here and set a
	// new cookie_secret (cookies signed with the old one keep their backend
	// and are re-signed when next seen); remove it after cookie_ttl, after
	// which cookies still signed with it are ignored and replaced. Only for
	// generated_cookie; at least 32 bytes; must differ from CookieSecret.
	PreviousCookieSecret string `mapstructure:"previous_cookie_secret"`
	// CookieSecretFile names a file whose content (trailing line breaks
	// removed) is CookieSecret, so that the secret stays out of the
	// configuration file (a secret store's mount, systemd's
	// LoadCredential). Relative paths are from the configuration file's
	// directory. Load reads it and moves its content into CookieSecret,
	// leaving this field empty, so the canonical form a control plane
	// serves carries the value (over mutual TLS only) and not the path;
	// Parse never reads files and rejects a set field. Exclusive with
	// cookie_secret. A control plane re-reads it on SIGHUP.
	CookieSecretFile string `mapstructure:"cookie_secret_file"`
	// PreviousCookieSecretFile is CookieSecretFile for
	// PreviousCookieSecret.
	PreviousCookieSecretFile string `mapstructure:"previous_cookie_secret_file"`
}

// HealthCheck configures active health checking of a service's instances
// (docs/design.md §5). An instance turns healthy after HealthyThreshold
// consecutive passes and unhealthy after UnhealthyThreshold consecutive
// failures.
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
	// ("5s"). Default 5s; in [100ms, 1h]. Lower detects failures sooner at
	// the cost of probe load.
	Interval time.Duration `mapstructure:"interval"`
	// Timeout of one check. Default 1s; at least 50ms and < Interval:
	// shorter checks fail on healthy instances.
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

// Spill tunes preemptive spill (docs/design.md §3 rule 5): a region whose
// healthy fraction h is below Threshold keeps at most min(1, Slope·h) of the
// demand that reaches it, and the rest spills to the next-nearest region.
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
	// match only below /api/). Must start with "/". Default "/". It
	// matches the request's canonical path, decoded (lb/reqpath: slashes
	// merged, dot segments and backslashes refused), ASCII
	// case-insensitively ("/api/" matches "/API/x"), with segment
	// parameters left out ("/api/" matches "/api;v=1/x"); a prefix that
	// can match no canonical path (with '\', "//" or ';') is refused.
	PathPrefix string `mapstructure:"path_prefix"`
	// Service is the name of the backend service. Required; must name a
	// service under services.
	Service string `mapstructure:"service"`
	// Timeout bounds a whole request through this route, from the moment the
	// gfe has its headers to the end of the response, retries and time in
	// the pending queue included. Default 30s; in [10ms, 24h]. A request that
	// exceeds it gets 504 (or is reset if its response has started).
	// Long-lived streams are not bounded by it: WebSocket and other upgraded
	// connections (after their backend's 101), and gRPC calls over HTTP/2
	// to a gRPC service — one whose health_check.protocol is grpc — which
	// carry their own deadline. A request that only says it is gRPC
	// (content-type application/grpc) to any other service is bounded.
	Timeout time.Duration `mapstructure:"timeout"`
	// Retries is how many more times, each on another backend instance, the
	// gfe may send a request that failed: one that never reached a backend
	// (connection refused or reset before it was written), or an idempotent
	// one (GET, HEAD, OPTIONS, PUT, DELETE, TRACE) that failed before any
	// response byte. Default 1; must be in 0..5; 0 = never retry.
	Retries int `mapstructure:"retries"`
	// PerTryTimeout, when positive, bounds each attempt of an idempotent
	// request without a body (the requests that may be sent again after
	// reaching a backend) until its response headers: an attempt without
	// headers by then is abandoned, counts as a timeout of its backend and,
	// within Retries, goes to another instance — in another region first,
	// past the site's plan row if it must, as after a refused connection
	// (a backend host that vanished with requests in flight takes every
	// zone on it). Default 0: attempts are bounded only by Timeout, which
	// bounds all attempts together. At least 10ms when set, at most
	// Timeout.
	PerTryTimeout time.Duration `mapstructure:"per_try_timeout"`
}

// Listener is one port a gfe serves, and how. An http or https listener
// hands requests to the routes; a tcp listener sends every connection to
// its one Service. Fields marked "http/https" must stay zero on a tcp
// listener.
type Listener struct {
	// Name of the listener, e.g. "public-https", used in logs and metrics.
	// Required, unique among listeners, same syntax as Region.Name.
	Name string `mapstructure:"name"`
	// Protocol is http, https or tcp. Required: it has no default.
	Protocol ListenerProtocol `mapstructure:"protocol"`
	// Port the gfe binds, on the host of its --listen address. Required,
	// 1..65535, unique among listeners.
	Port int `mapstructure:"port"`
	// Service is the backend service a tcp listener sends its connections
	// to. tcp: required, must name a service whose balancing_mode is
	// CONNECTION. http and https: must be empty (routes decide).
	Service string `mapstructure:"service"`
	// Certificates of an https listener. https: required, at least one; the
	// gfe picks the one whose certificate names (SAN, else CN) match the
	// client's SNI, and the first one when none match or the client sends
	// no SNI. http and tcp: must be empty. The files are read by the gfe,
	// not by Load: validation only checks that the paths are set.
	Certificates []Certificate `mapstructure:"certificates"`
	// ReadHeaderTimeout bounds the time to read a request's headers
	// (against slowloris clients). http/https: default 10s, must be > 0.
	// tcp: must be 0.
	ReadHeaderTimeout time.Duration `mapstructure:"read_header_timeout"`
	// IdleTimeout closes a client connection that stays idle this long.
	// http/https: the keep-alive idle time between requests; default 90s,
	// in (0, 24h]. tcp: the time without a byte in either direction;
	// default 10m, in (0, 24h]. TCP keep-alive probes of a client
	// connection start only after idle_timeout + 15s of silence (then
	// every 15s, 9 unanswered drop it): an idle connection is closed
	// before it is ever probed.
	IdleTimeout time.Duration `mapstructure:"idle_timeout"`
	// FirstByteTimeout closes a tcp connection whose client sent no byte
	// this long after it was accepted (a client that only opens
	// connections). The backend is dialled at once, so a protocol where
	// the server speaks first works as long as its client answers within
	// this time. tcp: default 30s, in (0, 1h]. http/https: must be 0
	// (read_header_timeout bounds them).
	FirstByteTimeout time.Duration `mapstructure:"first_byte_timeout"`
	// MaxConnections is the most connections a tcp listener holds open at
	// once; one more is closed (reset) at once and counted in
	// spillway_gfe_tcp_refused_total{reason="listener_limit"}. tcp:
	// default 10000, in 1..1000000. http/https: must be 0.
	MaxConnections int `mapstructure:"max_connections"`
	// MaxConnectionsPerClient is the most connections one client IP
	// address may hold open at once on the listener; one more is closed
	// (reset) as soon as it is accepted, before it takes any of the fd
	// budget or reaches a server, and counted in
	// spillway_gfe_tcp_refused_total{reason="client_limit"} (tcp) or
	// spillway_gfe_listener_refused_total{reason="client_limit"} (http,
	// https: every connection counts, HTTP/1.1 on the fast path or
	// net/http, h2, h2c). Clients behind one NAT share it. Default 256,
	// in 1..1000000: one address cannot take the whole file-descriptor
	// budget of client connections.
	MaxConnectionsPerClient int `mapstructure:"max_connections_per_client"`
	// MaxHeaderBytes is the largest request header block accepted, in bytes
	// (a larger one gets 431). http/https: default 65536, in 1024..1048576.
	// tcp: must be 0.
	MaxHeaderBytes int `mapstructure:"max_header_bytes"`
	// MaxRequestBodyBytes is the largest request body accepted, in bytes (a
	// larger one gets 413). http/https: default 0, which means unlimited;
	// at most 1 TiB; negative is invalid. tcp: must be 0.
	MaxRequestBodyBytes int64 `mapstructure:"max_request_body_bytes"`
	// RequestBodyTimeout is the longest pause the gfe waits for the next
	// byte of a request body while it forwards the body: a client that
	// pauses longer gets 408 and its connection is closed, and its request
	// never counts against the backend. It bounds a pause, not the whole
	// upload, and not a gRPC call over HTTP/2 (its messages may pause as
	// long as the call lives). http/https: default 10s, must be >= 0; 0
	// means no limit (only the route's timeout then ends a stalled
	// upload). tcp: must be 0.
	RequestBodyTimeout time.Duration `mapstructure:"request_body_timeout"`
	// MaxConnectionAge ends a client connection gracefully once it is this
	// old (each connection draws its own age in ±10% of it, so that
	// connections opened together do not end together). Clients that keep
	// connections alive then spread again over the gfes behind a DNS name
	// or an L4 balancer after one is added or restarted. The first request
	// on a connection past its age is served, with "Connection: close"
	// (HTTP/1.1: the connection closes after the response) or a GOAWAY
	// (HTTP/2: streams in flight finish, new ones go to a new
	// connection). An idle connection past its age ends at idle_timeout as
	// before. http/https: default 0, which means never; at most 24h.
	// tcp: must be 0.
	MaxConnectionAge time.Duration `mapstructure:"max_connection_age"`
	// FastPath serves plain HTTP/1.1 requests of an http or https listener on
	// the gfe's own HTTP/1.1 fast path (docs/design.md §4, docs/listeners.md;
	// internal/gfe/h1 and httpproxy.ServeFast) instead of net/http's server:
	// a connection's request heads are read and parsed strictly by the gfe
	// (https: after the gfe's own TLS handshake, when ALPN chose http/1.1 or
	// nothing), and anything the fast path does not take (HTTP/2, h2c,
	// upgrades and WebSocket, Expect, CONNECT, chunked request bodies, ...)
	// is handed to net/http with the bytes already read, so it is served as
	// without the fast path. http/https: default true (false turns it off).
	// tcp: must be false.
	FastPath bool `mapstructure:"fast_path"`
}

// Certificate is a TLS certificate and its private key, as PEM files.
type Certificate struct {
	// CertFile is the path of the PEM certificate chain, leaf first.
	// Required.
	CertFile string `mapstructure:"cert_file"`
	// KeyFile is the path of the PEM private key of the leaf. Required.
	KeyFile string `mapstructure:"key_file"`
}

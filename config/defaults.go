package config

// The defaults of the schema (config.go): what an absent key means. Load
// and Parse start each entry from these before decoding the YAML over it
// (schema.go); New applies none.

import (
	"time"
)

// DefaultMaxPendingRequests is Service.MaxPendingRequests's default.
const DefaultMaxPendingRequests = 1000

// DefaultFeedback returns the default local-signal settings.
func DefaultFeedback() Feedback {
	return Feedback{
		Enabled:        true,
		RejectFraction: 0.01,
		QueueDelay:     40 * time.Millisecond,
		Decrease:       0.95,
		Hold:           time.Second,
		RecoverDelay:   2 * time.Second,
		RecoverRate:    0.1,
		MinFactor:      0.1,
		MaxShrink:      0.25,

		ConfirmUtilization: 0.8,
	}
}

// DefaultService returns a Service with every default set: waterfall,
// RATE, no affinity, DefaultHealthCheck, DefaultSpill and
// DefaultOutlierDetection. Name and Backends are left empty.
func DefaultService() Service {
	return Service{
		Policy:            PolicyWaterfall,
		BalancingMode:     ModeRate,
		SessionAffinity:   DefaultSessionAffinity(),
		HealthCheck:       DefaultHealthCheck(),
		Spill:             DefaultSpill(),
		OutlierDetection:  DefaultOutlierDetection(),
		TargetUtilization: 0.95,
		Feedback:          DefaultFeedback(),

		MaxPendingRequests: DefaultMaxPendingRequests,
		LoadAware:          DefaultLoadAware(),
		Overload:           DefaultOverload(),
		Prequal:            DefaultPrequal(),
	}
}

// DefaultLoadAware returns the default load-aware choice: off (round robin
// inside a group, today's behaviour), with lb/loadaware's defaults for
// when it is turned on: 30s slow start, 1s decay, 2s probe_after,
// utilization weight 1.
func DefaultLoadAware() LoadAware {
	return LoadAware{
		SlowStart:         30 * time.Second,
		Decay:             time.Second,
		ProbeAfter:        2 * time.Second,
		UtilizationWeight: 1,
	}
}

// DefaultOverload returns the default overload handling: no shedding
// (today's behaviour), with a 1s Retry-After, admit 1 and at most half of
// the arrivals refused for when it is turned on.
func DefaultOverload() Overload {
	return Overload{RetryAfter: time.Second, Admit: 1, MaxShed: 0.5}
}

// DefaultOutlierDetection returns the default outlier detection: eject after
// 5 consecutive 5xx or 3 consecutive connect failures, for 30s growing to at
// most 300s, never more than half of a service's instances at once.
func DefaultOutlierDetection() OutlierDetection {
	return OutlierDetection{
		Consecutive5xx:             5, // Envoy's default
		ConsecutiveConnectFailures: 3,
		BaseEjectionTime:           30 * time.Second,
		MaxEjectionTime:            300 * time.Second,
		MaxEjectionPercent:         50, // keep half the fleet whatever happens
	}
}

// DefaultMaxConnectionsPerClient is the default max_connections_per_client
// of every listener: one client address holds at most this many
// connections to it.
const DefaultMaxConnectionsPerClient = 256

// DefaultListener returns a Listener of protocol p with the defaults of that
// protocol. http and https (and any other p): 10s read_header_timeout, 90s
// idle_timeout, 64 KiB max_header_bytes, unlimited body, 10s
// request_body_timeout, 256 max_connections_per_client, the fast path on.
// tcp: 10m idle_timeout, 30s first_byte_timeout, 10000 max_connections, 256
// max_connections_per_client, and the http-only fields zero. Name, Port,
// Service and Certificates are left empty.
func DefaultListener(p ListenerProtocol) Listener {
	if p == ListenerTCP {
		return Listener{
			Protocol:                p,
			IdleTimeout:             10 * time.Minute,
			FirstByteTimeout:        30 * time.Second,
			MaxConnections:          10_000,
			MaxConnectionsPerClient: DefaultMaxConnectionsPerClient,
		}
	}
	return Listener{
		Protocol:                p,
		ReadHeaderTimeout:       10 * time.Second,
		IdleTimeout:             90 * time.Second,
		MaxHeaderBytes:          64 << 10,
		RequestBodyTimeout:      10 * time.Second,
		MaxConnectionsPerClient: DefaultMaxConnectionsPerClient,
		FastPath:                true,
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

// DefaultSpill returns the preemptive spill of docs/design.md §3 rule 5:
// below half healthy, keep 2h of the demand.
func DefaultSpill() Spill {
	return Spill{Threshold: 0.5, Slope: 2}
}

// DefaultRoute returns a route matching every host and path, with no
// service, a 30s timeout and one retry.
func DefaultRoute() Route {
	return Route{Host: "*", PathPrefix: "/", Timeout: 30 * time.Second, Retries: 1}
}

package controlplane

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/internal/mtls"
	"github.com/spillway-lb/spillway/internal/quotaredis"
	"github.com/spillway-lb/spillway/internal/xdsexport"
	"github.com/spillway-lb/spillway/lb/clock"
	"github.com/spillway-lb/spillway/lb/health"
)

// Config is what an operator sets for one control plane replica (the flags of
// cmd/controlplane). Start from DefaultConfig; the zero value is not valid.
// A Config is read-only once passed to New.
type Config struct {
	// ConfigPath is the YAML file with the operator configuration (the
	// schema of package config). It is loaded with config.Load, so
	// SPILLWAY_* environment overrides apply, watched for changes, and
	// reloaded; an invalid change is rejected and the last good
	// configuration keeps being served. Required.
	ConfigPath string
	// ListenAddr is the gRPC listen address (ControlPlane service, gRPC
	// health, and reflection with GRPCReflection). Default
	// "127.0.0.1:7000". Port 0 picks a free port; Daemon.Addr reports it.
	ListenAddr string
	// TLS authenticates the gRPC listener with mutual TLS (package mtls):
	// every client must present a certificate the CA bundle vouches for
	// and TLS.AllowedClients allows, or its handshake is refused. Required:
	// set the files and AllowedClients, or TLS.InsecurePlaintext to serve
	// in clear text, in which case every snapshot carries the
	// configuration with its secrets redacted (config.Redact). The files
	// are re-read at each handshake, so certificates rotate without a
	// restart.
	TLS mtls.ServerConfig
	// GRPCReflection registers the gRPC reflection service
	// (--grpc-reflection), which lists the API to any authenticated
	// client. Default false.
	GRPCReflection bool
	// AdminAddr is the admin HTTP listen address (/metrics, /healthz,
	// /readyz, /status, and /debug/pprof/ with Pprof). Default
	// "127.0.0.1:7100": loopback, since it is unauthenticated unless
	// AdminTokenFile is set. Port 0 picks a free port.
	AdminAddr string
	// AdminTokenFile, when set, names a file holding a bearer token that
	// every admin request but /healthz and /readyz must carry
	// (adminhttp.Guard; re-read at each request). Default "": no token.
	AdminTokenFile string
	// Pprof mounts the Go profiler under /debug/pprof/ on the admin
	// listener (never /debug/pprof/cmdline). Default false.
	Pprof bool
	// NodeName identifies this replica: its memberlist name (Gossip.Name is
	// set to it), the control_plane_id of its snapshots, and its key in the
	// Maglev table that shares out health checks. Required, unique among
	// control planes and gfes.
	NodeName string
	// Gossip configures this replica's memberlist node. Name is overridden
	// with NodeName. Default gossip.DefaultConfig().
	Gossip gossip.Config
	// GossipCA is the CA bundle whose certificates may seal gossip states
	// (--gossip-ca; default TLS.CA). With TLS this replica seals its
	// states with its certificate's key (which must name NodeName) and
	// believes another node's state only if it is sealed by a certificate
	// this bundle vouches for that names that node (mtls.GossipSeals), so
	// a gossip-key holder cannot publish a replica's facts (health
	// verdicts, leases, autoscaled instances) under a listed replica's
	// name. Gossip.AcceptUnsealed relaxes it for rolling upgrades.
	GossipCA string
	// Replicas are the node names of the control-plane replicas that share
	// health checks with this one (flag --replicas; listing NodeName too is
	// harmless, so every replica may share one list). Health checks are
	// shared out only among the alive members of this list, and only their
	// gossiped verdicts are served: a gossip member that claims to be a
	// control plane under any other name is ignored (and logged), so it
	// can neither take over health checks nor mark backends unhealthy.
	// With TLS a state under a listed name counts only when sealed by that
	// replica's own certificate (GossipCA), so neither can a gossip-key
	// holder that joins under the name of a listed replica that is down.
	// Default empty: this replica checks every group itself.
	Replicas []string
	// ReloadDebounce is how long the config file must stay quiet after a
	// change event before it is reloaded, so that an editor's
	// truncate-then-write is read once, complete. Default 100ms. Longer
	// delays every reload by as much.
	ReloadDebounce time.Duration
	// ReloadPoll is how often the config file is re-read whatever the file
	// events say: a safety net for file systems that do not report changes.
	// Re-reading an unchanged file costs one read and a byte comparison.
	// Default 30s; 0 disables polling.
	ReloadPoll time.Duration
	// ShutdownGrace bounds how long the gRPC and admin servers wait for
	// calls under way when the daemon stops, before closing them. Open
	// snapshot streams are ended at once (with UNAVAILABLE, so gfes move to
	// another replica). Default 5s.
	ShutdownGrace time.Duration
	// KeepaliveMinTime is the shortest interval between client keepalive
	// pings the gRPC server tolerates; a client pinging more often is
	// disconnected (grpc keepalive.EnforcementPolicy). Default 5s, which
	// lets cpclient detect a dead control plane within seconds.
	KeepaliveMinTime time.Duration
	// QuotaErrorRate is the fraction of AllocateQuota calls the quota
	// service fails on purpose with UNAVAILABLE, before charging anything,
	// so that the gfes' fail-open path stays exercised in production
	// (docs/design.md §7). Default 0; in [0, 0.5].
	QuotaErrorRate float64
	// QuotaRedis is where quota counters are shared with the other
	// replicas (package quotaredis; flags --quota-redis,
	// --quota-redis-password-file, --quota-redis-timeout,
	// --quota-redis-tls-ca, --quota-redis-tls-cert, --quota-redis-tls-key,
	// --quota-redis-tls-server-name). Default: no
	// Addr, counters in this replica's memory — right for one replica;
	// with several, each counts alone and a consumer spread over n of them
	// may get up to n times its limit.
	QuotaRedis quotaredis.Config
	// XDS serves the plan over xDS to Envoy and proxyless gRPC clients
	// when XDS.Listen is set. Default: off.
	XDS XDSConfig
	// Autoscale runs the autoscaler of the groups with an autoscaling
	// block (flags --autoscale-*). Default: off.
	Autoscale AutoscaleConfig
}

// DefaultConfig returns a Config with every default set; ConfigPath and
// NodeName are left empty.
func DefaultConfig() Config {
	return Config{
		ListenAddr:       "127.0.0.1:7000",
		AdminAddr:        "127.0.0.1:7100",
		Gossip:           gossip.DefaultConfig(),
		ReloadDebounce:   100 * time.Millisecond, // longer than an editor's save, short for an operator
		ReloadPoll:       30 * time.Second,
		ShutdownGrace:    5 * time.Second,
		KeepaliveMinTime: 5 * time.Second, // below cpclient's default keepalive time of 10s
		XDS: XDSConfig{
			PlanInterval: 500 * time.Millisecond, // the gfe's default --plan-interval
			Damping:      0.5,                    // the gfe's default --damping
			EnvoyListen:  "0.0.0.0:10000",
			// The LRS interval gRPC and Envoy examples use; a report
			// every second moves the plan within two plan intervals.
			LoadReportInterval: time.Second,
			MaxSiteDemand:      1, // see xdsexport.LRSConfig.MaxSiteShare
			Limits:             xdsexport.DefaultLimits(),
		},
	}
}

// Validate reports every invalid field at once, each error naming the field
// (as its command-line flag where there is one) and the bad value.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.ConfigPath == "" {
		bad("config: required")
	}
	if c.NodeName == "" {
		bad("node: required")
	}
	for _, a := range []struct{ name, addr string }{{"listen", c.ListenAddr}, {"admin", c.AdminAddr}} {
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			bad("%s: must be host:port, got %q", a.name, a.addr)
		}
	}
	if c.ReloadDebounce < 0 {
		bad("reload_debounce: must be >= 0, got %v", c.ReloadDebounce)
	}
	if c.ReloadPoll < 0 {
		bad("reload_poll: must be >= 0, got %v", c.ReloadPoll)
	}
	if c.ShutdownGrace < 0 {
		bad("shutdown_grace: must be >= 0, got %v", c.ShutdownGrace)
	}
	if !(c.QuotaErrorRate >= 0 && c.QuotaErrorRate <= 0.5) {
		bad("quota_error_rate: must be in [0, 0.5], got %v", c.QuotaErrorRate)
	}
	if err := c.QuotaRedis.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.KeepaliveMinTime <= 0 {
		bad("keepalive_min_time: must be > 0, got %v", c.KeepaliveMinTime)
	}
	c.XDS.validate(c.TLS, bad)
	c.Autoscale.validate(bad)
	if err := c.TLS.Validate(); err != nil {
		errs = append(errs, err)
	}
	for i, r := range c.Replicas {
		if r == "" {
			bad("replicas[%d]: empty name", i)
		}
	}
	g := c.Gossip
	g.Name = c.NodeName
	if err := g.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Options holds the daemon's dependencies. The zero value is usable.
type Options struct {
	// Clock drives health-check schedules, reload debouncing and polling,
	// and the startup settle deadline. Nil means the real clock. Gossip
	// (memberlist) always runs on the real clock.
	Clock clock.Clock
	// Logger receives every component's logs, each with a component field.
	// The zero Logger discards everything.
	Logger zerolog.Logger
	// Rand returns uniform random 64-bit values for health-check jitter. It
	// is called from several goroutines, under a lock the daemon adds. Nil
	// means math/rand/v2.Uint64.
	Rand func() uint64
	// Prober, if not nil, probes every instance for every health check
	// instead of the real HTTP, TCP and gRPC probers (tests). It must be
	// safe for concurrent use.
	Prober health.Prober
	// Registry receives the daemon's metrics. Nil means a new registry with
	// the Go and process collectors, served on the admin /metrics.
	Registry *prometheus.Registry
}

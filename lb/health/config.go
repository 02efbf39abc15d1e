package health

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"
)

// Protocol is how a target is probed.
type Protocol string

// The protocols a health check can use.
const (
	// ProtocolHTTP sends GET Path and passes when the status code is in
	// ExpectedStatus.
	ProtocolHTTP Protocol = "http"
	// ProtocolTCP passes when a TCP connection to the target opens.
	ProtocolTCP Protocol = "tcp"
	// ProtocolGRPC calls grpc.health.v1.Health/Check for GRPCService and
	// passes only on SERVING.
	ProtocolGRPC Protocol = "grpc"
)

// StatusRange is an inclusive range of HTTP status codes.
type StatusRange struct {
	// Min is the lowest status code that passes. Default 200.
	Min int `mapstructure:"min"`
	// Max is the highest status code that passes. Default 299.
	Max int `mapstructure:"max"`
}

// Contains reports whether Min <= code <= Max.
func (r StatusRange) Contains(code int) bool { return r.Min <= code && code <= r.Max }

// String formats the range as "200-299".
func (r StatusRange) String() string { return fmt.Sprintf("%d-%d", r.Min, r.Max) }

// Config is one health check, as an operator writes it under a backend
// service's health_check block. The zero value is not valid; start from
// DefaultConfig. A Config is read-only once handed to a Checker.
type Config struct {
	// Protocol is http, tcp or grpc. Default http.
	Protocol Protocol `mapstructure:"protocol"`

	// Path is the HTTP request path, with an optional query. Used by http
	// only. Default "/".
	Path string `mapstructure:"path"`
	// Host is the HTTP Host header. Used by http only. Empty (the default)
	// means the target's address.
	Host string `mapstructure:"host"`
	// ExpectedStatus is the range of HTTP status codes that pass. Used by
	// http only; redirects are not followed, so 3xx fails unless included.
	// Default 200-299.
	ExpectedStatus StatusRange `mapstructure:"expected_status"`

	// GRPCService is the service name sent in the grpc.health.v1 Check
	// request. Used by grpc only. Empty (the default) asks for the health of
	// the whole server.
	GRPCService string `mapstructure:"grpc_service"`

	// Interval is the wait between the end of one probe of a target and the
	// start of the next, before jitter. Default 5s. Lower detects failure
	// sooner at the cost of probe load (one probe per target per interval).
	Interval time.Duration `mapstructure:"interval"`
	// Timeout bounds one probe; a probe that takes longer fails. Must be
	// <= Interval. Default 1s. Lower flags slow backends as failing.
	Timeout time.Duration `mapstructure:"timeout"`
	// HealthyThreshold is the number of consecutive passed probes that make
	// an Unhealthy target Healthy. Default 2. Higher keeps a flapping backend
	// out longer.
	HealthyThreshold int `mapstructure:"healthy_threshold"`
	// UnhealthyThreshold is the number of consecutive failed probes that make
	// a Healthy (or Unknown) target Unhealthy. Default 3. Higher rides out
	// blips at the cost of slower failure detection: a dead backend keeps
	// traffic for about UnhealthyThreshold × Interval.
	UnhealthyThreshold int `mapstructure:"unhealthy_threshold"`
	// Jitter spreads probes in time, as a fraction of Interval in [0, 1):
	// each wait is drawn uniformly from Interval × [1-Jitter, 1+Jitter], and
	// a new target's first probe comes after a wait drawn from
	// [0, Jitter × Interval). Default 0.1. Zero probes on a fixed grid and
	// probes new targets at once.
	Jitter float64 `mapstructure:"jitter"`

	// InitialStatus is the status of a target before its first probe:
	// unknown, healthy or unhealthy (see the package doc). Default unknown.
	InitialStatus Status `mapstructure:"initial_status"`
}

// DefaultConfig returns a complete, valid Config: an HTTP check of "/"
// expecting 2xx, every 5s with a 1s timeout, 2 passes to become healthy,
// 3 failures to become unhealthy, 10% jitter, new targets Unknown.
func DefaultConfig() Config {
	return Config{
		Protocol:           ProtocolHTTP,
		Path:               "/",
		ExpectedStatus:     StatusRange{Min: 200, Max: 299},
		Interval:           5 * time.Second,
		Timeout:            time.Second,
		HealthyThreshold:   2,
		UnhealthyThreshold: 3,
		Jitter:             0.1,
		InitialStatus:      StatusUnknown,
	}
}

// Validate reports every problem with c, joined with errors.Join. Each
// message starts with the field's config name (for example
// "unhealthy_threshold: must be >= 1, got 0"); callers prefix the path of
// the block the Config came from. Fields that the protocol does not use are
// not checked.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	switch c.Protocol {
	case ProtocolHTTP:
		if !strings.HasPrefix(c.Path, "/") {
			add("path: must start with \"/\", got %q", c.Path)
		} else if _, err := url.ParseRequestURI(c.Path); err != nil {
			add("path: %w", err)
		}
		if strings.ContainsAny(c.Host, " \t\r\n/") {
			add("host: must be a host or host:port, got %q", c.Host)
		}
		r := c.ExpectedStatus
		if r.Min < 100 || r.Max > 599 || r.Min > r.Max {
			add("expected_status: must satisfy 100 <= min <= max <= 599, got min %d max %d", r.Min, r.Max)
		}
	case ProtocolTCP, ProtocolGRPC:
	default:
		add("protocol: must be one of http, tcp, grpc, got %q", c.Protocol)
	}

	if c.Interval <= 0 {
		add("interval: must be > 0, got %s", c.Interval)
	}
	if c.Timeout <= 0 {
		add("timeout: must be > 0, got %s", c.Timeout)
	} else if c.Interval > 0 && c.Timeout > c.Interval {
		add("timeout: must be <= interval (%s), got %s", c.Interval, c.Timeout)
	}
	if c.HealthyThreshold < 1 {
		add("healthy_threshold: must be >= 1, got %d", c.HealthyThreshold)
	}
	if c.UnhealthyThreshold < 1 {
		add("unhealthy_threshold: must be >= 1, got %d", c.UnhealthyThreshold)
	}
	if !(c.Jitter >= 0 && c.Jitter < 1) || math.IsNaN(c.Jitter) {
		add("jitter: must be in [0, 1), got %g", c.Jitter)
	}
	switch c.InitialStatus {
	case StatusUnknown, StatusHealthy, StatusUnhealthy:
	default:
		add("initial_status: must be one of unknown, healthy, unhealthy, got %q", c.InitialStatus)
	}
	return errors.Join(errs...)
}

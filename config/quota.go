package config

import (
	"github.com/spillway-lb/spillway/lb/quota"
	"github.com/spillway-lb/spillway/lb/reqpath"
)

// Quota is per-consumer quota (docs/design.md §7): named metrics with a default
// limit per consumer per minute, what each request charges, the consumers
// and their API keys, and overrides. The zero value has no metrics: no
// request is charged.
type Quota struct {
	// Metrics are the named counters. Names are unique, with the syntax of
	// service names.
	Metrics []QuotaMetric `mapstructure:"metrics"`
	// Charges say which requests charge which metric, and how much. A
	// request charges every entry that matches it (service, method, path
	// prefix).
	Charges []QuotaCharge `mapstructure:"charges"`
	// Consumers map API keys to projects: the consumer a request is charged
	// to. A key arrives in the x-api-key header or the key query parameter
	// (the header wins). Keys are unique.
	Consumers []QuotaConsumer `mapstructure:"consumers"`
	// ProducerOverrides are the service owner's limits for one project and
	// metric, which may raise or lower the default. One per (project,
	// metric).
	ProducerOverrides []QuotaOverride `mapstructure:"producer_overrides"`
	// ConsumerOverrides are a project's own caps, which can only lower its
	// limit. One per (project, metric).
	ConsumerOverrides []QuotaOverride `mapstructure:"consumer_overrides"`
	// AllowAnonymous charges a request without a known API key to the
	// project "anonymous", at the default limits (with its overrides, if
	// any). Default false: such a request to a route that charges quota is
	// refused with 401 and charges nothing.
	AllowAnonymous bool `mapstructure:"allow_anonymous"`
}

// AnonymousProject is the project requests without a known API key are
// charged to when Quota.AllowAnonymous is set.
const AnonymousProject = "anonymous"

// QuotaUnit is what a metric counts.
type QuotaUnit string

// The units of a quota metric.
const (
	// QuotaRequests counts requests: each matching request charges its
	// charge's cost.
	QuotaRequests QuotaUnit = "requests"
	// QuotaBytes counts request payload bytes: each matching request
	// charges its Content-Length times its charge's cost. A matching
	// request with a body of unknown length (chunked, or HTTP/2 without
	// content-length) is refused with 411 Length Required before any of
	// it is read: the charge is decided, and refused, before a byte
	// reaches a backend.
	QuotaBytes QuotaUnit = "bytes"
)

// QuotaMetric is one named counter.
type QuotaMetric struct {
	// Name of the metric, e.g. "read-requests". Required, unique.
	Name string `mapstructure:"name"`
	// Unit is what the metric counts: "requests" (default) or "bytes".
	Unit QuotaUnit `mapstructure:"unit"`
	// DefaultLimit is each consumer's limit per minute without overrides.
	// Required, in 0..maxQuotaLimit (0 refuses every charge).
	DefaultLimit int64 `mapstructure:"default_limit"`
}

// QuotaCharge says that requests of a service (optionally only some
// methods and paths) charge a metric.
type QuotaCharge struct {
	// Service whose requests are charged. Required; must name a service.
	Service string `mapstructure:"service"`
	// Method, if set, limits the charge to requests of this HTTP method
	// (upper case, e.g. "POST"). Default: every method.
	Method string `mapstructure:"method"`
	// PathPrefix limits the charge to request paths starting with it
	// (plain string prefix, matched as Route.PathPrefix is: ASCII
	// case-insensitive, segment parameters left out). Default "/".
	PathPrefix string `mapstructure:"path_prefix"`
	// Metric charged. Required; must name a metric.
	Metric string `mapstructure:"metric"`
	// Cost is charged per request (requests metric) or per payload byte
	// (bytes metric). Default 1; in 1..maxQuotaCost.
	Cost int64 `mapstructure:"cost"`
}

// QuotaConsumer maps an API key to a project.
type QuotaConsumer struct {
	// APIKey is the key. Required, unique, 8 to 256 printable ASCII bytes
	// without spaces.
	APIKey string `mapstructure:"api_key"`
	// Project the key's requests are charged to. Required, with the syntax
	// of service names.
	Project string `mapstructure:"project"`
}

// QuotaOverride sets the limit of one project for one metric.
type QuotaOverride struct {
	// Project overridden. Required; a project some consumer maps to (or
	// AnonymousProject when AllowAnonymous is set).
	Project string `mapstructure:"project"`
	// Metric overridden. Required; must name a metric.
	Metric string `mapstructure:"metric"`
	// Limit per minute. In 0..maxQuotaLimit.
	Limit int64 `mapstructure:"limit"`
}

// DefaultQuotaMetric returns a metric's defaults: unit requests.
func DefaultQuotaMetric() QuotaMetric { return QuotaMetric{Unit: QuotaRequests} }

// DefaultQuotaCharge returns a charge's defaults: every method and path,
// cost 1.
func DefaultQuotaCharge() QuotaCharge { return QuotaCharge{PathPrefix: "/", Cost: 1} }

// QuotaLimit returns the effective limit per minute of project for metric
// (lb/quota.EffectiveLimit over the metric's default and the overrides)
// and where it came from; false for an unknown metric.
func (c *Config) QuotaLimit(project, metric string) (int64, quota.Source, bool) {
	var def int64
	found := false
	for _, m := range c.Quota.Metrics {
		if m.Name == metric {
			def, found = m.DefaultLimit, true
			break
		}
	}
	if !found {
		return 0, quota.SourceUnavailable, false
	}
	override := func(list []QuotaOverride) quota.Override {
		for _, o := range list {
			if o.Project == project && o.Metric == metric {
				return quota.Overridden(o.Limit)
			}
		}
		return quota.Override{}
	}
	l, src := quota.EffectiveLimit(def, override(c.Quota.ProducerOverrides), override(c.Quota.ConsumerOverrides))
	return l, src, true
}

// QuotaProject returns the project an API key is charged to: the key's
// consumer, else AnonymousProject when anonymous requests are allowed;
// false when the request cannot be charged (no known key, anonymous not
// allowed).
//
// It is on every charged request's path: one map lookup for a Config from
// Load, Parse or New (a scan of the consumers for one built otherwise),
// no allocation.
func (c *Config) QuotaProject(apiKey string) (string, bool) {
	if c.idx != nil {
		if p, ok := c.idx.apiKeys[apiKey]; ok && apiKey != "" {
			return p, true
		}
	} else {
		for _, k := range c.Quota.Consumers {
			if apiKey != "" && k.APIKey == apiKey {
				return k.Project, true
			}
		}
	}
	if c.Quota.AllowAnonymous {
		return AnonymousProject, true
	}
	return "", false
}

// Matches reports whether a request of service, method and path is
// charged by ch. path is the request's decoded canonical path
// (reqpath.Path.Decoded); the prefix matches it as a route's does
// (reqpath.HasPrefix: ASCII case-insensitive, segment parameters left
// out).
func (ch *QuotaCharge) Matches(service, method, path string) bool {
	return ch.Service == service && (ch.Method == "" || ch.Method == method) && reqpath.HasPrefix(path, ch.PathPrefix)
}

// QuotaCharges returns the charges a request of service, method and path
// matches, in config order (nil for none). The request path iterates
// Quota.Charges with QuotaCharge.Matches instead, which allocates nothing.
func (c *Config) QuotaCharges(service, method, path string) []QuotaCharge {
	var out []QuotaCharge
	for i := range c.Quota.Charges {
		if c.Quota.Charges[i].Matches(service, method, path) {
			out = append(out, c.Quota.Charges[i])
		}
	}
	return out
}

package config

import (
	"fmt"
	"strings"
)

// Bounds of the quota section (the first security review, finding 7: every figure stays
// far from overflow when summed over a window).
const (
	// maxQuotaLimit bounds a limit per minute: 1e12 units.
	maxQuotaLimit = 1_000_000_000_000
	// maxQuotaCost bounds a charge's cost per request or byte.
	maxQuotaCost = 1_000_000
	// minAPIKey and maxAPIKey bound an API key's length, in bytes.
	minAPIKey, maxAPIKey = 8, 256
)

// quota checks the quota section: names, references, bounds and
// uniqueness, each problem with its path.
func (v *validator) quota() {
	q := &v.c.Quota
	metrics := map[string]string{}
	for i, m := range q.Metrics {
		mp := fmt.Sprintf("quota.metrics[%d]", i)
		v.name(mp+".name", "quota metric", m.Name, metrics)
		if m.Unit != QuotaRequests && m.Unit != QuotaBytes {
			v.p.add(mp+".unit", fmt.Sprintf("must be %q or %q, got %q", QuotaRequests, QuotaBytes, m.Unit))
		}
		v.quotaLimit(mp+".default_limit", m.DefaultLimit)
	}
	metric := func(path, name string) {
		switch _, ok := metrics[name]; {
		case name == "":
			v.p.add(path, "required")
		case !ok:
			v.p.add(path, fmt.Sprintf("unknown quota metric %q", name))
		}
	}
	for i, ch := range q.Charges {
		cp := fmt.Sprintf("quota.charges[%d]", i)
		switch _, ok := v.serviceNames[ch.Service]; {
		case ch.Service == "":
			v.p.add(cp+".service", "required")
		case !ok:
			v.p.add(cp+".service", fmt.Sprintf("unknown service %q", ch.Service))
		}
		if ch.Method != "" && (!isToken(ch.Method) || ch.Method != strings.ToUpper(ch.Method)) {
			v.p.add(cp+".method", fmt.Sprintf("must be an upper-case HTTP method such as \"GET\", got %q", ch.Method))
		}
		if !strings.HasPrefix(ch.PathPrefix, "/") || strings.ContainsFunc(ch.PathPrefix, badPathRune) {
			v.p.add(cp+".path_prefix", fmt.Sprintf("must start with \"/\" and contain no spaces, control characters, '?' or '#', got %q", ch.PathPrefix))
		} else if why := unmatchablePrefix(ch.PathPrefix); why != "" {
			v.p.add(cp+".path_prefix", fmt.Sprintf("can match no request path: %s, got %q", why, ch.PathPrefix))
		}
		metric(cp+".metric", ch.Metric)
		if ch.Cost < 1 || ch.Cost > maxQuotaCost {
			v.p.add(cp+".cost", fmt.Sprintf("must be in 1..%d, got %d", maxQuotaCost, ch.Cost))
		}
	}
	keys := map[string]string{}
	projects := map[string]bool{}
	for i, k := range q.Consumers {
		kp := fmt.Sprintf("quota.consumers[%d]", i)
		switch {
		case k.APIKey == RedactedSecret:
			v.p.add(kp+".api_key", withheld)
		case len(k.APIKey) < minAPIKey || len(k.APIKey) > maxAPIKey || strings.ContainsFunc(k.APIKey, func(r rune) bool { return r <= ' ' || r > '~' }):
			// The key itself is never printed: it is a credential.
			v.p.add(kp+".api_key", fmt.Sprintf("must be %d to %d printable ASCII bytes without spaces (got %d bytes)", minAPIKey, maxAPIKey, len(k.APIKey)))
		default:
			if first, dup := keys[k.APIKey]; dup {
				v.p.add(kp+".api_key", fmt.Sprintf("duplicate API key (first at %s)", first))
			}
			keys[k.APIKey] = kp
		}
		switch {
		case k.Project == "":
			v.p.add(kp+".project", "required")
		case !nameRE.MatchString(k.Project):
			v.p.add(kp+".project", fmt.Sprintf("invalid project name %q: use lower-case letters, digits, '.', '_' and '-', starting and ending with a letter or digit, at most 63 bytes", k.Project))
		case k.Project == AnonymousProject:
			v.p.add(kp+".project", fmt.Sprintf("%q is reserved for requests without a key (allow_anonymous)", AnonymousProject))
		}
		projects[k.Project] = true
	}
	if q.AllowAnonymous {
		projects[AnonymousProject] = true
	}
	overrides := func(kind string, list []QuotaOverride) {
		seen := map[[2]string]string{}
		for i, o := range list {
			op := fmt.Sprintf("quota.%s[%d]", kind, i)
			switch {
			case o.Project == "":
				v.p.add(op+".project", "required")
			case !projects[o.Project]:
				v.p.add(op+".project", fmt.Sprintf("unknown project %q: no consumer maps to it", o.Project))
			}
			metric(op+".metric", o.Metric)
			v.quotaLimit(op+".limit", o.Limit)
			key := [2]string{o.Project, o.Metric}
			if first, dup := seen[key]; dup {
				v.p.add(op, fmt.Sprintf("duplicate override of project %q, metric %q (first at %s)", o.Project, o.Metric, first))
			} else {
				seen[key] = op
			}
		}
	}
	overrides("producer_overrides", q.ProducerOverrides)
	overrides("consumer_overrides", q.ConsumerOverrides)
}

// quotaLimit checks a limit per minute.
func (v *validator) quotaLimit(path string, l int64) {
	if l < 0 || l > maxQuotaLimit {
		v.p.add(path, fmt.Sprintf("must be in 0..%d per minute, got %d", int64(maxQuotaLimit), l))
	}
}

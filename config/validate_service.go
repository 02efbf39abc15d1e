package config

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/spillway-lb/spillway/lb/affinity"
)

// The checks of services: backends, balancing limits, the closed loop's
// feedback, outlier detection, session affinity and health checks.

// services checks every backend service.
func (v *validator) services() {
	if len(v.c.Services) == 0 {
		v.p.add("services", "at least one service is required")
	}
	v.serviceNames = map[string]string{}
	for si := range v.c.Services {
		v.service(fmt.Sprintf("services[%d]", si), &v.c.Services[si])
	}
}

func (v *validator) service(sp string, s *Service) {
	v.name(sp+".name", "service", s.Name, v.serviceNames)
	if !slices.Contains(Policies(), s.Policy) {
		v.p.add(sp+".policy", oneOf(Policies(), s.Policy))
	}
	scopes := HashScopes()
	switch {
	case s.HashScope == "":
	case !s.Policy.IsHash():
		v.p.add(sp+".hash_scope", fmt.Sprintf("only valid with a hash policy (hash2, hash3, hash5); policy is %q", s.Policy))
	case !slices.Contains(scopes, s.HashScope):
		v.p.add(sp+".hash_scope", oneOf(scopes, s.HashScope))
	}
	modes := []BalancingMode{ModeRate, ModeConnection, ModeUtilization}
	modeOK := slices.Contains(modes, s.BalancingMode)
	if !modeOK {
		v.p.add(sp+".balancing_mode", oneOf(modes, s.BalancingMode))
	}
	if len(s.Backends) == 0 {
		v.p.add(sp+".backends", "at least one backend is required")
	}
	used := map[string]string{}
	for bi, b := range s.Backends {
		bp := fmt.Sprintf("%s.backends[%d]", sp, bi)
		switch _, known := v.groupNames[b.Group]; {
		case b.Group == "":
			v.p.add(bp+".group", "required")
		case !known:
			v.p.add(bp+".group", fmt.Sprintf("unknown instance group %q", b.Group))
		case used[b.Group] != "":
			v.p.add(bp+".group", fmt.Sprintf("instance group %q is already a backend of this service (at %s)", b.Group, used[b.Group]))
		default:
			used[b.Group] = bp
		}
		if modeOK {
			v.limits(bp, s.BalancingMode, b)
		}
		if !(b.CapacityScaler >= 0 && b.CapacityScaler <= 1) {
			v.p.add(bp+".capacity_scaler", fmt.Sprintf("must be in [0, 1] (0 drains), got %v", b.CapacityScaler))
		}
	}
	v.affinity(sp+".session_affinity", s.SessionAffinity)
	v.healthCheck(sp+".health_check", s.HealthCheck)
	if t := s.Spill.Threshold; !(t >= 0 && t <= 1) {
		v.p.add(sp+".spill.threshold", fmt.Sprintf("must be in [0, 1] (0 disables preemptive spill), got %v", t))
	}
	if sl := s.Spill.Slope; !(sl > 0 && sl <= maxSpillSlope) {
		v.p.add(sp+".spill.slope", fmt.Sprintf("must be in (0, %d], got %v", maxSpillSlope, sl))
	}
	v.outlierDetection(sp+".outlier_detection", s.OutlierDetection)
	if t := s.TargetUtilization; !(t > 0 && t <= 1) {
		v.p.add(sp+".target_utilization", fmt.Sprintf("must be in (0, 1], got %v", t))
	}
	v.feedback(sp+".feedback", s.Feedback)
	v.loadAware(sp+".load_aware", s.LoadAware)
	v.overload(sp+".overload", s.Overload)
	v.prequal(sp+".prequal", s.Policy, s.Prequal)
	if !s.Policy.IsPlanned() {
		if s.LoadAware.Enabled {
			v.p.add(sp+".load_aware.enabled", fmt.Sprintf("only valid with a planned policy (waterfall, min_rtt), not %s", s.Policy))
		}
		if s.Overload.Shed {
			v.p.add(sp+".overload.shed", fmt.Sprintf("only valid with a planned policy (waterfall, min_rtt), not %s", s.Policy))
		}
	}
	if n := s.MaxPendingRequests; n < 1 || n > maxPendingRequests {
		v.p.add(sp+".max_pending_requests", fmt.Sprintf("must be in 1..%d, got %d", maxPendingRequests, n))
	}
}

// feedback checks a feedback section.
func (v *validator) feedback(fp string, f Feedback) {
	open01 := func(key string, x float64) {
		if !(x > 0 && x < 1) {
			v.p.add(fp+"."+key, fmt.Sprintf("must be in (0, 1), got %v", x))
		}
	}
	half01 := func(key string, x float64) {
		if !(x > 0 && x <= 1) {
			v.p.add(fp+"."+key, fmt.Sprintf("must be in (0, 1], got %v", x))
		}
	}
	open01("reject_fraction", f.RejectFraction)
	open01("decrease", f.Decrease)
	half01("recover_rate", f.RecoverRate)
	half01("min_factor", f.MinFactor)
	half01("max_shrink", f.MaxShrink)
	if !(f.ConfirmUtilization >= 0 && f.ConfirmUtilization <= 2) {
		v.p.add(fp+".confirm_utilization", fmt.Sprintf("must be in [0, 2], got %v", f.ConfirmUtilization))
	}
	if f.QueueDelay <= 0 {
		v.p.add(fp+".queue_delay", fmt.Sprintf("must be > 0, got %v", f.QueueDelay))
	}
	v.atLeast(fp+".queue_delay", f.QueueDelay, minQueueDelay, "latency noise would read as queueing")
	v.atMost(fp+".queue_delay", f.QueueDelay, maxQueueDelay)
	if f.Hold < 0 {
		v.p.add(fp+".hold", fmt.Sprintf("must be >= 0, got %v", f.Hold))
	}
	v.atMost(fp+".hold", f.Hold, maxShortTimeout)
	if f.RecoverDelay < 0 {
		v.p.add(fp+".recover_delay", fmt.Sprintf("must be >= 0, got %v", f.RecoverDelay))
	}
	v.atMost(fp+".recover_delay", f.RecoverDelay, maxShortTimeout)
}

// loadAware checks a load_aware section (also when it is off, so that
// turning it on cannot fail later).
func (v *validator) loadAware(lp string, l LoadAware) {
	if l.SlowStart < 0 {
		v.p.add(lp+".slow_start", fmt.Sprintf("must be >= 0 (0 disables slow start), got %v", l.SlowStart))
	}
	v.atMost(lp+".slow_start", l.SlowStart, maxShortTimeout)
	if l.Decay <= 0 {
		v.p.add(lp+".decay", fmt.Sprintf("must be > 0, got %v", l.Decay))
	}
	v.atLeast(lp+".decay", l.Decay, time.Millisecond, "shorter follows every sample's noise")
	v.atMost(lp+".decay", l.Decay, time.Minute)
	if l.ProbeAfter <= 0 {
		v.p.add(lp+".probe_after", fmt.Sprintf("must be > 0, got %v", l.ProbeAfter))
	}
	v.atLeast(lp+".probe_after", l.ProbeAfter, time.Millisecond, "every request would be a probe")
	v.atMost(lp+".probe_after", l.ProbeAfter, maxShortTimeout)
	if w := l.UtilizationWeight; !(w >= 0 && w <= maxUtilizationWeight) {
		v.p.add(lp+".utilization_weight", fmt.Sprintf("must be in [0, %d] (0 ignores load reports), got %v", maxUtilizationWeight, w))
	}
}

// overload checks an overload section.
func (v *validator) overload(op string, o Overload) {
	if o.RetryAfter <= 0 {
		v.p.add(op+".retry_after", fmt.Sprintf("must be > 0, got %v", o.RetryAfter))
	}
	v.atLeast(op+".retry_after", o.RetryAfter, time.Second, "Retry-After counts whole seconds")
	v.atMost(op+".retry_after", o.RetryAfter, maxShortTimeout)
	if a := o.Admit; !(a > 0 && a <= 1) {
		v.p.add(op+".admit", fmt.Sprintf("must be in (0, 1], got %v", a))
	}
	if m := o.MaxShed; !(m > 0 && m <= 1) {
		v.p.add(op+".max_shed", fmt.Sprintf("must be in (0, 1], got %v", m))
	}
}

// outlierDetection checks an outlier detection section.
func (v *validator) outlierDetection(op string, o OutlierDetection) {
	if o.Consecutive5xx < 0 || o.Consecutive5xx > maxConsecutive {
		v.p.add(op+".consecutive_5xx", fmt.Sprintf("must be in 0..%d (0 disables), got %d", maxConsecutive, o.Consecutive5xx))
	}
	if o.ConsecutiveConnectFailures < 0 || o.ConsecutiveConnectFailures > maxConsecutive {
		v.p.add(op+".consecutive_connect_failures", fmt.Sprintf("must be in 0..%d (0 disables), got %d", maxConsecutive, o.ConsecutiveConnectFailures))
	}
	if o.BaseEjectionTime <= 0 {
		v.p.add(op+".base_ejection_time", fmt.Sprintf("must be > 0, got %v", o.BaseEjectionTime))
	}
	v.atMost(op+".base_ejection_time", o.BaseEjectionTime, maxLongTimeout)
	v.atMost(op+".max_ejection_time", o.MaxEjectionTime, maxLongTimeout)
	if o.BaseEjectionTime > 0 && o.BaseEjectionTime <= maxLongTimeout && o.MaxEjectionTime < o.BaseEjectionTime {
		v.p.add(op+".max_ejection_time", fmt.Sprintf("must be >= base_ejection_time (%v), got %v", o.BaseEjectionTime, o.MaxEjectionTime))
	}
	if o.MaxEjectionPercent < 0 || o.MaxEjectionPercent > 100 {
		v.p.add(op+".max_ejection_percent", fmt.Sprintf("must be in 0..100, got %d", o.MaxEjectionPercent))
	}
}

// limit is one capacity field of a Backend, for the mode checks.
type limit struct {
	key  string
	mode BalancingMode
	val  float64
}

// limits checks that b sets exactly the limits of mode, with valid values.
func (v *validator) limits(bp string, mode BalancingMode, b Backend) {
	all := []limit{
		{"max_rate_per_instance", ModeRate, b.MaxRatePerInstance},
		{"max_rate", ModeRate, b.MaxRate},
		{"max_connections_per_instance", ModeConnection, float64(b.MaxConnectionsPerInstance)},
		{"max_connections", ModeConnection, float64(b.MaxConnections)},
		{"max_utilization", ModeUtilization, b.MaxUtilization},
		{"utilization_rate_per_instance", ModeUtilization, b.UtilizationRatePerInstance},
	}
	var mine, set []string
	for _, l := range all {
		if l.mode != mode {
			if l.val != 0 {
				v.p.add(bp+"."+l.key, fmt.Sprintf("not valid with balancing_mode %s (it is a %s limit)", mode, l.mode))
			}
			continue
		}
		mine = append(mine, l.key)
		if l.val == 0 {
			continue
		}
		set = append(set, l.key)
		switch {
		case l.key == "max_utilization":
			if !(l.val > 0 && l.val <= 1) {
				v.p.add(bp+"."+l.key, fmt.Sprintf("must be in (0, 1], got %v", l.val))
			}
		case !(l.val > 0) || math.IsInf(l.val, 0):
			v.p.add(bp+"."+l.key, fmt.Sprintf("must be a finite number > 0, got %v", l.val))
		case l.mode == ModeConnection && l.val > maxConnectionLimit:
			v.p.add(bp+"."+l.key, fmt.Sprintf("must be at most %d, got %v", maxConnectionLimit, l.val))
		case l.mode != ModeConnection && l.val > MaxRate:
			v.p.add(bp+"."+l.key, fmt.Sprintf("must be at most %g requests/s, got %v", float64(MaxRate), l.val))
		}
	}
	if mode == ModeUtilization { // both limits, each checked above
		for _, l := range all {
			if l.mode == mode && l.val == 0 {
				v.p.add(bp, fmt.Sprintf("balancing_mode %s requires %s", mode, l.key))
			}
		}
		return
	}
	switch {
	case len(set) == 0 && len(mine) == 1:
		v.p.add(bp, fmt.Sprintf("balancing_mode %s requires %s", mode, mine[0]))
	case len(set) == 0:
		v.p.add(bp, fmt.Sprintf("balancing_mode %s requires exactly one of %s", mode, strings.Join(mine, ", ")))
	case len(set) > 1:
		v.p.add(bp, fmt.Sprintf("balancing_mode %s takes exactly one of %s, got %s", mode, strings.Join(mine, ", "), strings.Join(set, " and ")))
	}
}

// minCookieSecret is the shortest cookie_secret accepted, in bytes: the
// size of the HMAC-SHA256 key derived from it (RFC 2104 §3).
const minCookieSecret = 32

// affinity checks a session affinity section. Messages about secrets give
// their length, never their value.
func (v *validator) affinity(ap string, a SessionAffinity) {
	types := affinity.Modes()
	if !slices.Contains(types, a.Type) {
		v.p.add(ap+".type", oneOf(types, a.Type))
		return
	}
	cookie := a.Type == AffinityGeneratedCookie || a.Type == AffinityHTTPCookie
	switch {
	case cookie && a.CookieName == "":
		v.p.add(ap+".cookie_name", fmt.Sprintf("required for type %s", a.Type))
	case cookie && !isToken(a.CookieName):
		v.p.add(ap+".cookie_name", fmt.Sprintf("invalid cookie name %q: must be an RFC 6265 token", a.CookieName))
	case !cookie && a.CookieName != "":
		v.p.add(ap+".cookie_name", fmt.Sprintf("only valid with type generated_cookie or http_cookie; type is %s", a.Type))
	}
	switch {
	case !cookie && a.CookieTTL != 0:
		v.p.add(ap+".cookie_ttl", fmt.Sprintf("only valid with type generated_cookie or http_cookie; type is %s", a.Type))
	case a.CookieTTL < 0 || a.CookieTTL > maxCookieTTL:
		v.p.add(ap+".cookie_ttl", fmt.Sprintf("must be in [0, %v] (400 days; 0 = session cookie), got %v", maxCookieTTL, a.CookieTTL))
	}
	gen := a.Type == AffinityGeneratedCookie
	switch {
	case a.CookieSecret == RedactedSecret:
		v.p.add(ap+".cookie_secret", withheld)
	case gen && a.CookieSecret == "":
		v.p.add(ap+".cookie_secret", "required for type generated_cookie")
	case gen && len(a.CookieSecret) < minCookieSecret:
		v.p.add(ap+".cookie_secret", fmt.Sprintf("must be at least %d bytes, got %d", minCookieSecret, len(a.CookieSecret)))
	case !gen && a.CookieSecret != "":
		v.p.add(ap+".cookie_secret", fmt.Sprintf("only valid with type generated_cookie; type is %s", a.Type))
	}
	switch {
	case a.PreviousCookieSecret == "":
	case a.PreviousCookieSecret == RedactedSecret:
		v.p.add(ap+".previous_cookie_secret", withheld)
	case !gen:
		v.p.add(ap+".previous_cookie_secret", fmt.Sprintf("only valid with type generated_cookie; type is %s", a.Type))
	case len(a.PreviousCookieSecret) < minCookieSecret:
		v.p.add(ap+".previous_cookie_secret", fmt.Sprintf("must be at least %d bytes, got %d", minCookieSecret, len(a.PreviousCookieSecret)))
	case a.PreviousCookieSecret == a.CookieSecret:
		v.p.add(ap+".previous_cookie_secret", "must differ from cookie_secret")
	}
	switch header := a.Type == AffinityHeader; {
	case header && a.HeaderName == "":
		v.p.add(ap+".header_name", "required for type header")
	case header && !isToken(a.HeaderName):
		v.p.add(ap+".header_name", fmt.Sprintf("invalid header name %q: must be an HTTP token", a.HeaderName))
	case !header && a.HeaderName != "":
		v.p.add(ap+".header_name", fmt.Sprintf("only valid with type header; type is %s", a.Type))
	}
}

// healthCheck checks a health check section.
func (v *validator) healthCheck(hp string, h HealthCheck) {
	protos := []HealthProtocol{HealthHTTP, HealthHTTPS, HealthTCP, HealthGRPC}
	if !slices.Contains(protos, h.Protocol) {
		v.p.add(hp+".protocol", oneOf(protos, h.Protocol))
	}
	if h.Protocol == HealthHTTP || h.Protocol == HealthHTTPS {
		if !strings.HasPrefix(h.Path, "/") || strings.ContainsFunc(h.Path, badPathRune) {
			v.p.add(hp+".path", fmt.Sprintf("must start with \"/\" and contain no spaces or control characters, got %q", h.Path))
		}
	}
	if h.GRPCService != "" && h.Protocol != HealthGRPC {
		v.p.add(hp+".grpc_service", fmt.Sprintf("only valid with protocol grpc; protocol is %s", h.Protocol))
	}
	if h.Port < 0 || h.Port > 65535 {
		v.p.add(hp+".port", fmt.Sprintf("must be in 1..65535, or 0 for the instance's port, got %d", h.Port))
	}
	if h.Interval <= 0 {
		v.p.add(hp+".interval", fmt.Sprintf("must be > 0, got %v", h.Interval))
	}
	v.atLeast(hp+".interval", h.Interval, minHealthInterval, "at most ten probes a second per instance")
	v.atMost(hp+".interval", h.Interval, maxShortTimeout)
	switch {
	case h.Timeout <= 0:
		v.p.add(hp+".timeout", fmt.Sprintf("must be > 0, got %v", h.Timeout))
	case h.Timeout < minHealthTimeout:
		v.atLeast(hp+".timeout", h.Timeout, minHealthTimeout, "healthy instances fail shorter checks")
	case h.Interval > 0 && h.Timeout >= h.Interval:
		v.p.add(hp+".timeout", fmt.Sprintf("must be less than interval (%v), got %v", h.Interval, h.Timeout))
	}
	if h.HealthyThreshold < 1 || h.HealthyThreshold > maxThreshold {
		v.p.add(hp+".healthy_threshold", fmt.Sprintf("must be in 1..%d, got %d", maxThreshold, h.HealthyThreshold))
	}
	if h.UnhealthyThreshold < 1 || h.UnhealthyThreshold > maxThreshold {
		v.p.add(hp+".unhealthy_threshold", fmt.Sprintf("must be in 1..%d, got %d", maxThreshold, h.UnhealthyThreshold))
	}
	if !(h.Jitter >= 0 && h.Jitter < 1) {
		v.p.add(hp+".jitter", fmt.Sprintf("must be in [0, 1), got %v", h.Jitter))
	}
}

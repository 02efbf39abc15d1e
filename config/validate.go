package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spillway-lb/spillway/lb/affinity"
)

// Validate checks c and returns every problem it finds, joined with
// errors.Join: each one a *FieldError that names the file (for a Config from
// Load or Parse), the field path and the bad value, e.g.
//
//	configs/bad.yaml: services[1].backends[0].group: unknown instance group "eu-west-x"
//
// It returns nil if c is valid. Validate does not change c and applies no
// defaults: a Config built by hand should start its sections from the
// Default* functions.
func (c *Config) Validate() error {
	p := &problems{file: c.source}
	c.validate(p)
	return p.err()
}

// validate adds every problem with c to p.
func (c *Config) validate(p *problems) {
	v := validator{p: p, c: c}
	v.topology()
	v.services()
	v.routes()
	v.listeners()
	v.quota()
}

// validator carries the name tables that cross-references are checked against.
type validator struct {
	p *problems
	c *Config
	// groupNames maps a group name to its path, for backend references.
	groupNames map[string]string
	// serviceNames maps a service name to its path, for route references.
	serviceNames map[string]string
}

// withheld is the problem with a secret that a control plane redacted
// (RedactedSecret).
const withheld = "withheld: the control plane serves secrets only over mutual TLS (it runs with --insecure-plaintext, or this client is not authenticated)"

// nameRE is the syntax of region, zone, group and service names: lower-case
// letters, digits, '.', '_' and '-', starting and ending with a letter or
// digit, at most 63 bytes. They appear in metrics labels, gossip and logs.
var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$`)

// name checks a required name and its uniqueness in seen (name → first path).
func (v *validator) name(path, kind, name string, seen map[string]string) {
	if name == "" {
		v.p.add(path, "required")
		return
	}
	if first, dup := seen[name]; dup {
		v.p.add(path, fmt.Sprintf("duplicate %s name %q (first at %s)", kind, name, first))
		return
	}
	// Recorded even when malformed, so that references to it do not add
	// "unknown" errors on top of this one.
	seen[name] = strings.TrimSuffix(path, ".name")
	if !nameRE.MatchString(name) {
		v.p.add(path, fmt.Sprintf("invalid %s name %q: use lower-case letters, digits, '.', '_' and '-', starting and ending with a letter or digit, at most 63 bytes", kind, name))
	}
}

// topology checks regions, zones, groups and instances.
func (v *validator) topology() {
	if len(v.c.Regions) == 0 {
		v.p.add("regions", "at least one region is required")
	}
	regions, zones := map[string]string{}, map[string]string{}
	v.groupNames = map[string]string{}
	addrs := map[string]string{}
	for ri, r := range v.c.Regions {
		rp := fmt.Sprintf("regions[%d]", ri)
		v.name(rp+".name", "region", r.Name, regions)
		if len(r.Zones) == 0 {
			v.p.add(rp+".zones", "at least one zone is required")
		}
		for zi, z := range r.Zones {
			zp := fmt.Sprintf("%s.zones[%d]", rp, zi)
			v.name(zp+".name", "zone", z.Name, zones)
			if len(z.Groups) == 0 {
				v.p.add(zp+".groups", "at least one instance group is required")
			}
			for gi, g := range z.Groups {
				gp := fmt.Sprintf("%s.groups[%d]", zp, gi)
				v.name(gp+".name", "instance group", g.Name, v.groupNames)
				if len(g.Instances) == 0 {
					v.p.add(gp+".instances", "at least one instance is required")
				}
				if len(g.Instances) > MaxInstances {
					v.p.add(gp+".instances", fmt.Sprintf("at most %d instances per group, got %d", MaxInstances, len(g.Instances)))
				}
				for ii, in := range g.Instances {
					ip := fmt.Sprintf("%s.instances[%d]", gp, ii)
					v.instance(ip, in, addrs)
				}
			}
		}
	}
}

// instance checks one instance; addrs maps address → first path.
func (v *validator) instance(path string, in Instance, addrs map[string]string) {
	if in.Address == "" {
		v.p.add(path+".address", "required")
	} else if err := checkHostPort(in.Address); err != nil {
		v.p.add(path+".address", fmt.Sprintf("invalid host:port %q: %v", in.Address, err))
	} else if first, dup := addrs[strings.ToLower(in.Address)]; dup {
		v.p.add(path+".address", fmt.Sprintf("duplicate address %q (first at %s)", in.Address, first))
	} else {
		addrs[strings.ToLower(in.Address)] = path
	}
	if in.MaxConcurrency < 0 || in.MaxConcurrency > maxConcurrency {
		v.p.add(path+".max_concurrency", fmt.Sprintf("must be in 0..%d (0 = unlimited), got %d", maxConcurrency, in.MaxConcurrency))
	}
}

// checkHostPort checks that s is host:port with an IP or DNS host and a port
// in 1..65535.
func checkHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return fmt.Errorf("%s", ae.Err)
		}
		return err
	}
	if host == "" {
		return fmt.Errorf("missing host")
	}
	if !isIP(host) && !isDNSName(host) {
		return fmt.Errorf("host %q is neither an IP address nor a DNS name", host)
	}
	if err := checkPort(port); err != nil {
		return err
	}
	return nil
}

// checkPort checks a decimal port number in 1..65535.
func checkPort(port string) error {
	if port == "" {
		return fmt.Errorf("missing port")
	}
	for _, r := range port {
		if r < '0' || r > '9' {
			return fmt.Errorf("port %q is not a number", port)
		}
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %s out of range 1..65535", port)
	}
	return nil
}

func isIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

// isDNSName reports whether s is a DNS name: dot-separated labels of letters,
// digits, '-' and '_', 1..63 bytes each, not starting or ending with '-', at
// most 253 bytes, with an optional trailing dot.
func isDNSName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if len(label) == 0 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			b := label[i]
			if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '-' || b == '_') {
				return false
			}
		}
	}
	return true
}

// isToken reports whether s is an RFC 9110 token (header names, cookie names).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0) {
			return false
		}
	}
	return true
}

// oneOf formats the choices of an enum for a message.
func oneOf[T ~string](choices []T, got T) string {
	return fmt.Sprintf("must be one of %s; got %q", joinNames(choices), got)
}

// joinNames joins names with ", ".
func joinNames[T ~string](names []T) string {
	s := make([]string, len(names))
	for i, c := range names {
		s[i] = string(c)
	}
	return strings.Join(s, ", ")
}

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
	v.atMost(hp+".interval", h.Interval, maxShortTimeout)
	switch {
	case h.Timeout <= 0:
		v.p.add(hp+".timeout", fmt.Sprintf("must be > 0, got %v", h.Timeout))
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

// badPathRune reports characters not allowed in a path or path prefix.
func badPathRune(r rune) bool {
	return r <= ' ' || r == 0x7f || r == '?' || r == '#'
}

// routes checks every route.
func (v *validator) routes() {
	if len(v.c.Routes) == 0 {
		v.p.add("routes", "at least one route is required")
	}
	seen := map[[2]string]string{}
	for i, r := range v.c.Routes {
		rp := fmt.Sprintf("routes[%d]", i)
		hostOK := true
		if err := checkRouteHost(r.Host); err != nil {
			v.p.add(rp+".host", err.Error())
			hostOK = false
		}
		prefixOK := strings.HasPrefix(r.PathPrefix, "/") && !strings.ContainsFunc(r.PathPrefix, badPathRune)
		if !prefixOK {
			v.p.add(rp+".path_prefix", fmt.Sprintf("must start with \"/\" and contain no spaces, control characters, '?' or '#', got %q", r.PathPrefix))
		}
		switch _, known := v.serviceNames[r.Service]; {
		case r.Service == "":
			v.p.add(rp+".service", "required")
		case !known:
			v.p.add(rp+".service", fmt.Sprintf("unknown service %q", r.Service))
		}
		if r.Timeout <= 0 {
			v.p.add(rp+".timeout", fmt.Sprintf("must be > 0, got %v", r.Timeout))
		}
		v.atMost(rp+".timeout", r.Timeout, maxLongTimeout)
		if r.Retries < 0 || r.Retries > maxRetries {
			v.p.add(rp+".retries", fmt.Sprintf("must be in 0..%d (0 = never retry), got %d", maxRetries, r.Retries))
		}
		if r.PerTryTimeout < 0 || r.Timeout > 0 && r.PerTryTimeout > r.Timeout {
			v.p.add(rp+".per_try_timeout", fmt.Sprintf("must be in 0..timeout (%v; 0 = off), got %v", r.Timeout, r.PerTryTimeout))
		}
		if hostOK && prefixOK {
			key := [2]string{strings.ToLower(r.Host), r.PathPrefix}
			if first, dup := seen[key]; dup {
				v.p.add(rp, fmt.Sprintf("duplicate route for host %q and path_prefix %q (first at %s)", r.Host, r.PathPrefix, first))
			} else {
				seen[key] = rp
			}
		}
	}
}

// checkRouteHost checks a route host pattern: "*", "*.domain", a DNS name or
// an IP address, without a port.
func checkRouteHost(h string) error {
	switch {
	case h == "":
		return fmt.Errorf("required (use \"*\" for any host)")
	case h == "*":
		return nil
	case strings.HasPrefix(h, "*."):
		if !isDNSName(h[2:]) || strings.HasSuffix(h, ".") {
			return fmt.Errorf("invalid wildcard host %q: want \"*.\" followed by a DNS name", h)
		}
		return nil
	case strings.Contains(h, "*"):
		return fmt.Errorf("invalid host %q: a wildcard is only allowed as a leading \"*.\" or as \"*\"", h)
	case isIP(h):
		return nil
	case strings.HasSuffix(h, "."):
		return fmt.Errorf("invalid host %q: drop the trailing dot", h)
	case !isDNSName(h):
		return fmt.Errorf("invalid host %q: want a DNS name or IP address, without a port", h)
	}
	return nil
}

// maxRetries is the most retries a route may ask for: beyond a few, retries
// multiply the load on a failing fleet more than they help.
const maxRetries = 5

// Upper bounds of numeric fields (finding 7 of issue 10). They keep every
// figure derived from a config in range: a group's capacity is at most
// MaxInstances × MaxRate = 1e13, so a sum over any config that fits in
// memory stays finite; durations stay far from time.Duration's overflow when
// added or multiplied (ejection n × base); sizes stay where net/http's own
// arithmetic on them cannot overflow. Each bound is far above any real
// deployment's value.
const (
	// MaxRate bounds every rate: max_rate_per_instance, max_rate and
	// utilization_rate_per_instance, in requests per second. Exported for
	// the simulator, whose scenarios become configs.
	MaxRate = 1e9
	// maxConnectionLimit bounds max_connections_per_instance and
	// max_connections of a backend.
	maxConnectionLimit = 1_000_000_000
	// MaxInstances bounds the instances of one group (exported, as
	// MaxRate).
	MaxInstances = 10_000
	// maxConcurrency bounds an instance's max_concurrency.
	maxConcurrency = 1_000_000
	// maxThreshold bounds health check thresholds.
	maxThreshold = 100
	// maxConsecutive bounds the outlier detection triggers.
	maxConsecutive = 10_000
	// maxSpillSlope bounds spill.slope.
	maxSpillSlope = 1000
	// maxCookieTTL bounds cookie_ttl: 400 days, the longest lifetime
	// browsers keep a cookie (RFC 6265bis §5.6.1).
	maxCookieTTL = 400 * 24 * time.Hour
	// maxLongTimeout bounds route timeouts, idle timeouts, ejection times.
	maxLongTimeout = 24 * time.Hour
	// maxShortTimeout bounds health check intervals, feedback hold and
	// recover delay, read_header_timeout and first_byte_timeout.
	maxShortTimeout = time.Hour
	// maxQueueDelay bounds feedback.queue_delay.
	maxQueueDelay = time.Minute
	// minMaxHeaderBytes and maxMaxHeaderBytes bound max_header_bytes:
	// below 1 KiB ordinary browser requests with a few cookies fail; above
	// 1 MiB (net/http's default) a header block is an attack, and values
	// near MaxInt overflow net/http's arithmetic (every request got 431).
	minMaxHeaderBytes = 1 << 10
	maxMaxHeaderBytes = 1 << 20
	// maxRequestBody bounds max_request_body_bytes: 1 TiB.
	maxRequestBody = 1 << 40
	// maxListenerConnections bounds a tcp listener's max_connections and
	// max_connections_per_client.
	maxListenerConnections = 1_000_000
)

// atMost adds a problem at path when d is above max.
func (v *validator) atMost(path string, d, max time.Duration) {
	if d > max {
		v.p.add(path, fmt.Sprintf("must be at most %v, got %v", max, d))
	}
}

// listeners checks every listener. It runs after services, whose names and
// modes tcp listeners refer to.
func (v *validator) listeners() {
	names := map[string]string{}
	ports := map[int]string{}
	for i := range v.c.Listeners {
		lp := fmt.Sprintf("listeners[%d]", i)
		l := &v.c.Listeners[i]
		v.name(lp+".name", "listener", l.Name, names)
		switch first, dup := ports[l.Port]; {
		case l.Port < 1 || l.Port > 65535:
			v.p.add(lp+".port", fmt.Sprintf("required, in 1..65535; got %d", l.Port))
		case dup:
			v.p.add(lp+".port", fmt.Sprintf("duplicate port %d (first at %s)", l.Port, first))
		default:
			ports[l.Port] = lp
		}
		switch {
		case l.Protocol == "":
			v.p.add(lp+".protocol", "required: one of http, https, tcp")
		case !slices.Contains(ListenerProtocols(), l.Protocol):
			v.p.add(lp+".protocol", oneOf(ListenerProtocols(), l.Protocol))
		case l.Protocol == ListenerTCP:
			v.tcpListener(lp, l)
		default:
			v.httpListener(lp, l)
		}
	}
}

// tcpListener checks the fields of a tcp listener.
func (v *validator) tcpListener(lp string, l *Listener) {
	switch _, known := v.serviceNames[l.Service]; {
	case l.Service == "":
		v.p.add(lp+".service", "required for protocol tcp")
	case !known:
		v.p.add(lp+".service", fmt.Sprintf("unknown service %q", l.Service))
	default:
		if s := v.serviceByName(l.Service); s != nil && s.BalancingMode != ModeConnection {
			v.p.add(lp+".service", fmt.Sprintf("service %q has balancing_mode %s; a tcp listener needs a CONNECTION service", l.Service, s.BalancingMode))
		}
	}
	if len(l.Certificates) > 0 {
		v.p.add(lp+".certificates", "only valid with protocol https; protocol is tcp")
	}
	if l.IdleTimeout <= 0 {
		v.p.add(lp+".idle_timeout", fmt.Sprintf("must be > 0, got %v", l.IdleTimeout))
	}
	v.atMost(lp+".idle_timeout", l.IdleTimeout, maxLongTimeout)
	if l.FirstByteTimeout <= 0 {
		v.p.add(lp+".first_byte_timeout", fmt.Sprintf("must be > 0, got %v", l.FirstByteTimeout))
	}
	v.atMost(lp+".first_byte_timeout", l.FirstByteTimeout, maxShortTimeout)
	if l.MaxConnections < 1 || l.MaxConnections > maxListenerConnections {
		v.p.add(lp+".max_connections", fmt.Sprintf("must be in 1..%d, got %d", maxListenerConnections, l.MaxConnections))
	}
	if l.MaxConnectionsPerClient < 1 || l.MaxConnectionsPerClient > maxListenerConnections {
		v.p.add(lp+".max_connections_per_client", fmt.Sprintf("must be in 1..%d, got %d", maxListenerConnections, l.MaxConnectionsPerClient))
	}
	httpOnly := func(key string, set bool) {
		if set {
			v.p.add(lp+"."+key, "only valid with protocol http or https; protocol is tcp")
		}
	}
	httpOnly("read_header_timeout", l.ReadHeaderTimeout != 0)
	httpOnly("max_header_bytes", l.MaxHeaderBytes != 0)
	httpOnly("max_request_body_bytes", l.MaxRequestBodyBytes != 0)
	httpOnly("request_body_timeout", l.RequestBodyTimeout != 0)
}

// httpListener checks the fields of an http or https listener.
func (v *validator) httpListener(lp string, l *Listener) {
	if l.Service != "" {
		v.p.add(lp+".service", fmt.Sprintf("only valid with protocol tcp; protocol %s uses routes", l.Protocol))
	}
	switch {
	case l.Protocol == ListenerHTTPS && len(l.Certificates) == 0:
		v.p.add(lp+".certificates", "at least one certificate is required for protocol https")
	case l.Protocol != ListenerHTTPS && len(l.Certificates) > 0:
		v.p.add(lp+".certificates", fmt.Sprintf("only valid with protocol https; protocol is %s", l.Protocol))
	}
	if l.Protocol == ListenerHTTPS {
		for ci, c := range l.Certificates {
			cp := fmt.Sprintf("%s.certificates[%d]", lp, ci)
			if c.CertFile == "" {
				v.p.add(cp+".cert_file", "required")
			}
			if c.KeyFile == "" {
				v.p.add(cp+".key_file", "required")
			}
		}
	}
	if l.ReadHeaderTimeout <= 0 {
		v.p.add(lp+".read_header_timeout", fmt.Sprintf("must be > 0, got %v", l.ReadHeaderTimeout))
	}
	v.atMost(lp+".read_header_timeout", l.ReadHeaderTimeout, maxShortTimeout)
	if l.IdleTimeout <= 0 {
		v.p.add(lp+".idle_timeout", fmt.Sprintf("must be > 0, got %v", l.IdleTimeout))
	}
	v.atMost(lp+".idle_timeout", l.IdleTimeout, maxLongTimeout)
	if l.MaxHeaderBytes < minMaxHeaderBytes || l.MaxHeaderBytes > maxMaxHeaderBytes {
		v.p.add(lp+".max_header_bytes", fmt.Sprintf("must be in %d..%d, got %d", minMaxHeaderBytes, maxMaxHeaderBytes, l.MaxHeaderBytes))
	}
	if l.MaxRequestBodyBytes < 0 || l.MaxRequestBodyBytes > maxRequestBody {
		v.p.add(lp+".max_request_body_bytes", fmt.Sprintf("must be in 0..%d (0 = unlimited), got %d", int64(maxRequestBody), l.MaxRequestBodyBytes))
	}
	if l.RequestBodyTimeout < 0 || l.RequestBodyTimeout > maxLongTimeout {
		v.p.add(lp+".request_body_timeout", fmt.Sprintf("must be in 0..%v (0 = no limit), got %v", maxLongTimeout, l.RequestBodyTimeout))
	}
	tcpOnly := func(key string, set bool) {
		if set {
			v.p.add(lp+"."+key, fmt.Sprintf("only valid with protocol tcp; protocol is %s", l.Protocol))
		}
	}
	tcpOnly("first_byte_timeout", l.FirstByteTimeout != 0)
	tcpOnly("max_connections", l.MaxConnections != 0)
	tcpOnly("max_connections_per_client", l.MaxConnectionsPerClient != 0)
}

// serviceByName returns the first service named name, or nil.
func (v *validator) serviceByName(name string) *Service {
	for i := range v.c.Services {
		if v.c.Services[i].Name == name {
			return &v.c.Services[i]
		}
	}
	return nil
}

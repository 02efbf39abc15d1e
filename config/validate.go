package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"
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
				if len(g.Instances) == 0 && !g.Autoscaling.Enabled() {
					// An autoscaled group may start empty: it scales
					// from zero, and the control plane adds the
					// instances it starts.
					v.p.add(gp+".instances", "at least one instance is required (or an autoscaling block)")
				}
				if len(g.Instances) > MaxInstances {
					v.p.add(gp+".instances", fmt.Sprintf("at most %d instances per group, got %d", MaxInstances, len(g.Instances)))
				}
				for ii, in := range g.Instances {
					ip := fmt.Sprintf("%s.instances[%d]", gp, ii)
					v.instance(ip, in, addrs)
				}
				v.autoscaling(gp+".autoscaling", g.Autoscaling)
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

// Upper bounds of numeric fields (the first security review, finding 7: SECURITY.md). They keep every
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
	// maxUtilizationWeight bounds load_aware.utilization_weight.
	maxUtilizationWeight = 100
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
	// every listener's max_connections_per_client.
	maxListenerConnections = 1_000_000
	// maxPendingRequests bounds a service's max_pending_requests: a
	// million waiting requests are tens of GiB of a gfe's memory.
	maxPendingRequests = 1_000_000
)

// Lower bounds of the durations whose tiny values empty the plan or stop a
// group from scaling (the second security review). Each is far below any
// deployment's value and at or below the fastest the project's own tests
// and demo use (health checks every 200 ms with a 100 ms timeout, 100 ms
// route timeouts, 300 ms pending waits, 3 s autoscaling windows).
const (
	// minHealthInterval bounds health_check.interval: each control plane
	// probes an instance at most ten times a second, and the probes' own
	// scheduling delay on a busy control plane (milliseconds) stays a
	// small part of the interval. At 1 ms every backend flapped and the
	// plan emptied.
	minHealthInterval = 100 * time.Millisecond
	// minHealthTimeout bounds health_check.timeout (which is also below
	// interval): a connect and one request with room for a control plane
	// briefly starved of CPU (a container's CPU quota is enforced in
	// 100 ms periods; a throttled one stalls tens of ms). Below it healthy
	// instances fail their checks.
	minHealthTimeout = 50 * time.Millisecond
	// minRouteTimeout bounds routes[].timeout and a set per_try_timeout:
	// every request through a shorter one is a 504 or a per-try timeout,
	// counted against its backend until outlier detection ejects them
	// all.
	minRouteTimeout = 10 * time.Millisecond
	// minQueueDelay bounds feedback.queue_delay: a healthy group's mean
	// latency moves by about a millisecond between samples (scheduling,
	// GC); below it that noise reads as queueing and every group is
	// planned at its min_factor.
	minQueueDelay = time.Millisecond
	// minAutoscaleWindow bounds autoscaling cpu_window,
	// concurrency_window and demoted_idle_window: the controller samples
	// once a tick (1 s by default), so a shorter window averages one
	// sample at most; and concurrency_window is also how long a group
	// must get no request before it may scale to zero, so a tiny one
	// drops a group to zero between two requests.
	minAutoscaleWindow = time.Second
	// minPendingWait bounds autoscaling.min_pending_wait: a request must
	// wait long enough to settle in the pending queue (100 ms, or half
	// its wait) and ask for an instance; one that never waits that long
	// never asks, and a group at zero would stay there.
	minPendingWait = 100 * time.Millisecond
)

// atLeast adds a problem at path when d is positive and below min (d ≤ 0
// has its own message).
func (v *validator) atLeast(path string, d, min time.Duration, why string) {
	if d > 0 && d < min {
		v.p.add(path, fmt.Sprintf("must be at least %v (%s), got %v", min, why, d))
	}
}

// atMost adds a problem at path when d is above max.
func (v *validator) atMost(path string, d, max time.Duration) {
	if d > max {
		v.p.add(path, fmt.Sprintf("must be at most %v, got %v", max, d))
	}
}

package testbackend

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Config describes one testbackend process. Start from DefaultConfig; the
// zero value has no instances and is not valid.
type Config struct {
	// Instances served by the process. At least one; names and addresses are
	// unique.
	Instances []InstanceConfig
	// Delays are the emulated RTTs between caller sources and instances
	// (see the package doc). Empty means no delay anywhere.
	Delays []DelayRule
	// ShutdownTimeout bounds how long Run waits, once its context is done,
	// for admitted requests to finish before closing their connections.
	// Default 5s. Zero closes at once.
	ShutdownTimeout time.Duration
}

// InstanceConfig is one backend instance.
type InstanceConfig struct {
	// Name identifies the instance in headers, stats and logs, for example
	// "us-east-b-1". Required, unique in the process.
	Name string
	// Addr is the host:port to listen on. Port 0 picks a free port (see
	// Server.Addr). Required, unique in the process.
	Addr string
	// Region the instance lives in; selects the region-scoped delay rules.
	// Required.
	Region string
	// Zone the instance lives in, reported in X-Spillway-Zone. Required.
	Zone string
	// Capacity of the instance.
	Capacity Capacity
}

// Capacity is the serving capacity of one instance (see the package doc).
type Capacity struct {
	// MaxConcurrency is the number of requests served at once. Default 4.
	// Zero means unlimited.
	MaxConcurrency int
	// MaxRPS is the number of requests started per second. Default 0, which
	// means unlimited.
	MaxRPS float64
	// Burst is the size of the MaxRPS token bucket: how many requests may
	// start back to back after an idle period. Default 1 (strict pacing).
	// Must be >= 1 when MaxRPS > 0; ignored otherwise.
	Burst int
	// Queue is how many requests may wait for a token or a slot. Default 16.
	// Zero rejects every request that cannot start at once.
	Queue int
	// ServiceTime is how long a request holds its slot. Default 2ms. With
	// MaxConcurrency c the instance serves at most c/ServiceTime requests/s.
	ServiceTime time.Duration
}

// DelayRule sets the emulated RTT between callers in Prefix and instances.
type DelayRule struct {
	// Region limits the rule to instances of that region. Empty applies it
	// to every instance. A region with no instance in this process is
	// allowed (the same rules can be given to every process).
	Region string
	// Prefix of caller source addresses, for example 127.0.1.0/24.
	Prefix netip.Prefix
	// RTT added to every reply to such a caller. Must be >= 0.
	RTT time.Duration
}

// String returns the rule in ParseDelayRule's syntax.
func (r DelayRule) String() string {
	if r.Region == "" {
		return fmt.Sprintf("%s=%s", r.Prefix, r.RTT)
	}
	return fmt.Sprintf("%s:%s=%s", r.Region, r.Prefix, r.RTT)
}

// DefaultCapacity returns the default capacity of an instance: 4 slots of
// 2ms (2000 requests/s), no rate limit, a queue of 16.
func DefaultCapacity() Capacity {
	return Capacity{
		MaxConcurrency: 4,
		Burst:          1,
		Queue:          16,
		ServiceTime:    2 * time.Millisecond,
	}
}

// DefaultConfig returns a Config with every default set and no instances.
func DefaultConfig() Config {
	return Config{ShutdownTimeout: 5 * time.Second}
}

// Validate reports every problem of c, each naming its field path, joined
// with errors.Join. It returns nil when c is usable by New.
func (c Config) Validate() error {
	var errs []error
	if len(c.Instances) == 0 {
		errs = append(errs, errors.New("instances: at least one instance is required"))
	}
	names := map[string]int{}
	addrs := map[string]int{}
	for i, inst := range c.Instances {
		path := fmt.Sprintf("instances[%d]", i)
		if err := inst.validate(path); err != nil {
			errs = append(errs, err)
		}
		if j, dup := names[inst.Name]; dup && inst.Name != "" {
			errs = append(errs, fmt.Errorf("%s.name: %q already used by instances[%d]", path, inst.Name, j))
		} else {
			names[inst.Name] = i
		}
		if j, dup := addrs[inst.Addr]; dup && inst.Addr != "" && !strings.HasSuffix(inst.Addr, ":0") {
			errs = append(errs, fmt.Errorf("%s.addr: %q already used by instances[%d]", path, inst.Addr, j))
		} else {
			addrs[inst.Addr] = i
		}
	}
	type ruleKey struct {
		region string
		prefix netip.Prefix
	}
	rules := map[ruleKey]int{}
	for i, r := range c.Delays {
		path := fmt.Sprintf("delays[%d]", i)
		if !r.Prefix.IsValid() {
			errs = append(errs, fmt.Errorf("%s.prefix: invalid prefix", path))
		}
		if r.RTT < 0 {
			errs = append(errs, fmt.Errorf("%s.rtt: must be >= 0, got %s", path, r.RTT))
		}
		k := ruleKey{r.Region, r.Prefix.Masked()}
		if j, dup := rules[k]; dup {
			errs = append(errs, fmt.Errorf("%s: %s repeats the prefix of delays[%d]", path, r, j))
		} else {
			rules[k] = i
		}
	}
	if c.ShutdownTimeout < 0 {
		errs = append(errs, fmt.Errorf("shutdown_timeout: must be >= 0, got %s", c.ShutdownTimeout))
	}
	return errors.Join(errs...)
}

func (c InstanceConfig) validate(path string) error {
	var errs []error
	for _, f := range []struct{ name, value string }{
		{"name", c.Name}, {"addr", c.Addr}, {"region", c.Region}, {"zone", c.Zone},
	} {
		if f.value == "" {
			errs = append(errs, fmt.Errorf("%s.%s: must not be empty", path, f.name))
		}
	}
	if c.Addr != "" {
		if _, _, err := net.SplitHostPort(c.Addr); err != nil {
			errs = append(errs, fmt.Errorf("%s.addr: %w", path, err))
		}
	}
	if err := c.Capacity.validate(path + ".capacity"); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (c Capacity) validate(path string) error {
	var errs []error
	if c.MaxConcurrency < 0 {
		errs = append(errs, fmt.Errorf("%s.max_concurrency: must be >= 0, got %d", path, c.MaxConcurrency))
	}
	if c.MaxRPS < 0 || math.IsNaN(c.MaxRPS) || math.IsInf(c.MaxRPS, 0) {
		errs = append(errs, fmt.Errorf("%s.max_rps: must be a finite number >= 0, got %v", path, c.MaxRPS))
	}
	if c.MaxRPS > 0 && c.Burst < 1 {
		errs = append(errs, fmt.Errorf("%s.burst: must be >= 1 when max_rps is set, got %d", path, c.Burst))
	}
	if c.Queue < 0 {
		errs = append(errs, fmt.Errorf("%s.queue: must be >= 0, got %d", path, c.Queue))
	}
	if c.ServiceTime < 0 {
		errs = append(errs, fmt.Errorf("%s.service_time: must be >= 0, got %s", path, c.ServiceTime))
	}
	return errors.Join(errs...)
}

// ParseInstance parses an --instance value: comma-separated key=value pairs
//
//	name=us-east-b-1,addr=127.0.0.1:9101,region=us-east,zone=us-east-b
//
// with optional capacity overrides max_concurrency, max_rps, burst, queue
// and service_time (a Go duration). Capacity fields not given keep their
// value from defaults. It checks syntax only; Config.Validate checks values.
func ParseInstance(spec string, defaults Capacity) (InstanceConfig, error) {
	inst := InstanceConfig{Capacity: defaults}
	seen := map[string]bool{}
	for kv := range strings.SplitSeq(spec, ",") {
		key, value, ok := strings.Cut(kv, "=")
		key = strings.TrimSpace(key)
		value = strings.TrimSpace(value)
		if !ok || key == "" {
			return InstanceConfig{}, fmt.Errorf("instance %q: %q is not key=value", spec, kv)
		}
		if seen[key] {
			return InstanceConfig{}, fmt.Errorf("instance %q: key %s given twice", spec, key)
		}
		seen[key] = true
		var err error
		switch key {
		case "name":
			inst.Name = value
		case "addr":
			inst.Addr = value
		case "region":
			inst.Region = value
		case "zone":
			inst.Zone = value
		case "max_concurrency":
			inst.Capacity.MaxConcurrency, err = strconv.Atoi(value)
		case "max_rps":
			inst.Capacity.MaxRPS, err = strconv.ParseFloat(value, 64)
		case "burst":
			inst.Capacity.Burst, err = strconv.Atoi(value)
		case "queue":
			inst.Capacity.Queue, err = strconv.Atoi(value)
		case "service_time":
			inst.Capacity.ServiceTime, err = time.ParseDuration(value)
		default:
			return InstanceConfig{}, fmt.Errorf("instance %q: unknown key %q (want name, addr, region, zone, max_concurrency, max_rps, burst, queue, service_time)", spec, key)
		}
		if err != nil {
			return InstanceConfig{}, fmt.Errorf("instance %q: %s: %w", spec, key, err)
		}
	}
	return inst, nil
}

// ParseDelayRule parses a --delay value, [REGION:]CIDR=RTT, for example
// "127.0.1.0/24=5ms" or "eu-west:127.0.1.0/24=80ms". The prefix is masked
// (127.0.1.7/24 means 127.0.1.0/24).
func ParseDelayRule(s string) (DelayRule, error) {
	lhs, rtt, ok := strings.Cut(s, "=")
	if !ok {
		return DelayRule{}, fmt.Errorf("delay %q: want [REGION:]CIDR=RTT", s)
	}
	var r DelayRule
	prefix, err := netip.ParsePrefix(lhs)
	if err != nil {
		// Not a bare prefix: REGION:CIDR. Split at the first colon, so that
		// an IPv6 prefix after the region keeps its own colons.
		region, p, found := strings.Cut(lhs, ":")
		if !found || region == "" {
			return DelayRule{}, fmt.Errorf("delay %q: %w", s, err)
		}
		if prefix, err = netip.ParsePrefix(p); err != nil {
			return DelayRule{}, fmt.Errorf("delay %q: %w", s, err)
		}
		r.Region = region
	}
	r.Prefix = prefix.Masked()
	if r.RTT, err = time.ParseDuration(rtt); err != nil {
		return DelayRule{}, fmt.Errorf("delay %q: %w", s, err)
	}
	if r.RTT < 0 {
		return DelayRule{}, fmt.Errorf("delay %q: rtt must be >= 0", s)
	}
	return r, nil
}

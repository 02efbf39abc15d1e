package realbench

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/spillway-lb/spillway/internal/benchpolicy"
	"github.com/spillway-lb/spillway/internal/topology"
)

// Phase is one part of the load story: every site's demand for a time.
type Phase struct {
	Name string `json:"name"`
	// Duration is the measured time of the phase.
	Duration time.Duration `json:"duration_ns"`
	// Demand is each site's request rate, requests/s (open loop).
	Demand map[string]float64 `json:"demand_rps"`
}

// Config is one benchmark run. DefaultConfig is the full run, QuickConfig
// the short one the tests use.
type Config struct {
	// Net is the second octet of the deployment's loopback addresses
	// (127.Net.0.0/16, see internal/topology). Default 40; pick another
	// when a second run or the demo (10) or the e2e tests (20, 21) may run
	// at the same time.
	Net int
	// Policies are the rows, run one after the other on one deployment,
	// each a known row (benchpolicy.Known): a row's options are written
	// into the service's config (topology.Spec.LoadAware and Shed).
	// Default benchpolicy.Defaults().
	Policies []benchpolicy.Row
	// Warmup is how long each policy runs at the first phase's demand
	// before it is measured, after the policy change has reached every gfe
	// and every backend is idle: the gfes' demand estimates (1 s time
	// constant), plans (damped, every 250 ms) and backends settle under the
	// load they are then measured under. Default 3s. Shorter measures some
	// of the previous policy's state.
	Warmup time.Duration
	// Phases are the measured parts of each policy's load, in order, with
	// no break between them or after Warmup. Default: "steady" (6 s: nyc
	// 200, lon 150, tokyo 100 req/s; every region under half full) then
	// "flash crowd" (12 s: nyc 450 req/s, above us-east's 320).
	Phases []Phase
	// SourcesPerSite is the number of client addresses each site's load
	// comes from, consecutive from 127.Net.s.100 (s the site's number from
	// 1). Default 64. Every request opens its own connection, so it has its
	// own source port too.
	SourcesPerSite int
	// Window is the time over which an instance's arrivals are compared
	// with its capacity for OVER_CAP and EXCESS. Default 1s (the step of
	// `lbsim bench`). Longer smooths out short bursts; shorter counts them.
	Window time.Duration
	// Tolerance is how far above its capacity an instance's arrivals in a
	// window must be to count as over capacity. Default 0.01 (as `lbsim
	// bench`).
	Tolerance float64
	// Timeout bounds each request. Default 5s.
	Timeout time.Duration
	// Headroom is the rate each test-backend instance really serves (its
	// token bucket, max-rps) over the capacity the config declares and the
	// gfes plan with (40 req/s). Default 1: the declared capacity is the
	// hard limit, so a planner that fills a region to 100% leaves it no
	// room to drain a backlog. 1.25 matches `lbsim bench`'s default model
	// (utilization_at_capacity 0.8). OVER_CAP and EXCESS always compare
	// with the declared capacity.
	Headroom float64
	// Topology returns the deployment in 127.net.0.0/16 the phases'
	// demand is sent to. Nil is Deployment (the demo's).
	Topology func(net int) topology.Spec
}

// deployment returns c.Topology(net), or Deployment(net) without one.
func (c *Config) deployment(net int) topology.Spec {
	if c.Topology != nil {
		return c.Topology(net)
	}
	return Deployment(net)
}

// DefaultConfig returns the full benchmark: 10 policies × (3 s warmup + 6 s
// steady + 12 s flash crowd) on one deployment, about 4 minutes.
func DefaultConfig() Config {
	return Config{
		Net:      40,
		Policies: benchpolicy.Defaults(),
		Warmup:   3 * time.Second,
		Phases: []Phase{
			{Name: "steady", Duration: 6 * time.Second, Demand: map[string]float64{"nyc": 200, "lon": 150, "tokyo": 100}},
			{Name: "flash crowd", Duration: 12 * time.Second, Demand: map[string]float64{"nyc": 450, "lon": 150, "tokyo": 100}},
		},
		SourcesPerSite: 64,
		Window:         time.Second,
		Tolerance:      0.01,
		Timeout:        5 * time.Second,
		Headroom:       1,
	}
}

// QuickConfig is DefaultConfig with every duration cut (2 s warmup, 3 s
// steady, 5 s flash crowd): about 11 s per policy, for tests and a first
// look. Its numbers are noisier and weigh the flash crowd's first seconds,
// before the gfes react, more.
func QuickConfig() Config {
	c := DefaultConfig()
	c.Warmup = 2 * time.Second
	c.Phases[0].Duration = 3 * time.Second
	c.Phases[1].Duration = 5 * time.Second
	return c
}

// Scale multiplies Warmup and every phase's Duration by f.
func (c *Config) Scale(f float64) {
	c.Warmup = time.Duration(float64(c.Warmup) * f)
	for i := range c.Phases {
		c.Phases[i].Duration = time.Duration(float64(c.Phases[i].Duration) * f)
	}
}

// Validate reports every problem of c at once.
func (c *Config) Validate() error {
	var errs []error
	if c.Net < 1 || c.Net > 254 {
		errs = append(errs, fmt.Errorf("net: must be in 1..254, got %d", c.Net))
	}
	if len(c.Policies) == 0 {
		errs = append(errs, errors.New("policies: none"))
	}
	known := benchpolicy.Known()
	for i, p := range c.Policies {
		if !slices.Contains(known, p) {
			errs = append(errs, fmt.Errorf("policies[%d]: unknown policy %q", i, p.ID()))
		}
		if slices.Contains(c.Policies[:i], p) {
			errs = append(errs, fmt.Errorf("policies[%d]: %s listed twice", i, p.ID()))
		}
	}
	if c.Warmup < 0 {
		errs = append(errs, fmt.Errorf("warmup: must be >= 0, got %v", c.Warmup))
	}
	if len(c.Phases) == 0 {
		errs = append(errs, errors.New("phases: none"))
	}
	sites := map[string]bool{}
	for _, s := range c.deployment(1).Sites {
		sites[s.Name] = true
	}
	for i, ph := range c.Phases {
		if ph.Duration <= 0 {
			errs = append(errs, fmt.Errorf("phases[%d].duration: must be > 0, got %v", i, ph.Duration))
		}
		var total float64
		for s, d := range ph.Demand {
			if !sites[s] {
				errs = append(errs, fmt.Errorf("phases[%d].demand: unknown site %q", i, s))
			}
			if !(d >= 0) {
				errs = append(errs, fmt.Errorf("phases[%d].demand[%s]: must be >= 0, got %g", i, s, d))
			}
			total += d
		}
		if total <= 0 {
			errs = append(errs, fmt.Errorf("phases[%d].demand: no site has demand", i))
		}
	}
	if c.SourcesPerSite < 1 || c.SourcesPerSite > 150 {
		errs = append(errs, fmt.Errorf("sources_per_site: must be in 1..150 (127.N.s.100 up to .249), got %d", c.SourcesPerSite))
	}
	if c.Window <= 0 {
		errs = append(errs, fmt.Errorf("window: must be > 0, got %v", c.Window))
	}
	if !(c.Tolerance >= 0) {
		errs = append(errs, fmt.Errorf("tolerance: must be >= 0, got %g", c.Tolerance))
	}
	if !(c.Headroom > 0) || math.IsInf(c.Headroom, 0) {
		errs = append(errs, fmt.Errorf("headroom: must be > 0, got %g", c.Headroom))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("timeout: must be > 0, got %v", c.Timeout))
	}
	return errors.Join(errs...)
}

// measured returns the total measured time of one policy.
func (c *Config) measured() time.Duration {
	var d time.Duration
	for _, ph := range c.Phases {
		d += ph.Duration
	}
	return d
}

// Scheduled returns the number of requests the measured phases schedule
// over every site: demand × duration, summed. A row's Requests should come
// within a few percent of it.
func (c *Config) Scheduled() float64 {
	var n float64
	for _, ph := range c.Phases {
		for _, d := range ph.Demand {
			n += d * ph.Duration.Seconds()
		}
	}
	return n
}

// spec returns the deployment of c: c.deployment(c.Net) with c.Headroom.
func (c *Config) spec() topology.Spec {
	s := c.deployment(c.Net)
	if c.Headroom != 1 {
		for i := range s.Regions {
			s.Regions[i].MaxRPS = s.Regions[i].Rate * c.Headroom
		}
	}
	return s
}

// Deployment returns the benchmark's topology in 127.net.0.0/16: the
// demo's (topology.Demo).
func Deployment(net int) topology.Spec { return topology.Demo(net) }

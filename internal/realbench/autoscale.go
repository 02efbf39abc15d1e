package realbench

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/spillway-lb/spillway/internal/topology"
)

// The rows of `lbbench --autoscale`, named as the scorecard's
// (`lbsim autoscale-bench`).
const (
	// AutoscalerWaterfall is the autoscaled near region with the next
	// region, a fixed group with room, as its buffer.
	AutoscalerWaterfall = "cloudrun+waterfall"
	// AutoscalerAlone is the autoscaled near region alone: no buffer.
	AutoscalerAlone = "cloudrun"
)

// Autoscalers returns the rows `lbbench --autoscale` can run, in order.
// The scorecard's kpa rows have no counterpart: the real system has no
// Knative autoscaler to run.
func Autoscalers() []string { return []string{AutoscalerWaterfall, AutoscalerAlone} }

// The deployment's names.
const (
	autoscaleSite   = "nyc"
	autoscaleNear   = "us-east"
	autoscaleBuffer = "eu-west"
	autoscaleGroup  = "us-east-b-web"
)

// concurrencyTarget is the rules' concurrency target (docs/design.md §6):
// the declared capacity of a near instance is its slots at this share.
const concurrencyTarget = 0.6

// AutoscaleConfig is one `lbbench --autoscale` run: per row, a fresh
// deployment of one site (nyc) in front of an autoscaled near region
// (us-east, real testbackend processes started by the control plane's
// process provider) and, for the waterfall row, a buffer region (eu-west,
// a fixed group with room), and a step load at the site.
// DefaultAutoscaleConfig is the full run, QuickAutoscaleConfig the short
// one the e2e test drives.
type AutoscaleConfig struct {
	// Net is the second octet of the deployment's loopback addresses.
	Net int
	// Autoscalers are the rows (Autoscalers()), each on a deployment of
	// its own.
	Autoscalers []string
	// ColdStart is the near instances' cold start: testbackend
	// --startup-delay and the block's cold_start.
	ColdStart time.Duration
	// RequestTime is how long a request holds its slot, at every
	// instance of either region (the scorecard's request time).
	RequestTime time.Duration
	// Slots is each near instance's max_concurrency_per_instance. Its
	// declared capacity (max_rate_per_instance) is Slots at the rules' 60%
	// target: 0.6 × Slots / RequestTime, so that the plan and the rules
	// agree on what an instance holds.
	Slots int
	// MaxInstances is the near group's max_instances; it starts at
	// min_instances 1.
	MaxInstances int
	// NearRTT and BufferRTT are the site's emulated RTT to the near and
	// the buffer region.
	NearRTT, BufferRTT time.Duration
	// BufferInstances and BufferRate are the buffer's fixed instances and
	// each one's declared capacity, requests/s; the test backends serve up
	// to twice that (room).
	BufferInstances int
	BufferRate      float64
	// BaseRate is the site's load before and after the step, StepRate
	// during it, requests/s (open loop).
	BaseRate, StepRate float64
	// Base, Step and After are the three measured phases: the base load,
	// the step, the base load again (After may be 0).
	Base, Step, After time.Duration
	// Window is the length of the timeline's windows and of the windows
	// the return to the near region is judged in. Default 1s.
	Window time.Duration
	// NearShare is the share of a window's answered requests the near
	// region must serve for the load to count as back there. Default 0.95.
	NearShare float64
	// Sources is the number of client addresses the load comes from.
	Sources int
	// Timeout bounds each request; it must exceed the pending queue's
	// wait (max(10s, 3.5 × cold start)). Default 30s.
	Timeout time.Duration
	// Sample is how often the gfe's and the control plane's status are
	// read (healthy instances, recommendation). Default 250ms.
	Sample time.Duration
}

// DefaultAutoscaleConfig returns the full run: a 3 s cold start, requests
// of 200 ms on 10 slots per near instance (30 req/s declared), nyc 2 ms
// from us-east and 40 ms from eu-west (two instances of 100 req/s), a
// step from 10 to 100 req/s (10×, the scorecard's step) after 10 s,
// held for 40 s, then 20 s back at 10 req/s; both rows, about 3 minutes.
func DefaultAutoscaleConfig() AutoscaleConfig {
	return AutoscaleConfig{
		Net:         40,
		Autoscalers: Autoscalers(),
		ColdStart:   3 * time.Second, RequestTime: 200 * time.Millisecond, Slots: 10, MaxInstances: 8,
		NearRTT: 2 * time.Millisecond, BufferRTT: 40 * time.Millisecond, BufferInstances: 2, BufferRate: 100,
		BaseRate: 10, StepRate: 100,
		Base: 10 * time.Second, Step: 40 * time.Second, After: 20 * time.Second,
		Window: time.Second, NearShare: 0.95, Sources: 16, Timeout: 30 * time.Second, Sample: 250 * time.Millisecond,
	}
}

// QuickAutoscaleConfig is DefaultAutoscaleConfig with a 5 s base, a 30 s
// step and no after phase: about 45 s per row, for the e2e test.
func QuickAutoscaleConfig() AutoscaleConfig {
	c := DefaultAutoscaleConfig()
	c.Base, c.Step, c.After = 5*time.Second, 30*time.Second, 0
	return c
}

// Scale multiplies the three phases by f.
func (c *AutoscaleConfig) Scale(f float64) {
	for _, d := range []*time.Duration{&c.Base, &c.Step, &c.After} {
		*d = time.Duration(float64(*d) * f)
	}
}

// Validate reports every problem of c at once.
func (c *AutoscaleConfig) Validate() error {
	var errs []error
	if c.Net < 1 || c.Net > 254 {
		errs = append(errs, fmt.Errorf("net: must be in 1..254, got %d", c.Net))
	}
	if len(c.Autoscalers) == 0 {
		errs = append(errs, errors.New("autoscalers: none"))
	}
	for i, a := range c.Autoscalers {
		if !slices.Contains(Autoscalers(), a) {
			errs = append(errs, fmt.Errorf("autoscalers[%d]: unknown %q (want one of %s)", i, a, strings.Join(Autoscalers(), ", ")))
		}
		if slices.Contains(c.Autoscalers[:i], a) {
			errs = append(errs, fmt.Errorf("autoscalers[%d]: %s listed twice", i, a))
		}
	}
	positive := []struct {
		name string
		d    time.Duration
	}{{"cold_start", c.ColdStart}, {"request_time", c.RequestTime}, {"base", c.Base}, {"step", c.Step},
		{"window", c.Window}, {"timeout", c.Timeout}, {"sample", c.Sample}}
	for _, p := range positive {
		if p.d <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be > 0, got %v", p.name, p.d))
		}
	}
	if c.After < 0 || c.NearRTT < 0 || c.BufferRTT < 0 {
		errs = append(errs, fmt.Errorf("after, near_rtt, buffer_rtt: must be >= 0, got %v, %v, %v", c.After, c.NearRTT, c.BufferRTT))
	}
	if c.Slots < 1 || c.MaxInstances < 1 || c.BufferInstances < 1 {
		errs = append(errs, fmt.Errorf("slots, max_instances, buffer_instances: must be >= 1, got %d, %d, %d", c.Slots, c.MaxInstances, c.BufferInstances))
	}
	for _, r := range []struct {
		name string
		v    float64
	}{{"buffer_rate", c.BufferRate}, {"base_rate", c.BaseRate}, {"step_rate", c.StepRate}} {
		if !(r.v > 0) || math.IsInf(r.v, 0) {
			errs = append(errs, fmt.Errorf("%s: must be > 0, got %g", r.name, r.v))
		}
	}
	if !(c.NearShare > 0 && c.NearShare <= 1) {
		errs = append(errs, fmt.Errorf("near_share: must be in (0, 1], got %g", c.NearShare))
	}
	if c.Sources < 1 || c.Sources > 150 {
		errs = append(errs, fmt.Errorf("sources: must be in 1..150, got %d", c.Sources))
	}
	return errors.Join(errs...)
}

// NearRate is a near instance's declared capacity, requests/s: its slots
// at the rules' concurrency target over the request time.
func (c *AutoscaleConfig) NearRate() float64 {
	r := concurrencyTarget * float64(c.Slots) / c.RequestTime.Seconds()
	return math.Round(r*1e6) / 1e6 // 12, not 11.999999999999998, in the config
}

// Block is the near group's autoscaling block: min_instances 1, the
// configured maximum, slots and cold start, and the rules' windows cut
// from minutes to seconds (as the e2e autoscale tests do) so that a
// scale-up fits a step of tens of seconds. The pending queue keeps its
// default wait, max(10s, 3.5 × cold start).
func (c *AutoscaleConfig) Block() string {
	return fmt.Sprintf("{min_instances: 1, max_instances: %d, max_concurrency_per_instance: %d, cold_start: %v, "+
		"cpu_window: 6s, concurrency_window: 6s, concurrency_long_window: 6s, demoted_idle_window: 3s, idle_timeout: 6s}",
		c.MaxInstances, c.Slots, c.ColdStart)
}

// phases returns the measured phases in order: base, step and, when
// After > 0, after.
func (c *AutoscaleConfig) phases() []Phase {
	ps := []Phase{
		{Name: "base", Duration: c.Base, Demand: map[string]float64{autoscaleSite: c.BaseRate}},
		{Name: "step", Duration: c.Step, Demand: map[string]float64{autoscaleSite: c.StepRate}},
	}
	if c.After > 0 {
		ps = append(ps, Phase{Name: "after", Duration: c.After, Demand: map[string]float64{autoscaleSite: c.BaseRate}})
	}
	return ps
}

// AutoscaleSpec returns the deployment of row autoscaler in
// 127.Net.0.0/16: site nyc; us-east autoscaled from zero configured
// instances (the control plane starts min_instances 1); for
// cloudrun+waterfall, eu-west with BufferInstances fixed instances that
// serve up to twice their declared BufferRate.
func (c *AutoscaleConfig) AutoscaleSpec(autoscaler string) topology.Spec {
	rtt := map[string]time.Duration{autoscaleNear: c.NearRTT}
	regions := []topology.Region{{Name: autoscaleNear, Zones: []string{"b"}, Instances: 0, Rate: c.NearRate()}}
	if autoscaler == AutoscalerWaterfall {
		rtt[autoscaleBuffer] = c.BufferRTT
		regions = append(regions, topology.Region{Name: autoscaleBuffer, Zones: []string{"b"}, Instances: c.BufferInstances,
			Rate: c.BufferRate, MaxRPS: 2 * c.BufferRate})
	}
	return topology.Spec{
		Net:            c.Net,
		Sites:          []topology.Site{{Name: autoscaleSite, RTT: rtt}},
		Regions:        regions,
		HealthInterval: 250 * time.Millisecond,
		ServiceTime:    c.RequestTime,
		Queue:          64,
		Autoscale: &topology.AutoscaleSpec{
			Region: 0, Block: c.Block(), MaxConcurrency: c.Slots, StartupDelay: c.ColdStart, ServiceTime: c.RequestTime,
		},
	}
}

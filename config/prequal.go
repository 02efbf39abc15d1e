package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/spillway-lb/spillway/lb/reqpath"
)

// PolicyPrequal is Prequal's replica selection as published (lb/prequal):
// the gfe probes instances of every region of the service for their
// requests in flight and latency, keeps a pool of 16 answers and sends
// each request to the cold instance of least latency (hot-cold rule). A
// baseline to compare against: it ignores regions, capacity and the plan.
const PolicyPrequal Policy = "prequal"

// Prequal configures the probes of a service with policy prequal: where
// an instance answers them and how many a gfe may send. Other policies
// ignore it and must leave it at its defaults.
type Prequal struct {
	// ProbePath is the HTTP path a probe GETs on an instance, which
	// answers "rif=N latency_us=M" (lb/prequal's wire format). Default
	// /.well-known/spillway-probe, the test backend's. Must start with /.
	ProbePath string `mapstructure:"probe_path"`
	// ProbeRate is the most probes per second one gfe sends for the
	// service, however many requests arrive: past it a request is picked
	// from the probes already in the pool (or, when it is empty, by least
	// request). Default 1000; in [1, 100000].
	ProbeRate float64 `mapstructure:"probe_rate"`
	// ProbeTimeout is how long a gfe waits for a probe's answer before
	// counting it failed. Default 250ms; in [1ms, 10s].
	ProbeTimeout time.Duration `mapstructure:"probe_timeout"`
}

// DefaultPrequalProbePath is Prequal.ProbePath's default: the route the
// test backend answers probes on.
const DefaultPrequalProbePath = "/.well-known/spillway-probe"

// DefaultPrequal returns the default probe settings.
func DefaultPrequal() Prequal {
	return Prequal{ProbePath: DefaultPrequalProbePath, ProbeRate: 1000, ProbeTimeout: 250 * time.Millisecond}
}

// maxProbeRate bounds prequal.probe_rate.
const maxProbeRate = 100000

// prequal checks a service's prequal section: its values always, and that
// a service of another policy leaves it at its defaults (a setting that
// would do nothing is a mistake).
func (v *validator) prequal(pp string, policy Policy, q Prequal) {
	if !strings.HasPrefix(q.ProbePath, "/") {
		v.p.add(pp+".probe_path", fmt.Sprintf("must start with /, got %q", q.ProbePath))
	} else if c, err := reqpath.Normalize(q.ProbePath); err != nil || c.Escaped != q.ProbePath || strings.ContainsAny(q.ProbePath, "?#") {
		v.p.add(pp+".probe_path", fmt.Sprintf("must be a canonical path without query (no //, dot segments, backslashes or escapes), got %q", q.ProbePath))
	}
	if r := q.ProbeRate; !(r >= 1 && r <= maxProbeRate) {
		v.p.add(pp+".probe_rate", fmt.Sprintf("must be in [1, %d] probes per second, got %v", maxProbeRate, r))
	}
	if q.ProbeTimeout <= 0 {
		v.p.add(pp+".probe_timeout", fmt.Sprintf("must be > 0, got %v", q.ProbeTimeout))
	}
	v.atLeast(pp+".probe_timeout", q.ProbeTimeout, time.Millisecond, "no probe could answer in time")
	v.atMost(pp+".probe_timeout", q.ProbeTimeout, 10*time.Second)
	if policy != PolicyPrequal && q != DefaultPrequal() {
		v.p.add(pp, fmt.Sprintf("only valid with policy prequal, not %s", policy))
	}
}

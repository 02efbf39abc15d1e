package testbackend

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spillway-lb/spillway/internal/splitmix"
)

// Antagonist is a time-varying slowdown of an instance: Prequal's
// antagonists, the other tenants of a machine that take CPU from a
// backend now and then. It is on for Duty of every Period; while it is
// on, each normal request and unary RPC (and each stream message) is
// served Slowdown times slower: its ServiceTime and its CPUPerRequest
// are multiplied by Slowdown, and it burns CPU more of busy work. The
// schedule is a pure function of the time since the instance started
// (Antagonist.On), on the instance's clock.
type Antagonist struct {
	// Period of the schedule. Must be positive.
	Period time.Duration
	// Duty is the fraction of each period the antagonist is on, in (0, 1].
	// Default 0.5.
	Duty float64
	// Slowdown multiplies service time and CPU per request while on;
	// >= 1. Default 1 (then CPU must be set).
	Slowdown float64
	// CPU is busy work added to each request while on; >= 0.
	CPU time.Duration
	// Phase delays the schedule: the first period starts Phase after the
	// instance starts (off until then). In [0, Period).
	Phase time.Duration
	// Seeded places each period's on-window at a random offset inside the
	// period, drawn from Seed, the period's number and the instance's
	// name (so two instances with the same seed differ, and a run
	// repeats exactly). Not seeded: the window opens at the start of
	// every period (a square wave).
	Seeded bool
	Seed   uint64
}

// AntagonistRule applies an Antagonist to the instance named Instance, or
// to every instance when Instance is empty.
type AntagonistRule struct {
	Instance   string
	Antagonist Antagonist
}

// antagonistKeys lists ParseAntagonist's keys, for its errors.
const antagonistKeys = "period, duty, slowdown, cpu, phase, seed"

// ParseAntagonist parses an --antagonist value,
//
//	[INSTANCE:]period=D[,duty=F][,slowdown=Nx][,cpu=D][,phase=D][,seed=N]
//
// for example "period=20s,duty=0.5,slowdown=4x" (every instance, on for
// the first 10s of every 20s, four times slower) or
// "us-east-b-1:period=10s,duty=30%,cpu=2ms,seed=7". D is a Go duration,
// F a fraction or a percentage, N a number >= 1 with an optional x. At
// least one of slowdown > 1 and cpu > 0 is required: an antagonist that
// changes nothing is a mistake. Errors name the value and the key.
func ParseAntagonist(s string) (AntagonistRule, error) {
	var r AntagonistRule
	spec := s
	if name, rest, ok := strings.Cut(s, ":"); ok && !strings.Contains(name, "=") {
		if name = strings.TrimSpace(name); name == "" {
			return AntagonistRule{}, fmt.Errorf("antagonist %q: empty instance name before ':'", s)
		}
		r.Instance, spec = name, rest
	}
	a := Antagonist{Duty: 0.5, Slowdown: 1}
	seen := map[string]bool{}
	for kv := range strings.SplitSeq(spec, ",") {
		key, value, ok := strings.Cut(kv, "=")
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		if !ok || key == "" || value == "" {
			return AntagonistRule{}, fmt.Errorf("antagonist %q: %q is not key=value (keys: %s)", s, kv, antagonistKeys)
		}
		if seen[key] {
			return AntagonistRule{}, fmt.Errorf("antagonist %q: key %s given twice", s, key)
		}
		seen[key] = true
		var err error
		switch key {
		case "period":
			a.Period, err = time.ParseDuration(value)
		case "duty":
			a.Duty, err = parseFraction(value)
		case "slowdown":
			a.Slowdown, err = strconv.ParseFloat(strings.TrimSuffix(value, "x"), 64)
		case "cpu":
			a.CPU, err = time.ParseDuration(value)
		case "phase":
			a.Phase, err = time.ParseDuration(value)
		case "seed":
			a.Seed, err = strconv.ParseUint(value, 10, 64)
			a.Seeded = true
		default:
			return AntagonistRule{}, fmt.Errorf("antagonist %q: unknown key %q (want %s)", s, key, antagonistKeys)
		}
		if err != nil {
			return AntagonistRule{}, fmt.Errorf("antagonist %q: %s: %w", s, key, err)
		}
	}
	if !seen["period"] {
		return AntagonistRule{}, fmt.Errorf("antagonist %q: period is required", s)
	}
	if err := a.validate(); err != nil {
		return AntagonistRule{}, fmt.Errorf("antagonist %q: %w", s, err)
	}
	r.Antagonist = a
	return r, nil
}

// parseFraction parses "0.3" or "30%".
func parseFraction(v string) (float64, error) {
	if p, ok := strings.CutSuffix(v, "%"); ok {
		f, err := strconv.ParseFloat(p, 64)
		return f / 100, err
	}
	return strconv.ParseFloat(v, 64)
}

// validate reports every problem of a, naming its key, joined.
func (a Antagonist) validate() error {
	var errs []error
	if a.Period <= 0 {
		errs = append(errs, fmt.Errorf("period: must be positive, got %s", a.Period))
	}
	if !(a.Duty > 0 && a.Duty <= 1) {
		errs = append(errs, fmt.Errorf("duty: must be in (0, 1], got %v", a.Duty))
	}
	if !(a.Slowdown >= 1) || math.IsInf(a.Slowdown, 1) || a.Slowdown > 1e6 {
		errs = append(errs, fmt.Errorf("slowdown: must be in [1, 1e6], got %v", a.Slowdown))
	}
	if a.CPU < 0 {
		errs = append(errs, fmt.Errorf("cpu: must be >= 0, got %s", a.CPU))
	}
	if a.Phase < 0 || (a.Period > 0 && a.Phase >= a.Period) {
		errs = append(errs, fmt.Errorf("phase: must be in [0, period), got %s", a.Phase))
	}
	if len(errs) == 0 && a.Slowdown == 1 && a.CPU == 0 {
		errs = append(errs, errors.New("slowdown or cpu: the antagonist changes nothing (want slowdown > 1 or cpu > 0)"))
	}
	return errors.Join(errs...)
}

// String returns a in ParseAntagonist's syntax (without an instance).
func (a Antagonist) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "period=%s,duty=%s,slowdown=%sx", a.Period, strconv.FormatFloat(a.Duty, 'g', -1, 64), strconv.FormatFloat(a.Slowdown, 'g', -1, 64))
	if a.CPU != 0 {
		fmt.Fprintf(&b, ",cpu=%s", a.CPU)
	}
	if a.Phase != 0 {
		fmt.Fprintf(&b, ",phase=%s", a.Phase)
	}
	if a.Seeded {
		fmt.Fprintf(&b, ",seed=%d", a.Seed)
	}
	return b.String()
}

// String returns r in ParseAntagonist's syntax.
func (r AntagonistRule) String() string {
	if r.Instance == "" {
		return r.Antagonist.String()
	}
	return r.Instance + ":" + r.Antagonist.String()
}

// antagonistFor returns the Antagonist rules give the instance named name
// and whether there is one: the last rule naming it, else the last rule
// for every instance.
func antagonistFor(rules []AntagonistRule, name string) (Antagonist, bool) {
	var all, mine *Antagonist
	for i := range rules {
		switch rules[i].Instance {
		case "":
			all = &rules[i].Antagonist
		case name:
			mine = &rules[i].Antagonist
		}
	}
	switch {
	case mine != nil:
		return *mine, true
	case all != nil:
		return *all, true
	}
	return Antagonist{}, false
}

// antagonistSchedule is an Antagonist bound to one instance: its start
// and its seed mixed with the instance's name. Immutable.
type antagonistSchedule struct {
	a     Antagonist
	start time.Time
	seed  uint64
}

func newAntagonistSchedule(a Antagonist, name string, start time.Time) *antagonistSchedule {
	h := fnv.New64a()
	h.Write([]byte(name))
	return &antagonistSchedule{a: a, start: start, seed: a.Seed ^ h.Sum64()}
}

// on reports whether the antagonist is on at now (see Antagonist.On).
func (s *antagonistSchedule) on(now time.Time) bool {
	if s == nil {
		return false
	}
	return s.a.On(now.Sub(s.start), s.seed)
}

// On reports whether the antagonist is on at elapsed after the instance
// started, seed being the instance's seed (Seed mixed with its name): off
// before Phase; then, in period k = ⌊(elapsed − Phase)/Period⌋, on for
// Duty·Period from the period's start, or, when Seeded, from an offset
// drawn uniformly in [0, (1 − Duty)·Period] from seed and k.
func (a Antagonist) On(elapsed time.Duration, seed uint64) bool {
	t := elapsed - a.Phase
	if t < 0 || a.Period <= 0 {
		return false
	}
	k, r := t/a.Period, t%a.Period
	w := time.Duration(a.Duty * float64(a.Period))
	start := time.Duration(0)
	if a.Seeded {
		x := splitmix.Mix64(seed + uint64(k+1)*0x9e3779b97f4a7c15)
		start = time.Duration(float64(x>>11) * 0x1p-53 * float64(a.Period-w))
	}
	return r >= start && r < start+w
}

package autoscalebench

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/autoscale"
	"github.com/spillway-lb/spillway/sim"
)

// ErrInvalidTrace is wrapped by every error ParseTrace returns for a bad
// trace; test for it with errors.Is.
var ErrInvalidTrace = errors.New("invalid autoscale trace")

// TraceError lists every problem found in one trace, as ScenarioError does
// for scenarios: "path: message" strings, each also a *config.FieldError.
type TraceError struct {
	// File is the name the trace was parsed under; may be empty.
	File string
	// Problems are "path: message" strings, in file order.
	Problems []string
}

// Error returns one line per problem, each prefixed with the file name.
func (e *TraceError) Error() string {
	return (&sim.ScenarioError{File: e.File, Problems: e.Problems}).Error()
}

// Unwrap returns ErrInvalidTrace and one *config.FieldError per problem.
func (e *TraceError) Unwrap() []error {
	out := (&sim.ScenarioError{File: e.File, Problems: e.Problems}).Unwrap()
	out[0] = ErrInvalidTrace
	return out
}

// Trace is a parsed autoscale trace: a group's autoscaling block and what
// the group did, tick by tick (`lbsim autoscale`).
type Trace struct {
	// Group is the autoscaling block, decoded as in an operator config.
	Group config.Autoscaling
	// Tick is the length of every tick.
	Tick time.Duration
	// Samples holds one sample per tick, repeats expanded.
	Samples []autoscale.Sample
}

// Limits of a trace.
const (
	// MaxTraceTicks bounds the ticks of a trace, repeats included
	// (a week of seconds is 604800).
	MaxTraceTicks = 1_000_000
	maxTraceTick  = time.Hour
	maxTraceValue = 1e12
)

// LoadTrace reads the file at path and parses it with ParseTrace.
func LoadTrace(path string) (*Trace, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read trace: %w", err)
	}
	return ParseTrace(data, path)
}

// ParseTrace decodes and validates one trace document:
//
//	group:                  # the autoscaling block, as in a group of the operator config
//	  max_instances: 10     #   (required; absent keys take their defaults)
//	  cold_start: 20s
//	tick: 1s                # required, (0, 1h]
//	samples:                # required, one per tick
//	  - {cpu_cores: 1.2, concurrency: 4.5, requests: 40, act: 8}
//	  - {cpu_cores: 0, concurrency: 0, requests: 0, repeat: 600}
//
// A sample's cpu_cores is the group's CPU cores in use during the tick,
// concurrency its mean requests in flight (total over instances), requests
// the requests it received, act its instances' mean ACT limit (omitted:
// max_concurrency_per_instance). All are ≥ 0 and finite, requests a whole
// number; absent ones are 0. repeat (default 1, ≥ 1) stands for that many
// identical samples, so that long idle stretches stay short to write; at
// most MaxTraceTicks ticks in all. Unknown keys, wrong types and a second
// YAML document are errors. On failure it returns a *TraceError (wrapping
// ErrInvalidTrace) that lists every problem found with its path.
func ParseTrace(data []byte, filename string) (*Trace, error) {
	fail := func(problems ...string) (*Trace, error) {
		return nil, &TraceError{File: filename, Problems: problems}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var raw any
	if err := dec.Decode(&raw); err != nil {
		if errors.Is(err, io.EOF) {
			return fail("empty trace file")
		}
		return fail(sim.YAMLProblems(err)...)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return fail("more than one YAML document; a trace is a single document")
	}
	top, ok := raw.(map[string]any)
	if !ok {
		return fail(fmt.Sprintf("expected a mapping with group, tick and samples, got %s", kindOf(raw)))
	}
	var (
		tr       Trace
		problems []string
		add      = func(path, format string, a ...any) { problems = append(problems, path+": "+fmt.Sprintf(format, a...)) }
	)
	for _, k := range traceKeys(top) {
		if k != "group" && k != "tick" && k != "samples" {
			add(k, "unknown field (want group, tick, samples)")
		}
	}
	if g, ok := top["group"]; !ok || g == nil {
		add("group", "required: the group's autoscaling block")
	} else if a, err := config.DecodeAutoscaling(filename, "group", g); err != nil {
		for _, fe := range config.FieldErrors(err) {
			problems = append(problems, fe.Path+": "+fe.Msg)
		}
	} else {
		tr.Group = a
	}
	switch t, ok := top["tick"]; {
	case !ok || t == nil:
		add("tick", "required: a duration such as \"1s\"")
	default:
		s, isStr := t.(string)
		d, err := time.ParseDuration(s)
		switch {
		case !isStr || err != nil:
			add("tick", "expected a duration such as \"1s\", got %s", describeValue(t))
		case d <= 0 || d > maxTraceTick:
			add("tick", "must be in (0, %v], got %v", maxTraceTick, d)
		default:
			tr.Tick = d
		}
	}
	samples, ok := top["samples"].([]any)
	switch {
	case top["samples"] == nil:
		add("samples", "required: at least one sample")
	case !ok:
		add("samples", "expected a list, got %s", describeValue(top["samples"]))
	case len(samples) == 0:
		add("samples", "required: at least one sample")
	}
	ticks := 0
	for i, e := range samples {
		path := fmt.Sprintf("samples[%d]", i)
		m, ok := e.(map[string]any)
		if !ok {
			add(path, "expected a mapping such as {cpu_cores: 1, concurrency: 2, requests: 3}, got %s", describeValue(e))
			continue
		}
		var s autoscale.Sample
		repeat := 1
		for _, k := range traceKeys(m) {
			v, kp := m[k], path+"."+k
			switch k {
			case "cpu_cores", "concurrency", "act":
				f, ok := number(v)
				if !ok || f < 0 || f > maxTraceValue {
					add(kp, "must be a number in [0, %g], got %s", maxTraceValue, describeValue(v))
					continue
				}
				switch k {
				case "cpu_cores":
					s.CPUCores = f
				case "concurrency":
					s.Concurrency = f
				default:
					s.ACT = f
				}
			case "requests", "repeat":
				n, ok := v.(int)
				lo := 0
				if k == "repeat" {
					lo = 1
				}
				if !ok || n < lo || n > MaxTraceTicks {
					add(kp, "must be a whole number in %d..%d, got %s", lo, MaxTraceTicks, describeValue(v))
					continue
				}
				if k == "requests" {
					s.Requests = int64(n)
				} else {
					repeat = n
				}
			default:
				add(kp, "unknown field (want cpu_cores, concurrency, requests, act, repeat)")
			}
		}
		if ticks += repeat; ticks > MaxTraceTicks {
			add(path, "the trace runs past %d ticks", MaxTraceTicks)
			break
		}
		for range repeat {
			tr.Samples = append(tr.Samples, s)
		}
	}
	if len(problems) > 0 {
		return fail(problems...)
	}
	return &tr, nil
}

// number returns v as a finite float64 if it is a YAML number.
func number(v any) (float64, bool) {
	var f float64
	switch x := v.(type) {
	case int:
		f = float64(x)
	case float64:
		f = x
	default:
		return 0, false
	}
	return f, !math.IsNaN(f) && !math.IsInf(f, 0)
}

// traceKeys returns m's keys in order, for problems in a stable order.
func traceKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// kindOf names the YAML kind of a decoded value.
func kindOf(v any) string {
	switch v.(type) {
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case nil:
		return "nothing"
	}
	return "a scalar"
}

// describeValue renders a decoded value for a message.
func describeValue(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("%q", x)
	case map[string]any, []any, nil:
		return kindOf(v)
	}
	return strings.TrimSpace(fmt.Sprint(v))
}

// TraceTick is the outcome of one tick of RunTrace (`lbsim autoscale`
// prints one per tick).
type TraceTick struct {
	// T is the time at the end of the tick, in seconds from the start.
	T float64 `json:"t_s"`
	// Running is the instances serving at T: started at least cold_start
	// before T (or running from the start) and not stopped.
	Running int `json:"running"`
	// Recommended is the autoscaler's recommendation at T.
	Recommended int `json:"recommended"`
	// Driver is what set it (autoscale.Driver).
	Driver autoscale.Driver `json:"driver"`
	// Drivers is each metric driver's count.
	Drivers autoscale.Drivers `json:"drivers"`
	// Demoted is the demoted instances still running after T.
	Demoted int `json:"demoted"`
	// Stopped is the demoted instances stopped at T.
	Stopped int `json:"stopped"`
}

// RunTrace replays tr through an autoscale.Autoscaler: the group starts
// with group.initial_instances running and ready, each sample is one Tick
// at the end of its tick, and an instance the autoscaler starts is ready
// cold_start later. Stops take the instances that are not ready yet
// first, then the newest. It returns one TraceTick per sample.
func RunTrace(tr *Trace) []TraceTick {
	start := time.Unix(0, 0).UTC()
	a := autoscale.New(tr.Group.Rules(), tr.Group.Initial(), start)
	// readyAt holds every instance's ready time, oldest first.
	readyAt := make([]time.Time, a.Recommended())
	for i := range readyAt {
		readyAt[i] = start
	}
	out := make([]TraceTick, 0, len(tr.Samples))
	for i, s := range tr.Samples {
		now := start.Add(time.Duration(i+1) * tr.Tick)
		d := a.Tick(now, s)
		for range d.Start {
			readyAt = append(readyAt, now.Add(tr.Group.ColdStart))
		}
		// Instances are appended in start order and started ones become
		// ready in the same order, so the newest — the not-yet-ready ones
		// first — are at the end.
		readyAt = readyAt[:len(readyAt)-d.Stopped]
		running := 0
		for _, t := range readyAt {
			if !t.After(now) {
				running++
			}
		}
		out = append(out, TraceTick{
			T:           now.Sub(start).Seconds(),
			Running:     running,
			Recommended: d.Recommended,
			Driver:      d.Driver,
			Drivers:     d.Drivers,
			Demoted:     d.Demoted,
			Stopped:     d.Stopped,
		})
	}
	return out
}

package autoscalebench

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/autoscale"
)

func TestParseTrace(t *testing.T) {
	tr, err := LoadTrace("../../configs/autoscale/step.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := config.DefaultAutoscaling()
	want.MaxInstances, want.InitialInstances, want.MaxConcurrencyPerInstance, want.ColdStart = 10, 1, 10, 5*time.Second
	if diff := cmp.Diff(want, tr.Group); diff != "" {
		t.Errorf("Group (-want +got):\n%s", diff)
	}
	if tr.Tick != time.Second || len(tr.Samples) != 300 {
		t.Errorf("Tick %v, %d samples, want 1s, 300", tr.Tick, len(tr.Samples))
	}
	if got, want := tr.Samples[30], (autoscale.Sample{CPUCores: 3, Concurrency: 30, Requests: 300}); got != want {
		t.Errorf("Samples[30] = %+v, want %+v", got, want)
	}
}

func TestParseTraceErrors(t *testing.T) {
	const group = "group: {max_instances: 4}\n"
	for _, tt := range []struct {
		name, doc string
		want      []string
	}{
		{"empty", "", []string{"t.yaml: empty trace file"}},
		{"not a mapping", "[1]", []string{"t.yaml: expected a mapping with group, tick and samples, got a list"}},
		{"all missing", "x: 1", []string{
			"t.yaml: x: unknown field (want group, tick, samples)",
			"t.yaml: group: required: the group's autoscaling block",
			`t.yaml: tick: required: a duration such as "1s"`,
			"t.yaml: samples: required: at least one sample",
		}},
		{"group problems", "group: {max_instances: 0, cpu_target: 2, cold_strat: 1s}\ntick: 1s\nsamples: [{}]", []string{
			`t.yaml: group.cold_strat: unknown field (did you mean "cold_start"?)`,
			"t.yaml: group.max_instances: required (1..10000) when the autoscaling block is set, got 0",
		}},
		{"group without max", "group: {}\ntick: 1s\nsamples: [{}]", []string{
			"t.yaml: group.max_instances: required (1..10000)",
		}},
		{"group wrong type", "group: {max_instances: many}\ntick: 1s\nsamples: [{}]", []string{
			`t.yaml: group.max_instances: expected an integer, got string "many"`,
		}},
		{"bad tick", group + "tick: 0s\nsamples: [{}]", []string{"t.yaml: tick: must be in (0, 1h0m0s], got 0s"}},
		{"tick not a duration", group + "tick: 1\nsamples: [{}]", []string{`t.yaml: tick: expected a duration such as "1s", got 1`}},
		{"bad samples", group + "tick: 1s\nsamples: [1, {cpu_cores: -1, requests: 1.5, act: .nan, repeat: 0, memory: 3}]", []string{
			"t.yaml: samples[0]: expected a mapping such as {cpu_cores: 1, concurrency: 2, requests: 3}, got 1",
			"t.yaml: samples[1].act: must be a number in [0, 1e+12], got NaN",
			"t.yaml: samples[1].cpu_cores: must be a number in [0, 1e+12], got -1",
			"t.yaml: samples[1].memory: unknown field (want cpu_cores, concurrency, requests, act, repeat)",
			"t.yaml: samples[1].repeat: must be a whole number in 1..1000000, got 0",
			"t.yaml: samples[1].requests: must be a whole number in 0..1000000, got 1.5",
		}},
		{"too long", group + "tick: 1s\nsamples: [{repeat: 600000}, {repeat: 600000}]", []string{
			"t.yaml: samples[1]: the trace runs past 1000000 ticks",
		}},
		{"two documents", group + "tick: 1s\nsamples: [{}]\n---\nx: 1", []string{
			"t.yaml: more than one YAML document; a trace is a single document",
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseTrace([]byte(tt.doc), "t.yaml")
			if !errors.Is(err, ErrInvalidTrace) {
				t.Fatalf("ParseTrace error %v does not match ErrInvalidTrace", err)
			}
			if diff := cmp.Diff(tt.want, strings.Split(err.Error(), "\n")); diff != "" {
				t.Errorf("ParseTrace problems (-want +got):\n%s", diff)
			}
			for _, fe := range config.FieldErrors(err) {
				if fe.File != "t.yaml" {
					t.Errorf("FieldError %v lacks the file name", fe)
				}
			}
		})
	}
}

// TestRunTraceIdleToZero: the sample trace's story, tick by tick (see the
// comment at the top of configs/autoscale/idle-to-zero.yaml).
func TestRunTraceIdleToZero(t *testing.T) {
	tr, err := LoadTrace("../../configs/autoscale/idle-to-zero.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ticks := RunTrace(tr)
	if len(ticks) != 1095 {
		t.Fatalf("%d ticks, want 1095", len(ticks))
	}
	at := func(s int) TraceTick { return ticks[s-1] }
	for _, want := range []TraceTick{
		{T: 1, Running: 4, Recommended: 4, Driver: autoscale.DriverCPU, Drivers: autoscale.Drivers{CPU: 4, Concurrency: 4, ACT: 4}},
		{T: 80, Running: 4, Recommended: 3, Driver: autoscale.DriverConcurrency, Drivers: autoscale.Drivers{CPU: 3, Concurrency: 3, ACT: 3}, Demoted: 1},
		{T: 120, Running: 4, Recommended: 0, Driver: autoscale.DriverIdle, Drivers: autoscale.Drivers{CPU: 1, Concurrency: 2}, Demoted: 4},
		{T: 140, Running: 3, Recommended: 0, Driver: autoscale.DriverIdle, Drivers: autoscale.Drivers{CPU: 1, Concurrency: 2}, Demoted: 3, Stopped: 1},
		{T: 180, Running: 1, Recommended: 0, Driver: autoscale.DriverIdle, Drivers: autoscale.Drivers{CPU: 1, Concurrency: 2}, Demoted: 1, Stopped: 2},
		{T: 1020, Running: 0, Recommended: 0, Driver: autoscale.DriverIdle, Drivers: autoscale.Drivers{CPU: 1}, Stopped: 1},
		{T: 1081, Running: 0, Recommended: 1, Driver: autoscale.DriverDemand, Drivers: autoscale.Drivers{CPU: 1, Concurrency: 1, ACT: 1}},
		{T: 1091, Running: 1, Recommended: 1, Driver: autoscale.DriverCPU, Drivers: autoscale.Drivers{CPU: 1, Concurrency: 1, ACT: 1}},
	} {
		if diff := cmp.Diff(want, at(int(want.T))); diff != "" {
			t.Errorf("t=%gs (-want +got):\n%s", want.T, diff)
		}
	}
}

// TestRunTraceBand: the hold band, the recompute from usage with its
// round-up, the scale-down below the band and the clamp to max, as
// configs/autoscale/band.yaml's comment tells them.
func TestRunTraceBand(t *testing.T) {
	tr, err := LoadTrace("../../configs/autoscale/band.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ticks := RunTrace(tr)
	cpu := func(n int) autoscale.Drivers { return autoscale.Drivers{CPU: n} }
	for _, want := range []TraceTick{
		{T: 132, Running: 10, Recommended: 10, Driver: autoscale.DriverCPU, Drivers: cpu(11)}, // 65%: held
		{T: 133, Running: 10, Recommended: 12, Driver: autoscale.DriverCPU, Drivers: cpu(12)}, // past 66%: 11.0x ⇒ 12
		{T: 271, Running: 12, Recommended: 12, Driver: autoscale.DriverCPU, Drivers: cpu(11)}, // 54–66% of 12: held
		{T: 272, Running: 12, Recommended: 11, Driver: autoscale.DriverCPU, Drivers: cpu(11), Demoted: 1},
		{T: 332, Running: 11, Recommended: 11, Driver: autoscale.DriverCPU, Drivers: cpu(10), Stopped: 1},
		{T: 360, Running: 11, Recommended: 11, Driver: autoscale.DriverCPU, Drivers: cpu(10)}, // 6 cores on 11: 54.5%, held
		{T: 404, Running: 17, Recommended: 20, Driver: autoscale.DriverMax, Drivers: cpu(21)},
		{T: 420, Running: 20, Recommended: 20, Driver: autoscale.DriverMax, Drivers: cpu(25)},
	} {
		if diff := cmp.Diff(want, ticks[int(want.T)-1]); diff != "" {
			t.Errorf("t=%gs (-want +got):\n%s", want.T, diff)
		}
	}
}

// TestRunTraceInvariants: on every sample trace, each tick's running
// instances are at most recommended + demoted, recommended stays within
// [min, max], and the instance list RunTrace keeps has recommended +
// demoted entries.
func TestRunTraceInvariants(t *testing.T) {
	files, _ := filepath.Glob("../../configs/autoscale/*.yaml")
	if len(files) < 3 {
		t.Fatalf("%d sample traces, want at least 3", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			tr, err := LoadTrace(f)
			if err != nil {
				t.Fatal(err)
			}
			checkTicks(t, tr, RunTrace(tr))
		})
	}
}

func checkTicks(t *testing.T, tr *Trace, ticks []TraceTick) {
	t.Helper()
	if len(ticks) != len(tr.Samples) {
		t.Fatalf("%d ticks for %d samples", len(ticks), len(tr.Samples))
	}
	for _, k := range ticks {
		if k.Recommended < tr.Group.MinInstances || k.Recommended > tr.Group.MaxInstances ||
			k.Running > k.Recommended+k.Demoted || k.Running < 0 || k.Stopped < 0 {
			t.Fatalf("tick %+v breaks an invariant", k)
		}
	}
}

// FuzzParseTrace: ParseTrace never panics; its errors are ErrInvalidTrace
// with FieldErrors naming the file; an accepted trace replays with one
// consistent tick per sample.
func FuzzParseTrace(f *testing.F) {
	files, _ := filepath.Glob("../../configs/autoscale/*.yaml")
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"", "[]", "group: 1", "group: {max_instances: 2}\ntick: 1ns\nsamples: [{repeat: 3, act: 1e12}]",
		"group: {max_instances: 1e9, tolerance: .inf}\ntick: 2h\nsamples: {}",
		"group: {max_instances: 3, min_instances: 3}\ntick: 1s\nsamples: [{requests: 9223372036854775807}, ~, {1: 2}]",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := ParseTrace(data, "fuzz.yaml")
		if err != nil {
			if !errors.Is(err, ErrInvalidTrace) {
				t.Fatalf("error %v is not ErrInvalidTrace", err)
			}
			for _, fe := range config.FieldErrors(err) {
				if fe.File != "fuzz.yaml" {
					t.Fatalf("FieldError %v lacks the file name", fe)
				}
			}
			return
		}
		if len(tr.Samples) > 20000 {
			return // long runs cost the fuzzer time, not coverage
		}
		checkTicks(t, tr, RunTrace(tr))
	})
}

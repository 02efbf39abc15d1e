package testbackend

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/lb/loadreport"
)

// fakeCPU is a CPUTimeFunc that tests set.
type fakeCPU struct{ ns atomic.Int64 }

func (f *fakeCPU) time() time.Duration { return time.Duration(f.ns.Load()) }
func (f *fakeCPU) add(d time.Duration) { f.ns.Add(int64(d)) }
func (f *fakeCPU) funcOf() CPUTimeFunc { return f.time }

func TestUsageMeter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	const ms = time.Millisecond
	// Each step happens at t0+at: the process has used cpu of CPU time and
	// the limiter's integral is busy request-seconds; the meter is read.
	type step struct {
		at       time.Duration
		cpu      time.Duration
		busy     float64
		wantCPU  float64
		wantConc float64
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{name: "first reading is 0", steps: []step{{at: 0, cpu: 5 * time.Second, busy: 7}}},
		{name: "one second after the first", steps: []step{
			{at: 0},
			{at: time.Second, cpu: 1500 * ms, busy: 2, wantCPU: 1.5, wantConc: 2},
		}},
		{name: "first second: the window is what there is", steps: []step{
			{at: 0},
			{at: 500 * ms, cpu: 250 * ms, busy: 1.5, wantCPU: 0.5, wantConc: 3},
		}},
		{name: "steady reads: the newest sample at least 1s old", steps: []step{
			{at: 0},
			{at: 500 * ms, cpu: 500 * ms, busy: 0.5, wantCPU: 1, wantConc: 1},
			// Reference is the sample at 500ms (1s old), not the one at 0.
			{at: 1500 * ms, cpu: 2500 * ms, busy: 4.5, wantCPU: 2, wantConc: 4},
		}},
		{name: "readings closer than 100ms are not kept", steps: []step{
			{at: 0},
			{at: 50 * ms, cpu: 50 * ms, busy: 0.05, wantCPU: 1, wantConc: 1},
			// The 50ms reading was not kept: the reference is the one at 0.
			{at: 1050 * ms, cpu: 1050 * ms, busy: 2.05, wantCPU: 1, wantConc: 2.05 / 1.05},
		}},
		{name: "after a silence: the span since the last reading", steps: []step{
			{at: 0},
			{at: 200 * ms, cpu: 200 * ms, busy: 0.4, wantCPU: 1, wantConc: 2},
			{at: 5200 * ms, cpu: 700 * ms, busy: 0.4, wantCPU: 0.1, wantConc: 0},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cpu time.Duration
			var busy float64
			m := &usageMeter{cpuTime: func() time.Duration { return cpu }, busy: func(time.Time) float64 { return busy }}
			for i, s := range tt.steps {
				cpu, busy = s.cpu, s.busy
				got := m.read(t0.Add(s.at))
				want := usage{CPUCores: s.wantCPU, Concurrency: s.wantConc}
				if !cmp.Equal(got, want, approx) {
					t.Errorf("step %d at +%v: read = %+v, want %+v", i, s.at, got, want)
				}
			}
		})
	}
}

// TestUsageMeterRing reads every 100ms for 3s at 1 core and 3 in flight:
// once the ring has wrapped, each reading still finds a reference exactly
// 1s old.
func TestUsageMeterRing(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var now time.Duration
	m := &usageMeter{
		cpuTime: func() time.Duration { return now },
		busy:    func(time.Time) float64 { return 3 * now.Seconds() },
	}
	for now = 0; now <= 3*time.Second; now += 100 * time.Millisecond {
		got := m.read(t0.Add(now))
		if now == 0 {
			continue
		}
		if want := (usage{CPUCores: 1, Concurrency: 3}); !cmp.Equal(got, want, approx) {
			t.Fatalf("read at +%v = %+v, want %+v", now, got, want)
		}
	}
	// The reference at 3s is the sample at 2s.
	if ref := m.referenceLocked(t0.Add(3 * time.Second)); !ref.at.Equal(t0.Add(2 * time.Second)) {
		t.Errorf("reference at +3s is at %v, want +2s", ref.at.Sub(t0))
	}
}

func TestLimiterBusySeconds(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	l := newLimiter(Capacity{MaxConcurrency: 4, Queue: 4}, clk)
	ctx := t.Context()
	for range 2 {
		if err := l.acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(1500 * time.Millisecond) // 2 in flight for 1.5s: 3
	if err := l.acquire(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second) // 3 in flight for 1s: 3 more
	l.release()
	l.release()
	clk.Advance(2 * time.Second) // 1 in flight for 2s: 2 more
	if got := l.busySeconds(clk.Now()); !cmp.Equal(got, 8.0, approx) {
		t.Errorf("busySeconds = %v, want 8", got)
	}
	l.release()
}

// TestUsageReported checks the numbers of a process that used 1.5s of CPU
// over one second with 2 requests in flight, on 4 cores: in /admin/stats
// and in the load report of an answer.
func TestUsageReported(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	var cpu fakeCPU
	inst := testInstance("u", Capacity{MaxConcurrency: 4, Queue: 4})
	s := startServerOpts(t, Config{Instances: []InstanceConfig{inst}, CPUs: 4}, Options{Clock: clk, CPUTime: cpu.funcOf()})
	c := newClient(t, "")
	base := "http://" + s.Addr("u")

	if st := getStats(t, c, base); st.CPUCores != 0 || st.Concurrency != 0 || st.CPUs != 4 {
		t.Fatalf("stats at start: cpu_cores %v, concurrency %v, cpus %v; want 0, 0, 4", st.CPUCores, st.Concurrency, st.CPUs)
	}
	if r := mustDo(t, c, http.MethodPost, base+"/admin/hold?on=true"); r.status != http.StatusOK {
		t.Fatalf("hold: status %d", r.status)
	}
	var wg sync.WaitGroup
	answers := make([]response, 2)
	for i := range answers {
		wg.Go(func() { answers[i] = do(t.Context(), c, http.MethodGet, base+"/work") })
	}
	in := s.find("u")
	ctx, cancel := context.WithTimeout(t.Context(), defaultTestTimeout)
	defer cancel()
	if err := in.lim.waitFor(ctx, func(inFlight, _ int) bool { return inFlight == 2 }); err != nil {
		t.Fatalf("waiting for 2 in flight: %v", err)
	}
	clk.Advance(time.Second)
	cpu.add(1500 * time.Millisecond)

	st := getStats(t, c, base)
	got := [4]float64{st.CPUCores, st.CPUs, st.CPUUtilization, st.Concurrency}
	if want := [4]float64{1.5, 4, 0.375, 2}; !cmp.Equal(got, want, approx) {
		t.Errorf("stats [cpu_cores cpus cpu_utilization concurrency] = %v, want %v", got, want)
	}

	mustDo(t, c, http.MethodPost, base+"/admin/hold?on=false")
	wg.Wait()
	for i, r := range answers {
		if r.err != nil || r.status != http.StatusOK {
			t.Fatalf("request %d: status %d, %v", i, r.status, r.err)
		}
		h := r.header.Get(loadreport.Header)
		rep, err := loadreport.Parse(h)
		if err != nil {
			t.Fatalf("request %d: %s %q: %v", i, loadreport.Header, h, err)
		}
		if rep.CPUUtilization != 0.375 {
			t.Errorf("request %d: cpu_utilization %v, want 0.375 (in %q)", i, rep.CPUUtilization, h)
		}
		if !strings.Contains(h, ", named_metrics.cpu_cores=1.5, named_metrics.concurrency=2") {
			t.Errorf("request %d: %s %q lacks named_metrics.cpu_cores=1.5, named_metrics.concurrency=2", i, loadreport.Header, h)
		}
	}

	clk.Advance(time.Second) // idle: nothing in flight, no CPU used
	st = getStats(t, c, base)
	if st.CPUCores != 0 || st.Concurrency != 0 {
		t.Errorf("stats after an idle second: cpu_cores %v, concurrency %v; want 0, 0", st.CPUCores, st.Concurrency)
	}
}

func TestFormatLoad(t *testing.T) {
	got := formatLoad(load{
		Report:   loadreport.Report{ApplicationUtilization: 0.5, CPUUtilization: 0.25, RPSFractional: 10, Queue: 1},
		CPUCores: 0.5, Concurrency: 2.25,
	})
	want := "TEXT application_utilization=0.5, cpu_utilization=0.25, rps_fractional=10, named_metrics.queue=1, named_metrics.cpu_cores=0.5, named_metrics.concurrency=2.25"
	if got != want {
		t.Errorf("formatLoad = %q, want %q", got, want)
	}
	if _, err := loadreport.Parse(got); err != nil {
		t.Errorf("loadreport.Parse(%q): %v", got, err)
	}
}

// TestStartupDelay checks the emulated cold start on the fake clock: the
// health check fails, saying "starting", until the delay has passed since
// New, and passes from then on; a tcp instance refuses connections and a
// grpc instance answers NOT_SERVING until then.
func TestStartupDelay(t *testing.T) {
	clk := clock.NewFake(time.Unix(1000, 0))
	web := testInstance("web", DefaultCapacity())
	raw := testInstance("raw", Capacity{Queue: 1})
	raw.Proto = ProtoTCP
	rpc := testInstance("rpc", Capacity{Queue: 1})
	rpc.Proto = ProtoGRPC
	s := startServer(t, Config{Instances: []InstanceConfig{web, raw, rpc}, StartupDelay: 5 * time.Second}, clk)
	c := newClient(t, "")
	base := "http://" + s.Addr("web")
	hc := healthgrpc.NewHealthClient(dialGRPC(t, s.Addr("rpc"), ""))

	check := func(when string, wantHealthy bool) {
		t.Helper()
		r := mustDo(t, c, http.MethodGet, base+"/healthz")
		wantStatus, wantBody := http.StatusOK, "ok\n"
		if !wantHealthy {
			wantStatus, wantBody = http.StatusServiceUnavailable, "starting\n"
		}
		if r.status != wantStatus || r.body != wantBody {
			t.Errorf("%s: /healthz = %d %q, want %d %q", when, r.status, r.body, wantStatus, wantBody)
		}
		wantStatus2 := healthgrpc.HealthCheckResponse_SERVING
		if !wantHealthy {
			wantStatus2 = healthgrpc.HealthCheckResponse_NOT_SERVING
		}
		if resp, err := hc.Check(t.Context(), &healthgrpc.HealthCheckRequest{}); err != nil || resp.GetStatus() != wantStatus2 {
			t.Errorf("%s: gRPC health Check = %v, %v; want %v", when, resp.GetStatus(), err, wantStatus2)
		}
		for _, name := range []string{"web", "raw", "rpc"} {
			st, _ := s.Stats(name)
			if st.Healthy != wantHealthy || st.Starting == wantHealthy {
				t.Errorf("%s: %s healthy=%v starting=%v, want healthy=%v starting=%v", when, name, st.Healthy, st.Starting, wantHealthy, !wantHealthy)
			}
		}
		conn, err := net.DialTimeout("tcp", s.Addr("raw"), defaultTestTimeout)
		if (err == nil) != wantHealthy {
			t.Errorf("%s: dial tcp instance: %v, want success=%v", when, err, wantHealthy)
		}
		if conn != nil {
			_ = conn.Close()
		}
	}
	check("at start", false)
	clk.Advance(5*time.Second - time.Nanosecond)
	check("1ns before the delay", false)
	clk.Advance(time.Nanosecond)
	check("at the delay", true)
}

// TestCPUPerRequest serves requests that each cost 20ms of CPU, on the
// real clock, and checks that the process's CPU time grew by at least
// that much: CPU time, unlike wall time, does not depend on what else
// runs on the machine.
func TestCPUPerRequest(t *testing.T) {
	const perRequest, requests = 20 * time.Millisecond, 5
	s := startServerOpts(t, Config{Instances: []InstanceConfig{testInstance("busy", Capacity{MaxConcurrency: 1, Queue: requests})}, CPUPerRequest: perRequest}, Options{})
	c := newClient(t, "")
	before := ProcessCPUTime()
	for range requests {
		if r := mustDo(t, c, http.MethodGet, "http://"+s.Addr("busy")+"/work"); r.status != http.StatusOK {
			t.Fatalf("status %d", r.status)
		}
	}
	if used := ProcessCPUTime() - before; used < requests*perRequest {
		t.Errorf("process CPU time grew by %v over %d requests, want at least %v", used, requests, requests*perRequest)
	}
}

func TestBurnCPU(t *testing.T) {
	if _, ok := threadCPUTime(); !ok {
		t.Skip("no CLOCK_THREAD_CPUTIME_ID")
	}
	before := ProcessCPUTime()
	burnCPU(30 * time.Millisecond)
	if used := ProcessCPUTime() - before; used < 30*time.Millisecond {
		t.Errorf("burnCPU(30ms) used %v of CPU, want at least 30ms", used)
	}
	burnCPU(0) // returns at once
}

// BenchmarkUsageMeterRead is the cost each admission and each load report
// adds: one getrusage and the meter's bookkeeping.
func BenchmarkUsageMeterRead(b *testing.B) {
	l := newLimiter(Capacity{MaxConcurrency: 4}, clock.Real{})
	m := &usageMeter{cpuTime: ProcessCPUTime, busy: l.busySeconds}
	b.ReportAllocs()
	for b.Loop() {
		m.read(time.Now())
	}
}

// BenchmarkUsageMeterSample is what each admission adds while no sample
// is due.
func BenchmarkUsageMeterSample(b *testing.B) {
	l := newLimiter(Capacity{MaxConcurrency: 4}, clock.Real{})
	m := &usageMeter{cpuTime: ProcessCPUTime, busy: l.busySeconds}
	now := time.Now()
	m.read(now)
	b.ReportAllocs()
	for b.Loop() {
		m.sample(now)
	}
}

// BenchmarkFormatLoad is the cost of the load report header of each
// answer.
func BenchmarkFormatLoad(b *testing.B) {
	l := load{Report: loadreport.Report{ApplicationUtilization: 0.75, CPUUtilization: 0.5, RPSFractional: 123.4, Queue: 2}, CPUCores: 0.61, Concurrency: 3.2}
	b.ReportAllocs()
	for b.Loop() {
		_ = formatLoad(l)
	}
}

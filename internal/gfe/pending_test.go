package gfe

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/internal/gfe/pending"
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/lb/backend"
	"github.com/spillway-lb/spillway/lb/waterfall"
	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

// autoscaledConfig is a config whose only service, web, has one group,
// east, autoscaled, with one instance at addr taking one request at a
// time; a request waits at most wait (pending_wait_cold_starts 0).
func autoscaledConfig(t *testing.T, addr string, wait time.Duration) *config.Config {
	t.Helper()
	y := fmt.Sprintf(`regions:
  - name: us-east
    zones:
      - name: us-east-b
        groups:
          - name: east
            instances:
              - {address: %s, max_concurrency: 1}
            autoscaling:
              max_instances: 3
              max_concurrency_per_instance: 1
              cold_start: 1500ms
              min_pending_wait: %v
              pending_wait_cold_starts: 0
services:
  - name: web
    policy: round_robin
    backends:
      - {group: east, max_rate_per_instance: 100000}
routes:
  - {host: "*", path_prefix: /, service: web}
`, addr, wait)
	c, err := config.Parse([]byte(y), "test.yaml")
	if err != nil {
		t.Fatalf("config.Parse: %v\n%s", err, y)
	}
	return c
}

// recordingCP is a control plane that refuses every capacity request and
// records it.
type recordingCP struct {
	mu   sync.Mutex
	reqs []*pb.CapacityRequest
}

func (r *recordingCP) RequestCapacity(_ context.Context, in *pb.CapacityRequest, _ ...grpc.CallOption) (*pb.CapacityResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, in)
	return &pb.CapacityResponse{Message: "no autoscaler configured"}, nil
}

func (r *recordingCP) requests() []*pb.CapacityRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*pb.CapacityRequest(nil), r.reqs...)
}

// pendingEdge runs a gfe on a fake clock serving autoscaledConfig over
// backend b with a pending wait of wait, asking cp for capacity.
func pendingEdge(t *testing.T, b *httpBackend, cp *recordingCP, wait time.Duration) (*runningEdge, *clock.Fake, *fakeGossip, *prometheus.Registry) {
	t.Helper()
	return pendingEdgeWith(t, b, cp, wait, nil)
}

// pendingEdgeWith is pendingEdge with edit, when set, applied to the
// config it serves.
func pendingEdgeWith(t *testing.T, b *httpBackend, cp *recordingCP, wait time.Duration, edit func(*config.Config)) (*runningEdge, *clock.Fake, *fakeGossip, *prometheus.Registry) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Node, cfg.Site = "gfe-nyc", "nyc"
	cfg.Listen, cfg.Admin = "127.0.0.1:0", "127.0.0.1:0"
	cfg.DrainTimeout = time.Second
	g := &fakeGossip{node: cfg.Node, states: map[string]gossip.NodeState{}}
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	reg := prometheus.NewRegistry()
	e, err := New(cfg, Options{Gossip: g, Clock: clk, Registry: reg, Capacity: func() pending.Requester { return cp }})
	if err != nil {
		t.Fatal(err)
	}
	c := autoscaledConfig(t, b.addr(), wait)
	if edit != nil {
		edit(c)
	}
	return runEdge(t, e, c), clk, g, reg
}

type answer struct {
	code       int
	retryAfter string
	body       string
	err        error
}

// awaitAnswer advances clk by one poll (5ms) at a time until ch answers.
func awaitAnswer(t *testing.T, clk *clock.Fake, ch <-chan answer, what string) answer {
	t.Helper()
	var a answer
	waitUntil(t, what, func() bool {
		select {
		case a = <-ch:
			return true
		default:
			clk.Advance(5 * time.Millisecond) // a poll
			return false
		}
	})
	return a
}

// getAsync sends GET path to the gfe in the background.
func getAsync(e *runningEdge, path string) <-chan answer {
	out := make(chan answer, 1)
	go func() {
		resp, err := http.Get("http://" + e.ListenAddr().String() + path)
		if err != nil {
			out <- answer{err: err}
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out <- answer{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: string(body)}
	}()
	return out
}

// holdBackend sends a request that b holds (GET /slow, until b.release
// is closed) and waits until b has it: the only slot of the only
// instance is then taken.
func holdBackend(t *testing.T, e *runningEdge, b *httpBackend) <-chan answer {
	t.Helper()
	first := getAsync(e, "/slow")
	waitUntil(t, "the first request at the backend", func() bool { return b.slowIn.Load() == 1 })
	return first
}

// waitHist returns the sample count and sum of the pending wait histogram
// for web and result.
func waitHist(t *testing.T, reg *prometheus.Registry, result string) (uint64, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "spillway_gfe_pending_wait_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labels(m)["result"] == result && labels(m)["service"] == "web" {
				return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
			}
		}
	}
	return 0, 0
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// TestPendingServedWhenSlotFrees: the only instance (max_concurrency 1)
// is busy; a second request waits in the pending queue instead of a 429,
// the gfe asks for capacity (2 instances: 1 + ceil(1/1)) and publishes
// the pending load, and the request is served once the first ends
// (pending wait 2s).
func TestPendingServedWhenSlotFrees(t *testing.T) {
	b := newHTTPBackend(t, "b1")
	cp := &recordingCP{}
	e, clk, g, reg := pendingEdge(t, b, cp, 2*time.Second)

	first := holdBackend(t, e, b)
	second := getAsync(e, "/")
	waitUntil(t, "the second request to wait", func() bool { return e.pending.Waiting() == 1 })
	if got := testutil.ToFloat64(pendingDepth(t, reg)); got != 1 {
		t.Errorf("spillway_gfe_pending_requests{web} = %v, want 1", got)
	}
	for _, ss := range e.Status().Services {
		if ss.Name == "web" && ss.Pending != 1 {
			t.Errorf("/status services[web].pending = %d, want 1", ss.Pending)
		}
	}
	clk.Advance(200 * time.Millisecond) // still waiting, polled 40 times
	waitUntil(t, "a capacity request", func() bool { return len(cp.requests()) == 1 })
	req := cp.requests()[0]
	if req.GetService() != "web" || req.GetGroup() != "east" || req.GetWantedInstances() != 2 ||
		req.GetReason() != pb.CapacityReason_CAPACITY_REASON_QUEUEING || req.GetNodeId() != "gfe-nyc" || req.GetSite() != "nyc" {
		t.Errorf("capacity request = %v; want web/east, 2 instances, QUEUEING, from gfe-nyc at nyc", req)
	}
	if got := e.pending.Waiting(); got != 1 {
		t.Fatalf("waiting after 200ms = %d, want 1", got)
	}
	clk.Advance(300 * time.Millisecond) // a plan step (500ms) publishes the load; still waiting
	waitUntil(t, "the load published", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.states["gfe-nyc"].Load["east"].Pending == 1
	})
	g.mu.Lock()
	l := g.states["gfe-nyc"].Load["east"]
	g.mu.Unlock()
	if n := len(cp.requests()); n != 1 {
		t.Errorf("capacity requests after 500ms = %d, want 1 (at most one per second)", n)
	}
	if got := testutil.ToFloat64(counterOf(t, reg, "spillway_gfe_capacity_requests_total", "refused")); got != 1 {
		t.Errorf("spillway_gfe_capacity_requests_total{web,east,refused} = %v, want 1", got)
	}
	if l.InFlight != 1 {
		t.Errorf("published load in flight = %v, want 1 (the first request, every sample)", l.InFlight)
	}

	close(b.release)
	if a := <-first; a.err != nil || a.code != http.StatusOK {
		t.Fatalf("first request: %d %v", a.code, a.err)
	}
	a := awaitAnswer(t, clk, second, "the second request served")
	if a.err != nil || a.code != http.StatusOK {
		t.Fatalf("second request: %d %q %v, want 200", a.code, a.body, a.err)
	}
	if n, sum := waitHist(t, reg, "served"); n != 1 || sum < 0.2 {
		t.Errorf("pending_wait_seconds{served} = %d samples, sum %v; want 1, >= 0.2", n, sum)
	}
	if n, _ := waitHist(t, reg, "rejected"); n != 0 {
		t.Errorf("pending_wait_seconds{rejected} = %d samples, want 0", n)
	}
	if got := testutil.ToFloat64(e.metrics.pickErrors.WithLabelValues("web", "all_busy")); got != 0 {
		t.Errorf("pick errors{all_busy} = %v, want 0", got)
	}
}

// TestPendingRejectedAfterWait: with the instance held busy past the
// pending wait (300ms), the waiting request is answered 429 with
// Retry-After (cold start 1.5s → 2) at the first poll at or after 300ms.
func TestPendingRejectedAfterWait(t *testing.T) {
	b := newHTTPBackend(t, "b1")
	cp := &recordingCP{}
	e, clk, _, reg := pendingEdge(t, b, cp, 300*time.Millisecond)

	first := holdBackend(t, e, b)
	start := clk.Now()
	second := getAsync(e, "/")
	waitUntil(t, "the second request to wait", func() bool { return e.pending.Waiting() == 1 })
	clk.Advance(295 * time.Millisecond)
	select {
	case a := <-second:
		t.Fatalf("answered %d before the pending wait", a.code)
	default:
	}
	a := awaitAnswer(t, clk, second, "the second request rejected")
	waited := clk.Now().Sub(start)
	if a.err != nil || a.code != http.StatusTooManyRequests || a.retryAfter != "2" {
		t.Fatalf("second request: %d Retry-After %q %v; want 429, Retry-After 2", a.code, a.retryAfter, a.err)
	}
	if want := "gfe: no instance became free within the pending wait\n"; a.body != want {
		t.Errorf("body = %q, want %q", a.body, want)
	}
	n, sum := waitHist(t, reg, "rejected")
	if n != 1 || math.Abs(sum-0.3) > 0.006 {
		t.Errorf("pending_wait_seconds{rejected} = %d samples, sum %v; want 1, 0.3 (±one 5ms poll)", n, sum)
	}
	if waited < 300*time.Millisecond {
		t.Errorf("rejected after %v of fake time, want >= 300ms", waited)
	}
	if got := testutil.ToFloat64(e.metrics.pickErrors.WithLabelValues("web", "all_busy")); got != 1 {
		t.Errorf("pick errors{all_busy} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(pendingDepth(t, reg)); got != 0 {
		t.Errorf("spillway_gfe_pending_requests{web} = %v, want 0", got)
	}
	close(b.release)
	if a := <-first; a.err != nil || a.code != http.StatusOK {
		t.Fatalf("first request: %d %v", a.code, a.err)
	}
}

// counterOf returns the web/east series of counter name with result.
func counterOf(t *testing.T, reg *prometheus.Registry, name, result string) prometheus.Collector {
	t.Helper()
	return gaugeOf{reg: reg, name: name, service: "web", result: result}
}

// pendingDepth returns the web series of spillway_gfe_pending_requests.
func pendingDepth(t *testing.T, reg *prometheus.Registry) prometheus.Collector {
	t.Helper()
	return gaugeOf{reg: reg, name: "spillway_gfe_pending_requests", service: "web"}
}

// gaugeOf collects one gauge or counter series of reg (by service and,
// when not empty, result), for testutil.ToFloat64.
type gaugeOf struct {
	reg                   *prometheus.Registry
	name, service, result string
}

func (g gaugeOf) Describe(ch chan<- *prometheus.Desc) {
	ch <- prometheus.NewDesc(g.name, "copy", nil, nil)
}

func (g gaugeOf) Collect(ch chan<- prometheus.Metric) {
	mfs, _ := g.reg.Gather()
	v := 0.0
	for _, mf := range mfs {
		if mf.GetName() != g.name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if l := labels(m); l["service"] == g.service && l["result"] == g.result {
				v = m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(g.name, "copy", nil, nil), prometheus.GaugeValue, v)
}

// TestCapacityTarget: capacity requests name the service's autoscaled
// group nearest by RTT, its first autoscaled group without RTT estimates,
// and count the group's instances from the snapshot, demoted ones left out
// (east: 2 active, one unhealthy, and a healthy demoted one).
func TestCapacityTarget(t *testing.T) {
	y := `regions:
  - name: us-east
    zones:
      - name: us-east-b
        groups:
          - name: east
            instances:
              - {address: "127.0.0.1:1001"}
              - {address: "127.0.0.1:1002"}
              - {address: "127.0.0.1:1005", demoted: true}
            autoscaling: {max_instances: 4, max_concurrency_per_instance: 10}
          - name: plain
            instances:
              - {address: "127.0.0.1:1004"}
  - name: eu-west
    zones:
      - name: eu-west-b
        groups:
          - name: west
            instances:
              - {address: "127.0.0.1:1003"}
            autoscaling: {max_instances: 2, max_concurrency_per_instance: 5}
services:
  - name: web
    policy: round_robin
    backends:
      - {group: plain, max_rate_per_instance: 100}
      - {group: west, max_rate_per_instance: 100}
      - {group: east, max_rate_per_instance: 100}
  - name: static
    policy: round_robin
    backends:
      - {group: plain, max_rate_per_instance: 100}
routes:
  - {host: "*", path_prefix: /, service: web}
`
	c, err := config.Parse([]byte(y), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		rtt     map[string]float64
		service string
		after   time.Duration // since the snapshot
		// published is the node's last published state, if any.
		published *gossip.NodeState
		want      pending.Target
		wantOK    bool
	}{
		{name: "no RTT yet: the first autoscaled group", service: "web",
			want: pending.Target{Group: "west", Instances: 1, Healthy: 1, MaxConcurrency: 5}, wantOK: true},
		{name: "nearest by RTT", service: "web", rtt: map[string]float64{"us-east": 5, "eu-west": 80},
			want: pending.Target{Group: "east", Instances: 2, Healthy: 1, Starting: 1, MaxConcurrency: 10}, wantOK: true},
		{name: "a known RTT before an unknown one", service: "web", rtt: map[string]float64{"us-east": 90},
			want: pending.Target{Group: "east", Instances: 2, Healthy: 1, Starting: 1, MaxConcurrency: 10}, wantOK: true},
		{name: "nearer the other way", service: "web", rtt: map[string]float64{"us-east": 90, "eu-west": 10},
			want: pending.Target{Group: "west", Instances: 1, Healthy: 1, MaxConcurrency: 5}, wantOK: true},
		{name: "never healthy for two cold starts: failed, not starting", service: "web", rtt: map[string]float64{"us-east": 5, "eu-west": 80},
			after: 20 * time.Second, // 2 × the default cold_start, 10s
			want:  pending.Target{Group: "east", Instances: 2, Healthy: 1, MaxConcurrency: 10}, wantOK: true},
		{name: "sized by the arrival rate: 100/s × 0.1s = 10 in flight ⇒ 10/10/0.6 ⇒ 2", service: "web", rtt: map[string]float64{"us-east": 5, "eu-west": 80},
			published: &gossip.NodeState{Demand: map[string]float64{"web": 100}, Load: map[string]gossip.GroupLoad{"east": {InFlight: 5, Requests: 50}}},
			want:      pending.Target{Group: "east", Instances: 2, Healthy: 1, Starting: 1, MaxConcurrency: 10, RateWant: 2}, wantOK: true},
		{name: "no latency known: no rate-sized want", service: "web", rtt: map[string]float64{"us-east": 5, "eu-west": 80},
			published: &gossip.NodeState{Demand: map[string]float64{"web": 100}},
			want:      pending.Target{Group: "east", Instances: 2, Healthy: 1, Starting: 1, MaxConcurrency: 10}, wantOK: true},
		{name: "no autoscaled group", service: "static"},
		{name: "unknown service", service: "nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &fakeGossip{node: "gfe-nyc", states: map[string]gossip.NodeState{}}
			clk := clock.NewFake(time.Unix(1_000_000, 0))
			e := newTestEdge(t, g, clk)
			if err := e.ApplySnapshot(snapshot.FromConfig("v1", c, "127.0.0.1:1002")); err != nil {
				t.Fatal(err)
			}
			clk.Advance(tt.after)
			for r, ms := range tt.rtt {
				e.rtt.Set(r, ms)
			}
			if tt.published != nil {
				e.published.Store(tt.published)
			}
			got, ok := e.capacityTarget(tt.service)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("capacityTarget(%q) = %+v, %v; want %+v, %v", tt.service, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// TestGroupLoadPublished: each plan step publishes the mean of the
// in-flight samples and the rate of the requests that ended per group,
// and leaves out a group that went idle.
func TestGroupLoadPublished(t *testing.T) {
	g := &fakeGossip{node: "gfe-nyc", states: map[string]gossip.NodeState{}}
	c := gfetest.TwoRegionConfig(t, "round_robin", []string{"127.0.0.1:1001", "127.0.0.1:1002"}, []string{"127.0.0.1:1003"}, 100)
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	e := newTestEdge(t, g, clk)
	if err := e.ApplySnapshot(snapshot.FromConfig("v1", c)); err != nil {
		t.Fatal(err)
	}
	published := func() map[string]gossip.GroupLoad {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.states["gfe-nyc"].Load
	}
	e.step(clk.Now()) // first build: backends exist, no rate yet
	if l := published(); l != nil {
		t.Fatalf("load before any request = %v, want none", l)
	}
	b1, b2 := e.builder.Backend("127.0.0.1:1001"), e.builder.Backend("127.0.0.1:1002")
	b1.TryAcquire()
	b2.TryAcquire()
	for i := range loadSamplesPerPlan { // in flight 2 for half the samples, then 1
		if i == loadSamplesPerPlan/2 {
			b2.Release()
		}
		e.sampleLoad(e.control.Load())
	}
	for range 5 {
		b1.Observe(backend.OutcomeOK, time.Millisecond)
	}
	b2.Observe(backend.OutcomeFailed, 0)
	clk.Advance(500 * time.Millisecond)
	e.step(clk.Now()) // one more sample (1) at the step: (5·2 + 6·1)/11
	want := map[string]gossip.GroupLoad{"east": {InFlight: 16.0 / 11, Requests: 6 / 0.5}}
	if diff := cmp.Diff(want, published(), cmpopts.EquateApprox(0, 1e-9)); diff != "" {
		t.Errorf("published load (-want +got):\n%s", diff)
	}
	b1.Release()
	clk.Advance(500 * time.Millisecond)
	e.step(clk.Now())
	if l := published(); l != nil {
		t.Errorf("load after the group went idle = %v, want none (absent is zero)", l)
	}
}

// TestSpillPast: the demand a row sends to regions farther than the
// autoscaled group's is what the group would take with the capacity.
func TestSpillPast(t *testing.T) {
	row := []waterfall.Flow{
		{Region: "us-east", Demand: 40}, {Region: "us-east", Demand: 5},
		{Region: "eu-west", Demand: 15}, {Region: "asia", Demand: 10}, {Region: "mars", Demand: 7},
	}
	rtt := map[string]float64{"us-east": 8, "eu-west": 35, "asia": 90, "near": 2}
	for _, tt := range []struct {
		region string
		want   float64
	}{
		{"us-east", 25}, // eu-west and asia; mars has no RTT estimate
		{"eu-west", 10},
		{"asia", 0},
		{"near", 70}, // a nearer region at zero: everything the row sends elsewhere
	} {
		if got := spillPast(row, rtt, tt.region, rtt[tt.region]); got != tt.want {
			t.Errorf("spillPast(%s) = %v, want %v", tt.region, got, tt.want)
		}
	}
}

func TestConfigValidatePending(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*Config)
		wantErr string
	}{
		{name: "defaults", edit: func(*Config) {}},
		{name: "no poll", edit: func(c *Config) { c.PendingPoll = 0 }, wantErr: "gfe.pending_poll: must be > 0, got 0s"},
		{name: "negative capacity interval", edit: func(c *Config) { c.CapacityInterval = -time.Second },
			wantErr: "gfe.capacity_interval: must be > 0, got -1s"},
		{name: "pending max at its bound", edit: func(c *Config) { c.PendingMax = pending.MaxMaxWaiting }},
		{name: "no pending max", edit: func(c *Config) { c.PendingMax = 0 }, wantErr: "gfe.pending_max: must be in 1..10000000, got 0"},
		{name: "pending max past its bound", edit: func(c *Config) { c.PendingMax = pending.MaxMaxWaiting + 1 },
			wantErr: "gfe.pending_max: must be in 1..10000000, got 10000001"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Node, c.Site = "gfe-nyc", "nyc"
			tt.edit(&c)
			err := c.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("Validate() = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// TestReadyWithAutoscaledGroup: a gfe whose only service has no healthy
// backend is ready when the service has an autoscaled group (its requests
// wait for an instance), and not otherwise.
func TestReadyWithAutoscaledGroup(t *testing.T) {
	const addr = "127.0.0.1:1001"
	tests := []struct {
		name string
		cfg  func(t *testing.T) *config.Config
		want bool
	}{
		{name: "autoscaled", cfg: func(t *testing.T) *config.Config { return autoscaledConfig(t, addr, time.Second) }, want: true},
		{name: "not autoscaled", cfg: func(t *testing.T) *config.Config { return edgeConfig(t, []string{addr}, "") }, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &fakeGossip{node: "gfe-nyc", states: map[string]gossip.NodeState{}}
			clk := clock.NewFake(time.Unix(1_000_000, 0))
			e := newTestEdge(t, g, clk)
			if err := e.ApplySnapshot(snapshot.FromConfig("v1", tt.cfg(t), addr)); err != nil {
				t.Fatal(err)
			}
			e.step(clk.Now())
			if got := e.Ready(); got != tt.want {
				t.Errorf("Ready() with no healthy backend = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestPendingFastPathClientGone: a fast-path request whose client closes
// its connection while it waits is canceled (the queue peeks at the
// socket), so the freed slot goes to the live request behind it.
func TestPendingFastPathClientGone(t *testing.T) {
	b := newHTTPBackend(t, "b1")
	e, clk, _, reg := pendingEdge(t, b, &recordingCP{}, 2*time.Second)

	first := holdBackend(t, e, b)
	conn, err := net.DialTimeout("tcp", e.ListenAddr().String(), lnTestTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("GET /gone HTTP/1.1\r\nHost: example.com\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the raw request to wait", func() bool { return e.pending.Waiting() == 1 })
	third := getAsync(e, "/third")
	waitUntil(t, "the third request to wait", func() bool { return e.pending.Waiting() == 2 })
	conn.Close()
	clk.Advance(pending.GoneEvery) // the queue asks the head before trying it
	waitUntil(t, "the gone client's request canceled", func() bool {
		n, _ := waitHist(t, reg, "canceled")
		return n == 1
	})
	if got := e.pending.Waiting(); got != 1 {
		t.Errorf("waiting after the client left = %d, want 1", got)
	}
	close(b.release)
	if a := <-first; a.err != nil || a.code != http.StatusOK {
		t.Fatalf("first request: %d %v", a.code, a.err)
	}
	a := awaitAnswer(t, clk, third, "the third request served")
	if a.err != nil || a.code != http.StatusOK {
		t.Fatalf("third request: %d %v, want 200", a.code, a.err)
	}
	if n, _ := waitHist(t, reg, "served"); n != 1 {
		t.Errorf("pending_wait_seconds{served} = %d, want 1 (the gone client's request never reached the backend)", n)
	}
}

// TestSeenInstances: an instance is starting from when it first appears
// until it is healthy once, or for at most the window given; one that was
// healthy and fails is not starting, and one that leaves is forgotten.
func TestSeenInstances(t *testing.T) {
	c := gfetest.TwoRegionConfig(t, "round_robin", []string{"127.0.0.1:1001", "127.0.0.1:1002"}, []string{"127.0.0.1:1003"}, 100)
	t0 := time.Unix(1_000_000, 0)
	var s seenInstances
	s.update(snapshot.FromConfig("v1", c, "127.0.0.1:1001", "127.0.0.1:1002"), t0)
	const within = 4 * time.Second
	for _, tt := range []struct {
		at   time.Duration
		snap *snapshot.Snapshot // applied at at, nil for none
		addr string
		want bool
	}{
		{at: time.Second, addr: "127.0.0.1:1001", want: true},
		{at: 4 * time.Second, addr: "127.0.0.1:1001", want: false},                                                                         // past the window
		{at: time.Second, snap: snapshot.FromConfig("v2", c, "127.0.0.1:1002"), addr: "127.0.0.1:1001", want: false},                       // healthy now
		{at: 2 * time.Second, snap: snapshot.FromConfig("v3", c, "127.0.0.1:1001", "127.0.0.1:1002"), addr: "127.0.0.1:1001", want: false}, // was healthy
		{at: 2 * time.Second, addr: "127.0.0.1:1002", want: true},
		{at: 2 * time.Second, addr: "127.0.0.1:9999", want: false}, // never seen
	} {
		if tt.snap != nil {
			s.update(tt.snap, t0.Add(tt.at))
		}
		if got := s.starting(tt.addr, t0.Add(tt.at), within); got != tt.want {
			t.Errorf("at +%v: starting(%s) = %v, want %v", tt.at, tt.addr, got, tt.want)
		}
	}
}

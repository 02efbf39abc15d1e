package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/autoscale/controller"
	"github.com/spillway-lb/spillway/internal/demo"
	"github.com/spillway-lb/spillway/internal/topology"
)

// autoscaleSpec is one site, nyc, in front of one autoscaled region,
// us-east, that starts with no instance: the control plane starts up to 3
// testbackend processes of 4 slots each (200ms per request, a 1s cold
// start), with the rules' windows scaled down to seconds.
func autoscaleSpec(net int) topology.Spec {
	return topology.Spec{
		Net:   net,
		Sites: []topology.Site{{Name: "nyc", RTT: map[string]time.Duration{"us-east": 2 * time.Millisecond}}},
		Regions: []topology.Region{
			{Name: "us-east", Zones: []string{"b"}, Instances: 0, Rate: 20},
		},
		HealthInterval: 200 * time.Millisecond,
		Autoscale: &topology.AutoscaleSpec{
			Region: 0,
			Block: "{max_instances: 3, max_concurrency_per_instance: 4, cold_start: 2s, cpu_window: 6s, " +
				"concurrency_window: 6s, concurrency_long_window: 6s, demoted_idle_window: 3s, idle_timeout: 6s, " +
				"min_pending_wait: 6s, pending_wait_cold_starts: 0}",
			MaxConcurrency: 4,
			StartupDelay:   time.Second,
			ServiceTime:    200 * time.Millisecond,
		},
	}
}

// autoscalerStatus returns control plane 0's autoscaler status of group
// (zero when it runs no instance of it).
func autoscalerStatus(t *testing.T, c *topology.Cluster, group string) controller.GroupStatus {
	t.Helper()
	st, err := c.Autoscaler(context.Background(), 0, group)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// waitAutoscaler polls the control plane's autoscaler status of group
// until cond holds, for at most d.
func waitAutoscaler(t *testing.T, c *topology.Cluster, group, what string, d time.Duration, cond func(controller.GroupStatus) bool) controller.GroupStatus {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		st := autoscalerStatus(t, c, group)
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, %s: autoscaler status %+v", d, what, st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// closedLoop runs n clients that each send GET url back to back until
// ctx ends, and counts the answers by status code.
type closedLoop struct {
	mu     sync.Mutex
	codes  map[int]int
	errors atomic.Int64
	wg     sync.WaitGroup
}

func startClosedLoop(ctx context.Context, url string, n int) *closedLoop {
	l := &closedLoop{codes: map[int]int{}}
	client := &http.Client{Timeout: 30 * time.Second}
	for range n {
		l.wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				resp, err := client.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						l.errors.Add(1)
					}
					continue
				}
				resp.Body.Close()
				l.mu.Lock()
				l.codes[resp.StatusCode]++
				l.mu.Unlock()
			}
		})
	}
	return l
}

func (l *closedLoop) wait() map[int]int {
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.codes
}

// TestAutoscaleZeroToNToZero scales a real group from 0 to 3 and back to
// 0 under a load step (docs/design.md §6): the first request waits in the gfe's
// pending queue through a cold start; a step of 24 clients brings the
// group to max_instances; with every slot held, requests beyond them get
// 429 after the pending wait; as the load falls the surplus is demoted and
// stopped, and without requests the group returns to zero.
func TestAutoscaleZeroToNToZero(t *testing.T) {
	c := startCluster(t, autoscaleSpec(64))
	gf := c.GFEs[0]
	const group = "us-east-b-web"
	// The control plane takes the group's lease one TTL (1s) after it
	// starts; from then on it runs the group, at zero.
	if st := waitAutoscaler(t, c, group, "the group run at zero", 30*time.Second, func(s controller.GroupStatus) bool { return s.Acting }); len(st.Instances) != 0 {
		t.Fatalf("before any request: %+v, want no instance", st)
	}

	// 1. From zero: the first request waits for a cold start.
	start := time.Now()
	resp, err := http.Get(gf.URL + "/first")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	waited := time.Since(start)
	if resp.StatusCode != http.StatusOK || waited < time.Second {
		t.Fatalf("first request: %d after %v, want 200 after the 1s cold start", resp.StatusCode, waited)
	}
	if st := autoscalerStatus(t, c, group); st.Active < 1 {
		t.Fatalf("after the first request: %+v, want an active instance", st)
	}
	t.Logf("first request served after %v (cold start 1s)", waited)

	// 2. The step: 24 clients need 24/4/0.6 = 10 instances, clamped to 3.
	ctx, cancel := context.WithCancel(context.Background())
	step := startClosedLoop(ctx, gf.URL+"/step", 24)
	// The pending queue's capacity requests may raise the count first
	// (driver demand); once their hold of a cold start is over, the
	// metric drivers ask for more than 3 and the clamp decides (max).
	st := waitAutoscaler(t, c, group, "3 active under the step, held by max", 30*time.Second, func(s controller.GroupStatus) bool {
		return s.Active == 3 && s.Recommended == 3 && s.Driver == "max"
	})
	time.Sleep(2 * time.Second) // serve at 3 for a while
	cancel()
	codes := step.wait()
	if codes[http.StatusOK] < 50 || codes[http.StatusTooManyRequests] != 0 || len(codes) != 1 || step.errors.Load() != 0 {
		t.Errorf("step answers %v (%d errors), want only 200s (at least 50) and no 429: every wait is short", codes, step.errors.Load())
	}
	t.Logf("step: %v", codes)

	// 3. At max with every slot held: 12 requests take the slots, the
	// others wait the pending wait (6s) and get 429.
	for _, in := range st.Instances {
		post(t, "http://"+in.Address+"/admin/hold?on=true")
	}
	var held sync.WaitGroup
	var mu sync.Mutex
	got := map[int][]time.Duration{}
	for i := range 15 {
		held.Go(func() {
			t0 := time.Now()
			resp, err := http.Get(fmt.Sprintf("%s/held-%d", gf.URL, i))
			if err != nil {
				t.Errorf("held request %d: %v", i, err)
				return
			}
			resp.Body.Close()
			mu.Lock()
			got[resp.StatusCode] = append(got[resp.StatusCode], time.Since(t0))
			mu.Unlock()
		})
	}
	time.Sleep(8 * time.Second) // past the pending wait
	for _, in := range st.Instances {
		post(t, "http://"+in.Address+"/admin/hold?on=false")
	}
	held.Wait()
	if n := len(got[http.StatusTooManyRequests]); n != 3 || len(got[http.StatusOK]) != 12 {
		t.Errorf("with every slot held: %d × 429 and %d × 200, want 3 and 12 (got %v)", n, len(got[http.StatusOK]), got)
	}
	for _, d := range got[http.StatusTooManyRequests] {
		if d < 5500*time.Millisecond {
			t.Errorf("a 429 came after %v, want it after the 6s pending wait", d)
		}
	}
	if v := metricValue(t, gf.Admin+"/metrics", "spillway_gfe_pending_wait_seconds", "service=web", "result=rejected"); v != 3 {
		t.Errorf("pending waits rejected = %v, want 3", v)
	}

	// 4. Down: 2 clients fit in one instance; the other two are demoted,
	// then stopped (the first set after 3s under 10%, the second after its
	// 6s idle timeout).
	ctx, cancel = context.WithCancel(context.Background())
	few := startClosedLoop(ctx, gf.URL+"/few", 2)
	waitAutoscaler(t, c, group, "1 recommended, 2 demoted", 30*time.Second, func(s controller.GroupStatus) bool {
		return s.Recommended == 1 && s.Demoted+s.Stopping == 2
	})
	waitAutoscaler(t, c, group, "the demoted instances stopped", 30*time.Second, func(s controller.GroupStatus) bool {
		return len(s.Instances) == 1 && s.Active == 1
	})
	cancel()
	if codes := few.wait(); len(codes) != 1 || codes[http.StatusOK] == 0 {
		t.Errorf("answers while scaling down: %v, want only 200s", codes)
	}

	// 5. No requests for the concurrency window: back to zero, every
	// process stopped.
	waitAutoscaler(t, c, group, "no instance left", 30*time.Second, func(s controller.GroupStatus) bool {
		return len(s.Instances) == 0
	})
	for _, in := range st.Instances {
		if resp, err := http.Get("http://" + in.Address + "/healthz"); err == nil {
			resp.Body.Close()
			t.Errorf("instance %s still answers after the group scaled to zero", in.Address)
		}
	}
	if v := metricValue(t, c.Spec.ControlPlaneAdmin(0)+"/metrics", "spillway_controlplane_autoscaler_stops_total", "group="+group, "result=ok"); v < 3 {
		t.Errorf("stops_total{ok} = %v, want at least 3", v)
	}
}

func post(t *testing.T, url string) {
	t.Helper()
	resp, err := http.Post(url, "", nil)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("POST %s: %s", url, resp.Status)
	}
}

// TestAutoscaleWaterfallBuffer is the autoscaling buffer (docs/design.md §3
// rule 7, §6) end to end, on the demo's autoscaler deployment
// (demo.AutoscaleSpec): nyc offers 60 req/s to us-east's one instance of 40
// req/s; the plan spills the rest to eu-west, the autoscaler counts the spill
// as demand and starts instances, and the load returns to us-east as they
// turn healthy; without load the group returns to min_instances.
func TestAutoscaleWaterfallBuffer(t *testing.T) {
	c := startCluster(t, demo.AutoscaleSpec(65))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ws, err := demo.RunAutoscale(ctx, c, 25*time.Second, 20*time.Second, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	demo.PrintAutoscale(&b, 1, 1, ws)
	t.Log(b.String())
	if err := demo.CheckAutoscale(ws); err != nil {
		t.Error(err)
	}
	peak := 0
	for _, w := range ws {
		peak = max(peak, w.Active)
	}
	if peak < 2 || peak > 3 {
		t.Errorf("us-east peaked at %d instances, want 2 (60/s at 40/s each) or 3 (one of overshoot)", peak)
	}
}

// TestAutoscaleLeaseTakeover runs the autoscaler in two control planes: one
// holds the group's lease and runs its instance (min_instances 1). Killed,
// its instance dies with it; the other replica takes the lease over, starts
// its own instance, and the gfe's requests are served again.
func TestAutoscaleLeaseTakeover(t *testing.T) {
	spec := autoscaleSpec(66)
	spec.ControlPlanes = 2
	spec.Autoscale.Block = "{min_instances: 1, max_instances: 3, max_concurrency_per_instance: 4, cold_start: 2s}"
	c := startCluster(t, spec)
	const group = "us-east-b-web"
	holder, other := -1, -1
	var first controller.GroupStatus
	deadline := time.Now().Add(30 * time.Second)
	for holder < 0 {
		for k := range 2 {
			if st, err := c.Autoscaler(context.Background(), k, group); err == nil && st.Active == 1 {
				holder, other, first = k, 1-k, st
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no control plane runs the group's instance after 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st, err := c.Autoscaler(context.Background(), other, group); err != nil || len(st.Instances) != 0 {
		t.Fatalf("the other control plane runs %+v (%v), want nothing: one replica per group", st, err)
	}
	gf := c.GFEs[0]
	get := func() int {
		resp, err := http.Get(gf.URL + "/takeover")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get(); code != http.StatusOK {
		t.Fatalf("before the takeover: %d, want 200", code)
	}

	killed := time.Now()
	c.CPs[holder].Kill()
	// Its instance dies with it (the process provider's instances cannot
	// outlive the replica that started them).
	addr := first.Instances[0].Address
	for {
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			break
		}
		conn.Close()
		if time.Since(killed) > 10*time.Second {
			t.Fatalf("instance %s still listens 10s after its control plane was killed", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	deadline = time.Now().Add(30 * time.Second)
	var took controller.GroupStatus
	for {
		st, err := c.Autoscaler(context.Background(), other, group)
		if err == nil && st.Active == 1 {
			took = st
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the surviving control plane runs %+v (%v) 30s after the kill, want the group's instance", st, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("control plane %d took over after %v with instance %s", other+1, time.Since(killed).Round(100*time.Millisecond), took.Instances[0].Address)
	deadline = time.Now().Add(30 * time.Second)
	for get() != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("no 200 through the gfe 30s after the takeover")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestAutoscaleACT: Adaptive Concurrency Tuning end to end. The instances
// burn 150ms of CPU per 200ms request on a budget of 0.25 cores (testbackend
// --cpu-per-request, --cpus), so two requests at once report a
// cpu_utilization far above 90%: the gfe lowers the instance's concurrency
// limit from 4 towards 1 (its /status shows it), gossips the group's mean
// limit, and the controller's ACT driver, dividing the requests in flight
// by it, scales the group out where the concurrency driver (4 slots) would
// keep one instance.
func TestAutoscaleACT(t *testing.T) {
	spec := autoscaleSpec(71)
	spec.Autoscale.Block = "{min_instances: 1, max_instances: 5, max_concurrency_per_instance: 4, cold_start: 2s, cpu_window: 6s, " +
		"concurrency_window: 6s, concurrency_long_window: 6s, demoted_idle_window: 3s, idle_timeout: 6s, " +
		"min_pending_wait: 6s, pending_wait_cold_starts: 0, cpus_per_instance: 100}"
	spec.Autoscale.BackendArgs = []string{"--cpu-per-request", "150ms", "--cpus", "0.25"}
	c := startCluster(t, spec)
	gf := c.GFEs[0]
	const group = "us-east-b-web"
	waitAutoscaler(t, c, group, "one instance active", 30*time.Second, func(s controller.GroupStatus) bool { return s.Acting && s.Active == 1 })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	load := startClosedLoop(ctx, gf.URL+"/act", 2)
	// Two clients: 2 in flight need 2/4/0.6 ⇒ 1 instance by concurrency;
	// with the ACT limit at 1 they need 2/1/0.6 ⇒ 4 by act. (CPU is out of
	// the way: cpus_per_instance 100.)
	st := waitAutoscaler(t, c, group, "scaled out by the ACT driver", 60*time.Second, func(s controller.GroupStatus) bool {
		return s.Driver == "act" && s.Recommended >= 2 && s.ACT > 0 && s.ACT < 4
	})
	t.Logf("autoscaler: recommended %d by %s, drivers %+v, ACT %.2f", st.Recommended, st.Driver, st.Drivers, st.ACT)
	gs, err := c.Status(context.Background(), gf)
	if err != nil {
		t.Fatal(err)
	}
	tuned := 0
	for _, svc := range gs.Services {
		for _, g := range svc.Groups {
			for _, b := range g.Backends {
				if b.ACTLimit > 0 && b.ACTLimit < 4 {
					tuned++
				}
			}
		}
	}
	if tuned == 0 {
		t.Errorf("gfe /status shows no instance with an ACT limit below 4: %+v", gs.Services)
	}
	if st.Drivers.Concurrency > 1 {
		t.Errorf("concurrency driver asked %d, want 1 (the scale-out is ACT's)", st.Drivers.Concurrency)
	}
	cancel()
	load.wait()
	if load.errors.Load() != 0 {
		t.Errorf("%d client errors", load.errors.Load())
	}
}

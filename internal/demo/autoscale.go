package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spillway-lb/spillway/internal/loadgen"
	"github.com/spillway-lb/spillway/internal/topology"
)

// The autoscaler phase (docs/design.md §6, the waterfall as the buffer of §3
// rule 7) runs on a deployment of its own: the site nyc in front of us-east,
// autoscaled (1 to 4 instances of 40 req/s, a 2s cold start), and eu-west,
// two fixed instances, the buffer. nyc offers more than one instance takes:
// the plan spills the rest to eu-west, the gfe reports the spill, the
// autoscaler counts it as demand and starts instances, and nyc's traffic
// comes back to us-east as they turn healthy; when the load stops, the group
// returns to its one instance. (A group at zero leaves it through the pending
// queue, which a region with a buffer never fills: the e2e test
// TestAutoscaleZeroToNToZero shows that path.)

// AutoscaleGroup is the autoscaled group of the phase.
const AutoscaleGroup = "us-east-b-web"

// AutoscaleRate is the load of the phase, requests/s from nyc: 1.5 of
// us-east's instances at their declared 40 req/s.
const AutoscaleRate = 60

// AutoscaleSpec returns the phase's deployment in 127.net.0.0/16.
func AutoscaleSpec(net int) topology.Spec {
	ms := time.Millisecond
	return topology.Spec{
		Net:            net,
		Sites:          []topology.Site{{Name: "nyc", RTT: map[string]time.Duration{"us-east": 8 * ms, "eu-west": 35 * ms}}},
		HealthInterval: 250 * ms,
		Regions: []topology.Region{
			{Name: "us-east", Zones: []string{"b"}, Instances: 0, Rate: 40},
			{Name: "eu-west", Zones: []string{"b"}, Instances: 2, Rate: 40},
		},
		Autoscale: &topology.AutoscaleSpec{
			Region: 0,
			// 4 slots of 50ms (plus the 8ms RTT): 40 req/s keep 2.4 in flight,
			// 60% of 4, so the rules and the declared capacity agree.
			Block: "{min_instances: 1, max_instances: 4, max_concurrency_per_instance: 4, cold_start: 2s, cpu_window: 6s, " +
				"concurrency_window: 6s, concurrency_long_window: 6s, demoted_idle_window: 3s, idle_timeout: 6s}",
			MaxConcurrency: 4,
			StartupDelay:   2 * time.Second,
			ServiceTime:    50 * ms,
		},
	}
}

// AutoscaleWindow is one slice of the phase's timeline.
type AutoscaleWindow struct {
	From, To time.Duration
	// Offered is the load's rate in the window.
	Offered float64
	// Res is what the load generator measured in the window.
	Res *loadgen.Result
	// Recommended, Active and Demoted are the control plane's autoscaler
	// status at the window's end.
	Recommended, Active, Demoted int
}

// RunAutoscale waits for us-east's first instance, offers AutoscaleRate
// from nyc for on, then nothing for off, and returns the timeline in
// windows of w.
func RunAutoscale(ctx context.Context, c *topology.Cluster, on, off, w time.Duration) ([]AutoscaleWindow, error) {
	if err := topology.WaitFor(ctx, 30*time.Second, func() (bool, error) {
		st, err := topology.Status(ctx, c.GFEs[0])
		if err != nil {
			return false, err
		}
		for _, s := range st.Services {
			for _, g := range s.Groups {
				if g.Name == AutoscaleGroup && g.Healthy >= 1 {
					return true, nil
				}
			}
		}
		return false, fmt.Errorf("the gfe sees no healthy instance of %s yet", AutoscaleGroup)
	}); err != nil {
		return nil, err
	}
	type point struct {
		at                           time.Duration
		recommended, active, demoted int
	}
	var (
		mu     sync.Mutex
		points []point
	)
	start := time.Now()
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			if st, err := c.Autoscaler(pctx, 0, AutoscaleGroup); err == nil {
				mu.Lock()
				points = append(points, point{time.Since(start), st.Recommended, st.Active, st.Demoted})
				mu.Unlock()
			}
			select {
			case <-pctx.Done():
				return
			case <-t.C:
			}
		}
	})
	res, err := c.RunLoadAt(ctx, "nyc", loadgen.Config{
		URL: c.GFEs[0].URL + "/", Rate: AutoscaleRate, Duration: on + off, Records: true,
		Timeout:  20 * time.Second,
		Sources:  []netip.Addr{c.Spec.ClientIP(0)},
		Schedule: []loadgen.RateStep{{At: on, Rate: 0}},
	})
	stop()
	wg.Wait()
	if err != nil {
		return nil, err
	}
	var out []AutoscaleWindow
	for from := time.Duration(0); from < on+off; from += w {
		win := AutoscaleWindow{From: from, To: from + w, Res: res.Window(from, from+w)}
		if from < on {
			win.Offered = AutoscaleRate
		}
		mu.Lock()
		for _, p := range points {
			if p.at <= win.To {
				win.Recommended, win.Active, win.Demoted = p.recommended, p.active, p.demoted
			}
		}
		mu.Unlock()
		out = append(out, win)
	}
	return out, nil
}

// PrintAutoscale writes the phase's timeline.
func PrintAutoscale(w io.Writer, i, n int, ws []AutoscaleWindow) {
	fmt.Fprintf(w, "\n== phase %d/%d: autoscaler, with eu-west as the buffer (a deployment of its own)\n", i, n)
	fmt.Fprintf(w, "   expect: nyc's %d req/s are more than us-east's one instance takes (40/s): the rest spills to eu-west\n", AutoscaleRate)
	fmt.Fprintf(w, "   while us-east scales up (2s cold start) and comes back as its instances turn healthy; without load\n")
	fmt.Fprintf(w, "   us-east returns to one instance (the others demoted, then stopped)\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "t (s)\toffered\tus-east\teu-west\tok\terrors\tp99\tus-east instances\tdemoted\t\n")
	for _, win := range ws {
		r := win.Res
		errs := r.Sent - r.OK
		fmt.Fprintf(tw, "%.0f-%.0f\t%.0f/s\t%.0f%%\t%.0f%%\t%d\t%d\t%v\t%d\t%d\t\n", win.From.Seconds(), win.To.Seconds(), win.Offered,
			100*r.RegionShare("us-east"), 100*r.RegionShare("eu-west"), r.OK, errs, r.Percentile(99).Round(time.Millisecond),
			win.Active, win.Demoted)
	}
	tw.Flush()
}

// CheckAutoscale reports the phase's expectations that failed: the load
// was served without errors, part of it spilled to eu-west at first,
// us-east took at least 80% of it by the end of the load with at least 2
// instances, and the group was back to its one instance at the end.
func CheckAutoscale(ws []AutoscaleWindow) error {
	var errs []error
	var lastLoaded *AutoscaleWindow
	for i := range ws {
		w := &ws[i]
		if n := w.Res.Sent - w.Res.OK; n > 0 {
			errs = append(errs, fmt.Errorf("autoscaler: %d of %d requests failed at %v-%v", n, w.Res.Sent, w.From, w.To))
		}
		if w.Offered > 0 {
			lastLoaded = w
		}
	}
	if first := ws[0]; first.Res.RegionShare("eu-west") < 0.1 {
		errs = append(errs, fmt.Errorf("autoscaler: eu-west took %.0f%% of nyc's load at %v-%v, want the spill (at least 10%%) while us-east scales up",
			100*first.Res.RegionShare("eu-west"), first.From, first.To))
	}
	if lastLoaded != nil && (lastLoaded.Res.RegionShare("us-east") < 0.8 || lastLoaded.Active < 2) {
		errs = append(errs, fmt.Errorf("autoscaler: us-east took %.0f%% of nyc's load at %v-%v with %d instances, want at least 80%% with 2 or more",
			100*lastLoaded.Res.RegionShare("us-east"), lastLoaded.From, lastLoaded.To, lastLoaded.Active))
	}
	if last := ws[len(ws)-1]; last.Active+last.Demoted != 1 {
		errs = append(errs, fmt.Errorf("autoscaler: %d instances left at the end, want min_instances 1", last.Active+last.Demoted))
	}
	return errors.Join(errs...)
}

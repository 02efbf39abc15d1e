// Package quotabench measures the quota targets (docs/design.md §7;
// BENCHMARKS.md §6) on a real deployment (cmd/quotabench): three gfes at
// three sites, two control planes keeping their counters in one real
// redis-server, each gfe pinned to one control plane (gfe 1 and 3 to cp-1,
// gfe 2 to cp-2), all on loopback as separate processes.
//
// Accuracy: 100 consumers (Consumers) are offered ten times their limit
// from all three gfes at once, from the moment the deployment is up to the
// end of the next whole Unix minute; in every window, each consumer's
// admitted requests must be within [0.98, 1.02] of its limit (the first,
// partial window: at most 1.02).
//
// Faults, under the same load: Redis stalled (SIGSTOP) and killed, a
// control plane stalled and killed, 3 s each. Throughout, no request may
// spend more than 1 ms in quota admission (the gfes'
// spillway_gfe_quota_admit_seconds histogram: nothing above its 1 ms
// bucket), and after each fault heals the gfes stop failing open within
// 2 s. Then both control planes restart with --quota-error-rate 0.01 for
// 20 s: every injected error is a failed call at a gfe, whose requests
// are admitted (no answer but 200 and 429) and counted (fail_open).
//
// Cost: Enforcer.Admit's p99 in process, with quota on and off, and its
// allocations (the testing.B figure is BenchmarkAdmit).
package quotabench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spillway-lb/spillway/internal/quantile"
	"github.com/spillway-lb/spillway/internal/topology"
)

// Options for Run.
type Options struct {
	// Dir holds binaries, config and logs. Default: a temporary
	// directory, removed when Run returns.
	Dir string
	// Bins are prebuilt binaries (topology.Options.Bins); nil builds them.
	Bins map[string]string
	// Net is the second octet of the deployment's addresses.
	Net int
	// Consumers is how many consumers (default 100); Offered how many
	// times its limit each is offered (default 10).
	Consumers int
	Offered   float64
	// SkipFaults skips the fault and injected-error phases.
	SkipFaults bool
	// Out receives the tables; Tee every process's log (nil: none).
	Out, Tee io.Writer
}

// Run runs the benchmark and prints its tables to Out. It returns an
// error naming every target missed.
func Run(ctx context.Context, o Options) error {
	if o.Dir == "" {
		dir, err := os.MkdirTemp("", "spillway-quotabench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		o.Dir = dir
	}
	if o.Consumers == 0 {
		o.Consumers = 100
	}
	if o.Offered == 0 {
		o.Offered = 10
	}
	consumers := Consumers(o.Consumers)
	polite := PoliteConsumers()
	spec := Spec(o.Net, append(append([]Consumer(nil), consumers...), polite...))
	fmt.Fprintf(o.Out, "starting: 3 gfes (nyc, lon, tokyo), 2 control planes, redis-server, backends (in %s)\n", o.Dir)
	c, err := topology.Start(ctx, spec, topology.Options{Dir: o.Dir, Bins: o.Bins, Tee: o.Tee})
	if err != nil {
		return err
	}
	defer c.Stop()
	var urls []string
	for _, g := range c.GFEs {
		urls = append(urls, g.URL)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1000, DisableCompression: true}, Timeout: 10 * time.Second}
	var offered float64
	for _, cs := range consumers {
		offered += o.Offered * float64(cs.Limit) / 60
	}
	start := time.Now()
	end := start.Truncate(time.Minute).Add(2 * time.Minute)
	fmt.Fprintf(o.Out, "accuracy: %d consumers, limits %d..%d/min, offered %.0f× (%.0f requests/s) from 3 gfes, %s → %s (windows %d and %d)\n",
		len(consumers), consumers[0].Limit, consumers[len(consumers)-1].Limit, o.Offered, offered,
		start.Format("15:04:05"), end.Format("15:04:05"), start.Unix()/60, start.Unix()/60+1)
	before, err := scrape(c)
	if err != nil {
		return err
	}
	l := startLoad(client, urls, consumers, func(cs Consumer) float64 { return o.Offered * float64(cs.Limit) / 60 })
	defer l.stop()
	// Polite consumers use half their limit: their leases call every
	// second, so the faults reach them (a consumer whose window is spent
	// makes no call until the next window).
	lp := startLoad(client, urls, polite, func(cs Consumer) float64 { return 0.5 * float64(cs.Limit) / 60 })
	defer lp.stop()
	var errs []error
	first, full := start.Unix()/60, start.Unix()/60+1
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(end.Add(2 * time.Second))):
	}
	after, err := scrape(c)
	if err != nil {
		return err
	}
	errs = append(errs, accuracy(o.Out, l, consumers, first, full))
	fmt.Fprintf(o.Out, "  during the accuracy run: %.0f calls failed at the gfes, %.0f requests admitted failing open, %.0f of %.0f admissions took over 1 ms\n",
		after.failedCalls-before.failedCalls, after.failOpen-before.failOpen,
		(after.admits-after.admitsUnder1ms)-(before.admits-before.admitsUnder1ms), after.admits-before.admits)
	if !o.SkipFaults {
		errs = append(errs, faults(ctx, o.Out, c, l))
	}
	if n := l.others() + lp.others(); n > 0 {
		errs = append(errs, fmt.Errorf("%d answers were neither 200 nor 429", n))
	}
	return errors.Join(errs...)
}

// PoliteConsumers are 10 consumers of limit 600 a minute, offered half
// of it during the fault phases.
func PoliteConsumers() []Consumer {
	out := make([]Consumer, 10)
	for i := range out {
		out[i] = Consumer{Project: fmt.Sprintf("polite%d", i), Key: fmt.Sprintf("polite-key-%d", i), Limit: 600}
	}
	return out
}

// Spec is the benchmark's deployment in 127.net.0.0/16, with consumers in
// its quota config: one metric "calls" charged by every request to /api/,
// each consumer's limit a producer override.
func Spec(net int, consumers []Consumer) topology.Spec {
	ms := time.Millisecond
	return topology.Spec{
		Net: net, ControlPlanes: 2, Redis: true, PinControlPlanes: true,
		// A Redis call may take longer than the 20ms default on a machine
		// this busy; a failed call fails open for a second.
		CPArgs:  []string{"--quota-redis-timeout", "100ms"},
		Regions: []topology.Region{{Name: "us-east", Zones: []string{"b"}, Instances: 4, Rate: 1000}},
		Sites: []topology.Site{
			{Name: "nyc", RTT: map[string]time.Duration{"us-east": ms}},
			{Name: "lon", RTT: map[string]time.Duration{"us-east": ms}},
			{Name: "tokyo", RTT: map[string]time.Duration{"us-east": ms}},
		},
		ServiceTime: 100 * time.Microsecond,
		EditConfig: func(yaml string) string {
			var b strings.Builder
			b.WriteString(yaml)
			b.WriteString("quota:\n  metrics: [{name: calls, default_limit: 60}]\n  charges: [{service: web, path_prefix: /api/, metric: calls}]\n  consumers:\n")
			for _, cs := range consumers {
				fmt.Fprintf(&b, "    - {api_key: %s, project: %s}\n", cs.Key, cs.Project)
			}
			b.WriteString("  producer_overrides:\n")
			for _, cs := range consumers {
				fmt.Fprintf(&b, "    - {project: %s, metric: calls, limit: %d}\n", cs.Project, cs.Limit)
			}
			return b.String()
		},
	}
}

// accuracy prints and checks every consumer's admitted/limit in the
// partial window first and the full window full.
func accuracy(out io.Writer, l *load, consumers []Consumer, first, full int64) error {
	var errs []error
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "window\tconsumers\tmin admitted/limit\tmax admitted/limit\tworst consumer\toffered/limit (full window)\t\n")
	for _, w := range []int64{first, full} {
		lo, hi := 1e9, 0.0
		worst, worstDev := "", 0.0
		var offered, limits float64
		for _, cs := range consumers {
			t := l.window(cs.Project, w)
			r := float64(t.Admitted) / float64(cs.Limit)
			lo, hi = min(lo, r), max(hi, r)
			if dev := max(r-1, 1-r); w == full && dev > worstDev || w == first && r-1 > worstDev {
				worst, worstDev = fmt.Sprintf("%s (limit %d: %d)", cs.Project, cs.Limit, t.Admitted), max(r-1, 1-r)
			}
			offered += float64(t.Admitted + t.Limited + t.Other)
			limits += float64(cs.Limit)
			if r > 1.02 || (w == full && r < 0.98) {
				errs = append(errs, fmt.Errorf("window %d: %s admitted %d of limit %d (%.3f)", w, cs.Project, t.Admitted, cs.Limit, r))
			}
		}
		name := "partial (first)"
		if w == full {
			name = "full"
		}
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%s\t%.1f\t\n", name, len(consumers), lo, hi, worst, offered/limits)
	}
	tw.Flush()
	for _, cs := range []Consumer{consumers[0], consumers[len(consumers)*9/10], consumers[len(consumers)-1]} {
		t := l.window(cs.Project, full)
		fmt.Fprintf(out, "  %s: limit %d/min, full window: %d admitted, %d refused (429)\n", cs.Project, cs.Limit, t.Admitted, t.Limited)
	}
	if len(errs) > 5 {
		errs = append(errs[:5], fmt.Errorf("and %d more", len(errs)-5))
	}
	return errors.Join(errs...)
}

// faults runs the fault phases under the running load.
func faults(ctx context.Context, out io.Writer, c *topology.Cluster, l *load) error {
	var errs []error
	type fault struct {
		name        string
		break_, fix func() error
	}
	cp := func(k int) string { return "cp-" + strconv.Itoa(k+1) }
	phases := []fault{
		{"redis stalled (SIGSTOP)", c.Redis.Stall, c.Redis.Resume},
		{"redis killed, restarted", func() error { c.Redis.Kill(); return nil }, func() error { return c.Redis.Restart(ctx) }},
		{cp(0) + " stalled (SIGSTOP)", func() error { return c.CPs[0].Signal(stopSignal) }, func() error { return c.CPs[0].Signal(contSignal) }},
		{cp(1) + " killed, restarted", func() error { c.CPs[1].Kill(); return nil }, func() error {
			if err := c.StartControlPlane(1); err != nil {
				return err
			}
			// Recovered from when it serves again, not from its exec.
			return topology.WaitFor(ctx, 20*time.Second, func() (bool, error) {
				resp, err := http.Get("http://" + c.Spec.ControlPlaneIP(1) + ":7100/readyz")
				if err != nil {
					return false, err
				}
				resp.Body.Close()
				return resp.StatusCode == http.StatusOK, nil
			})
		}},
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "fault (3 s)\tfail-open admissions\tadmissions > 1 ms\tslowest admission bucket\trecovered after\tp99 admitted latency\t\n")
	for _, ph := range phases {
		before, err := scrape(c)
		if err != nil {
			return err
		}
		l.takeLatencies()
		if err := ph.break_(); err != nil {
			return fmt.Errorf("%s: %w", ph.name, err)
		}
		time.Sleep(3 * time.Second)
		if err := ph.fix(); err != nil {
			return fmt.Errorf("%s: healing: %w", ph.name, err)
		}
		healed := time.Now()
		recovered, err := waitRecovered(ctx, c, healed, 10*time.Second)
		if err != nil {
			return fmt.Errorf("%s: %w", ph.name, err)
		}
		after, err := scrape(c)
		if err != nil {
			return err
		}
		lat := l.takeLatencies()
		failOpen := after.failOpen - before.failOpen
		slow := (after.admits - after.admitsUnder1ms) - (before.admits - before.admitsUnder1ms)
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%s\t%v\t%v\t\n", ph.name, failOpen, slow, after.slowestBucket, recovered.Round(10*time.Millisecond), quantile.Of(lat, 0.99).Round(100*time.Microsecond))
		if failOpen == 0 {
			errs = append(errs, fmt.Errorf("%s: no request failed open: the fault did not take", ph.name))
		}
		if slow > 0 {
			errs = append(errs, fmt.Errorf("%s: %.0f admissions took over 1 ms", ph.name, slow))
		}
		if recovered > 2*time.Second {
			errs = append(errs, fmt.Errorf("%s: gfes failed open for %v after the fault healed, want <= 2s", ph.name, recovered))
		}
	}
	tw.Flush()
	errs = append(errs, injected(ctx, out, c))
	return errors.Join(errs...)
}

// injected restarts both control planes with --quota-error-rate 0.01 and
// checks, over 20 s, that the gfes' failed calls are the control planes'
// injected errors and that their requests were admitted.
func injected(ctx context.Context, out io.Writer, c *topology.Cluster) error {
	for k := range c.CPs {
		c.CPs[k].Stop(5 * time.Second)
		c.AddControlPlaneArgs(k, "--quota-error-rate", "0.01")
		if err := c.StartControlPlane(k); err != nil {
			return err
		}
	}
	// Wait for the gfes to be connected and charging again.
	if _, err := waitRecovered(ctx, c, time.Now(), 20*time.Second); err != nil {
		return fmt.Errorf("injected errors: %w", err)
	}
	before, err := scrape(c)
	if err != nil {
		return err
	}
	time.Sleep(20 * time.Second)
	after, err := scrape(c)
	if err != nil {
		return err
	}
	inj := after.injected - before.injected
	store := after.storeFailed - before.storeFailed
	failed := after.failedCalls - before.failedCalls
	failOpen := after.failOpen - before.failOpen
	calls := after.okCalls + after.exhaustedCalls + after.failedCalls - before.okCalls - before.exhaustedCalls - before.failedCalls
	fmt.Fprintf(out, "injected errors (--quota-error-rate 0.01, 20 s): %.0f of %.0f calls injected (%.2f%%), %.0f more failed at Redis; gfes counted %.0f failed calls and admitted %.0f requests failing open\n",
		inj, calls, 100*inj/max(1, calls), store, failed, failOpen)
	var errs []error
	// Every failure the control planes answered is one the gfes counted;
	// a call under way at a scrape may be counted on one side only.
	if d := failed - inj - store; d < -3 || d > 3 || inj == 0 {
		errs = append(errs, fmt.Errorf("injected errors: control planes injected %.0f and failed %.0f at Redis, gfes counted %.0f failed calls", inj, store, failed))
	}
	if failOpen == 0 {
		errs = append(errs, errors.New("injected errors: no request was admitted failing open"))
	}
	return errors.Join(errs...)
}

// waitRecovered polls the gfes' fail_open decisions every 100 ms from
// healed until they have not grown for 3 s (or timeout), and returns how
// long after healed they last grew (0: not at all).
func waitRecovered(ctx context.Context, c *topology.Cluster, healed time.Time, timeout time.Duration) (time.Duration, error) {
	var last time.Time
	prev := -1.0
	deadline := healed.Add(timeout)
	for {
		m, err := scrape(c)
		if err == nil {
			if m.failOpen != prev {
				if prev >= 0 {
					last = time.Now()
				}
				prev = m.failOpen
			}
			ref := healed
			if last.After(ref) {
				ref = last
			}
			if time.Since(ref) > 3*time.Second {
				if last.IsZero() {
					return 0, nil
				}
				return last.Sub(healed), nil
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("gfes still failing open %v after the fault healed (last: %v)", timeout, err)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

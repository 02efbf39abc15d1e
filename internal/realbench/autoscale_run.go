package realbench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spillway-lb/spillway/internal/loadgen"
	"github.com/spillway-lb/spillway/internal/topology"
)

// AutoscaleResult is a whole `lbbench --autoscale` run; its JSON form is
// what `lbbench --autoscale --json` prints ({"rows": [...]} with the
// scorecard's keys, and the run's setting).
type AutoscaleResult struct {
	// Kind is "autoscale", which tells this JSON from Result's.
	Kind   string         `json:"kind"`
	Net    int            `json:"net"`
	Config AutoscaleInfo  `json:"config"`
	Rows   []AutoscaleRow `json:"rows"`
	// StartupS is the time to build (when needed) and start the
	// deployments, WallS the whole run's, s.
	StartupS float64 `json:"startup_s"`
	WallS    float64 `json:"wall_s"`
	LoadAvg  LoadAvg `json:"load_avg"`
}

// AutoscaleKind is AutoscaleResult.Kind.
const AutoscaleKind = "autoscale"

// AutoscaleInfo is the setting of a run (AutoscaleConfig) in the JSON's
// units.
type AutoscaleInfo struct {
	ColdStartS      float64 `json:"cold_start_s"`
	RequestMs       float64 `json:"request_ms"`
	Slots           int     `json:"slots"`
	NearRateRPS     float64 `json:"near_rate_rps"`
	MaxInstances    int     `json:"max_instances"`
	NearRTTMs       float64 `json:"near_rtt_ms"`
	BufferRTTMs     float64 `json:"buffer_rtt_ms"`
	BufferInstances int     `json:"buffer_instances"`
	BufferRateRPS   float64 `json:"buffer_rate_rps"`
	BaseRPS         float64 `json:"base_rps"`
	StepRPS         float64 `json:"step_rps"`
	BaseS           float64 `json:"base_s"`
	StepS           float64 `json:"step_s"`
	AfterS          float64 `json:"after_s"`
	WindowS         float64 `json:"window_s"`
	NearShare       float64 `json:"near_share"`
	Block           string  `json:"block"`
}

func (c *AutoscaleConfig) info() AutoscaleInfo {
	return AutoscaleInfo{
		ColdStartS: c.ColdStart.Seconds(), RequestMs: millis(c.RequestTime), Slots: c.Slots, NearRateRPS: c.NearRate(),
		MaxInstances: c.MaxInstances, NearRTTMs: millis(c.NearRTT), BufferRTTMs: millis(c.BufferRTT), BufferInstances: c.BufferInstances,
		BufferRateRPS: c.BufferRate, BaseRPS: c.BaseRate, StepRPS: c.StepRate, BaseS: c.Base.Seconds(), StepS: c.Step.Seconds(),
		AfterS: c.After.Seconds(), WindowS: c.Window.Seconds(), NearShare: c.NearShare, Block: c.Block(),
	}
}

// RunAutoscale runs every row of cfg, each on a fresh deployment
// (AutoscaleSpec) in 127.Net.0.0/16: it waits until the gfe sees the near
// group's first instance (and every buffer instance) healthy, drives the
// story (base, step, after) from the site's client addresses while it
// reads the near group's state every Sample and keeps the process
// provider's start and stop records (the control plane's log, through
// Options.Tee), stops the deployment and computes the row. Options.Start
// and Lab are not supported: the story runs on loopback.
func RunAutoscale(ctx context.Context, cfg AutoscaleConfig, opts Options) (*AutoscaleResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("realbench: autoscale: %w", err)
	}
	if opts.Dir == "" {
		return nil, errors.New("realbench: autoscale: Options.Dir is required")
	}
	if opts.Start != nil || opts.Lab != "" {
		return nil, errors.New("realbench: autoscale: runs on loopback only (no Options.Start or Lab)")
	}
	if opts.LoadAvgPath == "" {
		opts.LoadAvgPath = "/proc/loadavg"
	}
	start := time.Now()
	res := &AutoscaleResult{Kind: AutoscaleKind, Net: cfg.Net, Config: cfg.info()}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	sampler := &loadSampler{path: opts.LoadAvgPath}
	wg.Go(func() { sampler.run(ctx, 5*time.Second) })

	bins := opts.Bins
	for i, a := range cfg.Autoscalers {
		t0 := time.Now()
		m, startup, built, err := runAutoscaleRow(ctx, &cfg, a, opts, bins, i)
		if err != nil {
			return nil, fmt.Errorf("realbench: autoscale: %s: %w", a, err)
		}
		bins = built // the first deployment built them
		res.StartupS += startup
		row, err := cfg.autoscaleRow(m)
		if err != nil {
			return nil, fmt.Errorf("realbench: autoscale: %s: %w", a, err)
		}
		if err := DefaultAutoscaleTargets().Check(&row); err != nil {
			row.Missed = strings.Split(err.Error(), "\n")
		}
		res.Rows = append(res.Rows, row)
		progress(opts.Progress, "[%d/%d] %-20s %6d requests, %d failed, step p99 %6.1f ms, buffer %.0f%%, peak %d, %.0f instance-s (%.1fs)",
			i+1, len(cfg.Autoscalers), a, row.Requests, row.Failed, row.P99Ms, 100*row.BufferShare, row.Peak, row.InstanceS, time.Since(t0).Seconds())
	}
	cancel()
	wg.Wait()
	res.LoadAvg = sampler.summary()
	res.WallS = time.Since(start).Seconds()
	return res, nil
}

// runAutoscaleRow starts row autoscaler's deployment (the i-th of the
// run), drives the story and returns what it recorded, the time the
// deployment took to start and be ready, and the binaries it ran.
func runAutoscaleRow(ctx context.Context, cfg *AutoscaleConfig, autoscaler string, opts Options, bins map[string]string, i int) (AutoscaleMeasurement, float64, map[string]string, error) {
	t0 := time.Now()
	spec := cfg.AutoscaleSpec(autoscaler)
	plog := newProviderLog(opts.Tee)
	dir := filepath.Join(opts.Dir, fmt.Sprintf("row%d", i+1))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return AutoscaleMeasurement{}, 0, nil, err
	}
	progress(opts.Progress, "%s: starting the deployment in 127.%d.0.0/16 (%s)", autoscaler, cfg.Net, dir)
	c, err := topology.Start(ctx, spec, topology.Options{Dir: dir, Bins: bins, Tee: plog})
	if err != nil {
		return AutoscaleMeasurement{}, 0, nil, fmt.Errorf("start: %w", err)
	}
	defer c.Stop()
	if err := waitAutoscaleReady(ctx, c, cfg, autoscaler); err != nil {
		return AutoscaleMeasurement{}, 0, nil, err
	}
	startup := time.Since(t0).Seconds()
	gf := c.GFE(autoscaleSite)
	waited0, werr := pendingWaits(ctx, c.Client(), gf.Admin)

	sctx, stop := context.WithCancel(ctx)
	gs := &groupSampler{}
	var wg sync.WaitGroup
	wg.Go(func() { gs.run(sctx, c, cfg.Sample) })
	phases := cfg.phases()
	var sched []loadgen.RateStep
	var at time.Duration
	for _, ph := range phases {
		sched = append(sched, loadgen.RateStep{At: at, Rate: ph.Demand[autoscaleSite]})
		at += ph.Duration
	}
	lres, err := c.RunLoadAt(ctx, autoscaleSite, loadgen.Config{
		URL: gf.URL + "/", Rate: cfg.StepRate, Schedule: sched, Duration: at, Timeout: cfg.Timeout, Records: true,
		Sources: loadgen.Sources(c.Spec.ClientIP(0), cfg.Sources),
	})
	stop()
	wg.Wait()
	if err != nil {
		return AutoscaleMeasurement{}, 0, nil, fmt.Errorf("load: %w", err)
	}
	waited1, werr1 := pendingWaits(ctx, c.Client(), gf.Admin)
	m := AutoscaleMeasurement{Autoscaler: autoscaler, Dropped: lres.Dropped, Waited: waited1 - waited0,
		Spans: plog.Spans(lres.Start), Samples: gs.Samples(lres.Start)}
	if werr != nil || werr1 != nil {
		m.Waited = -1
	}
	for _, rec := range lres.Records {
		if rec.Dropped {
			continue // counted in Dropped
		}
		ph, end := 0, phases[0].Duration
		for ph < len(phases)-1 && rec.At >= end {
			ph++
			end += phases[ph].Duration
		}
		m.Requests = append(m.Requests, Request{Site: autoscaleSite, Phase: ph, T: rec.At, Source: rec.Source, Status: rec.Status,
			Region: rec.Region, Backend: rec.Backend, Latency: rec.Latency})
	}
	return m, startup, c.Bins, nil
}

// waitAutoscaleReady waits until the gfe sees the near group's first
// instance (min_instances, started by the control plane) and, for a row
// with a buffer, every buffer instance healthy.
func waitAutoscaleReady(ctx context.Context, c *topology.Cluster, cfg *AutoscaleConfig, autoscaler string) error {
	want := map[string]int{autoscaleGroup: 1}
	if autoscaler == AutoscalerWaterfall {
		want[autoscaleBuffer+"-b-web"] = cfg.BufferInstances
	}
	gf := c.GFE(autoscaleSite)
	err := topology.WaitFor(ctx, 60*time.Second, func() (bool, error) {
		st, err := c.Status(ctx, gf)
		if err != nil {
			return false, err
		}
		got := map[string]int{}
		for _, s := range st.Services {
			for _, g := range s.Groups {
				got[g.Name] = g.Healthy
			}
		}
		for g, n := range want {
			if got[g] < n {
				return false, fmt.Errorf("the gfe sees %d healthy instances of %s, want %d", got[g], g, n)
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("wait for the deployment: %w", err)
	}
	return nil
}

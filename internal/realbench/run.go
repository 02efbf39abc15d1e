package realbench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spillway-lb/spillway/internal/benchpolicy"
	"github.com/spillway-lb/spillway/internal/gfe/status"
	"github.com/spillway-lb/spillway/internal/loadgen"
	"github.com/spillway-lb/spillway/internal/topology"
)

// Options are Run's dependencies.
type Options struct {
	// Dir holds the binaries, config and logs of the deployment. Required.
	Dir string
	// Bins, when set, are prebuilt binaries by name (gfe, controlplane,
	// testbackend); otherwise Run builds them into Dir.
	Bins map[string]string
	// Tee receives every process's output; nil keeps it in memory.
	Tee io.Writer
	// Progress receives one line per step (startup, each policy); nil
	// prints nothing.
	Progress io.Writer
	// LoadAvgPath is the file the machine's load average is read from.
	// Default /proc/loadavg; a missing file leaves Result.LoadAvg empty.
	LoadAvgPath string
	// Start, when set, starts the deployment spec instead of
	// topology.Start on loopback (with Dir, Bins and Tee): lbbench --lab
	// starts it on the lab's hosts (package lab). Run stops the cluster's
	// processes before it returns; whatever else Start made is the
	// caller's to remove. The cluster's load generators must run where
	// its sites' client addresses are (topology.Cluster.RunLoadAt).
	Start func(ctx context.Context, spec topology.Spec) (*topology.Cluster, error)
	// Lab names the network of the lab's hosts when Start runs the
	// deployment there (Result.Lab); "" is loopback.
	Lab string
}

// Run starts the deployment (Deployment(cfg.Net), with cfg.Headroom) with the first policy,
// then for every policy of cfg: applies it (a config reload that every gfe
// must have taken), waits until every backend is idle, drives the story
// (Warmup, then every phase without a break) from every site at once, and
// computes the policy's row. It stops the deployment before it returns.
func Run(ctx context.Context, cfg Config, opts Options) (*Result, error) {
	s, err := startSession(ctx, &cfg, opts)
	if err != nil {
		return nil, err
	}
	defer s.close()
	for i, p := range cfg.Policies {
		t0 := time.Now()
		row, _, err := s.runPolicy(ctx, p)
		if err != nil {
			return nil, err
		}
		s.res.Rows = append(s.res.Rows, row)
		progress(opts.Progress, "[%d/%d] %-28s %6d requests, %5.1f%% errors, p99 %6.1f ms (%.1fs)",
			i+1, len(cfg.Policies), p.ID(), row.Requests, 100*row.ErrorRate, row.P99Ms, time.Since(t0).Seconds())
	}
	s.finish()
	return s.res, nil
}

// session is a started deployment and what its rows are computed against;
// runPolicy drives it under one policy after another.
type session struct {
	cfg     *Config
	opts    Options
	c       *topology.Cluster
	tab     *table
	res     *Result
	current benchpolicy.Row // the policy the deployment serves
	start   time.Time
	sampler *loadSampler
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// startSession validates cfg and starts its deployment (cfg.spec()) with
// the first policy, sampling the machine's load until finish or close.
func startSession(ctx context.Context, cfg *Config, opts Options) (*session, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("realbench: %w", err)
	}
	if opts.Dir == "" {
		return nil, errors.New("realbench: Options.Dir is required")
	}
	if opts.LoadAvgPath == "" {
		opts.LoadAvgPath = "/proc/loadavg"
	}
	s := &session{cfg: cfg, opts: opts, start: time.Now(), sampler: &loadSampler{path: opts.LoadAvgPath}}
	spec := cfg.spec()
	tab, err := newTable(spec, cfg)
	if err != nil {
		return nil, fmt.Errorf("realbench: %w", err)
	}
	s.tab = tab
	s.res = newResult(spec, cfg, tab)
	s.res.Lab = opts.Lab

	sctx, cancel := context.WithCancel(ctx)
	s.cancel = cancel
	s.wg.Go(func() { s.sampler.run(sctx, 5*time.Second) })

	s.current = cfg.Policies[0]
	withRow(&spec, s.current)
	startDeployment := opts.Start
	if startDeployment == nil {
		progress(opts.Progress, "starting the deployment in 127.%d.0.0/16 (%s)", cfg.Net, opts.Dir)
		startDeployment = func(ctx context.Context, spec topology.Spec) (*topology.Cluster, error) {
			return topology.Start(ctx, spec, topology.Options{Dir: opts.Dir, Bins: opts.Bins, Tee: opts.Tee})
		}
	}
	c, err := startDeployment(sctx, spec)
	if err != nil {
		s.close()
		return nil, fmt.Errorf("realbench: start: %w", err)
	}
	s.c = c
	s.res.StartupS = time.Since(s.start).Seconds()
	progress(opts.Progress, "up in %.1fs", s.res.StartupS)
	return s, nil
}

// runPolicy applies p unless the deployment serves it already, waits until
// every backend is idle, drives the story and returns p's row and the
// measurement it was computed from.
func (s *session) runPolicy(ctx context.Context, p benchpolicy.Row) (Row, Measurement, error) {
	if p != s.current {
		if err := applyPolicy(ctx, s.c, p); err != nil {
			return Row{}, Measurement{}, fmt.Errorf("realbench: %s: %w", p.ID(), err)
		}
		s.current = p
	}
	if err := waitIdle(ctx, s.c); err != nil {
		return Row{}, Measurement{}, fmt.Errorf("realbench: %s: %w", p.ID(), err)
	}
	m, err := drive(ctx, s.c, s.cfg, p)
	if err != nil {
		return Row{}, Measurement{}, fmt.Errorf("realbench: %s: %w", p.ID(), err)
	}
	row, err := s.tab.row(m)
	if err == nil {
		err = row.check()
	}
	if err != nil {
		return Row{}, Measurement{}, fmt.Errorf("realbench: %s: %w", p.ID(), err)
	}
	return row, m, nil
}

// finish stops the load sampler and sets the result's load and wall time.
func (s *session) finish() {
	s.cancel()
	s.wg.Wait()
	s.res.LoadAvg = s.sampler.summary()
	s.res.WallS = time.Since(s.start).Seconds()
}

// close stops the deployment and the load sampler.
func (s *session) close() {
	if s.c != nil {
		s.c.Stop()
	}
	s.cancel()
	s.wg.Wait()
}

func progress(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}

// applyPolicy rewrites the deployment's config with row p (its policy and
// options), has the control plane reload it, and waits until every gfe
// serves it: its /status shows p's policy under a config version other
// than the one it had before.
func applyPolicy(ctx context.Context, c *topology.Cluster, p benchpolicy.Row) error {
	before := map[string]string{}
	for _, g := range c.GFEs {
		st, err := c.Status(ctx, g)
		if err != nil {
			return err
		}
		before[g.Name] = st.ConfigVersion
	}
	spec := c.Spec
	withRow(&spec, p)
	// Write and rename, so the control plane never reads half a file.
	tmp := filepath.Join(filepath.Dir(c.ConfigPath), ".spillway.yaml.tmp")
	if err := os.WriteFile(tmp, []byte(spec.ConfigYAML()), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, c.ConfigPath); err != nil {
		return err
	}
	for _, cp := range c.CPs {
		if cp != nil {
			_ = cp.Signal(syscall.SIGHUP) // the file watcher reloads too; this only hurries it
		}
	}
	for _, g := range c.GFEs {
		err := topology.WaitFor(ctx, 20*time.Second, func() (bool, error) {
			st, err := c.Status(ctx, g)
			if err != nil {
				return false, err
			}
			if st.ConfigVersion == before[g.Name] || len(st.Services) == 0 || st.Services[0].Policy != string(p.Policy) {
				return false, fmt.Errorf("%s serves config %s with policy %v", g.Name, st.ConfigVersion, policies(st.Services))
			}
			return true, nil
		})
		if err != nil {
			return fmt.Errorf("apply the policy: %w", err)
		}
	}
	return nil
}

// withRow sets the service of spec to row p's: its policy, hash scope and
// options.
func withRow(spec *topology.Spec, p benchpolicy.Row) {
	spec.Policy, spec.HashScope = p.Policy, p.HashScope()
	spec.LoadAware, spec.Shed = p.LoadAware, p.Shed
}

func policies(s []status.ServiceStatus) []string {
	out := make([]string, len(s))
	for i, e := range s {
		out[i] = e.Policy
	}
	return out
}

// waitIdle waits until no backend instance has a request in flight or
// queued, so that no policy inherits the previous one's backlog.
func waitIdle(ctx context.Context, c *topology.Cluster) error {
	var addrs []string
	for _, r := range c.Spec.Regions {
		addrs = append(addrs, c.Instances[r.Name]...)
	}
	return topology.WaitFor(ctx, 20*time.Second, func() (bool, error) {
		for _, a := range addrs {
			st, err := backendStats(ctx, c.Client(), a)
			if err != nil {
				return false, err
			}
			if st.InFlight != 0 || st.QueueLen != 0 {
				return false, fmt.Errorf("backend %s has %d in flight and %d queued", a, st.InFlight, st.QueueLen)
			}
		}
		return true, nil
	})
}

// backendLoad is the part of the test backend's /admin/stats
// (testbackend.Stats) that waitIdle reads.
type backendLoad struct {
	InFlight int `json:"in_flight"`
	QueueLen int `json:"queue_len"`
}

func backendStats(ctx context.Context, client *http.Client, addr string) (*backendLoad, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/admin/stats", nil)
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var st backendLoad
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("decode %s/admin/stats: %w", addr, err)
	}
	return &st, nil
}

// drive runs the story of cfg from every site at once: one open-loop load
// per site, at the first phase's demand for Warmup (not recorded), then
// each phase's demand in turn, every request on a new connection from one
// of the site's SourcesPerSite addresses.
func drive(ctx context.Context, c *topology.Cluster, cfg *Config, p benchpolicy.Row) (Measurement, error) {
	type siteRun struct {
		site string
		res  *loadgen.Result
		err  error
	}
	var (
		wg   sync.WaitGroup
		runs []*siteRun
	)
	measured := cfg.measured()
	for si, s := range c.Spec.Sites {
		gf := gfeOf(c, s.Name)
		var sched []loadgen.RateStep
		peak := 0.0
		at := cfg.Warmup
		sched = append(sched, loadgen.RateStep{At: 0, Rate: cfg.Phases[0].Demand[s.Name]})
		for i, ph := range cfg.Phases {
			if i > 0 {
				sched = append(sched, loadgen.RateStep{At: at, Rate: ph.Demand[s.Name]})
			}
			at += ph.Duration
			peak = max(peak, ph.Demand[s.Name])
		}
		if peak == 0 || gf == nil {
			continue
		}
		sr := &siteRun{site: s.Name}
		runs = append(runs, sr)
		lc := loadgen.Config{
			URL: gf.URL + "/", Rate: peak, Schedule: sched, Duration: cfg.Warmup + measured, Warmup: cfg.Warmup,
			Sources: loadgen.Sources(c.Spec.ClientIP(si), cfg.SourcesPerSite), NewConnEach: true, Timeout: cfg.Timeout, Records: true,
		}
		wg.Go(func() { sr.res, sr.err = c.RunLoadAt(ctx, s.Name, lc) })
	}
	wg.Wait()
	m := Measurement{Policy: p}
	var origin time.Time
	for _, sr := range runs {
		if sr.err != nil {
			return Measurement{}, fmt.Errorf("load from %s: %w", sr.site, sr.err)
		}
		if origin.IsZero() || sr.res.Start.Before(origin) {
			origin = sr.res.Start
		}
	}
	if err := ctx.Err(); err != nil {
		return Measurement{}, err
	}
	for _, sr := range runs {
		m.Dropped += sr.res.Dropped
		offset := sr.res.Start.Sub(origin)
		for _, rec := range sr.res.Records {
			if rec.Dropped {
				continue // counted in m.Dropped
			}
			since := rec.At - cfg.Warmup // since the end of this site's warmup
			ph, end := 0, cfg.Phases[0].Duration
			for ph < len(cfg.Phases)-1 && since >= end {
				ph++
				end += cfg.Phases[ph].Duration
			}
			m.Requests = append(m.Requests, Request{
				Site: sr.site, Phase: ph, T: since + offset, Source: rec.Source, Status: rec.Status,
				Region: rec.Region, Backend: rec.Backend, Latency: rec.Latency,
			})
		}
	}
	return m, nil
}

func gfeOf(c *topology.Cluster, site string) *topology.GFE {
	for _, g := range c.GFEs {
		if g.Site == site {
			return g
		}
	}
	return nil
}

// loadSampler samples the machine's 1-minute load average.
type loadSampler struct {
	path string

	mu      sync.Mutex
	samples []float64
}

func (s *loadSampler) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		s.sample()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *loadSampler) sample() {
	b, err := os.ReadFile(s.path)
	if err != nil {
		return
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return
	}
	s.mu.Lock()
	s.samples = append(s.samples, v)
	s.mu.Unlock()
}

func (s *loadSampler) summary() LoadAvg {
	s.mu.Lock()
	defer s.mu.Unlock()
	var l LoadAvg
	for _, v := range s.samples {
		l.Mean += v
		l.Max = max(l.Max, v)
	}
	l.Samples = len(s.samples)
	l.Mean = ratio(l.Mean, float64(l.Samples))
	return l
}

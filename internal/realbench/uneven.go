package realbench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/benchpolicy"
	"github.com/spillway-lb/spillway/internal/topology"
	"github.com/spillway-lb/spillway/sim"
)

// UnevenShares is each site's share of the uneven story's global demand:
// tokyo, the site nearest the smallest region (asia-east, topology.Uneven),
// sends half of it.
var UnevenShares = map[string]float64{"tokyo": 0.5, "nyc": 0.2, "lon": 0.2, "sao": 0.1}

// UnevenLoads are the uneven story's phases as multiples of the
// deployment's declared capacity (350 req/s): a ramp from 0.5× to 1.7×,
// then one step to 2×.
var UnevenLoads = []float64{0.5, 0.7, 0.9, 0.95, 1.1, 1.3, 1.5, 1.7, 2.0}

// UnevenPolicies returns the uneven story's rows, one line each: the
// planned policies, waterfall with the load-aware choice inside a group
// and with shedding of global overload too, then the baselines users would
// pick. The baselines take no shedding (the config allows overload.shed
// on a planned policy only), so the shedding row is compared with
// waterfall+load_aware.
func UnevenPolicies() []benchpolicy.Row {
	return []benchpolicy.Row{
		{Policy: config.PolicyWaterfall},
		{Policy: config.PolicyMinRTT},
		{Policy: config.PolicyWaterfall, Options: benchpolicy.Options{LoadAware: true}},
		{Policy: config.PolicyWaterfall, Options: benchpolicy.Options{LoadAware: true, Shed: true}},
		{Policy: config.PolicyRoundRobin, Scope: config.HashScopeGlobal},
		{Policy: config.PolicyLeastRequest, Scope: config.HashScopeGlobal}, // P2C over least requests
		{Policy: config.PolicyEnvoyPriority},                               // Envoy's priority levels
		{Policy: config.PolicyHash2, Scope: config.HashScopeGlobal},
		{Policy: config.PolicyPrequal, Scope: config.HashScopeGlobal}, // Prequal's probes, as published
	}
}

// Story is a benchmark repeated: Reps repetitions, each running every
// policy of Config once, the order rotated by one per repetition (the
// first repetition in Config.Policies' order, the second from the second
// policy on, ...) so that no policy always runs first or after the same
// neighbour.
type Story struct {
	Config
	// Name names the story in the result ("uneven").
	Name string
	// Reps is the number of repetitions, >= 1.
	Reps int
	// Antagonist is the slowdown of the antagonized instances (the
	// deployment's, recorded in the result).
	Antagonist topology.UnevenAntagonist
}

// UnevenStory returns the uneven story (lbbench --story uneven): the
// deployment topology.Uneven with its antagonists, UnevenPolicies, a 3 s
// warmup at the first phase's demand, then one 6 s phase per UnevenLoads
// entry with every site's demand its UnevenShares of the load, a 5 s
// deadline, 5 repetitions: about 45 minutes with the nine rows. quick cuts
// it to 2 s phases, 2 s warmup and 2 repetitions (about 7 minutes), with the
// antagonists' period halved to 2 s so that each phase still sees them come
// and go.
func UnevenStory(quick bool) Story {
	st := Story{Name: "uneven", Reps: 5, Antagonist: topology.DefaultUnevenAntagonist, Config: DefaultConfig()}
	phase := 6 * time.Second
	if quick {
		st.Reps, st.Warmup, phase = 2, 2*time.Second, 2*time.Second
		st.Antagonist.Period = 2 * time.Second
	}
	a := st.Antagonist
	st.Topology = func(net int) topology.Spec { return topology.Uneven(net, a) }
	st.Policies = UnevenPolicies()
	st.Timeout = 5 * time.Second
	st.Phases = UnevenPhases(UnevenLoads, phase)
	return st
}

// UnevenCapacity is the declared capacity of topology.Uneven, requests/s.
func UnevenCapacity() float64 {
	return capacityOf(topology.Uneven(1, topology.DefaultUnevenAntagonist))
}

// capacityOf returns the declared capacity of spec's regions, requests/s.
func capacityOf(spec topology.Spec) float64 {
	var c float64
	for _, r := range spec.Regions {
		c += r.Rate * float64(r.Instances*len(r.Zones))
	}
	return c
}

// UnevenPhases returns one phase of length d per load (a multiple of
// UnevenCapacity), named after it ("0.9x"), each site's demand its
// UnevenShares of load × capacity.
func UnevenPhases(loads []float64, d time.Duration) []Phase {
	c := UnevenCapacity()
	var out []Phase
	for _, l := range loads {
		ph := Phase{Name: fmt.Sprintf("%gx", l), Duration: d, Demand: map[string]float64{}}
		for s, share := range UnevenShares {
			ph.Demand[s] = share * l * c
		}
		out = append(out, ph)
	}
	return out
}

// Validate reports every problem of st at once.
func (st *Story) Validate() error {
	errs := []error{st.Config.Validate()}
	if st.Reps < 1 {
		errs = append(errs, fmt.Errorf("reps: must be >= 1, got %d", st.Reps))
	}
	return errors.Join(errs...)
}

// order returns the policies of repetition rep (from 0): Config.Policies
// rotated left by rep.
func (st *Story) order(rep int) []benchpolicy.Row {
	ps := st.Policies
	k := rep % len(ps)
	return append(slices.Clone(ps[k:]), ps[:k]...)
}

// RunStory starts the story's deployment once and runs every repetition
// on it (Story), each policy applied and driven as Run does, then
// summarises each policy's runs as their median and range (UnevenRow). It
// stops the deployment before it returns.
func RunStory(ctx context.Context, st Story, opts Options) (*StoryResult, error) {
	if err := st.Validate(); err != nil {
		return nil, fmt.Errorf("realbench: %w", err)
	}
	minCross, phaseMin, err := minCrossRegion(st.spec(), &st.Config)
	if err != nil {
		return nil, fmt.Errorf("realbench: %w", err)
	}
	s, err := startSession(ctx, &st.Config, opts)
	if err != nil {
		return nil, err
	}
	defer s.close()
	runs := map[benchpolicy.Row][]StoryRun{}
	n, total := 0, st.Reps*len(st.Policies)
	for rep := range st.Reps {
		for k, p := range st.order(rep) {
			t0 := time.Now()
			row, m, err := s.runPolicy(ctx, p)
			if err != nil {
				return nil, fmt.Errorf("repetition %d: %w", rep+1, err)
			}
			run := s.tab.storyRun(m, row, &st.Config)
			run.Rep, run.Order = rep+1, k+1
			runs[p] = append(runs[p], run)
			n++
			progress(opts.Progress, "[%d/%d] rep %d %-24s %6d requests, %5.1f%% errors, p99 %7.1f ms, p99.9 %7.1f ms (%.1fs)",
				n, total, rep+1, p.ID(), row.Requests, 100*run.ErrorRate, run.P99Ms, run.P999Ms, time.Since(t0).Seconds())
		}
	}
	s.finish()
	res := &StoryResult{Result: *s.res, Story: st.Name, Reps: st.Reps, TimeoutS: st.Timeout.Seconds(),
		Antagonist:     AntagonistInfo{PeriodS: st.Antagonist.Period.Seconds(), Duty: st.Antagonist.Duty, Slowdown: st.Antagonist.Slowdown},
		MinCrossRegion: minCross}
	res.Result.Rows = nil
	capacity := capacityOf(st.spec())
	for i := range res.Result.Phases {
		res.StoryPhases = append(res.StoryPhases, StoryPhase{PhaseInfo: res.Result.Phases[i],
			Load: demandOf(st.Phases[i]) / capacity, MinCrossRegion: phaseMin[i]})
	}
	res.Result.Phases = nil
	for _, p := range st.Policies {
		res.Rows = append(res.Rows, summarise(p, runs[p]))
	}
	return res, nil
}

// demandOf returns the phase's demand over every site, requests/s.
func demandOf(ph Phase) float64 {
	var d float64
	for _, v := range ph.Demand {
		d += v
	}
	return d
}

// minCrossRegion returns the least share of the story's requests that any
// assignment within the regions' capacity must send outside their site's
// nearest region — the linear program of sim.SolveMinRTT with cost 1 for a
// site's other regions and 0 for its nearest, so that its optimum is the
// least cross-region flow (under rule 6's uniform overload λ when demand
// exceeds capacity) — over every phase weighted by its requests, and each
// phase's.
func minCrossRegion(spec topology.Spec, cfg *Config) (float64, []float64, error) {
	tab, err := newTable(spec, cfg)
	if err != nil {
		return 0, nil, err
	}
	var capacity []float64
	for _, r := range spec.Regions {
		capacity = append(capacity, r.Rate*float64(r.Instances*len(r.Zones)))
	}
	cost := make([][]float64, len(tab.sites))
	for i, s := range tab.sites {
		cost[i] = make([]float64, len(tab.regions))
		for j, r := range tab.regions {
			if r != tab.nearest[s] {
				cost[i][j] = 1
			}
		}
	}
	var cross, all float64
	var phases []float64
	for i, ph := range cfg.Phases {
		demand := make([]float64, len(tab.sites))
		for j, s := range tab.sites {
			demand[j] = ph.Demand[s]
		}
		opt, err := sim.SolveMinRTT(demand, capacity, cost)
		if err != nil {
			return 0, nil, fmt.Errorf("phase %d (%s): minimum cross-region share: %w", i, ph.Name, err)
		}
		// MeanRTTMs is Σ flow·cost / Σ flow: the cross-region share.
		phases = append(phases, opt.MeanRTTMs)
		w := opt.Placed * ph.Duration.Seconds()
		cross += opt.MeanRTTMs * w
		all += w
	}
	return ratio(cross, all), phases, nil
}

package policybench

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/benchpolicy"
	"github.com/spillway-lb/spillway/sim"
)

// scope returns r's scope with a baseline's default: global when empty.
// Planned rows keep theirs (validate rejects any).
func scope(r benchpolicy.Row) config.HashScope {
	if r.Scope == "" && !r.Policy.IsPlanned() {
		return config.HashScopeGlobal
	}
	return r.Scope
}

// id returns r's label with its default scope, the label of its result row.
func id(r benchpolicy.Row) string {
	return benchpolicy.Row{Policy: r.Policy, Scope: scope(r)}.ID()
}

// ErrOptionNotModelled is returned by Run for a row that turns a service
// option on (benchpolicy.Options): the simulator models neither, so it
// refuses the row rather than score it as the policy without them.
//   - load_aware chooses an instance per request by its latency and
//     requests in flight; the simulator splits a group's share evenly
//     over its instances, which are alike (a scenario's slow instances
//     are groups of their own), and has no per-request choice to change.
//   - overload.shed refuses a share of the arrivals at the gfe; the
//     simulator does not count refusals apart from failures.
//
// Both run in the real benchmark (lbbench, --story uneven).
var ErrOptionNotModelled = errors.New("not modelled by lbsim bench (the simulator splits a group's share evenly over alike instances and refuses nothing at the gfe); run it with lbbench --story uneven")

// validate checks r before a run: a known policy, no scope on a planned
// one, nearest_region only on a hash policy, as the gfe takes them, and no
// service option (ErrOptionNotModelled).
func validate(r benchpolicy.Row) error {
	if _, err := config.ParsePolicy(string(r.Policy)); err != nil {
		return fmt.Errorf("bench policy %s: %w", r.Policy, err)
	}
	if r.Any() {
		opts := strings.ReplaceAll(strings.TrimPrefix(r.Suffix(), "+"), "+", " and ")
		return fmt.Errorf("bench policy %s: %s: %w", r.ID(), opts, ErrOptionNotModelled)
	}
	if r.Policy.IsPlanned() {
		if r.Scope != "" {
			return fmt.Errorf("bench policy %s: %w", r.Policy, sim.ErrScopeNotApplicable)
		}
		return nil
	}
	if _, err := config.ParseHashScope(string(scope(r))); err != nil {
		return fmt.Errorf("bench policy %s: %w", r.Policy, err)
	}
	if !r.Policy.IsHash() && scope(r) != config.HashScopeGlobal {
		return fmt.Errorf("bench policy %s: scope %s: the gfe takes a hash_scope only for hash2, hash3 and hash5", r.Policy, r.Scope)
	}
	return nil
}

// Options tunes one Run. The zero value runs every default policy
// over the whole timeline.
type Options struct {
	// Policies to run, one row each, in this order; nil means
	// benchpolicy.Defaults(). IDs must be unique, a baseline's empty scope
	// counting as global.
	Policies []benchpolicy.Row
	// MaxSteps, when > 0, stops the run after that many steps (a shortened
	// timeline, for tests).
	MaxSteps int
	// Series records every step's region shares in each row (Row.Series).
	Series bool
	// Parallelism is how many policies run at once; 0 means GOMAXPROCS.
	// Results do not depend on it.
	Parallelism int
}

// ErrTooLarge is returned by Run when a scenario would need more memory or
// time than a simulation should: more than maxBenchInstances instance slots,
// or more than maxBenchCells site-steps.
var ErrTooLarge = errors.New("scenario too large to simulate")

const (
	maxBenchInstances = 20_000
	maxBenchCells     = 50_000_000
)

// Run runs every policy of opts through s's timeline (DefaultTimeline, one
// step, when s has none) and reports, per policy, latency, overload, errors,
// cross-region traffic and the gap to the min-RTT optimum. Policies run
// independently, in parallel, on the same trace; the result is the same for
// the same scenario and options.
//
// # Model
//
// Time advances in steps of Timeline.StepS. In step k (time t):
//
//  1. The world is evaluated at t (the truth: every site's demand, every
//     group's started and healthy instances and capacity_scaler) and at
//     t − GossipDelayS (what gossip has told the gfes so far). A site's
//     demand as gfes plan with it is its gfe's estimate: the gfe's own
//     filter (ewma.RateFilter, fast attack, slow decay with time constant
//     Timeline.DemandSmoothingS) over the site's requests up to the end of
//     the step, at once for the site's own gfe and GossipDelayS later for
//     the others.
//  2. One gfe per site runs the gfe's own routing table build
//     (lb/routing.Builder, with Timeline.Damping and the
//     snapshot, peers and demand below) and splits its site's demand over
//     instances as that table picks. Its snapshot is the delayed world as
//     a config with one service under the row's policy (groups listing
//     their started instances, max_rate_per_instance rate_per_instance,
//     the capacity_scaler of then, the healthy ones healthy); its peers
//     are the other sites with their delayed demand and their RTTs; its
//     own demand is as of t (see bench_gfe.go). From the table:
//     - waterfall and min_rtt: the table plans (waterfall.Compute or
//     ComputeMinRTT), damps the plan towards its previous one
//     (waterfall.Damp) and picks by its site's row with a
//     waterfall.Picker; the split is that Picker's distribution: each
//     group with the probability the Picker chooses it
//     (waterfall.Picker.Groups: its share, renormalised over the groups
//     with healthy instances), evenly over the group's healthy instances
//     (round robin, as the gfe picks inside a group).
//     - round_robin and least_request: evenly over the table's pool, every
//     healthy instance, drained groups (capacity_scaler 0) included as in
//     the gfe (the expected split of backend.RoundRobin; the
//     preference of backend.LeastRequest for backends with fewer requests
//     in flight, which favours near and idle backends, is not modelled, so
//     it equals round robin).
//     - hash2, hash3 and hash5: every connection of the site's synthetic
//     clients (Model.ClientsPerSite addresses × ConnectionsPerClient source
//     ports, drawn from Timeline.Seed) to one anycast address, port 443,
//     picked by the table itself (its Maglev over its pool, keyed by the
//     policy's 2/3/5-tuple): the exact split of that client population,
//     not an average over backends. Scope global uses every healthy
//     instance; nearest_region those of the site's nearest region (by
//     RTT, ties by name) that has one.
//     The pool of scope global includes regions the site has no RTT to
//     (as the gfe's does); the site does not reach them, so what it sends
//     there fails without reaching an instance (it is not routed).
//  3. Each instance's arrival rate λ is the sum of what every site sends
//     it. Its service rate is μ = rate_per_instance /
//     Model.UtilizationAtCapacity and its queue holds at most μ ×
//     Model.MaxQueueMs requests. The queue advances by StepS as documented
//     on stepQueue: a fluid backlog that grows when λ > μ, carries over to
//     the next step and fails what does not fit; plus M/M/1 random queueing.
//     Requests sent to an instance that is not healthy in truth (the gfe's
//     view lags) fail; its backlog is discarded (those requests were
//     counted when they arrived). A request counts as served when its
//     instance accepts it. A request's latency is the
//     RTT from its site to the instance's region plus its time at the
//     instance (wait behind the backlog, queueing and service).
//  4. With Timeline.Feedback (the default), the closed loop (docs/design.md §3
//     rule 8): each site's gfe is told what its own requests of the step
//     ended in, instance by instance, on the counters its next build reads
//     (backend.Backend.Observe and ObserveLoad, as the gfe's proxy
//     does): refused for the share the instance's full queue dropped,
//     failed when the instance was down, answered with the step's mean
//     latency otherwise, and one load report per instance (its
//     utilization and the rate it receives, Model.LoadReports) unless the
//     scenario turns reports off. The builder turns them into each group's effective capacity
//     factor (lb/capacity), applies its own at once and gossips it: the
//     other gfes plan with it GossipDelayS later (at least one step).
//     Only planned policies read the signals. See bench_loop.go.
//
// A run starts from a steady state: empty queues, every factor at 1, and
// gfes whose first plan is not damped. The run is deterministic.
//
// # Metrics
//
// Per policy, over every step: the mean, p50 and p99 latency of served
// requests (p50 and p99 from a 0.1 ms histogram to which each (site,
// instance, step) adds its exponential at 14 fixed quantiles, so that one
// exponential's median and p99 are exact); OverCapacity, the share of served
// requests served by an instance whose arrival rate exceeded its capacity
// (rate_per_instance × capacity_scaler) by more than 1%; Excess, the share
// of requests above capacity (Σ max(0, λ − capacity) over healthy
// instances); ErrorRate, failed requests (unroutable, sent to a region the
// site does not reach, overflowed, or sent to an unhealthy instance) over
// all requests; CrossRegion, the share of
// routed requests sent outside the site's nearest region; MeanRTTMs and
// RTTOverLP, the mean RTT of routed requests over that of the linear-program
// optimum of the same steps (sim.SolveLP: least total RTT with every region
// within λ·capacity of its healthy instances); and OscillationPP, how much
// the sites' region shares swing back and forth (see Row).
//
// Run fails with ErrTooLarge for scenarios too large to simulate, and with
// ErrOverflow when a scenario's numbers are so large that a metric does not
// fit in a float64.
func Run(s *sim.Scenario, opts Options) (*Result, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	tl := sim.DefaultTimeline()
	if s.Timeline != nil {
		tl = *s.Timeline
	}
	policies := opts.Policies
	if policies == nil {
		policies = benchpolicy.Defaults()
	}
	if len(policies) == 0 {
		return nil, errors.New("bench: no policies")
	}
	seen := map[string]bool{}
	for _, p := range policies {
		if err := validate(p); err != nil {
			return nil, err
		}
		if seen[id(p)] {
			return nil, fmt.Errorf("bench policy %s: listed twice", id(p))
		}
		seen[id(p)] = true
	}
	steps := tl.Steps()
	if opts.MaxSteps > 0 {
		steps = min(steps, opts.MaxSteps)
	}
	if cells := steps * len(s.Sites); cells > maxBenchCells {
		return nil, fmt.Errorf("%d steps × %d sites: %w", steps, len(s.Sites), ErrTooLarge)
	}
	tr := s.NewTrace(&tl, steps)
	topo, err := newTopology(s, &tl, tr, policies)
	if err != nil {
		return nil, err
	}

	res := &Result{
		Steps:            steps,
		StepS:            tl.StepS,
		GossipDelayS:     tl.GossipDelayS,
		DemandSmoothingS: tl.DemandSmoothingS,
		Damping:          tl.Damping,
		Seed:             tl.Seed,
		Sites:            len(s.Sites),
		Instances:        topo.slots(),
		Policies:         make([]Row, len(policies)),
		Feedback:         tl.Feedback,
		LoadReports:      tl.Model.LoadReports,
	}
	for _, r := range s.Regions {
		res.Regions = append(res.Regions, r.Name)
	}
	for k := range steps {
		for _, d := range tr.Demand[k] {
			res.Requests += d * tr.StepS
		}
	}

	// The LP optimum of every step comes first: every run reads it.
	lps, err := topo.solveSteps(tr)
	if err != nil {
		return nil, err
	}
	for k := range lps {
		if lps[k].ok {
			res.LP.Steps++
			res.LP.cost += lps[k].sol.Cost * tr.StepS
			res.LP.placed += lps[k].sol.Placed * tr.StepS
		} else {
			res.LP.Unavailable++
		}
	}
	if res.LP.placed > 0 {
		res.LP.MeanRTTMs = res.LP.cost / res.LP.placed
	}

	par := opts.Parallelism
	if par <= 0 {
		par = runtime.GOMAXPROCS(0)
	}
	sem := make(chan struct{}, par)
	errs := make([]error, len(policies))
	var wg sync.WaitGroup
	for i, p := range policies {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			r := newRunner(s, &tl, tr, topo, lps, p, opts.Series)
			row, err := r.run()
			if err != nil {
				errs[i] = fmt.Errorf("bench %s: %w", id(p), err)
				return
			}
			res.Policies[i] = row
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return res, nil
}

// Result is the outcome of Run: one row per policy. Its JSON
// form is the object `lbsim bench --json` prints. Every number is finite.
type Result struct {
	// Scenario names the scenario (the file); set by the caller.
	Scenario string `json:"scenario,omitempty"`
	// Steps is the number of steps run, of StepS seconds each.
	Steps        int     `json:"steps"`
	StepS        float64 `json:"step_s"`
	GossipDelayS float64 `json:"gossip_delay_s"`
	// DemandSmoothingS is the time constant of each gfe's estimate of its
	// own site's demand (Timeline.DemandSmoothingS).
	DemandSmoothingS float64 `json:"demand_smoothing_s"`
	Damping          float64 `json:"damping"`
	Seed             uint64  `json:"seed"`
	Sites            int     `json:"sites"`
	// Regions lists the region names in scenario order; region-indexed
	// slices (Row.Series) follow this order.
	Regions []string `json:"regions"`
	// Instances is the number of instance slots simulated (the most each
	// group ever has).
	Instances int `json:"instances"`
	// Requests is the total demand over the run, in requests.
	Requests float64 `json:"requests"`
	// LP summarises the linear-program optimum over the run.
	LP LPSummary `json:"lp"`
	// Policies holds one row per policy, in the order run.
	Policies []Row `json:"policies"`
	// Feedback and LoadReports are Timeline.Feedback and
	// Model.LoadReports: whether the gfes ran the closed loop, and with
	// the instances' load reports.
	Feedback    bool `json:"feedback"`
	LoadReports bool `json:"load_reports"`
}

// LPSummary is the min-RTT optimum over a run.
type LPSummary struct {
	// MeanRTTMs is the optimum's mean RTT over the steps it was solved for.
	MeanRTTMs float64 `json:"mean_rtt_ms"`
	// Steps is how many steps had an optimum; Unavailable how many did not
	// (no assignment fits, possible only when some sites do not reach every
	// region).
	Steps       int `json:"steps"`
	Unavailable int `json:"unavailable"`

	cost, placed float64
}

// Row is one policy's outcome. Shares are fractions in [0,1].
type Row struct {
	// Policy and Scope are the benchpolicy.Row's; Scope is set, global
	// when the row left it empty, for baselines only.
	Policy string           `json:"policy"`
	Scope  config.HashScope `json:"scope,omitempty"`
	// Requests is the total demand (as in Result), Routed what the
	// policy sent to some instance, Served what completed; all in requests.
	Requests float64 `json:"requests"`
	Routed   float64 `json:"routed"`
	Served   float64 `json:"served"`
	// MeanMs, P50Ms and P99Ms are the latency of served requests (RTT plus
	// time at the instance), in ms; 0 when nothing was served.
	MeanMs float64 `json:"mean_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
	// OverCapacity is the share of served requests served by an instance
	// whose arrival rate was more than 1% above its capacity.
	OverCapacity float64 `json:"over_capacity"`
	// Excess is Σ max(0, arrival rate − capacity) over healthy instances
	// and steps, as a share of Requests: the load beyond capacity.
	Excess float64 `json:"excess"`
	// ErrorRate is the share of Requests that failed: not routable, dropped
	// by a full queue, or sent to an instance that was not healthy.
	ErrorRate float64 `json:"error_rate"`
	// CrossRegion is the share of routed requests sent to a region other
	// than the site's nearest (by RTT, ties by name).
	CrossRegion float64 `json:"cross_region"`
	// MeanRTTMs is the mean RTT of routed requests, in ms.
	MeanRTTMs float64 `json:"mean_rtt_ms"`
	// RTTOverLP is the mean RTT of routed requests over the LP optimum's,
	// both over the steps that have an optimum; null when none has. Below 1
	// means the policy stayed nearer than the optimum can without
	// overloading a region.
	RTTOverLP *float64 `json:"rtt_over_lp"`
	// OscillationPP measures how much the gfes' decisions swing back and
	// forth: for every site, region and step where the share of the site's
	// traffic sent to the region changes in the opposite direction to the
	// step before, the smaller of the two changes counts, weighted by the
	// site's part of the step's demand; the sum over the run, halved, in
	// percentage points. Monotone moves (a damped plan converging, a ramp)
	// add nothing; a gfe that follows demand noise with its spill adds.
	OscillationPP float64 `json:"oscillation_pp"`
	// CDF is the latency distribution of served requests: the latency at
	// each of CDFProbabilities.
	CDF []CDFPoint `json:"cdf"`
	// Series holds every step's region shares, when Options.Series is
	// set.
	Series []SeriesStep `json:"series,omitempty"`
}

// ID returns the row's label, as benchpolicy.Row.ID.
func (r Row) ID() string {
	if r.Scope == "" {
		return r.Policy
	}
	return r.Policy + "/" + string(r.Scope)
}

// CDFPoint is one point of a latency distribution: a fraction P of served
// requests took at most Ms milliseconds.
type CDFPoint struct {
	P  float64 `json:"p"`
	Ms float64 `json:"ms"`
}

// CDFProbabilities are the probabilities at which Row.CDF is given.
func CDFProbabilities() []float64 {
	return []float64{0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 0.999}
}

// SeriesStep is one step of a row's region series. Slices are indexed like
// Result.Regions.
type SeriesStep struct {
	// TS is the start of the step, seconds.
	TS float64 `json:"t_s"`
	// Shares is each region's share of the requests routed in the step.
	Shares []float64 `json:"shares"`
	// LoadRPS is the arrival rate each region received, requests/s.
	LoadRPS []float64 `json:"load_rps"`
	// CapacityRPS is each region's true capacity in the step, requests/s.
	CapacityRPS []float64 `json:"capacity_rps"`
}

// ratio returns a/b, or 0 when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 || math.IsNaN(a/b) {
		return 0
	}
	return a / b
}

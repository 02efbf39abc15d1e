package sim

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/spillway-lb/spillway/lb/ewma"
)

// trace is a timeline evaluated at every step: the true state of the world
// and the state the gfes see, gossip delay behind. It is built once per
// Bench and shared, read-only, by every policy's run.
type trace struct {
	steps int
	dt    float64
	// times[k] is the start of step k, k·dt.
	times []float64
	// demand[k][site] is the true demand of each site (scenario order) in
	// requests/s during step k.
	demand [][]float64
	// heard[k][site] is each site's demand as its own gfe estimates it at
	// the end of step k (demandEstimates); seen[k][site] is that estimate
	// as the other gfes have it, gossip delay later.
	heard, seen [][]float64
	// groups[k][g] is the true state of each group (scenario order) during
	// step k; seenGroups[k][g] the state at times[k] − gossip delay.
	groups, seenGroups [][]groupState
}

// newTrace evaluates tl (valid for s) at the first n steps.
func (s *Scenario) newTrace(tl *Timeline, n int) *trace {
	tr := &trace{steps: n, dt: tl.StepS, times: make([]float64, n)}
	seenAt := make([]float64, n)
	for k := range n {
		tr.times[k] = float64(k) * tl.StepS
		seenAt[k] = max(0, tr.times[k]-tl.GossipDelayS)
	}
	prog := s.demandPrograms(tl, tl.Steps())
	tr.demand = make([][]float64, n)
	for k := range n {
		tr.demand[k] = make([]float64, len(s.Sites))
		for i := range s.Sites {
			tr.demand[k][i] = prog[i].at(tr.times[k])
		}
	}
	tr.heard = demandEstimates(tr.demand, tl.StepS, tl.DemandSmoothingS)
	tr.seen = make([][]float64, n)
	for k := range n {
		// The estimate the site's gfe planned the step at seenAt[k] with,
		// as tr.heard[k] is the one its gfe plans step k with.
		j := int(math.Floor(seenAt[k]/tl.StepS + 1e-9))
		tr.seen[k] = tr.heard[min(j, k)]
	}
	withTimeline := *s
	withTimeline.Timeline = tl
	actions, _ := withTimeline.groupActions(nil)
	tr.groups = groupStatesAt(s.initialGroupStates(), actions, tl.Events, tr.times)
	tr.seenGroups = groupStatesAt(s.initialGroupStates(), actions, tl.Events, seenAt)
	return tr
}

// demandEstimates returns each site's demand as its gfe estimates it at
// the end of every step: the step's requests (demand × step) observed by
// the gfe's own filter (ewma.RateFilter with FastAttack and time constant
// smoothingS, the filter of the gfe's ewma.Rate), once per step as the gfe
// samples it once per plan interval. The first step's estimate is its
// demand; smoothingS 0 follows every step.
func demandEstimates(demand [][]float64, stepS, smoothingS float64) [][]float64 {
	out := make([][]float64, len(demand))
	for k := range demand {
		out[k] = make([]float64, len(demand[k]))
	}
	if len(demand) == 0 {
		return out
	}
	start := time.Unix(0, 0)
	step := time.Duration(stepS * float64(time.Second))
	for si := range demand[0] {
		f := ewma.RateFilter{Tau: time.Duration(smoothingS * float64(time.Second)), FastAttack: true, Alpha: 1}
		f.Observe(start, 0)
		for k := range demand {
			out[k][si] = f.Observe(start.Add(time.Duration(k+1)*step), demand[k][si]*stepS)
		}
	}
	return out
}

// groupStatesAt applies actions (sorted by time, already checked) to init
// and returns the states at each of times, which must be non-decreasing.
// An action at time a applies to every time ≥ a.
func groupStatesAt(init []groupState, actions []groupAction, events []Event, times []float64) [][]groupState {
	state := slices.Clone(init)
	out := make([][]groupState, len(times))
	next := 0
	for k, t := range times {
		for next < len(actions) && actions[next].at <= t+1e-9 {
			a := actions[next]
			next++
			state[a.group].apply(a, events)
		}
		out[k] = slices.Clone(state)
	}
	return out
}

// demandProgram is one site's demand as a function of time.
type demandProgram struct {
	base    float64
	levels  []DemandChange // step, ramp and flash_crowd, in time order
	diurnal *DemandChange
	noise   []float64 // multiplier per step; nil without noise
	dt      float64
}

// demandPrograms returns the program of every site, in scenario order.
func (s *Scenario) demandPrograms(tl *Timeline, steps int) []demandProgram {
	progs := make([]demandProgram, len(s.Sites))
	for i, st := range s.Sites {
		progs[i] = demandProgram{base: st.DemandRPS, dt: tl.StepS}
	}
	for _, d := range tl.Demand {
		for i, st := range s.Sites {
			if d.Site != AllSites && d.Site != st.Name {
				continue
			}
			p := &progs[i]
			switch d.Kind {
			case DemandStep, DemandRamp, DemandFlashCrowd:
				p.levels = append(p.levels, d)
			case DemandDiurnal:
				p.diurnal = &d
			case DemandNoise:
				// Each site draws its own sequence, from the seed and the
				// site's position, so that adding a site leaves the others'
				// noise unchanged.
				rng := rand.New(rand.NewPCG(tl.Seed, 0x6e6f697365<<16|uint64(i)))
				p.noise = make([]float64, steps)
				for k := range p.noise {
					p.noise[k] = max(0, 1+d.Amplitude*rng.NormFloat64())
				}
			}
		}
	}
	for i := range progs {
		slices.SortStableFunc(progs[i].levels, func(a, b DemandChange) int {
			switch {
			case a.AtS < b.AtS:
				return -1
			case a.AtS > b.AtS:
				return 1
			}
			return 0
		})
	}
	return progs
}

// at returns the demand at time t ≥ 0, in requests/s; never negative.
func (p *demandProgram) at(t float64) float64 {
	v := p.level(t)
	if d := p.diurnal; d != nil {
		v *= 1 + d.Amplitude*math.Sin(2*math.Pi*(t+d.PhaseS)/d.PeriodS)
	}
	if p.noise != nil {
		k := int(math.Floor(t/p.dt + 1e-9))
		k = min(max(k, 0), len(p.noise)-1)
		v *= p.noise[k]
	}
	return max(v, 0)
}

// level returns the demand level at t before the diurnal and noise
// multipliers.
func (p *demandProgram) level(t float64) float64 {
	const eps = 1e-9
	l := p.base
	lerp := func(from, to, start, dur float64) float64 {
		if dur <= 0 {
			return to
		}
		return from + (to-from)*(t-start)/dur
	}
	for _, c := range p.levels {
		if t < c.AtS-eps {
			return l
		}
		switch c.Kind {
		case DemandStep:
			l = c.RPS
		case DemandRamp:
			if t < c.AtS+c.ForS-eps {
				return lerp(l, c.RPS, c.AtS, c.ForS)
			}
			l = c.RPS
		case DemandFlashCrowd:
			rise, hold, fall := c.AtS+c.RiseS, c.AtS+c.RiseS+c.HoldS, c.end()
			switch {
			case t < rise-eps:
				return lerp(l, c.RPS, c.AtS, c.RiseS)
			case t < hold-eps:
				return c.RPS
			case t < fall-eps:
				return lerp(c.RPS, l, hold, c.FallS)
			}
			// Back to the level it had before.
		}
	}
	return l
}

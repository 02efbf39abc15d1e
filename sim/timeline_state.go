package sim

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/spillway-lb/spillway/lb/ewma"
)

// Trace is a timeline evaluated at every step: the true state of the world
// and the state the gfes see, gossip delay behind. The policy bench
// (sim/policybench) builds one per run and shares it, read-only, between
// every policy's run.
type Trace struct {
	// Steps is the number of steps, StepS their length in seconds
	// (Timeline.StepS).
	Steps int
	StepS float64
	// Times[k] is the start of step k, k·StepS, in seconds.
	Times []float64
	// Demand[k][site] is the true demand of each site (scenario order) in
	// requests/s during step k.
	Demand [][]float64
	// Heard[k][site] is each site's demand as its own gfe estimates it at
	// the end of step k (demandEstimates); Seen[k][site] is that estimate
	// as the other gfes have it, gossip delay later.
	Heard, Seen [][]float64
	// Groups[k][g] is the true state of each group (scenario order) during
	// step k; SeenGroups[k][g] the state at Times[k] − gossip delay.
	Groups, SeenGroups [][]GroupState
}

// NewTrace evaluates tl (valid for s) at the first n steps.
func (s *Scenario) NewTrace(tl *Timeline, n int) *Trace {
	tr := &Trace{Steps: n, StepS: tl.StepS, Times: make([]float64, n)}
	seenAt := make([]float64, n)
	for k := range n {
		tr.Times[k] = float64(k) * tl.StepS
		seenAt[k] = max(0, tr.Times[k]-tl.GossipDelayS)
	}
	prog := s.demandPrograms(tl, tl.Steps())
	tr.Demand = make([][]float64, n)
	for k := range n {
		tr.Demand[k] = make([]float64, len(s.Sites))
		for i := range s.Sites {
			tr.Demand[k][i] = prog[i].at(tr.Times[k])
		}
	}
	tr.Heard = demandEstimates(tr.Demand, tl.StepS, tl.DemandSmoothingS)
	tr.Seen = make([][]float64, n)
	for k := range n {
		// The estimate the site's gfe planned the step at seenAt[k] with,
		// as tr.heard[k] is the one its gfe plans step k with.
		j := int(math.Floor(seenAt[k]/tl.StepS + 1e-9))
		tr.Seen[k] = tr.Heard[min(j, k)]
	}
	withTimeline := *s
	withTimeline.Timeline = tl
	actions, _ := withTimeline.groupActions(nil)
	tr.Groups = groupStatesAt(s.initialGroupStates(), actions, tl.Events, tr.Times)
	tr.SeenGroups = groupStatesAt(s.initialGroupStates(), actions, tl.Events, seenAt)
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
func groupStatesAt(init []GroupState, actions []groupAction, events []Event, times []float64) [][]GroupState {
	state := slices.Clone(init)
	out := make([][]GroupState, len(times))
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

package sim

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/spillway-lb/spillway/lb/routing"
)

// Timeline is the optional dynamic part of a Scenario, read by `lbsim bench`
// (see policybench.Run): how long to simulate, how the gfes learn about the
// world, the backend and client model, and what changes over time. A
// Scenario without a Timeline is simulated as one step of DefaultTimeline:
// a steady state. All times are in seconds of simulated time from the start
// of the run.
type Timeline struct {
	// DurationS is the simulated time, > 0. The run has ⌈DurationS/StepS⌉
	// steps.
	DurationS float64
	// StepS is the length of one step, > 0. Default 1. Each step every gfe
	// plans once (the gfe's plan interval) and every instance's queue
	// advances by StepS.
	StepS float64
	// GossipDelayS is how old the state a gfe plans from is, ≥ 0. Default 2.
	// At time t a gfe sees the other sites' demand and every group's health
	// and capacity as they were at t − GossipDelayS (as at 0 before the
	// start); it measures its own site's demand itself, without delay.
	GossipDelayS float64
	// DemandSmoothingS is the time constant, in seconds ≥ 0, of each gfe's
	// estimate of its own site's demand: the gfe's filter (ewma.Rate with
	// FastAttack, its demand-smoothing flag), fed each step's requests.
	// Default 2, the gfe's (routing.DefaultDemandSmoothing). 0 plans
	// every step from the step's true demand.
	DemandSmoothingS float64
	// Damping is the fraction alpha in (0, 1] by which a gfe moves its plan
	// towards the planner's newest output each step (waterfall.Damp).
	// Default 0.5, the gfe's default. 1 disables damping.
	Damping float64
	// Feedback turns the gfes' closed loop on (docs/design.md §3 rule 8; the
	// service's feedback.enabled in their config). Default true. On, each
	// gfe counts what its own requests ended in on every instance (served
	// and how fast, refused by a full queue, failed at an instance that is
	// down, and load reports when Model.LoadReports) and plans each group
	// with the effective capacity lb/capacity derives from that, gossiped
	// to the other gfes GossipDelayS later; off, every group is planned
	// at its declared capacity.
	Feedback bool
	// Seed seeds everything random in the run: the synthetic client
	// addresses and ports hashed by the hash policies, and demand noise.
	// Default 1. The same scenario and seed give the same result.
	Seed uint64
	// Model is the backend and client model.
	Model Model
	// Demand lists the changes of the sites' demand over time; a site
	// without changes keeps its demand_rps.
	Demand []DemandChange
	// Events lists health and capacity changes of instance groups.
	Events []Event
}

// Model holds the parameters of the backend queue model and of the client
// population (see policybench.Run).
type Model struct {
	// UtilizationAtCapacity is how busy an instance is when it receives its
	// configured rate_per_instance, in (0, 1]. Default 0.8: the operator's
	// capacity leaves 25% headroom, so an instance serves at most
	// rate_per_instance / 0.8 requests/s. Lower values give more headroom.
	UtilizationAtCapacity float64
	// MaxQueueMs bounds each instance's queue, > 0: at most
	// service rate × MaxQueueMs requests wait; arrivals beyond fail. Default
	// 1000 (one second of work).
	MaxQueueMs float64
	// ClientsPerSite is the number of synthetic client addresses at each
	// site, in [1, 100000]. Default 1000. The hash policies hash these, so
	// fewer clients make hash2 and hash3 lumpier.
	ClientsPerSite int
	// ConnectionsPerClient is the number of connections (source ports) per
	// client, in [1, 100]. Default 4. hash5 hashes each connection.
	ConnectionsPerClient int
	// ClientSkew is the Zipf exponent of the clients' request rates, in
	// [0, 4]: client k (from 1) sends in proportion to k^−ClientSkew.
	// Default 0: every client sends the same.
	ClientSkew float64
	// LoadReports says whether the instances send load reports (ORCA
	// endpoint-load-metrics) with their answers. Default true. An
	// instance reports its utilization as the test backend does with a
	// rate limit alone, averaged over the step: λ/μ while nothing waits,
	// max(λ/μ, 1) plus the seconds of work waiting while requests do; so
	// at rate_per_instance without a queue it reports
	// UtilizationAtCapacity. It also reports the rate it receives from
	// every site (ORCA rps_fractional). Only gfes with Timeline.Feedback
	// read them.
	LoadReports bool
}

// DemandKind says how a DemandChange changes a site's demand.
type DemandKind string

// The demand kinds. Step, Ramp and FlashCrowd change the site's demand
// level and must not overlap in time on one site; Diurnal and Noise
// multiply the level, at most one of each per site.
const (
	// DemandStep sets the level to RPS at AtS.
	DemandStep DemandKind = "step"
	// DemandRamp moves the level linearly from its value at AtS to RPS over
	// ForS seconds.
	DemandRamp DemandKind = "ramp"
	// DemandFlashCrowd ramps the level from its value at AtS up to RPS over
	// RiseS, holds it for HoldS, and ramps it back to the value it had at
	// AtS over FallS.
	DemandFlashCrowd DemandKind = "flash_crowd"
	// DemandDiurnal multiplies the level by 1 + Amplitude·sin(2π(t +
	// PhaseS)/PeriodS) for the whole run.
	DemandDiurnal DemandKind = "diurnal"
	// DemandNoise multiplies the level, step by step, by max(0, 1 +
	// Amplitude·z) with z drawn from a standard normal distribution (seeded
	// by Timeline.Seed, the site and the step).
	DemandNoise DemandKind = "noise"
)

// DemandKinds returns every demand kind.
func DemandKinds() []DemandKind {
	return []DemandKind{DemandStep, DemandRamp, DemandFlashCrowd, DemandDiurnal, DemandNoise}
}

// AllSites as a DemandChange's Site applies the change to every site.
const AllSites = "*"

// DemandChange is one entry of Timeline.Demand. Only the fields its Kind
// uses are set; the others are zero.
type DemandChange struct {
	// Site names the site, or AllSites.
	Site string
	Kind DemandKind
	// AtS is when the change starts (step, ramp, flash_crowd), in
	// [0, DurationS).
	AtS float64
	// RPS is the target level (step, ramp) or the peak (flash_crowd), ≥ 0.
	RPS float64
	// ForS is the duration of a ramp, ≥ 0.
	ForS float64
	// RiseS, HoldS and FallS are the phases of a flash crowd, ≥ 0. RiseS and
	// FallS default to 0.
	RiseS, HoldS, FallS float64
	// PeriodS (> 0) and PhaseS (default 0) shape a diurnal cycle.
	PeriodS, PhaseS float64
	// Amplitude is the relative amplitude of a diurnal cycle or the
	// relative standard deviation of noise, in [0, 1].
	Amplitude float64
}

// end returns when a level change has finished.
func (c DemandChange) end() float64 {
	switch c.Kind {
	case DemandRamp:
		return c.AtS + c.ForS
	case DemandFlashCrowd:
		return c.AtS + c.RiseS + c.HoldS + c.FallS
	}
	return c.AtS
}

// isLevel reports whether c changes a site's level (as opposed to
// multiplying it).
func (c DemandChange) isLevel() bool {
	return c.Kind == DemandStep || c.Kind == DemandRamp || c.Kind == DemandFlashCrowd
}

// EventKind says what an Event changes.
type EventKind string

// The event kinds.
const (
	// EventHealth sets how many of the group's started instances pass
	// health checks.
	EventHealth EventKind = "healthy"
	// EventScale sets the group's instance count. Instances added start
	// at once but serve (and count as healthy instances) only ColdStartS
	// later; instances removed go at once, unhealthy ones first.
	EventScale EventKind = "instances"
	// EventScaler sets the group's capacity_scaler.
	EventScaler EventKind = "capacity_scaler"
	// EventSlowdown sets how many times slower than their configured rate
	// the group's instances serve, as an antagonist on their machines
	// would make them: the modelled service rate is divided by it while
	// the gfes' config (rate_per_instance, capacity_scaler) stays as it
	// was, so that only load reports and latency show it. 1 restores the
	// configured rate.
	EventSlowdown EventKind = "slowdown"
)

// Event is one entry of Timeline.Events: a change of one instance group at
// one time.
type Event struct {
	// AtS is when the change happens, in [0, DurationS).
	AtS float64
	// Group names an instance group of the scenario.
	Group string
	Kind  EventKind
	// Healthy is the new number of healthy instances (EventHealth); at most
	// the group's started instances at AtS.
	Healthy int
	// Instances is the new instance count (EventScale). A scale-down may not
	// happen while instances of the group are still cold-starting.
	Instances int
	// ColdStartS is how long added instances take to serve (EventScale),
	// ≥ 0, default 0.
	ColdStartS float64
	// CapacityScaler is the new capacity_scaler (EventScaler), in [0,1].
	CapacityScaler float64
	// Slowdown is the new slowdown (EventSlowdown), >= 1.
	Slowdown float64
}

// DefaultTimeline returns the timeline of a scenario that has none: one
// step of one second with every setting at its default.
func DefaultTimeline() Timeline {
	return Timeline{
		DurationS:        1,
		StepS:            1,
		GossipDelayS:     2,
		DemandSmoothingS: routing.DefaultDemandSmoothing.Seconds(), // the gfe's default
		Damping:          0.5,                                      // the gfe's default (gfe.damping)
		Feedback:         true,                                     // the gfe's default (feedback.enabled)
		Seed:             1,
		Model: Model{
			UtilizationAtCapacity: 0.8,  // 25% headroom above the configured rate
			MaxQueueMs:            1000, // one second of work
			ClientsPerSite:        1000,
			ConnectionsPerClient:  4,
			ClientSkew:            0,
			LoadReports:           true,
		},
	}
}

// Steps returns the number of steps of the run, ⌈DurationS/StepS⌉ (at least
// 1).
func (tl *Timeline) Steps() int {
	n := math.Ceil(tl.DurationS/tl.StepS - 1e-9)
	if n < 1 || math.IsNaN(n) {
		return 1
	}
	return int(n)
}

// Limits that keep a simulation's memory bounded.
const (
	maxSteps          = 100_000
	maxClientsPerSite = 100_000
	maxConnections    = 100
	maxKeysPerSite    = 1_000_000
	maxClientSkew     = 4
	maxSmoothingS     = 3600
)

// The file form of a timeline. Pointers tell a missing field from a zero.
type fileTimeline struct {
	DurationS        *float64     `yaml:"duration_s"`
	StepS            *float64     `yaml:"step_s"`
	GossipDelayS     *float64     `yaml:"gossip_delay_s"`
	DemandSmoothingS *float64     `yaml:"demand_smoothing_s"`
	Damping          *float64     `yaml:"damping"`
	Feedback         *bool        `yaml:"feedback"`
	Seed             *float64     `yaml:"seed"`
	Model            *fileModel   `yaml:"model"`
	Demand           []fileDemand `yaml:"demand"`
	Events           []fileEvent  `yaml:"events"`
}

type fileModel struct {
	UtilizationAtCapacity *float64 `yaml:"utilization_at_capacity"`
	MaxQueueMs            *float64 `yaml:"max_queue_ms"`
	ClientsPerSite        *float64 `yaml:"clients_per_site"`
	ConnectionsPerClient  *float64 `yaml:"connections_per_client"`
	ClientSkew            *float64 `yaml:"client_skew"`
	LoadReports           *bool    `yaml:"load_reports"`
}

type fileDemand struct {
	Site      string   `yaml:"site"`
	Kind      string   `yaml:"kind"`
	AtS       *float64 `yaml:"at_s"`
	RPS       *float64 `yaml:"rps"`
	ForS      *float64 `yaml:"for_s"`
	RiseS     *float64 `yaml:"rise_s"`
	HoldS     *float64 `yaml:"hold_s"`
	FallS     *float64 `yaml:"fall_s"`
	PeriodS   *float64 `yaml:"period_s"`
	PhaseS    *float64 `yaml:"phase_s"`
	Amplitude *float64 `yaml:"amplitude"`
}

type fileEvent struct {
	AtS            *float64 `yaml:"at_s"`
	Group          string   `yaml:"group"`
	Healthy        *float64 `yaml:"healthy"`
	Instances      *float64 `yaml:"instances"`
	ColdStartS     *float64 `yaml:"cold_start_s"`
	CapacityScaler *float64 `yaml:"capacity_scaler"`
	Slowdown       *float64 `yaml:"slowdown"`
}

// timeline converts the file form, applying defaults. Problems found while
// converting (missing, misplaced or non-integer fields) go to issues keyed
// by path, as in fileScenario.scenario; timelineProblems reports them.
func (f *fileTimeline) timeline(issues map[string]string) *Timeline {
	tl := DefaultTimeline()
	tl.DurationS = 0
	set := func(dst *float64, v *float64) {
		if v != nil {
			*dst = *v
		}
	}
	if f.DurationS == nil {
		issues["timeline.duration_s"] = "required"
	} else {
		tl.DurationS = *f.DurationS
	}
	set(&tl.StepS, f.StepS)
	set(&tl.GossipDelayS, f.GossipDelayS)
	set(&tl.DemandSmoothingS, f.DemandSmoothingS)
	set(&tl.Damping, f.Damping)
	if f.Feedback != nil {
		tl.Feedback = *f.Feedback
	}
	if f.Seed != nil {
		if v := *f.Seed; v != math.Trunc(v) || v < 0 || v > maxCount {
			issues["timeline.seed"] = fmt.Sprintf("must be a whole number in [0, %d], got %v", int64(maxCount), v)
		} else {
			tl.Seed = uint64(v)
		}
	}
	whole := func(path string, v *float64, lo, hi int, dst *int) {
		switch {
		case v == nil:
		case *v != math.Trunc(*v) || *v < float64(lo) || *v > float64(hi): // also NaN
			issues[path] = fmt.Sprintf("must be a whole number in [%d, %d], got %v", lo, hi, *v)
		default:
			*dst = int(*v)
		}
	}
	if m := f.Model; m != nil {
		set(&tl.Model.UtilizationAtCapacity, m.UtilizationAtCapacity)
		set(&tl.Model.MaxQueueMs, m.MaxQueueMs)
		set(&tl.Model.ClientSkew, m.ClientSkew)
		if m.LoadReports != nil {
			tl.Model.LoadReports = *m.LoadReports
		}
		whole("timeline.model.clients_per_site", m.ClientsPerSite, 1, maxClientsPerSite, &tl.Model.ClientsPerSite)
		whole("timeline.model.connections_per_client", m.ConnectionsPerClient, 1, maxConnections, &tl.Model.ConnectionsPerClient)
	}

	for i, fd := range f.Demand {
		path := fmt.Sprintf("timeline.demand[%d]", i)
		d := DemandChange{Site: fd.Site, Kind: DemandKind(fd.Kind)}
		fields := []struct {
			name string
			src  *float64
			dst  *float64
			// required by which kinds; used by which kinds
			required, used []DemandKind
		}{
			{"at_s", fd.AtS, &d.AtS, []DemandKind{DemandStep, DemandRamp, DemandFlashCrowd}, []DemandKind{DemandStep, DemandRamp, DemandFlashCrowd}},
			{"rps", fd.RPS, &d.RPS, []DemandKind{DemandStep, DemandRamp, DemandFlashCrowd}, []DemandKind{DemandStep, DemandRamp, DemandFlashCrowd}},
			{"for_s", fd.ForS, &d.ForS, []DemandKind{DemandRamp}, []DemandKind{DemandRamp}},
			{"rise_s", fd.RiseS, &d.RiseS, nil, []DemandKind{DemandFlashCrowd}},
			{"hold_s", fd.HoldS, &d.HoldS, []DemandKind{DemandFlashCrowd}, []DemandKind{DemandFlashCrowd}},
			{"fall_s", fd.FallS, &d.FallS, nil, []DemandKind{DemandFlashCrowd}},
			{"period_s", fd.PeriodS, &d.PeriodS, []DemandKind{DemandDiurnal}, []DemandKind{DemandDiurnal}},
			{"phase_s", fd.PhaseS, &d.PhaseS, nil, []DemandKind{DemandDiurnal}},
			{"amplitude", fd.Amplitude, &d.Amplitude, []DemandKind{DemandDiurnal, DemandNoise}, []DemandKind{DemandDiurnal, DemandNoise}},
		}
		known := slices.Contains(DemandKinds(), d.Kind)
		for _, fl := range fields {
			fpath := path + "." + fl.name
			switch {
			case !known:
				// The kind is reported; its fields cannot be judged.
			case fl.src != nil && !slices.Contains(fl.used, d.Kind):
				issues[fpath] = fmt.Sprintf("not used by kind %s", d.Kind)
			case fl.src == nil && slices.Contains(fl.required, d.Kind):
				issues[fpath] = fmt.Sprintf("required by kind %s", d.Kind)
			case fl.src != nil:
				*fl.dst = *fl.src
			}
		}
		tl.Demand = append(tl.Demand, d)
	}

	for i, fe := range f.Events {
		path := fmt.Sprintf("timeline.events[%d]", i)
		e := Event{Group: fe.Group}
		if fe.AtS == nil {
			issues[path+".at_s"] = "required"
		} else {
			e.AtS = *fe.AtS
		}
		var kinds []string
		if fe.Healthy != nil {
			kinds = append(kinds, "healthy")
			e.Kind = EventHealth
			whole(path+".healthy", fe.Healthy, 0, maxCount, &e.Healthy)
		}
		if fe.Instances != nil {
			kinds = append(kinds, "instances")
			e.Kind = EventScale
			whole(path+".instances", fe.Instances, 0, maxCount, &e.Instances)
		}
		if fe.CapacityScaler != nil {
			kinds = append(kinds, "capacity_scaler")
			e.Kind = EventScaler
			e.CapacityScaler = *fe.CapacityScaler
		}
		if fe.Slowdown != nil {
			kinds = append(kinds, "slowdown")
			e.Kind = EventSlowdown
			e.Slowdown = *fe.Slowdown
		}
		switch len(kinds) {
		case 0:
			issues[path] = "must set one of healthy, instances, capacity_scaler, slowdown"
		case 1:
		default:
			issues[path] = fmt.Sprintf("must set only one of healthy, instances, capacity_scaler, slowdown, got %s", strings.Join(kinds, " and "))
			e.Kind = ""
		}
		if fe.ColdStartS != nil {
			if e.Kind == EventScale {
				e.ColdStartS = *fe.ColdStartS
			} else if len(kinds) == 1 {
				issues[path+".cold_start_s"] = "only valid with instances"
			}
		}
		tl.Events = append(tl.Events, e)
	}
	return &tl
}

// GroupState is an instance group's state at one moment of a run.
type GroupState struct {
	// Started counts instances that have finished their cold start, healthy
	// or not; Healthy of them pass health checks. Pending instances are
	// still cold-starting: they neither serve nor count in the planner's
	// World.
	Started, Healthy, Pending int
	CapacityScaler            float64
	// Slowdown divides the instances' modelled service rate (EventSlowdown);
	// 0, as 1, is none. ServiceFactor gives the divisor.
	Slowdown float64
}

// ServiceFactor returns what the group's configured rate is divided by to
// give its instances' service rate: Slowdown, at least 1.
func (g GroupState) ServiceFactor() float64 { return max(1, g.Slowdown) }

// groupAction is one change of a group's state: an Event, or the end of a
// cold start (ready > 0).
type groupAction struct {
	at    float64
	order int // ready actions first at equal times, then events in file order
	group int
	event int // index into Timeline.Events; -1 for a ready action
	ready int // instances that finish their cold start
}

// groupIndex maps group names to their index in scenario order.
func (s *Scenario) groupIndex() map[string]int {
	idx := map[string]int{}
	for _, r := range s.Regions {
		for _, g := range r.Groups {
			idx[g.Name] = len(idx)
		}
	}
	return idx
}

// initialGroupStates returns every group's state at the start of a run, in
// scenario order.
func (s *Scenario) initialGroupStates() []GroupState {
	var st []GroupState
	for _, r := range s.Regions {
		for _, g := range r.Groups {
			st = append(st, GroupState{Started: g.Instances, Healthy: g.Healthy, CapacityScaler: g.CapacityScaler})
		}
	}
	return st
}

// groupActions replays the timeline's events listed in events (indexes
// into Timeline.Events, each with a known group and kind; nil means all) in
// time order and returns every action (events and cold-start ends) sorted by
// time, with the problems found: a health event above the started
// instances, or a scale-down during a cold start. A failing event is
// skipped.
func (s *Scenario) groupActions(events []int) ([]groupAction, []string) {
	tl := s.Timeline
	idx := s.groupIndex()
	if events == nil {
		events = make([]int, len(tl.Events))
		for i := range events {
			events[i] = i
		}
	}
	var actions []groupAction
	for _, i := range events {
		actions = append(actions, groupAction{at: tl.Events[i].AtS, order: 1 + i, group: idx[tl.Events[i].Group], event: i})
	}
	sortActions := func(a []groupAction) {
		slices.SortStableFunc(a, func(x, y groupAction) int {
			if c := cmp.Compare(x.at, y.at); c != 0 {
				return c
			}
			return cmp.Compare(x.order, y.order)
		})
	}
	sortActions(actions)
	state := s.initialGroupStates()
	var problems []string
	var out []groupAction
	for len(actions) > 0 {
		a := actions[0]
		actions = actions[1:]
		g := &state[a.group]
		if a.event >= 0 {
			e := tl.Events[a.event]
			path := fmt.Sprintf("timeline.events[%d]", a.event)
			switch total := g.Started + g.Pending; {
			case e.Kind == EventHealth && e.Healthy > g.Started:
				problems = append(problems, fmt.Sprintf("%s.healthy: %d > %d started instances of group %s at %v s", path, e.Healthy, g.Started, e.Group, e.AtS))
				continue
			case e.Kind == EventScale && e.Instances < total && g.Pending > 0:
				problems = append(problems, fmt.Sprintf("%s.instances: scale-down of group %s to %d at %v s while %d instances are still cold-starting", path, e.Group, e.Instances, e.AtS, g.Pending))
				continue
			case e.Kind == EventScale && e.Instances > total && e.ColdStartS > 0:
				actions = append(actions, groupAction{at: e.AtS + e.ColdStartS, order: 0, group: a.group, event: -1, ready: e.Instances - total})
				sortActions(actions)
			}
		}
		g.apply(a, tl.Events)
		out = append(out, a)
	}
	return out, problems
}

// apply changes g by a, an action that groupActions accepted. A scale-up
// with a cold start only adds pending instances; its ready action starts
// them.
func (g *GroupState) apply(a groupAction, events []Event) {
	if a.event < 0 {
		g.Pending -= a.ready
		g.Started += a.ready
		g.Healthy += a.ready
		return
	}
	e := events[a.event]
	switch e.Kind {
	case EventHealth:
		g.Healthy = e.Healthy
	case EventScale:
		switch total := g.Started + g.Pending; {
		case e.Instances > total && e.ColdStartS == 0:
			g.Started += e.Instances - total
			g.Healthy += e.Instances - total
		case e.Instances > total:
			g.Pending += e.Instances - total
		case e.Instances < total: // never while instances are pending
			removed := total - e.Instances
			unhealthy := g.Started - g.Healthy
			g.Started = e.Instances
			g.Healthy -= max(0, removed-unhealthy)
		}
	case EventScaler:
		g.CapacityScaler = e.CapacityScaler
	case EventSlowdown:
		g.Slowdown = e.Slowdown
	}
}

package pending

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"

	"github.com/spillway-lb/spillway/lb/clock"
	pb "github.com/spillway-lb/spillway/proto/spillway/v1"
)

// Requester is the control-plane call the Asker makes; pb.ControlPlaneClient
// implements it. It is called from the Asker's goroutines, possibly
// several at once (for different groups).
type Requester interface {
	RequestCapacity(ctx context.Context, in *pb.CapacityRequest, opts ...grpc.CallOption) (*pb.CapacityResponse, error)
}

// Target is the instance group a service's waiting requests should go to,
// as the gfe sees it now.
type Target struct {
	// Group is the instance group's name.
	Group string
	// Instances is the group's instances in the snapshot, healthy or not
	// (running or starting); Healthy how many of them pass health checks,
	// and Starting how many of the others are still starting (never
	// healthy yet, recently added): their slots will take waiting
	// requests once they are ready.
	Instances, Healthy, Starting int
	// RateWant is the instances the service's arrival rate at this gfe
	// needs (autoscale.Config.RateStarts from zero), 0 when unknown: a
	// capacity request asks for at least that many, so that on-demand
	// scaling is sized for the requests that arrive during the cold start
	// too.
	RateWant int
	// MaxConcurrency is the group's autoscaling.max_concurrency_per_instance
	// (requests one instance serves at once); < 1 counts as 1.
	MaxConcurrency int
}

// AskConfig is what an operator sets for the Asker.
type AskConfig struct {
	// Node and Site name the gfe in its requests (node_id, site).
	// Required.
	Node, Site string
	// Interval is the least time between two requests for one (service,
	// group), measured from the start of the previous one. Default 1s.
	Interval time.Duration
	// Timeout bounds one call. Default 5s.
	Timeout time.Duration
	// WarnEvery is the least time between two warnings of failed calls
	// for one (service, group). Default 1m.
	WarnEvery time.Duration
}

// AskOptions are the Asker's dependencies.
type AskOptions struct {
	// Clock times the rate limits; nil means the real clock.
	Clock clock.Clock
	// Logger receives refusals (debug) and errors (warn, rate limited).
	Logger zerolog.Logger
	// Client returns the control plane to ask, nil while there is none
	// (nothing is asked then). Nil: nothing is ever asked.
	Client func() Requester
	// Target returns the group to ask for, for a service whose requests
	// wait; false when there is none (no autoscaled group). Required. It
	// is called from Run's goroutine.
	Target func(service string) (Target, bool)
	// Registry receives spillway_gfe_capacity_requests_total; nil
	// registers it nowhere.
	Registry prometheus.Registerer
}

// Asker asks the control plane for capacity (RequestCapacity) for the
// groups that requests wait for: per (service, group) at most one call in
// flight and at most one call per Interval — in fact per service, since a
// service's waiting requests name one group at a time, and a service that
// may not ask yet costs a round no Target lookup. No request ever waits on a
// call: calls run on goroutines of their own, started by Step and awaited
// by Wait. Create it with NewAsker; it must not be copied.
type Asker struct {
	// Immutable after NewAsker.
	cfg    AskConfig
	clk    clock.Clock
	log    zerolog.Logger
	client func() Requester
	target func(string) (Target, bool)
	total  *prometheus.CounterVec

	// calls tracks the calls in flight.
	calls sync.WaitGroup

	mu sync.Mutex
	// Guarded by mu.
	keys map[askKey]*askState
	// busy is, by service, whether a call for it is in flight and when the
	// last one started: a service's lines name one group at a time, so a
	// service that may not ask yet is skipped before its Target is looked
	// up (which costs a map copy of the RTTs), every round.
	busy map[string]*askState
}

type askKey struct{ service, group string }

// askState is one (service, group)'s, or one service's, rate limit.
type askState struct {
	inFlight bool
	last     time.Time // start of the last call
	warned   time.Time // last warning logged
}

// NewAsker returns an Asker.
func NewAsker(cfg AskConfig, opts AskOptions) *Asker {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.WarnEvery <= 0 {
		cfg.WarnEvery = time.Minute
	}
	a := &Asker{
		cfg:    cfg,
		clk:    clock.OrReal(opts.Clock),
		log:    opts.Logger.With().Str("component", "capacity").Logger(),
		client: opts.Client,
		target: opts.Target,
		keys:   map[askKey]*askState{},
		busy:   map[string]*askState{},
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_gfe_capacity_requests_total",
			Help: "RequestCapacity calls to the control plane for the groups pending requests wait for, by service, group and result (granted, refused, error).",
		}, []string{"service", "group", "result"}),
	}
	if opts.Registry != nil {
		opts.Registry.MustRegister(a.total)
	}
	return a
}

// Request returns the request asking, for a line, capacity in target t:
// wanted_instances is t's instances plus one per MaxConcurrency requests
// waiting beyond the slots of t's starting instances (rounded up), at
// least 1, and at least t.RateWant; the reason is NO_INSTANCE when t has
// no healthy instance, QUEUEING otherwise.
func (a *Asker) Request(l Line, t Target) *pb.CapacityRequest {
	per := max(t.MaxConcurrency, 1)
	// Waiting for a starting instance beats starting another (docs/design.md §6's
	// rule): only the requests its slots cannot take ask for more.
	need := max(l.Waiting-t.Starting*per, 0)
	want := max(t.Instances+(need+per-1)/per, 1, t.RateWant)
	reason := pb.CapacityReason_CAPACITY_REASON_QUEUEING
	if t.Healthy == 0 {
		reason = pb.CapacityReason_CAPACITY_REASON_NO_INSTANCE
	}
	return &pb.CapacityRequest{
		NodeId:  a.cfg.Node,
		Site:    a.cfg.Site,
		Service: l.Service,
		Group:   t.Group,
		Want:    &pb.CapacityRequest_WantedInstances{WantedInstances: uint32(min(want, 1<<31))},
		Reason:  reason,
		Detail:  fmt.Sprintf("%d requests pending for %.1fs", l.Waiting, l.Oldest.Seconds()),
	}
}

// Step starts, at now, a call for every line whose (service, group) has
// none in flight and none started in the last Interval. Calls run under
// ctx. It does not block on them.
func (a *Asker) Step(ctx context.Context, now time.Time, lines []Line) {
	if a.client == nil || len(lines) == 0 {
		return
	}
	c := a.client()
	if c == nil {
		return
	}
	for _, l := range lines {
		a.mu.Lock()
		sv := a.busy[l.Service]
		wait := sv != nil && a.limitedLocked(sv, now)
		a.mu.Unlock()
		if wait {
			continue
		}
		t, ok := a.target(l.Service)
		if !ok {
			continue
		}
		k := askKey{l.Service, t.Group}
		a.mu.Lock()
		st := a.keys[k]
		if st == nil {
			st = &askState{}
			a.keys[k] = st
		}
		if sv == nil {
			sv = &askState{}
			a.busy[l.Service] = sv
		}
		if a.limitedLocked(st, now) {
			a.mu.Unlock()
			continue
		}
		st.inFlight, st.last = true, now
		sv.inFlight, sv.last = true, now
		a.mu.Unlock()
		a.calls.Add(1)
		go a.call(ctx, c, k, a.Request(l, t))
	}
}

// limitedLocked reports whether st may not start a call at now: one is in
// flight, or one started less than Interval ago. Caller must hold a.mu.
func (a *Asker) limitedLocked(st *askState, now time.Time) bool {
	return st.inFlight || (!st.last.IsZero() && now.Sub(st.last) < a.cfg.Interval)
}

// call makes one call and records its result.
func (a *Asker) call(ctx context.Context, c Requester, k askKey, req *pb.CapacityRequest) {
	defer a.calls.Done()
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	resp, err := c.RequestCapacity(ctx, req)
	a.mu.Lock()
	st := a.keys[k]
	st.inFlight = false
	a.busy[k.service].inFlight = false
	warn := err != nil && (st.warned.IsZero() || a.clk.Since(st.warned) >= a.cfg.WarnEvery)
	if warn {
		st.warned = a.clk.Now()
	}
	a.mu.Unlock()
	switch {
	case err != nil:
		a.total.WithLabelValues(k.service, k.group, "error").Inc()
		if warn {
			a.log.Warn().Err(err).Str("service", k.service).Str("group", k.group).Msg("capacity request failed")
		}
	case !resp.GetGranted():
		a.total.WithLabelValues(k.service, k.group, "refused").Inc()
		a.log.Debug().Str("service", k.service).Str("group", k.group).Str("message", resp.GetMessage()).
			Uint32("wanted_instances", req.GetWantedInstances()).Msg("capacity request refused")
	default:
		a.total.WithLabelValues(k.service, k.group, "granted").Inc()
	}
}

// Wait waits for the calls in flight to end.
func (a *Asker) Wait() { a.calls.Wait() }

package routing

import (
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/backend"
	"github.com/spillway-lb/spillway/lb/ewma"
	"github.com/spillway-lb/spillway/lb/hashing"
	"github.com/spillway-lb/spillway/lb/loadaware"
	"github.com/spillway-lb/spillway/lb/outlier"
	"github.com/spillway-lb/spillway/lb/shed"
	"github.com/spillway-lb/spillway/lb/waterfall"
)

// Reason says why a request went where it went; /status counts decisions by
// reason and /metrics exports them. The planner's reasons are
// waterfall.Reason's, with the same values and names; the gfe adds three
// of its own after them.
type Reason uint8

// The reasons of a routing decision.
const (
	ReasonNearest       = Reason(waterfall.ReasonNearest)       // the site's nearest region
	ReasonSpillCapacity = Reason(waterfall.ReasonSpillCapacity) // a nearer region was full
	ReasonSpillHealth   = Reason(waterfall.ReasonSpillHealth)   // a nearer region spilled preemptively
	ReasonOverload      = Reason(waterfall.ReasonOverload)      // every reachable region is full
)

// The gfe's own reasons, after the planner's.
const (
	ReasonAffinity Reason = Reason(waterfall.NumReasons) + iota // session affinity pinned the backend
	ReasonPolicy                                                // a baseline policy (round robin, least request, hashing)
	ReasonNoPlan                                                // a planned policy whose site has no plan row yet: round robin
	NumReasons                                                  // the number of reasons
)

// gfeReasonNames are the names of the reasons after the planner's.
var gfeReasonNames = [NumReasons - ReasonAffinity]string{"affinity", "policy", "no_plan"}

// String returns the reason's metric label and /status key.
func (r Reason) String() string {
	if r < ReasonAffinity {
		return waterfall.Reason(r).String()
	}
	return gfeReasonNames[r-ReasonAffinity]
}

// ReasonOf returns the Reason of a waterfall flow's reason.
func ReasonOf(r waterfall.Reason) Reason { return Reason(r) }

// Errors a pick can end in; the proxies map them to status codes and to the
// fixed labels of ErrorLabel.
var (
	ErrNoRoute   = errors.New("gfe: no route for request")
	ErrNoBackend = errors.New("gfe: no healthy backend")
	ErrAllBusy   = errors.New("gfe: every backend is at its concurrency limit")
	// ErrDrained is the error of every pick of a service whose every
	// backend group is drained (capacity_scaler 0): the operator asked for
	// no new traffic at all. It wraps ErrNoBackend, so that callers that
	// only tell "no backend" from "busy" treat it as the former.
	ErrDrained = fmt.Errorf("%w: every group of the service is drained (capacity_scaler 0)", ErrNoBackend)
)

// ErrorLabel returns the fixed metric label of a pick error: "no_route",
// "drained", "no_backend", "all_busy", or "other" for anything else (never
// the error's text, which may carry addresses).
func ErrorLabel(err error) string {
	switch {
	case errors.Is(err, ErrDrained):
		return "drained"
	case errors.Is(err, ErrNoRoute):
		return "no_route"
	case errors.Is(err, ErrNoBackend):
		return "no_backend"
	case errors.Is(err, ErrAllBusy):
		return "all_busy"
	}
	return "other"
}

// Table is the routing state requests read. It is built by a Builder and
// never changed after Build returns: callers must not modify its fields.
type Table struct {
	// Version is the Fleet's version.
	Version string
	// Config is the Fleet's configuration.
	Config *config.Config
	// Services maps service name to its entry.
	Services map[string]*Service
}

// Meters are a service's counters. They outlive tables: the Builder keeps
// one per service and hands it to every table it builds, so that counts
// carry over. Safe for concurrent use; must not be copied.
type Meters struct {
	// Decisions counts routing decisions by reason.
	Decisions [NumReasons]atomic.Int64
	// Failures counts requests (or connections) that got no answer from a
	// backend: no backend picked, or the backend failed.
	Failures atomic.Int64
	// Pending counts the service's requests waiting in the gfe's pending
	// queue (internal/gfe/pending, Ticket.Count): while it is not zero the
	// proxy queues a new request behind them instead of picking.
	Pending atomic.Int64

	// inFlight counts the requests started and not yet ended.
	inFlight atomic.Int64

	// Owned by the Builder's goroutine.
	// arrivals counts requests, for the demand of a rate service
	// (requests/s); level smooths inFlight, for the demand of a
	// CONNECTION-mode service (requests in flight), whose capacity counts
	// concurrent requests or connections (config.BalancingMode.Concurrent).
	arrivals ewma.Rate
	level    ewma.Level
	// concurrent is whether the service's demand is a level (inFlight)
	// rather than a rate (arrivals), from its balancing mode at the last
	// build.
	concurrent bool
	// rr is the service's round-robin cursor: it outlives tables so that
	// round robin stays exact across re-plans.
	rr *backend.RoundRobin
	// seq numbers the service's planned picks (groupDraw).
	seq atomic.Uint64
}

// weyl is 2^64 divided by the golden ratio: the stride of the Weyl
// sequence groupDraw takes.
const weyl = 0x9E3779B97F4A7C15

// groupDraw returns the value the next planned pick chooses its group by:
// the n-th term of the Weyl sequence n·2^64/φ (mod 2^64), a low-discrepancy
// sequence. Mapped through the plan shares it gives every group its share
// of any run of consecutive requests as evenly spaced as it can be, so that
// a group's arrivals are as smooth as the service's. Random draws would
// thin the stream into Poisson-like bursts, which queue at a backend that
// enforces its rate well below its capacity. Safe for concurrent use; it
// does not allocate.
func (m *Meters) groupDraw() uint64 { return m.seq.Add(1) * weyl }

// Started counts one request arriving for the service: its demand, and one
// more in flight until Ended. It does not allocate.
func (m *Meters) Started() {
	m.arrivals.Add(1)
	m.inFlight.Add(1)
}

// Withdraw takes back the arrival Started counted for a request whose
// client went away before any backend answered it (an HTTP/2 stream reset,
// a closed connection): such a request is not demand, or a client that
// opens and resets streams (rapid reset) would move the plan. It does not
// allocate.
func (m *Meters) Withdraw() { m.arrivals.Add(-1) }

// Arrivals returns the number of arrivals counted so far (Started less
// Withdraw).
func (m *Meters) Arrivals() int64 { return m.arrivals.Total() }

// Ended counts the end of a request counted by Started. It does not
// allocate.
func (m *Meters) Ended() { m.inFlight.Add(-1) }

// InFlight returns the number of requests started and not yet ended.
func (m *Meters) InFlight() int64 { return m.inFlight.Load() }

// demand samples the service's demand at now in its balancing mode's unit:
// the smoothed number of requests in flight for a CONNECTION-mode service,
// the smoothed arrival rate (requests/s) otherwise. Both averages are
// sampled every time, so that a change of mode finds them current.
func (m *Meters) demand(now time.Time) float64 {
	rate := m.arrivals.Sample(now)
	level := m.level.Sample(now, float64(m.inFlight.Load()))
	if m.concurrent {
		return level
	}
	return rate
}

// Member is one backend a service may send a request to: in a baseline
// policy's pool, or in a service's scope.
type Member struct {
	B      *backend.Backend
	Group  string
	Region string
	Zone   string
	// Host is B's outlier-detection state in this service.
	Host *outlier.Host
	// Demoted is whether the instance is demoted (config.Instance.Demoted):
	// it takes a request only when the active members it competes with
	// are full, and session affinity never pins to it.
	Demoted bool
	// reason is what a policy pick of B is counted under: the reason of its
	// group's flow in the plan row, ReasonNoPlan or ReasonPolicy.
	reason Reason
	// rank orders regions for retries: the index in the service's reach of
	// the first backend of B's region (nearer regions come first).
	rank int
}

// Service is one backend service in a table: its policy's picking state and
// what /status shows about it. Immutable after the table is built, apart
// from the atomics it points at. Its methods are safe for concurrent use.
type Service struct {
	name   string
	cfg    *config.Service
	meters *Meters
	// outliers is the service's outlier detector (safe for concurrent use).
	outliers *outlier.Detector
	// healthy counts the service's healthy backends.
	healthy int
	// drained is whether every backend group of the service is drained
	// (capacity_scaler 0): every pick then fails with ErrDrained.
	drained bool

	// Planned policies (waterfall, min_rtt).
	picker *waterfall.Picker
	rowLen int             // cells in this site's plan row; 0 = no row yet
	plan   *waterfall.Plan // the damped plan the picker comes from
	world  waterfall.World
	// herd is, when the plan was made with the herd guard's world
	// (herd.go), the groups whose load reports showed unexplained load in
	// this build, with that load; nil otherwise.
	herd map[string]float64
	// capacity is every group's declared and effective capacity.
	capacity []GroupCapacity
	// chooser is the load-aware choice inside the picker's groups (nil:
	// round robin); shed is the overload shedding rule of the plan
	// (loadaware.go).
	chooser *loadaware.Chooser
	shed    shed.Rule

	// Baseline policies: the healthy backends in scope that outlier
	// detection had not ejected when the table was built, the active ones
	// first: pool[:first] are picked from first, pool[first:] (the
	// demoted ones, when there is an active one) only when every one of
	// pool[:first] is full. The Maglev table is over pool[:first].
	pool     []Member
	first    int
	maglev   *hashing.Maglev
	rr       *backend.RoundRobin
	lr       *backend.LeastRequest
	inflight func(int) int64
	free     func(int) bool
	// drr is the round-robin cursor over pool[first:], and dfree,
	// dinflight are free and inflight over it.
	drr       *backend.RoundRobin
	dfree     func(int) bool
	dinflight func(int) int64
	nearest   string
	// levels are an envoy_priority service's priority levels
	// (priority.go), nil for every other policy.
	levels []PriorityLevel
	// pq is a prequal service's probe pool over pool[:first] (nil for
	// other policies), prober where its probes go (prequal.go).
	pq     *prequalState
	prober Prober

	// scope is every healthy backend this site may send the service's
	// requests to, ejected or not, in the order retries prefer regions:
	// for a planned policy with a plan row, the backends of the row's
	// groups in row order (nearest region first); otherwise the pool's
	// backends, nearest region first. Session affinity pins within it, and
	// retries pick from it. byAddr indexes it.
	scope  []Member
	byAddr map[string]int32
	// reach is scope followed, for a planned policy with a plan row, by
	// the healthy backends of the groups with capacity of the site's
	// farther regions, nearest first (the plan's overflow order): a retry
	// whose backend was unreachable may go there (RetryPick). scope is
	// reach[:len(scope)]; byBackend indexes reach.
	reach     []Member
	byBackend map[*backend.Backend]int32
	// scopeActive is whether scope has a member that is not demoted.
	scopeActive bool
	// aff applies the service's session affinity; nil for type none.
	aff *Affinity
	// now reads the builder's clock (outlier detection and cookie expiry).
	now func() time.Time
}

// Name returns the service's name.
func (s *Service) Name() string { return s.name }

// Capacity returns the declared and effective capacity of every group the
// service's plan was built with, in the world's region order; nil for a
// baseline policy. Callers must not modify it.
func (s *Service) Capacity() []GroupCapacity { return s.capacity }

// Config returns the service's configuration.
func (s *Service) Config() *config.Service { return s.cfg }

// Meters returns the service's counters.
func (s *Service) Meters() *Meters { return s.meters }

// Outliers returns the service's outlier detector.
func (s *Service) Outliers() *outlier.Detector { return s.outliers }

// Healthy returns the number of the service's healthy backends.
func (s *Service) Healthy() int { return s.healthy }

// Drained reports whether every backend group of the service is drained
// (capacity_scaler 0). Every pick of a drained service fails with
// ErrDrained, session affinity and retries included: draining everything
// means no new request reaches any backend.
func (s *Service) Drained() bool { return s.drained }

// Plan returns the damped plan of a planned policy (nil otherwise, or
// before the first plan).
func (s *Service) Plan() *waterfall.Plan { return s.plan }

// Picker returns the waterfall Picker that Pick uses for a planned policy:
// the one over this site's row of the damped plan and the Pool's backends
// of each group. It returns nil when Pick uses none: for a baseline policy,
// and for a planned one whose site has no plan row yet (Pick then goes
// round robin over the Pool).
func (s *Service) Picker() *waterfall.Picker {
	if !s.cfg.Policy.IsPlanned() || s.rowLen == 0 {
		return nil
	}
	return s.picker
}

// World returns the planner input of a planned policy.
func (s *Service) World() waterfall.World { return s.world }

// Herd reports whether the service's plan assumed the neighbours of a group
// with unexplained load to be rising with this site (the herd guard,
// herd.go). World is the world as gossip tells it either way.
func (s *Service) Herd() bool { return s.herd != nil }

// HerdEvidence returns, when Herd is true, the groups whose load reports
// showed load that neither the plan nor this gfe's requests explain in the
// build, with that load in the service's demand unit. The caller must not
// change it.
func (s *Service) HerdEvidence() map[string]float64 { return s.herd }

// Affinity returns the service's session affinity, nil for type none.
func (s *Service) Affinity() *Affinity { return s.aff }

// Pool returns the backends a baseline policy picks from: the healthy
// backends in scope that outlier detection had not ejected when the table
// was built, the active ones first (config order) and then the demoted
// ones (config order). The slice must not be modified.
func (s *Service) Pool() []Member { return s.pool }

// Scope returns every healthy backend this site may send the service's
// requests to, ejected or not, nearest region first (see Service.scope).
// The slice must not be modified.
func (s *Service) Scope() []Member { return s.scope }

// Member returns the member of the service's scope with address addr.
func (s *Service) Member(addr string) (*Member, bool) {
	i, ok := s.byAddr[addr]
	if !ok {
		return nil, false
	}
	return &s.scope[i], true
}

// Pick is one routing decision holding a backend slot; release it with Done.
type Pick struct {
	Backend *backend.Backend
	Group   string
	Region  string
	Reason  Reason
	Zone    string
	// Host is the backend's outlier state (nil: not tracked); the proxy
	// reports every attempt's result to it.
	Host *outlier.Host
	// Endpoint is the backend's load-aware state when a load-aware choice
	// (config load_aware) made the pick, nil otherwise: the proxy reports
	// the answer's latency and the backend's load reports to it
	// (ObserveLatency, ObserveUtilization).
	Endpoint *loadaware.Endpoint
	// chooser is the Chooser that made the pick, with Endpoint.
	chooser *loadaware.Chooser
}

// pickOf returns the pick of member m (whose slot the caller holds).
func pickOf(m *Member, r Reason) Pick {
	return Pick{Backend: m.B, Group: m.Group, Region: m.Region, Reason: r, Zone: m.Zone, Host: m.Host}
}

// Done releases the pick's backend slot.
func (p *Pick) Done() { p.Backend.Release() }

// Flow is what a hashing policy hashes: the client's and the listener's
// address and ports.
type Flow struct {
	Src, Dst netip.AddrPort
}

// Pick chooses a backend for one request by the service's policy, at the
// clock's current time. It does not allocate. See PickAt.
func (s *Service) Pick(rnd uint64, k Flow) (Pick, error) {
	return s.PickAt(rnd, k, s.now())
}

// ejectedRepicks bounds how many times PickAt picks again after landing on
// an ejected backend.
const ejectedRepicks = 2

// PickAt chooses a backend for one request by the service's policy, skipping
// backends that outlier detection has ejected at now. Tables leave out the
// backends ejected when they were built; one ejected since (the planner
// builds a new table at once, but requests may still hold the old one) is
// released and picked again, up to ejectedRepicks times, after which the
// pick stands — better an ejected backend than no answer. Session affinity
// is not applied here. Every pick of a drained service (Drained) fails
// with ErrDrained. A planned policy chooses the group by the service's
// Weyl sequence (Meters.groupDraw), not by rnd, which then only picks
// inside the group. It does not allocate.
func (s *Service) PickAt(rnd uint64, k Flow, now time.Time) (Pick, error) {
	if s.drained {
		return Pick{}, ErrDrained
	}
	pk, err := s.policyPick(rnd, k, now)
	for i := 0; err == nil && i < ejectedRepicks && pk.Host != nil && pk.Host.Ejected(now); i++ {
		pk.Done()
		rnd = rnd*6364136223846793005 + 1442695040888963407 // next LCG step: another group draw
		pk, err = s.policyPick(rnd, k, now)
	}
	return pk, err
}

// policyPick is one pick by the service's policy.
func (s *Service) policyPick(rnd uint64, k Flow, now time.Time) (Pick, error) {
	if s.cfg.Policy.IsPlanned() && s.rowLen > 0 {
		c, err := s.picker.PickAt(s.meters.groupDraw(), now)
		switch {
		case errors.Is(err, waterfall.ErrAllBusy):
			return Pick{}, ErrAllBusy
		case err != nil:
			return Pick{}, ErrNoBackend
		}
		var pk Pick
		if i, ok := s.byBackend[c.Backend]; ok {
			pk = pickOf(&s.reach[i], ReasonOf(c.Reason))
		} else {
			pk = Pick{Backend: c.Backend, Group: c.Group, Region: c.Region, Reason: ReasonOf(c.Reason)}
		}
		if c.Endpoint != nil {
			pk.Endpoint, pk.chooser = c.Endpoint, s.chooser
		}
		return pk, nil
	}
	if isPriority(s.cfg.Policy) {
		return s.priorityPick()
	}
	n := len(s.pool)
	if n == 0 {
		return Pick{}, ErrNoBackend
	}
	r := ReasonPolicy
	if s.cfg.Policy.IsPlanned() {
		r = ReasonNoPlan
	}
	var i int
	var ok bool
	const tcp = 6
	// The active members first (pool[:first]).
	switch s.cfg.Policy {
	case config.PolicyRoundRobin, config.PolicyWaterfall, config.PolicyMinRTT:
		i, ok = s.rr.PickAvailable(s.first, s.free)
	case config.PolicyLeastRequest:
		i, ok = s.lr.Pick(s.first, s.inflight)
	case config.PolicyPrequal:
		i, ok = s.prequalPick(rnd, now)
	case config.PolicyHash2:
		i, ok = s.maglev.Pick(hashing.Key2(k.Src.Addr(), k.Dst.Addr()))
	case config.PolicyHash3:
		i, ok = s.maglev.Pick(hashing.Key3(k.Src.Addr(), k.Dst.Addr(), tcp))
	case config.PolicyHash5:
		i, ok = s.maglev.Pick(hashing.Key5(k.Src.Addr(), k.Dst.Addr(), tcp, k.Src.Port(), k.Dst.Port()))
	}
	if ok {
		if m := &s.pool[i]; m.B.TryAcquire() {
			return pickOf(m, r), nil
		}
	}
	// The demoted members, only when every active one is full.
	if s.first == n || !s.activeFull() {
		return Pick{}, ErrAllBusy
	}
	if s.cfg.Policy == config.PolicyLeastRequest {
		i, ok = s.lr.Pick(n-s.first, s.dinflight)
	} else {
		i, ok = s.drr.PickAvailable(n-s.first, s.dfree)
	}
	if !ok {
		return Pick{}, ErrAllBusy
	}
	m := &s.pool[s.first+i]
	if !m.B.TryAcquire() {
		return Pick{}, ErrAllBusy
	}
	return pickOf(m, r), nil
}

// activeFull reports whether every active member of the pool
// (pool[:first]) is at its concurrency limit.
func (s *Service) activeFull() bool {
	for i := range s.first {
		if !s.pool[i].B.Full() {
			return false
		}
	}
	return true
}

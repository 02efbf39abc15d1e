package edge

import (
	"errors"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/ewma"
	"github.com/spillway-lb/spillway/lb/backend"
	"github.com/spillway-lb/spillway/lb/hashing"
	"github.com/spillway-lb/spillway/lb/outlier"
	"github.com/spillway-lb/spillway/lb/waterfall"
)

// reason says why a request went where it went; /status counts decisions by
// reason and /metrics exports them.
type reason uint8

const (
	reasonNearest       reason = iota // waterfall: the site's nearest region
	reasonSpillCapacity               // waterfall: a nearer region was full
	reasonSpillHealth                 // waterfall: a nearer region spilled preemptively
	reasonOverload                    // waterfall: every reachable region is full
	reasonAffinity                    // session affinity pinned the backend
	reasonPolicy                      // a baseline policy (round robin, least request, hashing)
	reasonNoPlan                      // a planned policy whose site has no plan row yet: round robin
	numReasons
)

var reasonNames = [numReasons]string{"nearest", "spill_capacity", "spill_health", "overload", "affinity", "policy", "no_plan"}

func (r reason) String() string { return reasonNames[r] }

func reasonOf(r waterfall.Reason) reason {
	switch r {
	case waterfall.ReasonSpillCapacity:
		return reasonSpillCapacity
	case waterfall.ReasonSpillHealth:
		return reasonSpillHealth
	case waterfall.ReasonOverload:
		return reasonOverload
	default:
		return reasonNearest
	}
}

// Errors a pick can end in; the proxy maps them to status codes.
var (
	errNoRoute   = errors.New("gfe: no route for request")
	errNoBackend = errors.New("gfe: no healthy backend")
	errAllBusy   = errors.New("gfe: every backend is at its concurrency limit")
)

// table is the routing state requests read. It is built by the planner
// goroutine and never changed after it is stored.
type table struct {
	version  string
	cfg      *config.Config
	services map[string]*service
}

// serviceMeters are a service's counters. They outlive tables: the planner
// keeps one per service and hands it to every table it builds, so that
// counts carry over. Must not be copied.
type serviceMeters struct {
	demand    ewma.Rate
	decisions [numReasons]atomic.Int64
	failures  atomic.Int64
	// rr is the service's round-robin cursor: it outlives tables so that
	// round robin stays exact across re-plans.
	rr *backend.RoundRobin
}

// member is one backend a service may send a request to: in a baseline
// policy's pool, or in a service's scope.
type member struct {
	b      *backend.Backend
	group  string
	region string
	zone   string
	// host is b's outlier-detection state in this service (nil only in
	// tables built without a detector, such as tests').
	host *outlier.Host
	// reason is what a policy pick of b is counted under: the reason of its
	// group's flow in the plan row, reasonNoPlan or reasonPolicy.
	reason reason
	// rank orders regions for retries: the index in the service's scope of
	// the first backend of b's region (nearer regions come first).
	rank int
}

// service is one backend service in a table: its policy's picking state and
// what /status shows about it. Immutable after the table is stored, apart
// from the atomics it points at.
type service struct {
	name   string
	cfg    *config.Service
	meters *serviceMeters
	// outliers is the service's outlier detector (safe for concurrent use),
	// read by /status.
	outliers *outlier.Detector
	// healthy counts the service's healthy backends.
	healthy int

	// Planned policies (waterfall, min_rtt).
	picker *waterfall.Picker
	rowLen int             // cells in this site's plan row; 0 = no row yet
	plan   *waterfall.Plan // the damped plan the picker comes from
	world  waterfall.World

	// Baseline policies: the healthy backends in scope that outlier
	// detection had not ejected when the table was built.
	pool     []member
	maglev   *hashing.Maglev
	rr       *backend.RoundRobin
	lr       *backend.LeastRequest
	inflight func(int) int64
	free     func(int) bool
	nearest  string

	// scope is every healthy backend this site may send the service's
	// requests to, ejected or not, in the order retries prefer regions:
	// for a planned policy with a plan row, the backends of the row's
	// groups in row order (nearest region first); otherwise the pool's
	// backends, nearest region first. Session affinity pins within it, and
	// retries pick from it. byAddr and byBackend index it.
	scope     []member
	byAddr    map[string]int32
	byBackend map[*backend.Backend]int32
	// aff applies the service's session affinity; nil for type none.
	aff *sessionAffinity
	// clk is the edge's clock (outlier detection and cookie expiry).
	clk clock.Clock
	// ejected is called when a Report ejects one of the service's hosts:
	// it counts the ejection and wakes the planner so that the next table
	// leaves the host out. Must not block.
	ejected func()
}

// pick is one routing decision holding a backend slot; release it with done.
type pick struct {
	backend *backend.Backend
	group   string
	region  string
	reason  reason
	zone    string
	// host is the backend's outlier state (nil: not tracked); the proxy
	// reports every attempt's result to it.
	host *outlier.Host
}

// pickOf returns the pick of member m (whose slot the caller holds).
func pickOf(m *member, r reason) pick {
	return pick{backend: m.b, group: m.group, region: m.region, reason: r, zone: m.zone, host: m.host}
}

func (p *pick) done() { p.backend.Release() }

// flowKey is what a hashing policy hashes: the client's and the listener's
// address and ports.
type flowKey struct {
	src, dst netip.AddrPort
}

// pick chooses a backend for one request by the service's policy, at the
// clock's current time. It does not allocate. See pickAt.
func (s *service) pick(rnd uint64, k flowKey) (pick, error) {
	return s.pickAt(rnd, k, s.now())
}

// now reads the service's clock (the real clock in tables built without one).
func (s *service) now() time.Time {
	if s.clk == nil {
		return time.Now()
	}
	return s.clk.Now()
}

// ejectedRepicks bounds how many times pickAt picks again after landing on
// an ejected backend.
const ejectedRepicks = 2

// pickAt chooses a backend for one request by the service's policy, skipping
// backends that outlier detection has ejected at now. Tables leave out the
// backends ejected when they were built; one ejected since (the planner
// builds a new table at once, but requests may still hold the old one) is
// released and picked again, up to ejectedRepicks times, after which the
// pick stands — better an ejected backend than no answer. Session affinity
// is not applied here. It does not allocate.
func (s *service) pickAt(rnd uint64, k flowKey, now time.Time) (pick, error) {
	pk, err := s.policyPick(rnd, k)
	for i := 0; err == nil && i < ejectedRepicks && pk.host != nil && pk.host.Ejected(now); i++ {
		pk.done()
		rnd = rnd*6364136223846793005 + 1442695040888963407 // next LCG step: another group draw
		pk, err = s.policyPick(rnd, k)
	}
	return pk, err
}

// policyPick is one pick by the service's policy.
func (s *service) policyPick(rnd uint64, k flowKey) (pick, error) {
	if s.cfg.Policy.IsPlanned() && s.rowLen > 0 {
		c, err := s.picker.Pick(rnd)
		switch {
		case errors.Is(err, waterfall.ErrAllBusy):
			return pick{}, errAllBusy
		case err != nil:
			return pick{}, errNoBackend
		}
		if i, ok := s.byBackend[c.Backend]; ok {
			return pickOf(&s.scope[i], reasonOf(c.Reason)), nil
		}
		return pick{backend: c.Backend, group: c.Group, region: c.Region, reason: reasonOf(c.Reason)}, nil
	}
	n := len(s.pool)
	if n == 0 {
		return pick{}, errNoBackend
	}
	var i int
	var ok bool
	const tcp = 6
	switch s.cfg.Policy {
	case config.PolicyRoundRobin, config.PolicyWaterfall, config.PolicyMinRTT:
		i, ok = s.rr.PickAvailable(n, s.free)
	case config.PolicyLeastRequest:
		i, ok = s.lr.Pick(n, s.inflight)
	case config.PolicyHash2:
		i, ok = s.maglev.Pick(hashing.Key2(k.src.Addr(), k.dst.Addr()))
	case config.PolicyHash3:
		i, ok = s.maglev.Pick(hashing.Key3(k.src.Addr(), k.dst.Addr(), tcp))
	case config.PolicyHash5:
		i, ok = s.maglev.Pick(hashing.Key5(k.src.Addr(), k.dst.Addr(), tcp, k.src.Port(), k.dst.Port()))
	}
	if !ok {
		return pick{}, errAllBusy
	}
	m := &s.pool[i]
	if !m.b.TryAcquire() {
		return pick{}, errAllBusy
	}
	r := reasonPolicy
	if s.cfg.Policy.IsPlanned() {
		r = reasonNoPlan
	}
	return pickOf(m, r), nil
}

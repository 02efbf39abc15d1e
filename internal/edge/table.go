package edge

import (
	"errors"
	"net/netip"
	"sync/atomic"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/ewma"
	"github.com/spillway-lb/spillway/lb/hashing"
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
	// load maps group name to the rate of requests sent to it. The map is
	// replaced (never changed) by the planner when the group set changes;
	// requests read it through the table's service, which holds the map
	// that was current when the table was built.
}

// member is one backend in a baseline policy's pool.
type member struct {
	b      *waterfall.Backend
	group  string
	region string
}

// service is one backend service in a table: its policy's picking state and
// what /status shows about it. Immutable after the table is stored, apart
// from the atomics it points at.
type service struct {
	name   string
	cfg    *config.Service
	meters *serviceMeters
	load   map[string]*ewma.Rate // group -> rate; read-only
	// healthy counts the service's healthy backends.
	healthy int

	// Planned policies (waterfall, min_rtt).
	picker *waterfall.Picker
	rowLen int             // cells in this site's plan row; 0 = no row yet
	plan   *waterfall.Plan // the damped plan the picker comes from
	world  waterfall.World

	// Baseline policies: the healthy backends in scope.
	pool     []member
	maglev   *hashing.Maglev
	rr       *hashing.RoundRobin
	lr       *hashing.LeastRequest
	inflight func(int) int64
	free     func(int) bool
	nearest  string
}

// pick is one routing decision holding a backend slot; release it with done.
type pick struct {
	backend *waterfall.Backend
	group   string
	region  string
	reason  reason
}

func (p *pick) done() { p.backend.Release() }

// flowKey is what a hashing policy hashes: the client's and the listener's
// address and ports.
type flowKey struct {
	src, dst netip.AddrPort
}

// pick chooses a backend for one request. It does not allocate.
func (s *service) pick(rnd uint64, k flowKey) (pick, error) {
	if s.cfg.Policy.IsPlanned() && s.rowLen > 0 {
		c, err := s.picker.Pick(rnd)
		switch {
		case errors.Is(err, waterfall.ErrAllBusy):
			return pick{}, errAllBusy
		case err != nil:
			return pick{}, errNoBackend
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
	m := s.pool[i]
	if !m.b.TryAcquire() {
		return pick{}, errAllBusy
	}
	r := reasonPolicy
	if s.cfg.Policy.IsPlanned() {
		r = reasonNoPlan
	}
	return pick{backend: m.b, group: m.group, region: m.region, reason: r}, nil
}

package outlier

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Result is the outcome of one request to a backend, as the proxy reports it
// to Host.Report. The zero value is Success.
type Result uint8

// The results a proxy reports. Requests the client cancelled, and requests
// that never reached a backend for reasons of the proxy's own, are not
// reported at all: they say nothing about the backend.
const (
	// Success is any answer that is not a server error, 4xx included: the
	// backend is up and speaking the protocol. It ends both failure runs.
	Success Result = iota
	// ServerError is a 5xx answer (for gRPC, a status the proxy maps to
	// 5xx). It counts toward Consecutive5xx and ends a run of connect
	// failures.
	ServerError
	// ConnectFailure is a failure to open a connection to the backend:
	// refused, reset during the handshake, dial timeout, TLS handshake
	// failure. It counts toward both ConsecutiveConnectFailures and
	// Consecutive5xx.
	ConnectFailure
	// Timeout is a request that got no answer in time after its connection
	// opened (a gateway timeout). It counts toward Consecutive5xx and ends a
	// run of connect failures. A dial timeout is a ConnectFailure.
	Timeout

	numResults // number of valid results; keep last
)

var resultNames = [numResults]string{"success", "server_error", "connect_failure", "timeout"}

// String returns the result's snake_case name, for logs and metrics labels.
func (r Result) String() string {
	if r < numResults {
		return resultNames[r]
	}
	return fmt.Sprintf("result(%d)", uint8(r))
}

// FromStatus returns the Result of an HTTP answer with status code code:
// ServerError for 500-599, Success for anything else.
func FromStatus(code int) Result {
	if code >= 500 && code <= 599 {
		return ServerError
	}
	return Success
}

// Reason says which run of failures caused an ejection.
type Reason string

// The reasons for an ejection. ReasonNone means a host was never ejected.
const (
	ReasonNone                       Reason = ""
	ReasonConsecutive5xx             Reason = "consecutive_5xx"
	ReasonConsecutiveConnectFailures Reason = "consecutive_connect_failures"
)

// Detector decides, from the results the proxy reports, which backends to
// eject and for how long. Backends are registered into named groups (a
// backend service, or a service's backends in one region: whatever set the
// proxy picks from); MaxEjectionPercent applies to each group separately.
//
// All methods are safe for concurrent use. Host.Report on a success or on a
// failure that does not complete a run, and Host.Ejected, take no lock and
// allocate nothing; completing a run takes the Detector's mutex, as do
// Register, Remove, SetConfig and the reporting methods.
//
// A Detector reads no clock and starts no goroutine: time comes in as the
// now argument of each call, and an ejection ends by itself once now passes
// its deadline. A Detector must not be copied.
type Detector struct {
	// cfg is the current Config, validated. Accessed atomically: the hot
	// path loads it only when a failure is counted.
	cfg atomic.Pointer[Config]

	mu sync.Mutex
	// Guarded by mu.
	groups   map[string]*hostGroup
	ejected  uint64 // ejections so far
	refused  uint64 // runs completed but not ejected because of MaxEjectionPercent
	restored uint64 // ejections ended early by Remove
}

// hostGroup is one group's registered hosts. Guarded by Detector.mu.
type hostGroup struct {
	name  string
	hosts []*Host // registration order
}

// Host is the outlier state of one registered backend, the handle the proxy
// keeps next to its backend and reports results on. A Host must not be
// copied; it is always used through the pointer Register returns.
type Host struct {
	// Immutable after Register.
	d     *Detector
	group *hostGroup
	name  string

	// Accessed atomically. until is the end of the current or last ejection
	// in Unix nanoseconds (0: never ejected); the host is ejected while
	// now < until. c5xx and cConnect are the current runs of failures and
	// of connect failures.
	until    atomic.Int64
	c5xx     atomic.Int64
	cConnect atomic.Int64

	// Guarded by d.mu.
	mult    int    // ejection multiplier as of lastEnd (decays after it)
	lastEnd int64  // end of the last ejection, Unix ns; decay counts from here
	reason  Reason // reason of the last ejection
	removed bool
}

// New returns a Detector with cfg, or an error naming every invalid field.
func New(cfg Config) (*Detector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("outlier: %w", err)
	}
	d := &Detector{groups: make(map[string]*hostGroup)}
	d.cfg.Store(&cfg)
	return d, nil
}

// Config returns the current Config.
func (d *Detector) Config() Config { return *d.cfg.Load() }

// SetConfig replaces the Config, or returns an error naming every invalid
// field and keeps the old one. The new thresholds apply from the next
// reported result on; current ejections keep their deadlines, and ejection
// multipliers above the new cap are lowered to it at the next ejection.
func (d *Detector) SetConfig(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("outlier: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cfg.Store(&cfg)
	return nil
}

// Register returns the Host for the backend name in group, adding it to the
// group if it is not there yet. Registering the same group and name again
// returns the same Host with its state, so the proxy may register every
// backend of each new snapshot and Remove those that left. A new Host is in
// service with no failures counted.
func (d *Detector) Register(group, name string) *Host {
	d.mu.Lock()
	defer d.mu.Unlock()
	g := d.groups[group]
	if g == nil {
		g = &hostGroup{name: group}
		d.groups[group] = g
	}
	for _, h := range g.hosts {
		if h.name == name {
			return h
		}
	}
	h := &Host{d: d, group: g, name: name}
	g.hosts = append(g.hosts, h)
	return h
}

// Remove takes h out of its group; removing a removed Host does nothing.
// Afterwards h is no longer ejected and never will be, and Report on it does
// nothing (the proxy may still hold it for requests in flight).
//
// The group shrinks, so the ejections left may now exceed
// MaxEjectionPercent or leave no backend in service (say the one healthy
// backend of a group of two was removed). Remove then ends ejections early,
// those with the nearest deadline first, until neither is the case: after
// Remove returns, the group satisfies MaxEjectionPercent at now and, if not
// empty, has a backend in service.
func (d *Detector) Remove(h *Host, now time.Time) {
	t := now.UnixNano()
	d.mu.Lock()
	defer d.mu.Unlock()
	if h.d != d || h.removed {
		return
	}
	h.removed = true
	h.until.Store(0)
	h.c5xx.Store(0)
	h.cConnect.Store(0)
	g := h.group
	g.hosts = slices.DeleteFunc(g.hosts, func(o *Host) bool { return o == h })
	if len(g.hosts) == 0 {
		delete(d.groups, g.name)
		return
	}
	cfg := d.cfg.Load()
	for ejectedLocked(g, t) > cfg.allowedEjections(len(g.hosts)) {
		var first *Host
		for _, o := range g.hosts {
			if t < o.until.Load() && (first == nil || o.until.Load() < first.until.Load()) {
				first = o
			}
		}
		first.until.Store(t)
		first.lastEnd = t
		d.restored++
	}
}

// ejectedLocked counts g's hosts that are ejected at t (Unix ns). Caller
// must hold d.mu.
func ejectedLocked(g *hostGroup, t int64) int {
	n := 0
	for _, h := range g.hosts {
		if t < h.until.Load() {
			n++
		}
	}
	return n
}

// Name returns the backend name h was registered with.
func (h *Host) Name() string { return h.name }

// Group returns the group h was registered in.
func (h *Host) Group() string { return h.group.name }

// Ejected reports whether h is ejected at now: true from the report that
// ejected it up to, not including, its deadline. It takes no lock and
// allocates nothing. now must come from the same clock as the times given
// to Report (the wall clock, or a fake one in tests), between the years 1678
// and 2262.
func (h *Host) Ejected(now time.Time) bool {
	return now.UnixNano() < h.until.Load()
}

// Report records the result of one request to h, finished at now, and
// reports whether it ejected h. It is safe to call from any number of
// goroutines and does not block: on Success, and on a failure that does not
// complete a run of Consecutive5xx or ConsecutiveConnectFailures, it takes
// no lock and allocates nothing.
//
// A failure that completes a run ejects h for min(k × BaseEjectionTime,
// MaxEjectionTime), k being h's decayed ejection multiplier plus one, unless
// that would take h's group over MaxEjectionPercent (or eject its last
// backend in service). Either way both runs start again from zero, so a
// refused host is looked at again after another full run. Failures reported
// while h is ejected (requests that were in flight when it was ejected) are
// not counted; a Success is.
func (h *Host) Report(r Result, now time.Time) (ejected bool) {
	if r == Success {
		// Read before writing so that a healthy host's counters stay
		// shared in every core's cache instead of bouncing between them.
		if h.c5xx.Load() != 0 {
			h.c5xx.Store(0)
		}
		if h.cConnect.Load() != 0 {
			h.cConnect.Store(0)
		}
		return false
	}
	return h.fail(r, now.UnixNano())
}

// fail counts a failure at t (Unix ns) and ejects h if it completes a run.
func (h *Host) fail(r Result, t int64) bool {
	if t < h.until.Load() {
		return false
	}
	cfg := h.d.cfg.Load()
	var done bool
	switch r {
	case ConnectFailure:
		n5 := h.c5xx.Add(1)
		nc := h.cConnect.Add(1)
		done = n5 >= int64(cfg.Consecutive5xx) || nc >= int64(cfg.ConsecutiveConnectFailures)
	case ServerError, Timeout:
		if h.cConnect.Load() != 0 {
			h.cConnect.Store(0)
		}
		done = h.c5xx.Add(1) >= int64(cfg.Consecutive5xx)
	default:
		return false
	}
	if !done {
		return false
	}
	return h.d.decide(h, t)
}

// decide ejects h at t (Unix ns) if one of its runs is still complete and
// its group allows it. It takes d.mu, so that concurrent decisions in a group
// see each other's ejections.
func (d *Detector) decide(h *Host, t int64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if h.removed || t < h.until.Load() {
		return false // removed, or a concurrent report ejected it first
	}
	cfg := d.cfg.Load()
	var reason Reason
	switch {
	case h.cConnect.Load() >= int64(cfg.ConsecutiveConnectFailures):
		reason = ReasonConsecutiveConnectFailures
	case h.c5xx.Load() >= int64(cfg.Consecutive5xx):
		reason = ReasonConsecutive5xx
	default:
		return false // a concurrent report already decided on this run
	}
	h.c5xx.Store(0)
	h.cConnect.Store(0)
	if ejectedLocked(h.group, t)+1 > cfg.allowedEjections(len(h.group.hosts)) {
		d.refused++
		return false
	}
	k := min(decayed(h.mult, h.lastEnd, t, cfg.BaseEjectionTime)+1, cfg.maxMultiplier())
	end := t + int64(cfg.ejectionTime(k))
	h.mult, h.lastEnd, h.reason = k, end, reason
	h.until.Store(end)
	d.ejected++
	return true
}

// decayed returns an ejection multiplier k, set by an ejection that ended (or
// ends) at lastEnd, as it stands at t: one less for every full base of time
// since lastEnd, never below zero. All times are Unix nanoseconds.
//
// With base 30s, an ejection ending at 100s with k = 3 leaves 3 until 130s,
// 2 until 160s, 1 until 190s and 0 from 190s on.
func decayed(k int, lastEnd, t int64, base time.Duration) int {
	if k <= 0 || t < lastEnd {
		return max(k, 0)
	}
	steps := (t - lastEnd) / int64(base)
	if steps >= int64(k) {
		return 0
	}
	return k - int(steps)
}

// HostState is what the Detector knows about one host at some time, for
// status pages and tests.
type HostState struct {
	// Group and Name are what the host was registered with.
	Group, Name string
	// Ejected reports whether the host is ejected.
	Ejected bool
	// EjectedUntil is the deadline of the current ejection; zero when the
	// host is not ejected.
	EjectedUntil time.Time
	// Multiplier is the decayed ejection multiplier: the next ejection
	// lasts min((Multiplier+1) × BaseEjectionTime, MaxEjectionTime) if it
	// comes now. While ejected it is the multiplier of the current ejection.
	Multiplier int
	// Reason is why the host was last ejected; ReasonNone if never.
	Reason Reason
	// Consecutive5xx and ConsecutiveConnectFailures are the current runs.
	Consecutive5xx, ConsecutiveConnectFailures int
}

// State returns what the Detector knows about h at now.
func (h *Host) State(now time.Time) HostState {
	h.d.mu.Lock()
	defer h.d.mu.Unlock()
	return h.stateLocked(now.UnixNano())
}

// stateLocked returns h's state at t (Unix ns). Caller must hold h.d.mu.
func (h *Host) stateLocked(t int64) HostState {
	s := HostState{
		Group:                      h.group.name,
		Name:                       h.name,
		Multiplier:                 decayed(h.mult, h.lastEnd, t, h.d.cfg.Load().BaseEjectionTime),
		Reason:                     h.reason,
		Consecutive5xx:             int(h.c5xx.Load()),
		ConsecutiveConnectFailures: int(h.cConnect.Load()),
	}
	if until := h.until.Load(); t < until {
		s.Ejected = true
		s.EjectedUntil = time.Unix(0, until)
	}
	return s
}

// Snapshot returns the state at now of every registered host, sorted by
// group and then name.
func (d *Detector) Snapshot(now time.Time) []HostState {
	t := now.UnixNano()
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []HostState
	for _, g := range d.groups {
		for _, h := range g.hosts {
			out = append(out, h.stateLocked(t))
		}
	}
	slices.SortFunc(out, func(a, b HostState) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// Stats are a Detector's event counts since New, for metrics.
type Stats struct {
	// Ejections is the number of ejections.
	Ejections uint64
	// Refused is the number of completed runs that did not eject their
	// host because its group was at MaxEjectionPercent (or down to its last
	// backend in service).
	Refused uint64
	// Restored is the number of ejections Remove ended early to keep a
	// shrunken group within MaxEjectionPercent.
	Restored uint64
}

// Stats returns the event counts so far.
func (d *Detector) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return Stats{Ejections: d.ejected, Refused: d.refused, Restored: d.restored}
}

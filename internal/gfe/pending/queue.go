package pending

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-lb/spillway/lb/clock"
)

// Result is how a Wait ended.
type Result uint8

// The results of Wait.
const (
	// Served: the ticket's Try got a backend.
	Served Result = iota
	// Rejected: the deadline came first (the proxy answers 429), or the
	// queue stopped.
	Rejected
	// Canceled: the waiter's context ended first (its client went away).
	Canceled
	// Full: the request never waited — its service's line held
	// Ticket.Limit waiters, or the queue Config.MaxWaiting (the proxy
	// answers 429, as for Rejected).
	Full
)

// String returns the result's metric label.
func (r Result) String() string {
	switch r {
	case Served:
		return "served"
	case Rejected:
		return "rejected"
	case Canceled:
		return "canceled"
	case Full:
		return "full"
	}
	return "unknown"
}

// Config is what an operator sets for the queue.
type Config struct {
	// Poll is how often the queue retries the picks of waiting requests
	// while some wait (it also retries at once on Kick). Default 5ms. A
	// freed slot is found at most Poll late; lower costs more picks per
	// second while requests wait, and nothing while none does.
	Poll time.Duration
	// Settle is how long a request must have waited before it counts as
	// demand for capacity (Lines: the Asker's requests and the pending
	// load the gfe gossips), or half its wait if that is shorter. Default
	// DefaultSettle (100ms). A client that goes away sooner — an HTTP/2
	// stream opened and reset at once — never asks for an instance;
	// lower asks sooner, at the cost of counting such clients.
	Settle time.Duration
	// MaxWaiting bounds the requests waiting in every line together; a
	// request beyond it does not wait (Full). Default DefaultMaxWaiting.
	// Each waiting request holds its goroutine, its request and its
	// connection's buffers, some tens of KiB; lower refuses a burst
	// sooner.
	MaxWaiting int
}

// The queue's defaults.
const (
	// DefaultPoll is Config.Poll's default.
	DefaultPoll = 5 * time.Millisecond
	// DefaultSettle is Config.Settle's default: GoneEvery, the longest a
	// fast-path client that went away may go unnoticed, and a small part
	// of any cold start (seconds), which a request from zero waits for
	// anyway.
	DefaultSettle = GoneEvery
	// DefaultMaxWaiting is Config.MaxWaiting's default: ten lines at
	// their default bound (config.DefaultMaxPendingRequests), about
	// 300 MiB at 30 KiB a waiting request.
	DefaultMaxWaiting = 10000
	// MaxMaxWaiting is the largest MaxWaiting a gfe accepts
	// (gfe.Config.Validate): ten million waiting requests are hundreds of
	// GiB.
	MaxMaxWaiting = 10_000_000
)

// DefaultConfig returns the queue's defaults.
func DefaultConfig() Config {
	return Config{Poll: DefaultPoll, Settle: DefaultSettle, MaxWaiting: DefaultMaxWaiting}
}

// Options are the queue's dependencies.
type Options struct {
	// Clock drives the poll ticker and times the waits; nil means the
	// real clock.
	Clock clock.Clock
	// Registry receives the queue's metrics; nil registers them nowhere.
	Registry prometheus.Registerer
	// Asker, when set, asks the control plane for capacity for the
	// services whose requests wait (Asker.Step after every round).
	Asker *Asker
}

// Ticket is one request that found no free backend.
type Ticket struct {
	// Service is the backend service the request is for: the queue's
	// line.
	Service string
	// Since is when the request arrived; Deadline when it stops waiting.
	Since, Deadline time.Time
	// Try picks a backend for the request again; it returns true when it
	// got one (and then holds its slot). The queue calls it from its own
	// goroutine, never concurrently with itself nor after Wait returned;
	// it must not block.
	Try func() bool
	// Gone, when not nil, reports whether the request's client went away
	// (a client the context does not follow: the fast path's). The queue
	// asks it before every Try and at least every GoneEvery otherwise, and
	// cancels the wait (Canceled) when it reports true, so that the slot
	// of a gone client goes to one that is still there. It must not block.
	Gone func() bool
	// Count, when not nil, is raised by one while the request waits (the
	// service's routing.Meters.Pending), so that the proxy sends a new
	// request of the service to the queue behind it instead of letting it
	// take a freed slot first.
	Count *atomic.Int64
	// Limit, when > 0, is the most requests the service's line holds
	// (its max_pending_requests): a request that finds it full does not
	// wait (Full).
	Limit int
}

// GoneEvery is how often the queue asks a waiter that it does not try
// whether its client went away (Ticket.Gone).
const GoneEvery = 100 * time.Millisecond

// waiter is a Ticket in its line.
type waiter struct {
	Ticket
	// asked is when Gone was last asked; settled is set once it has
	// waited its settle time with its client there (it counts in Lines
	// from then on). Both under Queue.mu.
	asked   time.Time
	settled bool
	// done is closed once result is set; both under Queue.mu.
	done   chan struct{}
	result Result
}

// Queue is the gfe's pending queue: one FIFO line per service of the
// requests that found no free backend, retried every Poll by Run. Create
// it with New; it is safe for concurrent use and must not be copied.
type Queue struct {
	// Immutable after New.
	cfg     Config
	clk     clock.Clock
	asker   *Asker
	metrics *metrics
	// kick wakes Run for a round at once (buffered, 1).
	kick chan struct{}

	// waiting counts the waiters of every line (accessed atomically), so
	// that Run sleeps without a lock while nobody waits.
	waiting atomic.Int64

	mu sync.Mutex
	// Guarded by mu. settled counts, by service, the waiters of its line
	// that have settled (no entry for none).
	lines   map[string][]*waiter
	settled map[string]int
	// stopped is set when Run returns: Wait rejects at once from then on,
	// since no round would ever end a wait.
	stopped bool
}

// New returns a Queue.
func New(cfg Config, opts Options) *Queue {
	def := DefaultConfig()
	if cfg.Poll <= 0 {
		cfg.Poll = def.Poll
	}
	if cfg.Settle <= 0 {
		cfg.Settle = def.Settle
	}
	if cfg.MaxWaiting <= 0 {
		cfg.MaxWaiting = def.MaxWaiting
	}
	return &Queue{
		cfg:     cfg,
		clk:     clock.OrReal(opts.Clock),
		asker:   opts.Asker,
		metrics: newMetrics(opts.Registry),
		kick:    make(chan struct{}, 1),
		lines:   map[string][]*waiter{},
		settled: map[string]int{},
	}
}

// Kick asks for a round at once: a new routing table arrived, or a request
// joined a line. It never blocks.
func (q *Queue) Kick() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// Wait puts t at the end of its service's line and blocks until the
// queue's rounds (Run, or Step) get it a backend (Served), its Deadline
// passes (Rejected), or ctx ends first (Canceled). A deadline already past is
// rejected by the next round, which joining kicks; once Run has returned,
// Wait returns Rejected at once. A request that finds its line at
// t.Limit waiters, or the queue at Config.MaxWaiting, returns Full at
// once, without waiting or being counted as waiting, and is counted in
// spillway_gfe_pending_full_total. Once Wait returns Served,
// what t.Try wrote is visible to the caller; after any other result Try
// is not called again.
func (q *Queue) Wait(ctx context.Context, t Ticket) Result {
	w := &waiter{Ticket: t, done: make(chan struct{})}
	q.mu.Lock()
	if bound := q.fullLocked(t); bound != "" {
		q.mu.Unlock()
		q.metrics.full.WithLabelValues(t.Service, bound).Inc()
		return Full
	}
	q.joinLocked(w)
	if q.stopped {
		q.resolveLocked(w, Rejected, q.clk.Now())
		q.mu.Unlock()
		return Rejected
	}
	q.lines[t.Service] = append(q.lines[t.Service], w)
	q.mu.Unlock()
	q.Kick()
	select {
	case <-w.done:
	case <-ctx.Done():
		q.mu.Lock()
		select {
		case <-w.done: // resolved before the lock: keep its result
		default:
			q.removeLocked(w)
			q.resolveLocked(w, Canceled, q.clk.Now())
		}
		q.mu.Unlock()
	}
	return w.result
}

// fullLocked returns the bound that t's joining would pass: "service"
// (its line holds t.Limit waiters), "total" (the queue holds MaxWaiting),
// or "" when it may wait. Caller must hold q.mu.
func (q *Queue) fullLocked(t Ticket) string {
	switch {
	case t.Limit > 0 && len(q.lines[t.Service]) >= t.Limit:
		return "service"
	case q.waiting.Load() >= int64(q.cfg.MaxWaiting):
		return "total"
	}
	return ""
}

// joinLocked counts w in. Caller must hold q.mu.
func (q *Queue) joinLocked(w *waiter) {
	q.waiting.Add(1)
	if w.Count != nil {
		w.Count.Add(1)
	}
	q.metrics.depth.WithLabelValues(w.Service).Inc()
}

// resolveLocked ends w's wait with r at now, counting it out. w must no
// longer be in its line. Caller must hold q.mu.
func (q *Queue) resolveLocked(w *waiter, r Result, now time.Time) {
	w.result = r
	if w.settled {
		if q.settled[w.Service]--; q.settled[w.Service] <= 0 {
			delete(q.settled, w.Service)
		}
	}
	q.waiting.Add(-1)
	if w.Count != nil {
		w.Count.Add(-1)
	}
	q.metrics.depth.WithLabelValues(w.Service).Dec()
	q.metrics.wait.WithLabelValues(w.Service, r.String()).Observe(max(0, now.Sub(w.Since).Seconds()))
	close(w.done)
}

// removeLocked takes w out of its line. Caller must hold q.mu.
func (q *Queue) removeLocked(w *waiter) {
	l := q.lines[w.Service]
	for i, x := range l {
		if x == w {
			l = append(l[:i:i], l[i+1:]...)
			break
		}
	}
	if len(l) == 0 {
		delete(q.lines, w.Service)
		return
	}
	q.lines[w.Service] = l
}

// Step runs one round at now. In every line, in arrival order, it calls
// the waiters' Try until one fails: those whose Try succeeded are Served,
// and no waiter is tried in a round where one ahead of it in its line
// failed. A waiter whose client is gone (Ticket.Gone, asked before each
// Try, every GoneEvery, and when it settles) is Canceled instead, and the
// next one is tried. Then every waiter still waiting whose Deadline is not
// after now is Rejected, and every other one that has waited its settle
// time (Config.Settle, or half its wait if shorter) settles: it counts in
// Lines from then on. Called by Run, and by tests.
func (q *Queue) Step(now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for name, l := range q.lines {
		keep := l[:0]
		blocked := false
		for _, w := range l {
			settles := !w.settled && now.Sub(w.Since) >= min(q.cfg.Settle, w.Deadline.Sub(w.Since)/2)
			if w.Gone != nil && (!blocked || settles || now.Sub(w.asked) >= GoneEvery) {
				w.asked = now
				if w.Gone() {
					q.resolveLocked(w, Canceled, now)
					continue
				}
			}
			if !blocked && w.Try() {
				q.resolveLocked(w, Served, now)
				continue
			}
			blocked = true
			if !now.Before(w.Deadline) {
				q.resolveLocked(w, Rejected, now)
				continue
			}
			if settles {
				w.settled = true
				q.settled[name]++
			}
			keep = append(keep, w)
		}
		clear(l[len(keep):])
		if len(keep) == 0 {
			delete(q.lines, name)
		} else {
			q.lines[name] = keep
		}
	}
}

// Line is the demand for capacity of one service's waiting requests.
type Line struct {
	Service string
	// Waiting is how many of its requests wait and have settled; Oldest
	// how long the first of them has waited.
	Waiting int
	Oldest  time.Duration
}

// Lines returns, at now, every service with settled requests waiting, in
// no particular order: only the requests that have waited their settle
// time (Config.Settle) with their client still there when last asked,
// and only while they wait. A request canceled before it settled is never
// in Lines, and one canceled later leaves them at once: neither the
// Asker's requests nor the gossiped pending load count a request whose
// client did not wait (an HTTP/2 stream opened and reset at once), so
// that such requests cannot scale a group.
func (q *Queue) Lines(now time.Time) []Line {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]Line, 0, len(q.settled))
	for name, n := range q.settled {
		line := Line{Service: name, Waiting: n}
		for _, w := range q.lines[name] {
			if w.settled { // the first settled, almost always the head
				line.Oldest = now.Sub(w.Since)
				break
			}
		}
		out = append(out, line)
	}
	return out
}

// Waiting returns how many requests wait in every line.
func (q *Queue) Waiting() int64 { return q.waiting.Load() }

// Run runs rounds (Step, then the Asker's) every Poll while requests wait
// and at once on Kick, until ctx ends; it then rejects every waiter (and
// every later one, at once) and waits for the Asker's calls in flight. It sleeps, without a timer
// firing, while no request waits.
func (q *Queue) Run(ctx context.Context) error {
	t := q.clk.NewTicker(q.cfg.Poll)
	defer t.Stop()
	for {
		if q.waiting.Load() == 0 {
			select {
			case <-ctx.Done():
				return q.stop()
			case <-q.kick:
			}
		} else {
			select {
			case <-ctx.Done():
				return q.stop()
			case <-q.kick:
			case <-t.C():
			}
		}
		now := q.clk.Now()
		q.Step(now)
		if q.asker != nil {
			q.asker.Step(ctx, now, q.Lines(now))
		}
	}
}

// stop rejects every waiter and waits for the Asker.
func (q *Queue) stop() error {
	now := q.clk.Now()
	q.mu.Lock()
	q.stopped = true
	for name, l := range q.lines {
		for _, w := range l {
			q.resolveLocked(w, Rejected, now)
		}
		delete(q.lines, name)
	}
	q.mu.Unlock()
	if q.asker != nil {
		q.asker.Wait()
	}
	return nil
}

// metrics are the queue's Prometheus metrics.
type metrics struct {
	depth *prometheus.GaugeVec
	wait  *prometheus.HistogramVec
	full  *prometheus.CounterVec
}

// waitBuckets are the buckets of the wait histogram, in seconds: a wait
// lasts from a few ms (a slot frees) to the pending wait (10 s by default,
// up to minutes with slow cold starts).
var waitBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60, 120}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_gfe_pending_requests",
			Help: "Requests waiting in the gfe's pending queue for a free backend, by service.",
		}, []string{"service"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "spillway_gfe_pending_wait_seconds",
			Help:    "How long requests waited in the pending queue, by service and result (served, rejected with 429, canceled by the client).",
			Buckets: waitBuckets,
		}, []string{"service", "result"}),
		full: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_gfe_pending_full_total",
			Help: "Requests that found the pending queue full and did not wait (answered 429), by service and bound (service: its max_pending_requests; total: the gfe's).",
		}, []string{"service", "bound"}),
	}
	if reg != nil {
		reg.MustRegister(m.depth, m.wait, m.full)
	}
	return m
}

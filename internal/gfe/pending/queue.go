package pending

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-lb/spillway/internal/clock"
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
}

// DefaultConfig returns the queue's defaults.
func DefaultConfig() Config { return Config{Poll: 5 * time.Millisecond} }

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
}

// GoneEvery is how often the queue asks a waiter that it does not try
// whether its client went away (Ticket.Gone).
const GoneEvery = 100 * time.Millisecond

// waiter is a Ticket in its line.
type waiter struct {
	Ticket
	// asked is when Gone was last asked (queue goroutine only).
	asked time.Time
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
	// Guarded by mu.
	lines map[string][]*waiter
	// stopped is set when Run returns: Wait rejects at once from then on,
	// since no round would ever end a wait.
	stopped bool
}

// New returns a Queue.
func New(cfg Config, opts Options) *Queue {
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultConfig().Poll
	}
	return &Queue{
		cfg:     cfg,
		clk:     clock.OrReal(opts.Clock),
		asker:   opts.Asker,
		metrics: newMetrics(opts.Registry),
		kick:    make(chan struct{}, 1),
		lines:   map[string][]*waiter{},
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
// Wait returns Rejected at once. Once Wait returns Served,
// what t.Try wrote is visible to the caller; after any other result Try
// is not called again.
func (q *Queue) Wait(ctx context.Context, t Ticket) Result {
	w := &waiter{Ticket: t, done: make(chan struct{})}
	q.mu.Lock()
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
// Try and every GoneEvery) is Canceled instead, and the next one is tried.
// Then every waiter still waiting whose Deadline is not after now is
// Rejected. Called by Run, and by tests.
func (q *Queue) Step(now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for name, l := range q.lines {
		keep := l[:0]
		blocked := false
		for _, w := range l {
			if w.Gone != nil && (!blocked || now.Sub(w.asked) >= GoneEvery) {
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

// Line is what waits for one service.
type Line struct {
	Service string
	// Waiting is how many requests wait; Oldest how long the first of them
	// has waited.
	Waiting int
	Oldest  time.Duration
}

// Lines returns, at now, every service with requests waiting, in no
// particular order.
func (q *Queue) Lines(now time.Time) []Line {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]Line, 0, len(q.lines))
	for name, l := range q.lines {
		out = append(out, Line{Service: name, Waiting: len(l), Oldest: now.Sub(l[0].Since)})
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
	}
	if reg != nil {
		reg.MustRegister(m.depth, m.wait)
	}
	return m
}

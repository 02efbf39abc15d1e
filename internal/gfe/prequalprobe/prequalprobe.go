// Package prequalprobe is the gfe's probe sender for services with policy
// prequal (config.PolicyPrequal): the I/O half of Prequal, whose rule is
// lb/prequal's and whose pool lives in the routing table (lb/routing's
// Prober). A pick asks for about three probes; the Sender sends each
// asynchronously, off the request's path, as GET probe_path to the
// instance over the proxy's own backend transport (the same dialer,
// source address and response-head checks as requests), parses the
// answer with lb/prequal.ParseAnswer and hands it to the pool.
//
// Guarantees:
//
//   - Probe never blocks and never waits for the network: a probe is sent
//     on a goroutine of its own, or dropped.
//   - Rate cap: per service, at most probe_rate probes start per second,
//     after a burst of at most min(probe_rate, Burst) (a token bucket on
//     the injected clock), however many requests arrive
//     (TestRateCap). Past it a pick uses the probes already in the pool.
//   - Bounded work: at most Options.MaxOutstanding probes are in flight
//     at once over every service; an answer is read up to
//     prequal.MaxAnswerSize+1 bytes and waits at most probe_timeout.
//   - A backend that lies or sends garbage is tolerated and visible: an
//     answer that does not parse, a status other than 200 or a transport
//     error is counted (spillway_gfe_probe_errors_total) and never reaches
//     the pool; values beyond lb/prequal's bounds are clamped and counted
//     (spillway_gfe_probes_clamped_total). The pick stays defined either
//     way: an empty pool falls back to least request.
//   - After Run returns no probe is outstanding and none starts.
package prequalprobe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/spillway-lb/spillway/lb/clock"
	"github.com/spillway-lb/spillway/lb/prequal"
	"github.com/spillway-lb/spillway/lb/routing"
)

// Burst is the most probes a service may send at once after an idle
// spell: one pool's worth (lb/prequal's PoolSize), or probe_rate if lower.
const Burst = 16

// DefaultMaxOutstanding is Options.MaxOutstanding's default.
const DefaultMaxOutstanding = 64

// Options are a Sender's dependencies.
type Options struct {
	// Transport carries the probes: the proxy's backend transport.
	// Required.
	Transport http.RoundTripper
	// Clock is the time the rate cap and the answers' ages read; nil is
	// the real clock.
	Clock clock.Clock
	// Registry receives the metrics; nil registers them nowhere.
	Registry prometheus.Registerer
	// Logger receives nothing per probe (a lying backend could flood it),
	// only the Sender's stop.
	Logger zerolog.Logger
	// MaxOutstanding bounds the probes in flight at once over every
	// service; 0 means DefaultMaxOutstanding.
	MaxOutstanding int
}

// Sender sends prequal probes; it implements routing.Prober. Create it
// with New, run it with Run. Safe for concurrent use.
type Sender struct {
	// Immutable after New.
	tr      http.RoundTripper
	clk     clock.Clock
	log     zerolog.Logger
	sem     chan struct{} // a slot per outstanding probe
	ctx     context.Context
	cancel  context.CancelFunc
	metrics *metrics

	wg sync.WaitGroup
	mu sync.Mutex
	// Guarded by mu.
	buckets map[string]*bucket // by service
	stopped bool
}

var _ routing.Prober = (*Sender)(nil)

// New returns a Sender, or an error when Options.Transport is missing.
func New(opts Options) (*Sender, error) {
	if opts.Transport == nil {
		return nil, errors.New("prequalprobe: Options.Transport is required")
	}
	n := opts.MaxOutstanding
	if n <= 0 {
		n = DefaultMaxOutstanding
	}
	s := &Sender{
		tr:      opts.Transport,
		clk:     clock.OrReal(opts.Clock),
		log:     opts.Logger,
		sem:     make(chan struct{}, n),
		metrics: newMetrics(opts.Registry),
		buckets: map[string]*bucket{},
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Run returns when ctx ends, after cancelling and waiting for every
// outstanding probe; from then on Probe drops every probe.
func (s *Sender) Run(ctx context.Context) error {
	<-ctx.Done()
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	return nil
}

// Probe implements routing.Prober: it sends one probe of t.Backend on a
// goroutine of its own, or drops it (counted) when the service is over
// its probe rate or MaxOutstanding probes are in flight. It never blocks.
func (s *Sender) Probe(t routing.ProbeTarget) {
	m := s.metrics.of(t.Service)
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	b := s.buckets[t.Service]
	if b == nil {
		b = &bucket{}
		s.buckets[t.Service] = b
	}
	ok := b.take(s.clk.Now(), t.Config.ProbeRate)
	if ok {
		select {
		case s.sem <- struct{}{}:
			s.wg.Add(1)
		default:
			s.mu.Unlock()
			m.busy.Inc()
			return
		}
	}
	s.mu.Unlock()
	if !ok {
		m.limited.Inc()
		return
	}
	m.sent.Inc()
	go func() {
		defer func() {
			<-s.sem
			s.wg.Done()
		}()
		s.send(t, m)
	}()
}

// errStatus is the error of an answer whose status is not 200.
var errStatus = errors.New("probe answered a status other than 200")

// send sends one probe and hands a valid answer to the pool.
func (s *Sender) send(t routing.ProbeTarget, m *serviceMetrics) {
	a, err := s.get(t)
	switch {
	case errors.Is(err, prequal.ErrAnswer):
		m.invalid.Inc()
		return
	case errors.Is(err, errStatus):
		m.status.Inc()
		return
	case err != nil:
		m.transport.Inc()
		return
	}
	if a.Clamped {
		m.clamped.Inc()
	}
	m.answered.Inc()
	t.Answer(a, s.clk.Now())
}

// get sends the probe of t and parses its answer.
func (s *Sender) get(t routing.ProbeTarget) (prequal.Answer, error) {
	timeout := t.Config.ProbeTimeout
	if timeout <= 0 {
		timeout = time.Second
	}
	ctx, cancel := context.WithTimeout(s.ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+t.Backend.Addr()+t.Config.ProbePath, nil)
	if err != nil {
		return prequal.Answer{}, fmt.Errorf("prequalprobe: probe of %s: %w", t.Backend.Addr(), err)
	}
	req.Header.Set("User-Agent", "spillway-gfe-probe")
	resp, err := s.tr.RoundTrip(req)
	if err != nil {
		return prequal.Answer{}, fmt.Errorf("prequalprobe: probe of %s: %w", t.Backend.Addr(), err)
	}
	defer resp.Body.Close()
	var buf [prequal.MaxAnswerSize + 1]byte
	n, err := io.ReadFull(resp.Body, buf[:])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return prequal.Answer{}, fmt.Errorf("prequalprobe: probe of %s: reading the answer: %w", t.Backend.Addr(), err)
	}
	if resp.StatusCode != http.StatusOK {
		return prequal.Answer{}, fmt.Errorf("prequalprobe: probe of %s: %w: %d", t.Backend.Addr(), errStatus, resp.StatusCode)
	}
	a, err := prequal.ParseAnswer(buf[:n])
	if err != nil {
		return prequal.Answer{}, fmt.Errorf("prequalprobe: probe of %s: %w", t.Backend.Addr(), err)
	}
	return a, nil
}

// bucket is one service's token bucket of probes.
type bucket struct {
	tokens float64
	last   time.Time
	seen   bool
}

// take takes one token at now for a rate of rate per second and a burst
// of min(rate, Burst), and reports whether there was one. A bucket starts
// full. A clock that goes back adds nothing.
func (b *bucket) take(now time.Time, rate float64) bool {
	burst := min(max(rate, 1), Burst)
	if !b.seen {
		b.tokens, b.seen = burst, true
	} else if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.tokens = min(burst, b.tokens+dt*rate)
	}
	if now.After(b.last) {
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

package rtt

import (
	"context"
	"io"
	"maps"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/spillway-lb/spillway/internal/clock"
)

// Prober measures this node's round trip to every region: every
// Interval it sends one HTTP request (Path) to one instance of each
// region, over a kept-alive connection from SourceIP, and takes the time to
// the response headers. The estimate is the minimum of the last rttWindow
// samples: a busy backend, a busy gfe or a scheduler hiccup only ever adds
// to a round trip, so the minimum tracks the network distance and a burst of
// slow samples cannot make a far region look near (which would flip the
// planner's region order). A real increase shows after rttWindow samples.
// Any response counts as a sample; a failed probe adds none (the region
// keeps its last estimate, and a region never answered has none, so the
// planner treats it as unreachable). Safe for concurrent use; Run must be
// called at most once.
type Prober struct {
	path     string
	interval time.Duration
	clk      clock.Clock
	log      zerolog.Logger
	client   *http.Client

	// kick starts a round at once (buffered, 1): the first snapshot
	// should not wait a whole interval for its first RTT estimates.
	kick chan struct{}

	mu  sync.Mutex
	rtt map[string]*windowMin // region -> recent samples in ms; guarded by mu
}

// Config is what an operator sets for the prober.
type Config struct {
	// Path is the HTTP path probed on a region's instances; any response
	// counts as a sample.
	Path string
	// Interval is how often each region is probed. Must be > 0.
	Interval time.Duration
}

// Options are the prober's dependencies.
type Options struct {
	// Clock drives the probe rounds; nil means the real clock. Round trips
	// are measured on the real clock (they are network time).
	Clock clock.Clock
	// Logger receives failed probes at debug level.
	Logger zerolog.Logger
	// Dialer opens the probe connections (bound to the gfe's source
	// address). Nil means a default net.Dialer.
	Dialer *net.Dialer
}

// New returns a Prober; it probes once Run starts.
func New(cfg Config, opts Options) *Prober {
	dialer := opts.Dialer
	if dialer == nil {
		dialer = &net.Dialer{}
	}
	return &Prober{
		path:     cfg.Path,
		interval: cfg.Interval,
		clk:      clock.OrReal(opts.Clock),
		log:      opts.Logger.With().Str("component", "rtt").Logger(),
		client: &http.Client{
			Timeout: 2 * time.Second,
			Transport: &http.Transport{
				DialContext:         dialer.DialContext,
				MaxIdleConnsPerHost: 1,
				IdleConnTimeout:     time.Minute,
			},
		},
		rtt:  map[string]*windowMin{},
		kick: make(chan struct{}, 1),
	}
}

// ProbeSoon asks for a round now. It never blocks.
func (p *Prober) ProbeSoon() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Snapshot returns a copy of the RTT estimate per region, in milliseconds.
func (p *Prober) Snapshot() map[string]float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]float64, len(p.rtt))
	for r, v := range p.rtt {
		if x, ok := v.min(); ok {
			out[r] = x
		}
	}
	return out
}

// Run probes the regions targets returns (region -> instance address) every
// interval, and at once after ProbeSoon, until ctx ends. Probes of one round
// run in parallel; a region targets no longer returns loses its estimate.
func (p *Prober) Run(ctx context.Context, targets func() map[string]string) error {
	defer p.client.CloseIdleConnections()
	t := p.clk.NewTicker(p.interval)
	defer t.Stop()
	p.round(ctx, targets())
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			p.round(ctx, targets())
		case <-p.kick:
			p.round(ctx, targets())
		}
	}
}

func (p *Prober) round(ctx context.Context, targets map[string]string) {
	var wg sync.WaitGroup
	for region, addr := range targets {
		wg.Go(func() {
			ms, ok := p.probe(ctx, addr)
			if !ok {
				return
			}
			p.mu.Lock()
			v := p.rtt[region]
			if v == nil {
				v = &windowMin{}
				p.rtt[region] = v
			}
			v.add(ms)
			p.mu.Unlock()
		})
	}
	wg.Wait()
	p.mu.Lock()
	maps.DeleteFunc(p.rtt, func(r string, _ *windowMin) bool { _, ok := targets[r]; return !ok })
	p.mu.Unlock()
}

// probe returns the time to the response headers of one request, in ms.
func (p *Prober) probe(ctx context.Context, addr string) (float64, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+p.path, nil)
	if err != nil {
		return 0, false
	}
	t0 := time.Now()
	resp, err := p.client.Do(req)
	if err != nil {
		p.log.Debug().Err(err).Str("backend", addr).Msg("rtt probe failed")
		return 0, false
	}
	ms := float64(time.Since(t0).Microseconds()) / 1000
	io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	return ms, true
}

// rttWindow is how many recent RTT samples the estimate is the minimum of.
const rttWindow = 8

// windowMin holds the last rttWindow samples. Not safe for concurrent use.
type windowMin struct {
	samples [rttWindow]float64
	n       int // samples seen, saturating at rttWindow
	next    int // where the next sample goes
}

func (w *windowMin) add(x float64) {
	w.samples[w.next] = x
	w.next = (w.next + 1) % rttWindow
	w.n = min(w.n+1, rttWindow)
}

// min returns the smallest recent sample, and false before the first one.
func (w *windowMin) min() (float64, bool) {
	if w.n == 0 {
		return 0, false
	}
	m := w.samples[0]
	for _, x := range w.samples[1:w.n] {
		m = min(m, x)
	}
	return m, true
}

// Set replaces region's estimate with one sample of ms (tests and tools
// that stand in for the probes).
func (p *Prober) Set(region string, ms float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := &windowMin{}
	w.add(ms)
	p.rtt[region] = w
}

package edge

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

// rttProber measures this node's round trip to every region: every
// RTTInterval it sends one HTTP request (RTTPath) to one instance of each
// region, over a kept-alive connection from SourceIP, and takes the time to
// the response headers. The estimate is the minimum of the last rttWindow
// samples: a busy backend, a busy gfe or a scheduler hiccup only ever adds
// to a round trip, so the minimum tracks the network distance and a burst of
// slow samples cannot make a far region look near (which would flip the
// planner's region order). A real increase shows after rttWindow samples.
// Any response counts as a sample; a failed probe adds none (the region
// keeps its last estimate, and a region never answered has none, so the
// planner treats it as unreachable).
type rttProber struct {
	path     string
	interval time.Duration
	clk      clock.Clock
	log      zerolog.Logger
	client   *http.Client

	// kick starts a round at once (buffered, 1): the first control state
	// should not wait a whole interval for its first RTT estimates.
	kick chan struct{}

	mu  sync.Mutex
	rtt map[string]*windowMin // region -> recent samples in ms; guarded by mu
}

func newRTTProber(cfg Config, dialer *net.Dialer, clk clock.Clock, log zerolog.Logger) *rttProber {
	return &rttProber{
		path:     cfg.RTTPath,
		interval: cfg.RTTInterval,
		clk:      clk,
		log:      log.With().Str("component", "rtt").Logger(),
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

// probeSoon asks for a round now. It never blocks.
func (p *rttProber) probeSoon() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// snapshot returns a copy of the smoothed RTT per region, in milliseconds.
func (p *rttProber) snapshot() map[string]float64 {
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

// run probes the regions targets returns (region -> instance address) every
// interval until ctx ends. Probes of one round run in parallel.
func (p *rttProber) run(ctx context.Context, targets func() map[string]string) error {
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

func (p *rttProber) round(ctx context.Context, targets map[string]string) {
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
func (p *rttProber) probe(ctx context.Context, addr string) (float64, bool) {
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

// regionTargets returns, for every region of the current config, the first
// healthy instance (in config order) to probe; a region with no healthy
// instance is probed on its first instance, so it keeps an RTT estimate.
func (e *Edge) regionTargets() map[string]string {
	cs := e.control.Load()
	if cs == nil {
		return nil
	}
	out := map[string]string{}
	for _, g := range cs.Config.Groups() {
		r := g.Region.Name
		for _, in := range g.Group.Instances {
			if _, ok := out[r]; !ok {
				out[r] = in.Address
			}
			if !cs.Unhealthy[in.Address] && cs.Unhealthy[out[r]] {
				out[r] = in.Address
			}
		}
	}
	return out
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

// set replaces region's estimate with one sample of ms (tests and tools
// that stand in for the prober).
func (p *rttProber) set(region string, ms float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := &windowMin{}
	w.add(ms)
	p.rtt[region] = w
}

package controlplane

// The health manager's (health.go) probing: a configuration's health_check
// blocks turned into checks and probers (ApplyConfig), the lb/health
// Checkers it runs for the groups this replica owns, and their verdicts per
// instance.

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/health"
	"github.com/spillway-lb/spillway/lb/health/probe"
)

// checkSpec is one health check as the daemon runs it: a service's
// health_check block turned into an lb/health Config.
type checkSpec struct {
	cfg   health.Config
	https bool // probe over TLS (health.ProtocolHTTP with an https transport)
	port  int  // 0 = the instance's own port
}

// healthPlan is a configuration prepared for health checking by ApplyConfig.
// Immutable.
type healthPlan struct {
	cfg *LoadedConfig
	// specs and probers by check key: a service name, or "" for the
	// default check of groups no service uses.
	specs   map[string]checkSpec
	probers map[string]health.Prober
	// groupKeys lists, per group, the check keys that cover its instances.
	groupKeys map[string][]string
	groups    []config.GroupRef
	names     []string // group names, file order
	// settleAfter is the longest time any check's first probe can take:
	// Jitter·Interval (first delay) + Timeout.
	settleAfter time.Duration
}

// checkTarget locates one target of one check.
type checkTarget struct {
	check  string
	target health.Target
}

// ApplyConfig prepares health checking for l: it converts every service's
// health_check block and builds its prober, and returns an error naming the
// service's path if one cannot run (which rejects the configuration). It
// does not block on Run; Run takes the newest applied configuration on its
// next turn.
func (h *healthManager) ApplyConfig(l *LoadedConfig) error {
	p, err := h.plan(l)
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.pending = p
	h.mu.Unlock()
	notify(h.applied)
	return nil
}

// plan builds the healthPlan of l.
func (h *healthManager) plan(l *LoadedConfig) (*healthPlan, error) {
	c := l.Config
	p := &healthPlan{
		cfg:       l,
		specs:     map[string]checkSpec{},
		probers:   map[string]health.Prober{},
		groupKeys: map[string][]string{},
		groups:    c.Groups(),
	}
	var errs []error
	add := func(key, path string, hc config.HealthCheck) {
		spec := specFor(hc)
		if err := spec.cfg.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
			return
		}
		pr, err := h.newProber(spec)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
			return
		}
		p.specs[key] = spec
		p.probers[key] = countingProber{p: pr,
			pass: h.m.checks.WithLabelValues(key, resultPass),
			fail: h.m.checks.WithLabelValues(key, resultFail)}
		p.settleAfter = max(p.settleAfter,
			time.Duration(spec.cfg.Jitter*float64(spec.cfg.Interval))+spec.cfg.Timeout)
	}
	for i, s := range c.Services {
		add(s.Name, fmt.Sprintf("services[%d].health_check", i), s.HealthCheck)
		for _, b := range s.Backends {
			p.groupKeys[b.Group] = append(p.groupKeys[b.Group], s.Name)
		}
	}
	for _, ref := range p.groups {
		p.names = append(p.names, ref.Group.Name)
		if len(p.groupKeys[ref.Group.Name]) == 0 {
			p.groupKeys[ref.Group.Name] = []string{""}
			if _, ok := p.specs[""]; !ok {
				add("", "default health_check", config.DefaultHealthCheck())
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// specFor converts a service's health_check block to the check it runs.
func specFor(hc config.HealthCheck) checkSpec {
	c := health.DefaultConfig()
	s := checkSpec{port: hc.Port}
	switch hc.Protocol {
	case config.HealthHTTP:
		c.Protocol = health.ProtocolHTTP
	case config.HealthHTTPS:
		c.Protocol, s.https = health.ProtocolHTTP, true
	case config.HealthTCP:
		c.Protocol = health.ProtocolTCP
	case config.HealthGRPC:
		c.Protocol = health.ProtocolGRPC
	default:
		c.Protocol = health.Protocol(hc.Protocol) // Validate reports it
	}
	c.Path = hc.Path
	if c.Path == "" {
		c.Path = "/"
	}
	c.GRPCService = hc.GRPCService
	c.Interval = hc.Interval
	c.Timeout = hc.Timeout
	c.HealthyThreshold = hc.HealthyThreshold
	c.UnhealthyThreshold = hc.UnhealthyThreshold
	c.Jitter = hc.Jitter
	s.cfg = c
	return s
}

// newProber returns the prober for spec: Options.Prober when set, else the
// real one for its protocol (lb/health/probe), over TLS for https.
func (h *healthManager) newProber(spec checkSpec) (health.Prober, error) {
	if h.prober != nil {
		return h.prober, nil
	}
	if spec.https {
		// lb/health/probe speaks plain HTTP; this transport turns its
		// requests into HTTPS ones. Certificates are not verified:
		// backends are addressed by IP (config.HealthHTTPS).
		return probe.NewHTTP(spec.cfg, probe.Options{Transport: httpsTransport{rt: &http.Transport{
			Proxy:                  nil,
			DialContext:            (&net.Dialer{}).DialContext,
			TLSClientConfig:        &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // documented: backends by IP
			DisableKeepAlives:      true,
			MaxResponseHeaderBytes: 64 << 10,
		}}}), nil
	}
	pr, err := probe.New(spec.cfg, probe.Options{})
	if err != nil {
		return nil, fmt.Errorf("health check: %w", err)
	}
	return pr, nil
}

// httpsTransport sends each request over HTTPS whatever its URL scheme.
type httpsTransport struct{ rt http.RoundTripper }

// RoundTrip rewrites the scheme of a copy of r to https and sends it.
func (t httpsTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r2 := r.Clone(r.Context())
	u := *r.URL
	u.Scheme = "https"
	r2.URL = &u
	return t.rt.RoundTrip(r2)
}

// countingProber counts the results of the prober it wraps.
type countingProber struct {
	p          health.Prober
	pass, fail prometheus.Counter
}

// Probe probes t with the wrapped prober and counts the result.
func (c countingProber) Probe(ctx context.Context, t health.Target) health.Result {
	r := c.p.Probe(ctx, t)
	if r.Passed() {
		c.pass.Inc()
	} else {
		c.fail.Inc()
	}
	return r
}

// runningChecker is one check's lb/health Checker and its Run goroutine.
type runningChecker struct {
	c       *health.Checker
	spec    checkSpec
	targets []health.Target // sorted
	cancel  context.CancelFunc
	done    chan struct{}
}

// syncCheckers makes the running checks match the plan and the groups this
// replica owns: one lb/health Checker per check key that has owned targets.
func (h *healthManager) syncCheckers(ls *loopState) {
	want := map[string][]health.Target{}
	for _, ref := range ls.plan.groups {
		g := ref.Group.Name
		if ls.own.owner[g] != h.self {
			continue
		}
		for _, key := range ls.plan.groupKeys[g] {
			spec := ls.plan.specs[key]
			for _, inst := range ref.Group.Instances {
				want[key] = append(want[key], health.Target{Addr: checkAddr(inst.Address, spec.port)})
			}
		}
	}
	for key := range ls.checkers {
		if len(want[key]) == 0 {
			h.stopChecker(ls, key)
		}
	}
	for key, ts := range want {
		slices.SortFunc(ts, func(a, b health.Target) int { return cmp.Compare(a.Addr, b.Addr) })
		ts = slices.Compact(ts)
		spec, pr := ls.plan.specs[key], ls.plan.probers[key]
		rc, ok := ls.checkers[key]
		if !ok {
			var err error
			rc, err = h.startChecker(ls, key, spec, pr)
			if err != nil {
				h.log.Error().Err(err).Str("check", key).Msg("starting health check")
				continue
			}
		} else if rc.spec != spec {
			if err := rc.c.SetConfig(spec.cfg, pr); err != nil {
				h.log.Error().Err(err).Str("check", key).Msg("updating health check")
				continue
			}
			rc.spec = spec
		}
		if !slices.Equal(rc.targets, ts) {
			rc.c.SetTargets(ts)
			rc.targets = ts
			h.forgetChecks(key, ts)
		}
	}
}

// startChecker creates the Checker of key and runs it until stopChecker or
// the end of Run.
func (h *healthManager) startChecker(ls *loopState, key string, spec checkSpec, pr health.Prober) (*runningChecker, error) {
	service := key
	c, err := health.NewChecker(spec.cfg, pr, health.Options{
		Clock:  h.clock,
		Logger: h.log.With().Str("service", service).Logger(),
		Rand:   h.rand,
		OnChange: func(ch health.Change) {
			v := ownVerdict{status: ch.To}
			if ch.To == health.StatusUnhealthy && ch.Result.Err != nil {
				v.detail = ch.Result.Err.Error()
			}
			h.mu.Lock()
			h.checks[checkTarget{check: key, target: ch.Target}] = v
			h.mu.Unlock()
			h.m.transitions.WithLabelValues(service, string(ch.To)).Inc()
			notify(h.checked)
		},
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ls.ctx)
	rc := &runningChecker{c: c, spec: spec, cancel: cancel, done: make(chan struct{})}
	ls.checkers[key] = rc
	ls.wg.Add(1)
	go runCheck(c, ctx, rc.done, &ls.wg)
	return rc, nil
}

// runCheck runs one Checker; a named function so stacks say what it is.
func runCheck(c *health.Checker, ctx context.Context, done chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	defer close(done)
	_ = c.Run(ctx) // only fails when run twice, which startChecker never does
}

// stopChecker stops the Checker of key and waits for it.
func (h *healthManager) stopChecker(ls *loopState, key string) {
	rc := ls.checkers[key]
	rc.cancel()
	<-rc.done
	delete(ls.checkers, key)
	h.forgetChecks(key, nil)
}

// forgetChecks drops the statuses of key's targets not in keep. Called after
// SetTargets (or Run) returned, when OnChange no longer reports them.
func (h *healthManager) forgetChecks(key string, keep []health.Target) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ct := range h.checks {
		if ct.check == key && !slices.Contains(keep, ct.target) {
			delete(h.checks, ct)
		}
	}
}

// ownVerdicts combines, for every instance of an owned group, the checks
// that cover it: unhealthy if any check says so, else unknown if any has no
// verdict yet, else healthy.
func (h *healthManager) ownVerdicts(ls *loopState) map[string]ownVerdict {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]ownVerdict{}
	for _, ref := range ls.plan.groups {
		g := ref.Group.Name
		if ls.own.owner[g] != h.self {
			continue
		}
		for _, inst := range ref.Group.Instances {
			v := ownVerdict{status: health.StatusHealthy}
			for _, key := range ls.plan.groupKeys[g] {
				t := health.Target{Addr: checkAddr(inst.Address, ls.plan.specs[key].port)}
				cv, ok := h.checks[checkTarget{check: key, target: t}]
				if !ok {
					cv.status = health.StatusUnknown
				}
				if cv.status == health.StatusUnhealthy {
					v = cv
					if key != "" {
						v.detail = "service " + key + ": " + v.detail
					}
					break
				}
				if cv.status == health.StatusUnknown {
					v.status = health.StatusUnknown
				}
			}
			out[inst.Address] = v
		}
	}
	return out
}

// checkAddr is the address a check probes for an instance: the instance's
// address, with its port replaced by port when port is not 0.
func checkAddr(addr string, port int) string {
	if port == 0 {
		return addr
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr // config validated host:port; unreachable
	}
	return net.JoinHostPort(host, fmt.Sprint(port))
}

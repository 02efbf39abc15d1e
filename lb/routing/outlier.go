package routing

import (
	"fmt"
	"math"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/outlier"
)

// Passive outlier detection (docs/design.md §4, lb/outlier).
//
// Every service has one outlier.Detector, kept by the Builder across tables.
// Its hosts are the service's healthy instances, registered in detector
// groups named after their instance groups, so max_ejection_percent applies
// per instance group and at least one healthy instance of every group stays
// in service: a site's plan row can always reach the groups it plans for.
// An instance that fails its health checks or leaves the config is removed
// (and so un-ejected); health checks, not ejections, decide about it then.
//
// The proxy reports the result of every attempt (Host.Report, lock-free and
// allocation-free unless it completes a run): a 5xx answer is ServerError, a
// failure to connect ConnectFailure, the route timeout Timeout, any other
// transport failure (reset, EOF before the answer) ServerError; a request
// cancelled by its client is not reported. A Report that ejects a host wakes
// the planner, whose next table — built at once — leaves the host out of
// the policy's pickers and pool; until then PickAt skips it at pick time.
// An ejection ends by itself at its deadline; the planner puts the host back
// at its first step after that (within PlanInterval). Session affinity keeps
// ejected hosts in its tables (so that the clients of other backends do not
// move) and treats them as unavailable.

// outlierConfig translates a service's outlier_detection to lb/outlier's
// Config. A trigger disabled with 0 becomes a run no host can complete.
func outlierConfig(od config.OutlierDetection) outlier.Config {
	c := outlier.Config{
		Consecutive5xx:             od.Consecutive5xx,
		ConsecutiveConnectFailures: od.ConsecutiveConnectFailures,
		BaseEjectionTime:           od.BaseEjectionTime,
		MaxEjectionTime:            od.MaxEjectionTime,
		MaxEjectionPercent:         od.MaxEjectionPercent,
	}
	if c.Consecutive5xx <= 0 {
		c.Consecutive5xx = math.MaxInt
	}
	if c.ConsecutiveConnectFailures <= 0 {
		c.ConsecutiveConnectFailures = math.MaxInt
	}
	return c
}

// hostKey names a registered host: instance group and address.
type hostKey struct{ group, addr string }

// serviceOutliers is the outlier state of one service that outlives tables.
// Owned by the Builder's goroutine (the Detector and Hosts themselves are
// safe for concurrent use by requests).
type serviceOutliers struct {
	det   *outlier.Detector
	cfg   outlier.Config
	hosts map[hostKey]*outlier.Host
	// seen marks the hosts registered in the current build.
	seen map[hostKey]bool
}

// outliersFor returns the outlier state of service sc with its current
// config, creating it on first use, and starts a build: hosts not registered
// again before finish are removed.
func (b *Builder) outliersFor(sc *config.Service, report func(string, error)) *serviceOutliers {
	cfg := outlierConfig(sc.OutlierDetection)
	so := b.outliers[sc.Name]
	if so == nil {
		det, err := outlier.New(cfg)
		if err != nil {
			// config validation keeps this from happening; run without
			// ejections rather than without the service.
			report("outlier/"+sc.Name, fmt.Errorf("service %s: outlier detection disabled: %w", sc.Name, err))
			cfg = outlier.DefaultConfig()
			cfg.MaxEjectionPercent = 0
			det, _ = outlier.New(cfg)
		}
		so = &serviceOutliers{det: det, cfg: cfg, hosts: map[hostKey]*outlier.Host{}}
		b.outliers[sc.Name] = so
	} else if cfg != so.cfg {
		if err := so.det.SetConfig(cfg); err != nil {
			report("outlier-config/"+sc.Name, fmt.Errorf("service %s: outlier detection config rejected; keeping the previous one: %w", sc.Name, err))
		} else {
			so.cfg = cfg
		}
	}
	if so.seen == nil {
		so.seen = map[hostKey]bool{}
	}
	clear(so.seen)
	return so
}

// host registers the instance addr of group and returns its Host.
func (so *serviceOutliers) host(group, addr string) *outlier.Host {
	k := hostKey{group, addr}
	so.seen[k] = true
	h := so.hosts[k]
	if h == nil {
		h = so.det.Register(group, addr)
		so.hosts[k] = h
	}
	return h
}

// finish removes the hosts not registered since outliersFor, at now.
func (so *serviceOutliers) finish(now time.Time) {
	for k, h := range so.hosts {
		if !so.seen[k] {
			so.det.Remove(h, now)
			delete(so.hosts, k)
		}
	}
}

// ejectedCount returns how many of the service's hosts are ejected at now.
func (so *serviceOutliers) ejectedCount(now time.Time) int {
	n := 0
	for _, h := range so.hosts {
		if h.Ejected(now) {
			n++
		}
	}
	return n
}

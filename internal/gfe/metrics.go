package gfe

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-lb/spillway/internal/gfe/httpproxy"
	"github.com/spillway-lb/spillway/internal/version"
	"github.com/spillway-lb/spillway/lb/capacity"
	"github.com/spillway-lb/spillway/lb/routing"
)

// metrics are the daemon's Prometheus metrics: the plan, the decisions and
// the counters the two proxies share.
type metrics struct {
	pickErrors    *prometheus.CounterVec // shared by the proxies
	backendErrors prometheus.Counter     // shared by the proxies
	shed          *prometheus.CounterVec // shared by the proxies: service, reason
	planShare     *prometheus.GaugeVec
	regionUtil    *prometheus.GaugeVec
	demand        *prometheus.GaugeVec
	ejected       *prometheus.GaugeVec
	// The closed loop, per service and group.
	declared, effective, factor *prometheus.GaugeVec
	shrunk                      *prometheus.GaugeVec
	// gossipClamped counts gossiped values clamped by GossipBounds.
	gossipClamped *prometheus.CounterVec
	// actLimit is each autoscaled group's mean ACT limit, while below the
	// ceiling.
	actLimit *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer, table func() *routing.Table) *metrics {
	m := &metrics{
		pickErrors:    httpproxy.NewPickErrors(),
		backendErrors: httpproxy.NewBackendErrors(),
		shed:          httpproxy.NewShed(),
		planShare: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_gfe_plan_share",
			Help: "Share of this site's demand the current (damped) plan sends to each group.",
		}, []string{"service", "region", "group"}),
		regionUtil: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_gfe_plan_region_utilization",
			Help: "Planned load over capacity of each region, across all sites.",
		}, []string{"service", "region"}),
		demand: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_gfe_demand_rps",
			Help: "Smoothed demand arriving at this node, by service, in the service's demand unit (requests/s; requests in flight or open connections for CONNECTION mode).",
		}, []string{"service"}),
		ejected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_gfe_outlier_ejected",
			Help: "Backends ejected by passive outlier detection at the last plan, by service.",
		}, []string{"service"}),
		actLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_gfe_group_act_limit",
			Help: "Mean adaptive concurrency limit (Adaptive Concurrency Tuning, from the CPU the instances report) of each autoscaled group's instances, while below max_concurrency_per_instance; absent at the ceiling.",
		}, []string{"group"}),
		declared: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_gfe_group_declared_capacity",
			Help: "Configured capacity of each group's healthy instances, in the service's demand unit.",
		}, []string{"service", "region", "group"}),
		effective: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_gfe_group_effective_capacity",
			Help: "Declared capacity times the effective-capacity factor the plan used (local signals, docs/design.md §3 rule 8), before target_utilization.",
		}, []string{"service", "region", "group"}),
		factor: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_gfe_group_capacity_factor",
			Help: "Effective-capacity factor of each group: own is this gfe's estimate, planned the lowest any gfe gossips.",
		}, []string{"service", "region", "group", "source"}),
		shrunk: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_gfe_group_capacity_signal",
			Help: "1 for the signal that last shrank this gfe's own estimate of a group's capacity or holds it down (rejections, connect_errors, load_report, in_flight, queueing).",
		}, []string{"service", "region", "group", "signal"}),
		gossipClamped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_gfe_gossip_clamped_total",
			Help: "Values other gfes gossiped that the plan clamped to the plausibility bounds (--gossip-max-*), by field: rtt, demand (above the cap), demand_rise (rising too fast), site_demand (a site's gfes together above either).",
		}, []string{"field"}),
	}
	for _, f := range []string{routing.ClampRTT, routing.ClampDemand, routing.ClampDemandRise, routing.ClampSiteDemand} {
		m.gossipClamped.WithLabelValues(f) // visible at 0
	}
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "spillway_gfe_build_info",
		Help:        "Always 1, labelled with this binary's build (as --version prints it).",
		ConstLabels: version.Get().Labels(),
	})
	buildInfo.Set(1)
	reg.MustRegister(buildInfo)
	reg.MustRegister(m.pickErrors, m.backendErrors, m.shed, m.planShare, m.regionUtil, m.demand, m.ejected, m.declared, m.effective, m.factor, m.shrunk, m.gossipClamped, m.actLimit, decisionsCollector{table})
	return m
}

// observeTable exports the plan of a freshly stored table, the demand it
// was planned with and the ejected backends. Called from the planner
// goroutine. actLimits is each autoscaled group's mean ACT limit below its
// ceiling (routing.Builder.ACTLimits).
func (m *metrics) observeTable(t *routing.Table, site string, demand map[string]float64, ejected map[string]int, actLimits map[string]float64) {
	m.actLimit.Reset()
	for g, v := range actLimits {
		m.actLimit.WithLabelValues(g).Set(v)
	}
	m.planShare.Reset()
	m.regionUtil.Reset()
	m.demand.Reset()
	m.declared.Reset()
	m.effective.Reset()
	m.factor.Reset()
	m.shrunk.Reset()
	for name, s := range t.Services {
		m.demand.WithLabelValues(name).Set(demand[name])
		for _, g := range s.Capacity() {
			m.declared.WithLabelValues(name, g.Region, g.Group).Set(g.Declared)
			m.effective.WithLabelValues(name, g.Region, g.Group).Set(g.Effective())
			m.factor.WithLabelValues(name, g.Region, g.Group, "own").Set(g.Own)
			m.factor.WithLabelValues(name, g.Region, g.Group, "planned").Set(g.Factor)
			if g.Signal != capacity.SignalNone {
				m.shrunk.WithLabelValues(name, g.Region, g.Group, g.Signal.String()).Set(1)
			}
		}
		if p := s.Plan(); p != nil {
			for _, f := range p.Row(site) {
				m.planShare.WithLabelValues(name, f.Region, f.Group).Set(f.Share)
			}
			for _, r := range p.Regions {
				m.regionUtil.WithLabelValues(name, r.Name).Set(r.Utilization())
			}
		}
	}
	for name, n := range ejected {
		m.ejected.WithLabelValues(name).Set(float64(n))
	}
}

// decisionsDesc describes spillway_gfe_decisions_total.
var decisionsDesc = prometheus.NewDesc("spillway_gfe_decisions_total",
	"Routing decisions since start, by service and reason (nearest, spill_capacity, spill_health, overload, affinity, policy, no_plan).",
	[]string{"service", "reason"}, nil)

// decisionsCollector exports the decision counters of the live table's
// services as counters, read at scrape time from their atomics.
type decisionsCollector struct{ table func() *routing.Table }

// Describe implements prometheus.Collector.
func (c decisionsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- decisionsDesc }

// Collect implements prometheus.Collector.
func (c decisionsCollector) Collect(ch chan<- prometheus.Metric) {
	t := c.table()
	if t == nil {
		return
	}
	for name, s := range t.Services {
		for r := range routing.NumReasons {
			ch <- prometheus.MustNewConstMetric(decisionsDesc, prometheus.CounterValue, float64(s.Meters().Decisions[r].Load()), name, r.String())
		}
	}
}

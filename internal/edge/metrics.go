package edge

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the gfe's Prometheus metrics. Counters on the request path are
// resolved once per label set by the client library and updated atomically.
type metrics struct {
	requests      *prometheus.CounterVec
	pickErrors    *prometheus.CounterVec
	backendErrors prometheus.Counter
	latency       prometheus.Histogram
	decisions     *prometheus.GaugeVec
	planShare     *prometheus.GaugeVec
	regionUtil    *prometheus.GaugeVec
	demand        *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_gfe_unrouted_requests_total",
			Help: "Requests that matched no route, by service (empty) and status.",
		}, []string{"service", "code"}),
		pickErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_gfe_pick_errors_total",
			Help: "Requests for which no backend could be picked, by service and error.",
		}, []string{"service", "error"}),
		backendErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "spillway_gfe_backend_errors_total",
			Help: "Proxied requests that failed at the backend (connect error, reset, timeout).",
		}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "spillway_gfe_request_duration_seconds",
			Help:    "Time from request arrival to the end of the proxied response.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		decisions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_gfe_decisions",
			Help: "Routing decisions since start, by service and reason (nearest, spill_capacity, spill_health, overload, affinity, policy).",
		}, []string{"service", "reason"}),
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
			Help: "Smoothed demand arriving at this node, by service.",
		}, []string{"service"}),
	}
	reg.MustRegister(m.requests, m.pickErrors, m.backendErrors, m.latency, m.decisions, m.planShare, m.regionUtil, m.demand)
	return m
}

// observeTable exports the plan of a freshly stored table. Called from the
// planner goroutine.
func (m *metrics) observeTable(t *table, site string) {
	m.planShare.Reset()
	m.regionUtil.Reset()
	for name, s := range t.services {
		for r := range numReasons {
			m.decisions.WithLabelValues(name, r.String()).Set(float64(s.meters.decisions[r].Load()))
		}
		if s.plan == nil {
			continue
		}
		for _, f := range s.plan.Row(site) {
			m.planShare.WithLabelValues(name, f.Region, f.Group).Set(f.Share)
		}
		for _, r := range s.plan.Regions {
			m.regionUtil.WithLabelValues(name, r.Name).Set(r.Utilization())
		}
	}
}

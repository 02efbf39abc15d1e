package prequalprobe

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the Sender's counters, by service.
type metrics struct {
	sent    *prometheus.CounterVec // service
	dropped *prometheus.CounterVec // service, reason (rate, busy)
	errors  *prometheus.CounterVec // service, reason (transport, status, invalid)
	ok      *prometheus.CounterVec // service
	clamped *prometheus.CounterVec // service

	mu sync.Mutex
	// Guarded by mu.
	by map[string]*serviceMetrics
}

// serviceMetrics are one service's counters, resolved once.
type serviceMetrics struct {
	sent, limited, busy, transport, status, invalid, answered, clamped prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_gfe_probes_sent_total",
			Help: "Prequal probes sent to instances, by service (policy prequal).",
		}, []string{"service"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_gfe_probes_dropped_total",
			Help: "Prequal probes a pick asked for and the gfe did not send, by service and reason (rate: over prequal.probe_rate; busy: too many probes in flight).",
		}, []string{"service", "reason"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_gfe_probe_errors_total",
			Help: "Prequal probes that brought no usable answer, by service and reason (transport: no answer or timeout; status: not 200; invalid: not the probe wire format).",
		}, []string{"service", "reason"}),
		ok: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_gfe_probes_answered_total",
			Help: "Prequal probes whose answer joined the service's probe pool, by service.",
		}, []string{"service"}),
		clamped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_gfe_probes_clamped_total",
			Help: "Prequal probe answers with requests in flight or latency beyond their bounds, clamped, by service.",
		}, []string{"service"}),
		by: map[string]*serviceMetrics{},
	}
	if reg != nil {
		reg.MustRegister(m.sent, m.dropped, m.errors, m.ok, m.clamped)
	}
	return m
}

// of returns the counters of service, resolving them on first use.
func (m *metrics) of(service string) *serviceMetrics {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.by[service]; s != nil {
		return s
	}
	s := &serviceMetrics{
		sent:      m.sent.WithLabelValues(service),
		limited:   m.dropped.WithLabelValues(service, "rate"),
		busy:      m.dropped.WithLabelValues(service, "busy"),
		transport: m.errors.WithLabelValues(service, "transport"),
		status:    m.errors.WithLabelValues(service, "status"),
		invalid:   m.errors.WithLabelValues(service, "invalid"),
		answered:  m.ok.WithLabelValues(service),
		clamped:   m.clamped.WithLabelValues(service),
	}
	m.by[service] = s
	return s
}

package controller

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spillway-lb/spillway/lb/autoscale"
)

// GroupStatus is what /status shows about one group this replica runs.
type GroupStatus struct {
	Group string `json:"group"`
	// Acting is false while the instances of a group whose lease was lost
	// drain.
	Acting bool `json:"acting"`
	// Recommended, Driver and Drivers are the last decision's.
	Recommended int               `json:"recommended"`
	Driver      autoscale.Driver  `json:"driver"`
	Drivers     autoscale.Drivers `json:"drivers"`
	// Active, Demoted and Stopping count the started instances by state;
	// Launching those the provider is starting.
	Active    int `json:"active"`
	Demoted   int `json:"demoted"`
	Stopping  int `json:"stopping"`
	Launching int `json:"launching"`
	// Sample is the last tick's measurement.
	CPUCores    float64 `json:"cpu_cores"`
	Concurrency float64 `json:"concurrency"`
	Requests    int64   `json:"requests"`
	// ACT is the mean ACT limit the gfes report for the group's instances
	// (0: at max_concurrency_per_instance), the ACT driver's unit.
	ACT float64 `json:"act,omitempty"`
	// StartFailures counts instances the provider failed to start;
	// LastError is the last failure.
	StartFailures int    `json:"start_failures"`
	LastError     string `json:"last_error,omitempty"`
	// Instances lists the started instances.
	Instances []InstanceStatus `json:"instances"`
}

// InstanceStatus is one started instance.
type InstanceStatus struct {
	Address  string `json:"address"`
	Name     string `json:"name,omitempty"`
	Demoted  bool   `json:"demoted,omitempty"`
	Stopping bool   `json:"stopping,omitempty"`
}

// Status returns the groups this replica runs, sorted by name, as of the
// last tick or change.
func (c *Controller) Status() []GroupStatus { return *c.status.Load() }

// Metrics are the controller's Prometheus figures, all labelled by group.
type Metrics struct {
	recommended *prometheus.GaugeVec
	instances   *prometheus.GaugeVec
	drivers     *prometheus.GaugeVec
	decisions   *prometheus.CounterVec
	starts      *prometheus.CounterVec
	stops       *prometheus.CounterVec
}

// NewMetrics registers the controller's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		recommended: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_controlplane_autoscaler_recommended_instances",
			Help: "Instances the autoscaler recommends for the group (last decision).",
		}, []string{"group"}),
		instances: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_controlplane_autoscaler_instances",
			Help: "Instances this replica's autoscaler runs for the group, by state (active, demoted, stopping, launching).",
		}, []string{"group", "state"}),
		drivers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "spillway_controlplane_autoscaler_driver_instances",
			Help: "Instances each driver (cpu, concurrency, act) asked for at the last decision.",
		}, []string{"group", "driver"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_controlplane_autoscaler_decisions_total",
			Help: "Decisions that changed the recommended count, by the driver that set it (cpu, concurrency, act, min, max, demand, idle).",
		}, []string{"group", "driver"}),
		starts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_controlplane_autoscaler_starts_total",
			Help: "Instances the provider was asked to start, by result (ok, error).",
		}, []string{"group", "result"}),
		stops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "spillway_controlplane_autoscaler_stops_total",
			Help: "Instances stopped, by result (ok, killed after the drain timeout, unknown, error).",
		}, []string{"group", "result"}),
	}
	reg.MustRegister(m.recommended, m.instances, m.drivers, m.decisions, m.starts, m.stops)
	return m
}

// observe records one decision; changed says it changed the recommended
// count (counted in decisions_total). Called from the loop only.
func (m *Metrics) observe(group string, d autoscale.Decision, changed bool) {
	if changed {
		m.decisions.WithLabelValues(group, string(d.Driver)).Inc()
	}
	m.recommended.WithLabelValues(group).Set(float64(d.Recommended))
	m.drivers.WithLabelValues(group, "cpu").Set(float64(d.Drivers.CPU))
	m.drivers.WithLabelValues(group, "concurrency").Set(float64(d.Drivers.Concurrency))
	m.drivers.WithLabelValues(group, "act").Set(float64(d.Drivers.ACT))
}

func (m *Metrics) setInstances(gs []GroupStatus) {
	for _, g := range gs {
		m.instances.WithLabelValues(g.Group, "active").Set(float64(g.Active))
		m.instances.WithLabelValues(g.Group, "demoted").Set(float64(g.Demoted))
		m.instances.WithLabelValues(g.Group, "stopping").Set(float64(g.Stopping))
		m.instances.WithLabelValues(g.Group, "launching").Set(float64(g.Launching))
	}
}

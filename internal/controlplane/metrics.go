package controlplane

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-lb/spillway/internal/version"
)

// metrics are the daemon's Prometheus metrics, all named
// spillway_controlplane_*. They live in the daemon's own registry, never in
// a package global.
type metrics struct {
	configInfo       *prometheus.GaugeVec
	reloads          *prometheus.CounterVec
	lastReloadOK     prometheus.Gauge
	connected        prometheus.Gauge
	pushes           prometheus.Counter
	acks             prometheus.Counter
	nacks            prometheus.Counter
	checks           *prometheus.CounterVec
	transitions      *prometheus.CounterVec
	instances        *prometheus.GaugeVec
	ownedGroups      prometheus.Gauge
	members          prometheus.Gauge
	unvouched        prometheus.Gauge
	capacityRequests *prometheus.CounterVec
	tlsRefused       prometheus.Counter
	xdsDemand        *prometheus.GaugeVec
	xdsUnplaced      prometheus.Gauge
	xdsRefused       *prometheus.CounterVec
	xdsLRSDropped    *prometheus.CounterVec
	xdsExcess        prometheus.Gauge
	xdsWithheld      *prometheus.GaugeVec
	xdsStreams       prometheus.Gauge
	xdsKeys          prometheus.Gauge
}

// Label values.
const (
	resultSuccess = "success"
	resultFailure = "failure"
	resultPass    = "pass"
	resultFail    = "fail"
	resultInvalid = "invalid"
	resultRefused = "refused"
	resultGranted = "granted"
)

func newMetrics(reg prometheus.Registerer) *metrics {
	const ns, sub = "spillway", "controlplane"
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: ns, Subsystem: sub, Name: "build_info",
		Help:        "Always 1, labelled with this binary's build (as --version prints it).",
		ConstLabels: version.Get().Labels(),
	})
	buildInfo.Set(1)
	reg.MustRegister(buildInfo)
	m := &metrics{
		tlsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "grpc_tls_refused_total",
			Help: "gRPC connections refused at the TLS handshake: no client certificate, one the CA bundle does not vouch for, or an identity --tls-allowed-clients does not allow.",
		}),
		configInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "config_info",
			Help: "Always 1, labelled with the version of the configuration being served.",
		}, []string{"version"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "config_reloads_total",
			Help: "Configuration loads that produced a new version (result=success) or were rejected (result=failure).",
		}, []string{"result"}),
		lastReloadOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "config_last_reload_successful",
			Help: "1 if the last configuration load was accepted (or changed nothing), 0 if it was rejected.",
		}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "connected_gfes",
			Help: "Open StreamSnapshots streams.",
		}),
		pushes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "snapshot_pushes_total",
			Help: "Snapshots sent to gfes.",
		}),
		acks: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "snapshot_acks_total",
			Help: "Snapshots acknowledged (ACK) by gfes.",
		}),
		nacks: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "snapshot_nacks_total",
			Help: "Snapshots rejected (NACK) by gfes.",
		}),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "health_checks_total",
			Help: "Active health-check probes run by this replica, by service (\"\" for groups no service uses) and result (pass, fail).",
		}, []string{"service", "result"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "health_transitions_total",
			Help: "Health status changes seen by this replica's checks, by service and new status.",
		}, []string{"service", "to"}),
		instances: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "instances",
			Help: "Instances in the served health view (own checks merged with other replicas'), by status (healthy, unhealthy, unknown).",
		}, []string{"status"}),
		ownedGroups: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "owned_groups",
			Help: "Instance groups this replica health-checks (its share of the Maglev table over alive control planes).",
		}),
		members: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "control_planes",
			Help: "Alive control-plane replicas seen in gossip and listed in --replicas, this one included.",
		}),
		unvouched: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "unvouched_control_planes",
			Help: "Gossip members claiming to be control planes that are not in --replicas, whose health reports are ignored.",
		}),
		capacityRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "capacity_requests_total",
			Help: "RequestCapacity calls, by result (invalid, refused, granted).",
		}, []string{"result"}),
		xdsDemand: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "xds_client_demand",
			Help: "Calls per second the xDS clients served by this replica report (LRS) sending, by site and service, as gossiped: demand the gfes plan with their own (each site bounded by --xds-max-site-demand; only sites with a gfe).",
		}, []string{"site", "service"}),
		xdsUnplaced: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "xds_client_demand_unplaced",
			Help: "Calls per second reported by xDS clients without a site (node.locality.region): not planned.",
		}),
		xdsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "xds_refused_total",
			Help: "xDS and LRS streams or requests refused, by reason: site (the node claims a site its certificate is not granted), bad_site, " +
				"not_allowed, node_changed (a later request names another site), streams and client_streams (the stream limits), keys (the snapshot limit), fetch.",
		}, []string{"reason"}),
		xdsLRSDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "xds_lrs_dropped_total",
			Help: "Clusters of xDS clients' load reports dropped, by reason: unknown_cluster (not a service the client may see), stream_cap, total_cap.",
		}, []string{"reason"}),
		xdsExcess: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "xds_client_demand_excess",
			Help: "Calls per second xDS clients report beyond the per-site bound (--xds-max-site-demand × the service's capacity), summed over sites and services: not planned.",
		}),
		xdsWithheld: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "xds_client_demand_withheld",
			Help: "Site and service pairs of xDS clients' demand not gossiped at the last plan, by reason: no_gfe (a site without a gfe, which no plan places), cap (past the entries gossiped).",
		}, []string{"reason"}),
		xdsStreams: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "xds_streams",
			Help: "Open xDS and LRS streams.",
		}),
		xdsKeys: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: ns, Subsystem: sub, Name: "xds_snapshots",
			Help: "Snapshots held for xDS clients' streams (with a stream, or within the grace period) besides those of the plan's sites.",
		}),
	}
	reg.MustRegister(m.configInfo, m.reloads, m.lastReloadOK, m.connected, m.pushes, m.acks, m.nacks,
		m.checks, m.transitions, m.instances, m.ownedGroups, m.members, m.capacityRequests, m.tlsRefused, m.unvouched,
		m.xdsDemand, m.xdsUnplaced, m.xdsRefused, m.xdsLRSDropped, m.xdsExcess, m.xdsWithheld, m.xdsStreams, m.xdsKeys)
	// Make the counters visible at 0 before the first event.
	for _, r := range []string{resultSuccess, resultFailure} {
		m.reloads.WithLabelValues(r)
	}
	for _, r := range []string{resultInvalid, resultRefused, resultGranted} {
		m.capacityRequests.WithLabelValues(r)
	}
	return m
}

// setXDSDemand sets the xDS clients' demand gauges to d (by site, then
// service) and unplaced; sites and services no longer in d are removed.
func (m *metrics) setXDSDemand(d map[string]map[string]float64, unplaced float64) {
	m.xdsDemand.Reset()
	for site, svcs := range d {
		for svc, v := range svcs {
			m.xdsDemand.WithLabelValues(site, svc).Set(v)
		}
	}
	m.xdsUnplaced.Set(unplaced)
}

package gfe

import (
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-lb/spillway/internal/cpclient"
	"github.com/spillway-lb/spillway/internal/gfe/status"
	"github.com/spillway-lb/spillway/internal/snapshot"
)

// This file makes the node's snapshot stream visible: a gfe that refuses
// the control plane's snapshots keeps routing on its last good one (static
// stability), so nothing in its traffic shows that health changes no
// longer reach it. /readyz says so in its body, /status in control_plane
// (the status page in red), and the spillway_gfe_snapshot_* metrics count
// it. /readyz keeps its status code: failing readiness would take traffic
// away from a gfe that still routes correctly on its last snapshot, and in
// a rollout that every old gfe refuses it would take away all of them at
// once.

// snapshotCollectors are the metrics of the snapshot being served (cur) and
// of the stream (nil without a control plane: they stay 0).
func snapshotCollectors(cur func() *snapshot.Snapshot, stream func() cpclient.Status) []prometheus.Collector {
	st := func() cpclient.Status {
		if stream == nil {
			return cpclient.Status{}
		}
		return stream()
	}
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "spillway_gfe_snapshot_unknown_fields",
			Help: "Configuration fields of the snapshot being served that this build does not know (sent by a control plane of a newer release): applied without them. /status lists them.",
		}, func() float64 {
			if s := cur(); s != nil {
				return float64(len(s.UnknownFields))
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "spillway_gfe_snapshot_nacks_in_a_row",
			Help: "Snapshots refused (NACK) since the last one accepted: above 0 this gfe serves an older snapshot than the control plane's and does not follow its health changes. /status and /readyz have the error.",
		}, func() float64 { return float64(st().NacksInARow) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "spillway_gfe_snapshot_nacks_total",
			Help: "Snapshots refused (NACK) since start.",
		}, func() float64 { return float64(st().Nacks) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "spillway_gfe_snapshot_acks_total",
			Help: "Snapshots accepted (ACK) since start.",
		}, func() float64 { return float64(st().Acks) }),
	}
}

// streamStatus returns /status's control_plane, nil without a control
// plane.
func (d *Daemon) streamStatus() *status.StreamStatus {
	if d.stream == nil {
		return nil
	}
	s := d.stream()
	out := &status.StreamStatus{
		Connected: s.Connected, Serving: s.Version, Pushes: s.Pushes, Acks: s.Acks, Nacks: s.Nacks,
		NacksInARow: s.NacksInARow, Refusing: s.NacksInARow > 0, LastNack: s.LastNack,
	}
	if !s.LastNackAt.IsZero() {
		at := s.LastNackAt
		out.LastNackAt = &at
	}
	return out
}

// readyDetail returns the lines /readyz adds after ready or not ready: why
// the node does not follow the control plane (it refuses its snapshots),
// and what of the snapshot it serves it ignored. "" when there is nothing
// to say.
func (d *Daemon) readyDetail() string {
	var b strings.Builder
	if d.stream != nil {
		if s := d.stream(); s.NacksInARow > 0 {
			serving := s.Version
			if serving == "" {
				serving = "nothing yet"
			}
			fmt.Fprintf(&b, "refusing snapshots: the last %d pushed by the control plane were refused (NACK); serving %s, which no longer follows its health changes: %s\n",
				s.NacksInARow, serving, s.LastNack)
		}
	}
	if cur := d.Snapshot(); cur != nil && len(cur.UnknownFields) > 0 {
		fmt.Fprintf(&b, "snapshot %s applied without %d fields this build does not know (a newer control plane): %s\n",
			cur.Version, len(cur.UnknownFields), strings.Join(cur.UnknownFields, ", "))
	}
	return b.String()
}

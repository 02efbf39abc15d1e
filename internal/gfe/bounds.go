package gfe

import (
	"time"

	"github.com/spillway-lb/spillway/lb/routing"
)

// clampLogEvery is the least time between two log lines about clamped
// gossip values: a lying or broken peer is clamped every plan.
const clampLogEvery = time.Minute

// clampLog rate-limits the log of clamped gossip values.
type clampLog struct {
	last       time.Time
	suppressed int
}

// reportClamps counts the gossiped values the last build clamped
// (routing.Bounds) and logs them, at most one line per clampLogEvery, with
// the first clamp and how many were not logged since the last line.
// Called from the planner goroutine.
func (d *Daemon) reportClamps(now time.Time, clamps []routing.Clamp) {
	if len(clamps) == 0 {
		return
	}
	for _, c := range clamps {
		d.metrics.gossipClamped.WithLabelValues(c.Field).Inc()
	}
	l := &d.clampLog
	if !l.last.IsZero() && now.Sub(l.last) < clampLogEvery {
		l.suppressed += len(clamps)
		return
	}
	c := clamps[0]
	d.log.Warn().Str("peer", c.Node).Str("field", c.Field).Str("key", c.Key).
		Float64("reported", c.Reported).Float64("used", c.Used).
		Int("clamped", len(clamps)).Int("clamped_since_last_log", l.suppressed).
		Msg("implausible gossiped value clamped (a broken or lying peer); see spillway_gfe_gossip_clamped_total")
	l.last, l.suppressed = now, 0
}

package controlplane

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/lb/routing"
)

// maxGossipedDemand bounds the site and service pairs of xDS demand one
// replica gossips. With the sites limited to those with a gfe and the
// services to the configuration's, a real deployment stays far below it;
// at about 40 bytes a pair in the gossip state's JSON it keeps the xDS
// part under 200 KB, far from the codec's 16 MiB limit, so that the
// state's other parts (the health verdicts, the lease renewals) always go
// out with it.
const maxGossipedDemand = 4096

// Reasons a site and service pair of xDS demand is not gossiped (the
// metric's label).
const (
	withheldNoGFE = "no_gfe"
	withheldCap   = "cap"
)

// capacities returns every service of cfg with its declared capacity
// (routing.DeclaredCapacity): the services xDS clients may report on, and
// the base of the bound on a site's xDS demand.
func capacities(cfg *config.Config) map[string]float64 {
	out := make(map[string]float64, len(cfg.Services))
	for i := range cfg.Services {
		out[cfg.Services[i].Name] = routing.DeclaredCapacity(cfg, &cfg.Services[i])
	}
	return out
}

// publishDemand gossips the xDS clients' demand at now as this replica's
// SiteDemand: bounded per site (LoadReports), for the sites that have a
// gfe (a site without one is not planned: routinginput.Peers), at most
// maxGossipedDemand pairs. It sets the demand metrics, and logs when the
// sites and services over the bound change.
func (x *xdsExporter) publishDemand(now time.Time) {
	d := x.lrs.Demand(now)
	gossiped, withheld := gossipedDemand(d.BySite, gfeSites(x.pub.Snapshot()), maxGossipedDemand)
	for _, r := range []string{withheldNoGFE, withheldCap} {
		x.m.xdsWithheld.WithLabelValues(r).Set(float64(withheld[r]))
	}
	var excess float64
	var over []string
	for site, svcs := range d.Excess {
		for svc, v := range svcs {
			excess += v
			over = append(over, site+"/"+svc)
		}
	}
	slices.Sort(over)
	x.m.xdsExcess.Set(excess)
	if s := strings.Join(over, ","); s != x.excess {
		x.excess = s
		if s != "" {
			x.log.Warn().Float64("excess_rps", excess).Str("sites_services", abbreviate(over, 10)).Float64("max_site_demand", x.cfg.MaxSiteDemand).
				Msg("xDS clients report more demand than the per-site bound (--xds-max-site-demand × the service's capacity); the excess is not planned")
		}
	}
	x.m.setXDSDemand(gossiped, d.Unplaced)
	if err := x.pub.SetSiteDemand(gossiped); err != nil {
		x.log.Error().Err(err).Msg("publishing the xDS clients' demand")
	}
}

// gfeSites returns the sites of the gfes in snap.
func gfeSites(snap *gossip.Snapshot) map[string]bool {
	out := map[string]bool{}
	if snap == nil {
		return out
	}
	for _, st := range snap.States {
		if st.Kind == gossip.KindGFE && st.Site != "" {
			out[st.Site] = true
		}
	}
	return out
}

// gossipedDemand returns the part of d (by site, then service) to gossip:
// the sites in sites, and of those at most max pairs, the largest demand
// first (ties by site, then service). withheld counts the pairs left out,
// by reason.
func gossipedDemand(d map[string]map[string]float64, sites map[string]bool, max int) (map[string]map[string]float64, map[string]int) {
	type pair struct {
		site, svc string
		v         float64
	}
	withheld := map[string]int{}
	var pairs []pair
	for site, svcs := range d {
		if !sites[site] {
			withheld[withheldNoGFE] += len(svcs)
			continue
		}
		for svc, v := range svcs {
			pairs = append(pairs, pair{site, svc, v})
		}
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		return cmp.Or(cmp.Compare(b.v, a.v), cmp.Compare(a.site, b.site), cmp.Compare(a.svc, b.svc))
	})
	if len(pairs) > max {
		withheld[withheldCap] = len(pairs) - max
		pairs = pairs[:max]
	}
	out := map[string]map[string]float64{}
	for _, p := range pairs {
		if out[p.site] == nil {
			out[p.site] = map[string]float64{}
		}
		out[p.site][p.svc] = p.v
	}
	return out, withheld
}

// abbreviate joins the first n of items with commas, and says how many
// more there are.
func abbreviate(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ",")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:n], ","), len(items)-n)
}

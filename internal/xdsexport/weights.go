package xdsexport

import (
	"math"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/lb/waterfall"
)

// WeightScale is the locality weight of a share of 1. Weights are integers
// (uint32) in xDS; a million keeps shares to 1e-6 and the sum of a
// priority's weights far below Envoy's limit of 2^32−1.
const WeightScale = 1_000_000

// Locality is one instance group of a service as a site's clients weigh
// it.
type Locality struct {
	// Region, Zone and Group name the group (xDS locality region, zone and
	// sub_zone).
	Region, Zone, Group string
	// Priority is 0 for the groups the site's row uses, 1 for the others
	// (failover only).
	Priority uint32
	// Weight is the locality's load_balancing_weight, ≥ 1.
	Weight uint32
}

// Weights returns the localities of service sc for the clients at site, in
// the order of sc's backends, drained groups (capacity_scaler 0) left out:
//
//   - with a planned policy and a plan row for site: each group of the row
//     at priority 0 with its share × WeightScale (at least 1), every other
//     group at priority 1 with its healthy active (not demoted) instances
//     (at least 1);
//   - with a planned policy, a plan and no row for site (an unknown site):
//     every group at priority 0, weighted by the load the plan sends it
//     from all sites, when that is > 0;
//   - otherwise (baseline policy, no plan yet, nothing planned anywhere):
//     every group at priority 0, weighted by its healthy active instances.
//
// Weights is pure; plan may be nil.
func Weights(sc *config.Service, s *snapshot.Snapshot, plan *waterfall.Plan, site string) []Locality {
	var out []Locality
	for _, be := range sc.Backends {
		ref, ok := s.Config.Group(be.Group)
		if !ok || be.CapacityScaler == 0 {
			continue
		}
		out = append(out, Locality{
			Region: ref.Region.Name, Zone: ref.Zone.Name, Group: ref.Group.Name,
			Weight: max(1, uint32(s.HealthyActiveCount(ref.Group.Instances))),
		})
	}
	if plan == nil || !sc.Policy.IsPlanned() {
		return out
	}
	if row := plan.Row(site); len(row) > 0 {
		share := map[string]float64{}
		for _, f := range row {
			share[f.Group] += f.Share
		}
		for i := range out {
			if w := scaled(share[out[i].Group], 1); w > 0 {
				out[i].Weight = w
			} else {
				out[i].Priority = 1
			}
		}
		return out
	}
	var total float64
	load := map[string]float64{}
	for _, g := range plan.Groups {
		load[g.Name] = g.Load
		total += g.Load
	}
	if total <= 0 {
		return out
	}
	for i := range out {
		out[i].Weight = max(1, scaled(load[out[i].Group], total))
	}
	return out
}

// scaled returns v/total × WeightScale rounded, and at least 1 when v > 0:
// a group with any share keeps some of the traffic. It returns 0 for v ≤ 0
// (and for NaN).
func scaled(v, total float64) uint32 {
	if !(v > 0) {
		return 0
	}
	w := math.Round(v / total * WeightScale)
	return uint32(max(1, min(w, WeightScale)))
}

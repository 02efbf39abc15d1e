package routing

import (
	"errors"
	"fmt"
	"math"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/waterfall"
)

// CheckPlannable reports why the services of s could not be routed by, or
// nil. A gfe calls it before it accepts (ACKs) a snapshot, so that a
// snapshot it would fail to plan is refused (NACKed) up front and the last
// good one keeps serving, instead of being accepted and then failing on
// every plan.
//
// For every service it checks that each group's capacity with every
// instance healthy (the largest it can be), and their sum, are finite. For
// every planned service (waterfall, min_rtt) it also computes one plan with
// the service's planner over that world, with one site a millisecond from
// every region whose demand is the whole capacity, and checks that the
// plan's shares are finite. Every problem is returned, joined, each naming
// its service. CheckPlannable is pure; s must have a Config.
func CheckPlannable(s *Fleet) error {
	cfg := s.Config
	all := FromConfig(s.Version, cfg)
	var errs []error
	for i := range cfg.Services {
		if err := checkService(all, &cfg.Services[i]); err != nil {
			errs = append(errs, fmt.Errorf("service %s: %w", cfg.Services[i].Name, err))
		}
	}
	return errors.Join(errs...)
}

// checkService is CheckPlannable for service sc of all, a fleet in which
// every instance is healthy.
func checkService(all *Fleet, sc *config.Service) error {
	var total float64
	rtt := map[string]float64{}
	for bi := range sc.Backends {
		b := &sc.Backends[bi]
		ref, ok := all.Config.Group(b.Group)
		if !ok {
			continue
		}
		n := ref.Group.ActiveInstances()
		c := b.Capacity(sc.BalancingMode, n, n)
		if math.IsInf(c, 0) || math.IsNaN(c) {
			return fmt.Errorf("backends[%d] (group %s): capacity is %v", bi, b.Group, c)
		}
		total += c
		rtt[ref.Region.Name] = 1
	}
	if math.IsInf(total, 0) || math.IsNaN(total) {
		return fmt.Errorf("total capacity is %v", total)
	}
	if !sc.Policy.IsPlanned() {
		return nil
	}
	me := Peer{Node: "plannable-check", Site: "plannable-check", RTT: rtt, Demand: map[string]float64{sc.Name: total}}
	w := BuildWorld(all, sc, nil, me, nil)
	compute := waterfall.Compute
	if sc.Policy == config.PolicyMinRTT {
		compute = waterfall.ComputeMinRTT
	}
	plan, err := compute(w, waterfall.Config{SpillThreshold: sc.Spill.Threshold, SpillSlope: sc.Spill.Slope})
	if err != nil {
		return fmt.Errorf("planning: %w", err)
	}
	for _, f := range plan.Flows {
		if math.IsInf(f.Share, 0) || math.IsNaN(f.Share) || math.IsInf(f.Demand, 0) || math.IsNaN(f.Demand) {
			return fmt.Errorf("planning: group %s gets share %v (demand %v)", f.Group, f.Share, f.Demand)
		}
	}
	return nil
}

package sim

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spillway-lb/spillway/config"
)

// Result is the outcome of one policy on one scenario, as printed by
// `lbsim plan`. Its JSON form is one object:
//
//	{"policy": "waterfall",
//	 "sites":   [{"name": "nyc", "demand_rps": 1500}],
//	 "flows":   [{"site": "nyc", "region": "us-east", "group": "us-east-b", "rps": 1000, "reason": "nearest"}],
//	 "regions": [{"name": "us-east", "capacity_rps": 1000, "load_rps": 1000, "utilization": 1}]}
//
// with "scope" added for the baseline policies and "reason" present on the
// flows of Waterfall and MinRTT only. Flows, Sites and Regions are
// never nil, so they encode as [] rather than null.
type Result struct {
	Policy config.Policy `json:"policy"`
	// Scope is empty for Waterfall and MinRTT.
	Scope config.HashScope `json:"scope,omitempty"`
	// Sites lists every site of the scenario, sorted by name.
	Sites []SiteDemand `json:"sites"`
	// Flows are the non-zero flows, sorted by site, then the site's region
	// order (ascending RTT, ties by name), then group.
	Flows []Flow `json:"flows"`
	// Regions lists every region of the scenario, sorted by name.
	Regions []RegionLoad `json:"regions"`
}

// SiteDemand is one site's demand in a Result.
type SiteDemand struct {
	Name string `json:"name"`
	// DemandRPS is the site's demand in requests/s.
	DemandRPS float64 `json:"demand_rps"`
}

// Flow is the traffic one site sends to one instance group.
type Flow struct {
	Site   string `json:"site"`
	Region string `json:"region"`
	Group  string `json:"group"`
	// RPS is the traffic sent, in requests/s; always > 0.
	RPS float64 `json:"rps"`
	// Reason says why Waterfall or MinRTT put the flow in its region:
	// "nearest", "spill_capacity", "spill_health" or "overload"
	// (waterfall.Reason).
	// Empty, and omitted from JSON, for the baselines.
	Reason string `json:"reason,omitempty"`
}

// RegionLoad is one region's capacity and load in a Result.
type RegionLoad struct {
	Name string `json:"name"`
	// CapacityRPS is the sum of the region's group capacities, requests/s.
	CapacityRPS float64 `json:"capacity_rps"`
	// LoadRPS is the sum of the flows into the region, requests/s.
	LoadRPS float64 `json:"load_rps"`
	// Utilization is LoadRPS/CapacityRPS, 0 when both are 0 (a Result never
	// has load on a region without capacity). Above 1 means overload.
	Utilization float64 `json:"utilization"`
}

// WriteTable writes r as two aligned tables: the flows of each site (with
// the share of the site's demand, and for Waterfall and MinRTT the reason),
// then the regions with capacity, load and utilization. A site without
// flows gets one row of dashes.
func (r *Result) WriteTable(w io.Writer) error {
	scope := string(r.Scope)
	if scope == "" {
		scope = "-"
	}
	if _, err := fmt.Fprintf(w, "policy: %s  scope: %s\n\n", r.Policy, scope); err != nil {
		return err
	}
	withReason := r.Policy.IsPlanned()
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if withReason {
		fmt.Fprintln(tw, "SITE\tDEMAND_RPS\tREGION\tGROUP\tRPS\tSHARE\tREASON")
	} else {
		fmt.Fprintln(tw, "SITE\tDEMAND_RPS\tREGION\tGROUP\tRPS\tSHARE")
	}
	bySite := map[string][]Flow{}
	for _, f := range r.Flows {
		bySite[f.Site] = append(bySite[f.Site], f)
	}
	for _, s := range r.Sites {
		flows := bySite[s.Name]
		if len(flows) == 0 {
			fmt.Fprintf(tw, "%s\t%.1f\t-\t-\t-\t-", s.Name, s.DemandRPS)
			if withReason {
				fmt.Fprint(tw, "\t-")
			}
			fmt.Fprintln(tw)
			continue
		}
		for i, f := range flows {
			site, demand := "", ""
			if i == 0 {
				site, demand = s.Name, fmt.Sprintf("%.1f", s.DemandRPS)
			}
			share := 0.0
			if s.DemandRPS > 0 {
				share = f.RPS / s.DemandRPS
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.1f\t%.1f%%", site, demand, f.Region, f.Group, f.RPS, 100*share)
			if withReason {
				fmt.Fprintf(tw, "\t%s", f.Reason)
			}
			fmt.Fprintln(tw)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if _, err := fmt.Fprintln(w); err != nil {
		return err
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "REGION\tCAPACITY_RPS\tLOAD_RPS\tUTILIZATION")
	for _, rl := range r.Regions {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f%%\n", rl.Name, rl.CapacityRPS, rl.LoadRPS, 100*rl.Utilization)
	}
	return tw.Flush()
}

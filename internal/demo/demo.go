// Package demo runs the story of the one-command demo: a local deployment of
// one control plane, three gfes at three sites and test backends in three
// regions, driven through steady state, a flash crowd, an unhealthy region,
// global overload and recovery, printing per phase where each site's traffic
// went and each region's utilization. The service sheds global overload
// (overload.shed, Spec.Shed): in that phase the gfes refuse the excess at
// once and the demo prints what was shed and the admitted requests' p99.
// cmd/demo wires it to flags and signals.
package demo

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spillway-lb/spillway/internal/loadgen"
	"github.com/spillway-lb/spillway/internal/topology"
)

// Regions and sites of the demo; the RTTs are emulated by the test backends.
var (
	regionNames = []string{"us-east", "eu-west", "asia-east"}
	siteNames   = []string{"nyc", "lon", "tokyo"}
)

// RegionCapacity is the configured capacity of one demo region, req/s.
const RegionCapacity = 320

// Phase is one step of the story.
type Phase struct {
	Name string
	// Demand per site, req/s.
	Demand map[string]float64
	// Unhealthy lists instances to fail (by region: how many of its
	// instances, from the first) during the phase; the others are healthy.
	Unhealthy map[string]int
	// Expect says in words what the waterfall should do.
	Expect string
	// Overload marks the global overload phase, whose shedding
	// PrintOverload and CheckOverload report.
	Overload bool
}

// Story is the demo's sequence of phases.
func Story() []Phase {
	return []Phase{
		{Name: "steady state", Demand: map[string]float64{"nyc": 200, "lon": 150, "tokyo": 100},
			Expect: "every site stays in its nearest region"},
		{Name: "flash crowd at nyc", Demand: map[string]float64{"nyc": 450, "lon": 150, "tokyo": 100},
			Expect: "us-east fills to its target, 95% of 320 req/s (less while local signals shrink it); nyc's other ~150 req/s spill to eu-west, its next-nearest region"},
		{Name: "5 of 8 eu-west instances unhealthy", Demand: map[string]float64{"nyc": 200, "lon": 100, "tokyo": 100},
			Unhealthy: map[string]int{"eu-west": 5},
			Expect:    "eu-west has healthy room (120 req/s; planned utilization counts healthy capacity) but h=3/8 < 0.5 keeps only 2h=75% of lon's traffic; 25% spills to us-east"},
		{Name: "global overload (+20%)", Demand: map[string]float64{"nyc": 500, "lon": 400, "tokyo": 252}, Overload: true,
			Expect: "1152 req/s against 960: the plan runs every region at the same 126% of its 95% target, traffic as local as possible; " +
				"with overload.shed (admit 0.9) every gfe refuses the same ~29% at once (503, Retry-After), so each region gets 90% of its target and the admitted requests keep p99 under 150 ms at every site"},
		{Name: "recovery", Demand: map[string]float64{"nyc": 200, "lon": 150, "tokyo": 100},
			Expect: "traffic returns to each site's nearest region"},
	}
}

// ParsePhases parses a --phases value: phase numbers from 1 to n,
// comma-separated ("1,4"). It returns nil, every phase, for "".
func ParsePhases(s string, n int) (map[int]bool, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := map[int]bool{}
	for _, f := range strings.Split(s, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 1 || k > n {
			return nil, fmt.Errorf("%q: want phase numbers from 1 to %d, comma-separated", f, n)
		}
		out[k] = true
	}
	return out, nil
}

// SiteResult is what one site's load generator measured in a phase.
type SiteResult struct {
	Site   string
	Demand float64
	Res    *loadgen.Result
}

// RunPhase applies the phase's health, lets the deployment settle for
// settle, then measures measure of traffic from every site at once.
func RunPhase(ctx context.Context, c *topology.Cluster, ph Phase, settle, measure time.Duration) ([]SiteResult, error) {
	for r, addrs := range c.Instances {
		n := ph.Unhealthy[r]
		if err := topology.SetHealthy(ctx, false, addrs[:n]...); err != nil {
			return nil, err
		}
		if err := topology.SetHealthy(ctx, true, addrs[n:]...); err != nil {
			return nil, err
		}
	}
	// One load without a break: the first settle of it is not recorded, so
	// that demand estimates, gossip, health checks and plan damping catch
	// up under the load that is then measured.
	return drive(ctx, c, ph, settle, settle+measure)
}

func drive(ctx context.Context, c *topology.Cluster, ph Phase, warmup, d time.Duration) ([]SiteResult, error) {
	res, err := c.DriveRecorded(ctx, ph.Demand, warmup, d)
	if err != nil {
		return nil, err
	}
	var out []SiteResult
	for _, s := range siteNames {
		if r, ok := res[s]; ok {
			out = append(out, SiteResult{Site: s, Demand: ph.Demand[s], Res: r})
		}
	}
	return out, nil
}

// ServedRPS returns the measured 2xx rate per region over all sites.
func ServedRPS(results []SiteResult, measure time.Duration) map[string]float64 {
	out := map[string]float64{}
	for _, r := range results {
		for region, n := range r.Res.ByRegion {
			out[region] += float64(n) / measure.Seconds()
		}
	}
	return out
}

// RoutedRPS returns the measured rate of requests sent to each region over
// all sites, whatever the backend answered.
func RoutedRPS(results []SiteResult, measure time.Duration) map[string]float64 {
	out := map[string]float64{}
	for _, r := range results {
		for region, n := range r.Res.Routed {
			out[region] += float64(n) / measure.Seconds()
		}
	}
	return out
}

// RegionPlan is what the first gfe's /status says about one region: the
// planned load over the declared capacity of its healthy instances, the
// capacity local signals leave it (docs/design.md §3 rule 8) and the signals
// that shrank it.
type RegionPlan struct {
	Utilization float64
	Effective   float64
	Signals     string
}

// Print writes the phase's tables: where each site's traffic went, what
// the gfe shed (Shed) and the admitted requests' p99 (Admitted), and each
// region's measured and planned utilization, and its effective capacity;
// for the overload phase, the shedding's verdict (PrintOverload).
func Print(w io.Writer, i, n int, ph Phase, results []SiteResult, planned map[string]RegionPlan, measure time.Duration) {
	fmt.Fprintf(w, "\n== phase %d/%d: %s\n   expect: %s\n", i, n, ph.Name, ph.Expect)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "site\tdemand\t%s\tok\terrors\tshed\tp50\tp99\tadmitted p99\t\n", strings.Join(regionNames, "\t"))
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%.0f/s\t", r.Site, r.Demand)
		for _, reg := range regionNames {
			fmt.Fprintf(tw, "%.0f%%\t", 100*r.Res.RegionShare(reg))
		}
		errRate := 0.0
		if r.Res.Sent > 0 {
			errRate = float64(r.Res.Failed) / float64(r.Res.Sent)
		}
		admitted, _ := Admitted(r.Res)
		fmt.Fprintf(tw, "%d\t%.1f%%\t%.1f%%\t%v\t%v\t%v\t\n", r.Res.OK, 100*errRate, 100*Shed(r.Res),
			r.Res.Percentile(50).Round(time.Millisecond), r.Res.Percentile(99).Round(time.Millisecond), admitted.Round(time.Millisecond))
	}
	tw.Flush()
	if ph.Overload {
		PrintOverload(w, results)
	}
	served, routed := ServedRPS(results, measure), RoutedRPS(results, measure)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "region\tcapacity\tsent\tutilization\tplanned\tserved ok\teffective\tsignal\t\n")
	for _, reg := range regionNames {
		p := planned[reg]
		sig := p.Signals
		if sig == "" {
			sig = "-"
		}
		fmt.Fprintf(tw, "%s\t%d/s\t%.0f/s\t%.0f%%\t%.0f%%\t%.0f/s\t%.0f/s\t%s\t\n", reg, RegionCapacity, routed[reg], 100*routed[reg]/RegionCapacity, 100*p.Utilization, served[reg], p.Effective, sig)
	}
	tw.Flush()
}

// Planned returns what the first gfe's /status says about every region:
// its planned utilization against the declared capacity of its healthy
// instances, its effective capacity (the least any gfe gossips) and the
// signals that shrank its groups at that gfe.
func Planned(ctx context.Context, c *topology.Cluster) (map[string]RegionPlan, error) {
	st, err := topology.Status(ctx, c.GFEs[0])
	if err != nil {
		return nil, err
	}
	out := map[string]RegionPlan{}
	for _, s := range st.Services {
		declared := map[string]float64{}
		for _, g := range s.Groups {
			declared[g.Region] += g.DeclaredRPS
			p := out[g.Region]
			p.Effective += g.EffectiveRPS
			if g.Signal != "none" && !strings.Contains(p.Signals, g.Signal) {
				p.Signals = strings.TrimPrefix(p.Signals+","+g.Signal, ",")
			}
			out[g.Region] = p
		}
		for _, r := range s.Regions {
			p := out[r.Name]
			if declared[r.Name] > 0 {
				p.Utilization = r.LoadRPS / declared[r.Name]
			}
			out[r.Name] = p
		}
	}
	return out, nil
}

package policybench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/benchpolicy"
	"github.com/spillway-lb/spillway/lb/routing"
	"github.com/spillway-lb/spillway/sim"
)

// smallWorld: site a's 400 rps fill X (x1 with 3 of 4 instances healthy, x2
// with 3) and spill to Y; b sends 50 to Y.
const smallWorld = `
regions:
  - name: X
    groups:
      - {name: x1, instances: 4, healthy: 3, rate_per_instance: 60}
      - {name: x2, instances: 3, healthy: 3, rate_per_instance: 40}
  - name: Y
    groups:
      - {name: y1, instances: 5, healthy: 5, rate_per_instance: 100}
sites:
  - {name: a, demand_rps: 400, rtt_ms: {X: 1, Y: 50}}
  - {name: b, demand_rps: 50, rtt_ms: {X: 40, Y: 2}}
timeline: {duration_s: 3, damping: 0.5}
`

// runGFEs runs policy p's gfes on s for the timeline's steps and returns
// them with every site's split at the last step, by slot.
func runGFEs(t *testing.T, s *sim.Scenario, p benchpolicy.Row) (*gfes, *topology, *sim.Trace, []map[int]float64) {
	t.Helper()
	tl := *s.Timeline
	tr := s.NewTrace(&tl, tl.Steps())
	topo, err := newTopology(s, &tl, tr, []benchpolicy.Row{p})
	if err != nil {
		t.Fatal(err)
	}
	g := newGFEs(s, &tl, topo, p)
	splits := make([][]split, len(s.Sites))
	lost := make([]float64, len(s.Sites))
	for k := range tr.Steps {
		if err := g.decide(k, tr, splits, lost); err != nil {
			t.Fatalf("step %d: %v", k, err)
		}
	}
	out := make([]map[int]float64, len(s.Sites))
	for si := range out {
		out[si] = map[int]float64{}
		for _, sp := range splits[si] {
			out[si][sp.slot] += sp.share
		}
	}
	return g, topo, tr, out
}

// TestPlannedSplitMatchesTablePicks: the split the simulator takes from a
// gfe's table for a planned policy is the distribution of that table's own
// picks (Service.PickAt with seeded random numbers), after damping and
// with a spill, an unhealthy instance and two groups in a region.
func TestPlannedSplitMatchesTablePicks(t *testing.T) {
	s := mustParse(t, smallWorld)
	for _, p := range []config.Policy{config.PolicyWaterfall, config.PolicyMinRTT} {
		t.Run(string(p), func(t *testing.T) {
			g, topo, _, splits := runGFEs(t, s, benchpolicy.Row{Policy: p})
			now := benchEpoch
			for si, site := range s.Sites {
				svc := g.tables[si].Services[benchService]
				if svc.Picker() == nil {
					t.Fatalf("site %s: no plan row", site.Name)
				}
				const picks = 200_000
				rng := rand.New(rand.NewPCG(1, uint64(si)))
				got := map[int]float64{}
				for range picks {
					pk, err := svc.PickAt(rng.Uint64(), routing.Flow{}, now)
					if err != nil {
						t.Fatalf("site %s: PickAt: %v", site.Name, err)
					}
					got[topo.slotOf[pk.Backend.Addr()]] += 1.0 / picks
					pk.Done()
				}
				// 0.005 is more than 4 standard deviations at 200k picks.
				if diff := cmp.Diff(splits[si], got, cmpopts.EquateApprox(0, 0.005)); diff != "" {
					t.Errorf("site %s: split vs the table's picks (-split +picks):\n%s", site.Name, diff)
				}
			}
			// The world is as the scenario says: a spills out of X, and
			// x1's unhealthy instance (slot 3) gets nothing.
			var toY float64
			for slot, share := range splits[0] {
				if topo.regionOf[topo.slotGroup[slot]] == 1 {
					toY += share
				}
			}
			if !(toY > 0.2 && toY < 0.6) {
				t.Errorf("a sends %v of its demand to Y, want a spill of about 0.4 (damped)", toY)
			}
			if share, ok := splits[0][3]; ok {
				t.Errorf("x1's unhealthy instance (slot 3) gets %v of a's demand", share)
			}
		})
	}
}

// TestBenchGlobalPoolShared: a baseline of scope global has the same pool
// at every gfe, which is why decide builds one table for all of them; a
// table built for each site has that pool too.
func TestBenchGlobalPoolShared(t *testing.T) {
	s := mustParse(t, smallWorld)
	for _, p := range []benchpolicy.Row{{Policy: config.PolicyRoundRobin}, {Policy: config.PolicyHash5, Scope: config.HashScopeGlobal}} {
		t.Run(p.ID(), func(t *testing.T) {
			g, _, tr, _ := runGFEs(t, s, p)
			cs, err := g.snapshot(tr.SeenGroups[0])
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for si := range s.Sites {
				tbl, problems := g.builders[si].Build(routing.Input{Fleet: cs, Self: g.peer(si, 1), Now: benchEpoch})
				if len(problems) > 0 {
					t.Fatal(problems)
				}
				var pool []string
				for _, m := range tbl.Services[benchService].Pool() {
					pool = append(pool, m.B.Addr())
				}
				if si == 0 {
					want = pool
				} else if !slices.Equal(want, pool) {
					t.Errorf("site %s's pool %v, site %s's %v", s.Sites[si].Name, pool, s.Sites[0].Name, want)
				}
			}
			if len(want) != 11 {
				t.Errorf("pool of %d backends, want the 11 healthy ones", len(want))
			}
		})
	}
}

// TestBenchUnreachableRegion: the gfe's pool for scope global is every
// healthy instance, also those in regions a site has no RTT to; in the
// simulation a site does not reach a region missing from its rtt_ms, so
// what it sends there fails.
func TestBenchUnreachableRegion(t *testing.T) {
	s := mustParse(t, `
regions:
  - {name: X, groups: [{name: x, instances: 1, healthy: 1, rate_per_instance: 100}]}
  - {name: Y, groups: [{name: y, instances: 1, healthy: 1, rate_per_instance: 100}]}
sites: [{name: a, demand_rps: 50, rtt_ms: {X: 10}}]
`)
	_, rows := benchRows(t, s, Options{})
	for id, want := range map[string]float64{"round_robin/global": 0.5, "waterfall": 0, "hash5/nearest_region": 0} {
		if got := rows[id].ErrorRate; math.Abs(got-want) > 1e-12 {
			t.Errorf("%s: error rate %v, want %v", id, got, want)
		}
		if got := rows[id].MeanRTTMs; got != 10 {
			t.Errorf("%s: mean RTT %v, want 10 (only what reaches X is routed)", id, got)
		}
	}
}

// TestBenchConfigCorners: worlds a config cannot say as they are still run.
// A group without started instances is left out of the gfes' config (and
// a region without any); a group of rate 0 is configured as rate 1 with
// capacity_scaler 0 (capacity 0 either way), which drains it: the planners
// avoid it and round robin, like the gfe's, leaves it out of its pool.
func TestBenchConfigCorners(t *testing.T) {
	s := mustParse(t, `
regions:
  - {name: X, groups: [{name: x, instances: 0, healthy: 0, rate_per_instance: 100}]}
  - {name: Y, groups: [{name: y, instances: 1, healthy: 1, rate_per_instance: 0}]}
  - {name: Z, groups: [{name: z, instances: 1, healthy: 1, rate_per_instance: 100}]}
sites: [{name: a, demand_rps: 50, rtt_ms: {X: 1, Y: 2, Z: 3}}]
`)
	_, rows := benchRows(t, s, Options{})
	if got := rows["waterfall"]; got.ErrorRate != 0 || got.MeanRTTMs != 3 {
		t.Errorf("waterfall: error rate %v, mean RTT %v; want 0 and 3 (everything to z)", got.ErrorRate, got.MeanRTTMs)
	}
	if got := rows["round_robin/global"]; got.ErrorRate != 0 || got.MeanRTTMs != 3 {
		t.Errorf("round robin: error rate %v, mean RTT %v; want 0 and 3 (y is drained: everything to z)", got.ErrorRate, got.MeanRTTMs)
	}
	empty := mustParse(t, `
regions: [{name: X, groups: [{name: x, instances: 0, healthy: 0, rate_per_instance: 100}]}]
sites: [{name: a, demand_rps: 50, rtt_ms: {X: 1}}]
`)
	_, rows = benchRows(t, empty, Options{})
	for id, r := range rows {
		if r.ErrorRate != 1 {
			t.Errorf("%s: error rate %v with no instance, want 1", id, r.ErrorRate)
		}
	}
}

// TestRankNames: the gfes' names sort as the scenario's do, whatever those
// are.
func TestRankNames(t *testing.T) {
	names := []string{"us-east", "EU West", "asia", "b", "a", "c", "d", "e", "f", "g", "h"}
	got := rankNames("r", names)
	want := []string{"r10", "r00", "r02", "r03", "r01", "r04", "r05", "r06", "r07", "r08", "r09"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rankNames mismatch (-want +got):\n%s", diff)
	}
}

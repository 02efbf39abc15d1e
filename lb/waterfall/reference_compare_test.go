package waterfall

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestComputeMatchesReference holds Compute to the planner it replaced
// (refCompute: one global sort of every pair): on thousands of random worlds
// the plans must be identical, every float bit for bit, and invalid worlds
// must fail with the same message. The worlds are those of the property
// tests, larger ones with up to 300 regions whose RTTs tie exactly or differ
// only in their lowest bits (the bits siteOrder replaces by the region
// index), and the benchmark worlds.
func TestComputeMatchesReference(t *testing.T) {
	cfg := DefaultConfig()
	type world struct {
		name string
		w    World
	}
	var worlds []world
	for seed := range uint64(2000) {
		worlds = append(worlds, world{fmt.Sprintf("randomWorld seed %d", seed), randomWorld(rand.New(rand.NewPCG(seed, 0)))})
	}
	for seed := range uint64(300) {
		worlds = append(worlds, world{fmt.Sprintf("wideWorld seed %d", seed), wideWorld(rand.New(rand.NewPCG(seed, 7)))})
	}
	worlds = append(worlds,
		world{"bench 80×40×3", benchWorldOf(80, 40, 3)},
		world{"bench 300×100×3", benchWorldOf(300, 100, 3)},
		world{"bench 7×1×1", benchWorldOf(7, 1, 1)},
	)
	// -0 is a valid RTT whose bits order after every positive number; the
	// old sort put it last, and so must Compute.
	negZero := benchWorldOf(6, 5, 2)
	negZero.Sites[2].RTT["region-01"] = math.Copysign(0, -1)
	negZero.Sites[4].RTT["region-03"] = math.Copysign(0, -1)
	negZero.Sites[4].RTT["region-00"] = 0
	worlds = append(worlds, world{"RTTs of -0", negZero})
	bad := benchWorldOf(5, 4, 2)
	bad.Sites[3].RTT["region-02"] = math.NaN()
	bad.Sites[1].RTT["region-00"] = -1
	bad.Sites[1].RTT["region-03"] = math.Inf(1)
	bad.Sites[2].Demand = -3
	worlds = append(worlds, world{"invalid RTTs", bad})

	// Plans compare whole, every float bit for bit, their RTT table (what
	// SiteRegions and Damp read; SiteOrders.Equal) included.
	opts := cmp.Options{
		cmp.Comparer(func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }),
	}
	for _, tc := range worlds {
		want, wantErr := refCompute(tc.w, cfg)
		got, gotErr := Compute(tc.w, cfg)
		if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Fatalf("%s: Compute error %v, reference %v", tc.name, gotErr, wantErr)
		}
		if diff := cmp.Diff(want, got, opts); diff != "" {
			t.Fatalf("%s: Compute differs from the reference (-reference +Compute):\n%s\nworld: %s", tc.name, diff, worldJSON(tc.w))
		}
		if wantErr != nil {
			continue // the slice form's errors: TestRTTByRegionInvalid
		}
		// The same world with RTTByRegion instead of maps plans the same.
		dense, err := Compute(withRTTByRegion(tc.w), cfg)
		if err != nil {
			t.Fatalf("%s with RTTByRegion: %v", tc.name, err)
		}
		if diff := cmp.Diff(want, dense, opts); diff != "" {
			t.Fatalf("%s with RTTByRegion differs from the reference (-reference +Compute):\n%s\nworld: %s", tc.name, diff, worldJSON(tc.w))
		}
	}
}

// withRTTByRegion returns w with every site's RTT map replaced by the same
// RTTs as RTTByRegion (+Inf for a region missing from the map).
func withRTTByRegion(w World) World {
	out := World{Regions: w.Regions, Sites: make([]Site, len(w.Sites))}
	for i, s := range w.Sites {
		rtts := make([]float64, len(w.Regions))
		for r, reg := range w.Regions {
			v, ok := s.RTT[reg.Name]
			if !ok {
				v = math.Inf(1)
			}
			rtts[r] = v
		}
		out.Sites[i] = Site{Name: s.Name, Demand: s.Demand, RTTByRegion: rtts}
	}
	return out
}

// wideWorld is a world of 1–40 sites and 1–300 regions: RTTs either small
// integers (many exact ties) or one base RTT nudged by a few ulps (equal in
// every bit but the lowest), some sites reaching only some regions, some
// without demand, and demand from 0.3 to 1.7 times capacity.
func wideWorld(rng *rand.Rand) World {
	var w World
	nr := 1 + rng.IntN(300)
	var capacity float64
	for r := range nr {
		region := Region{Name: fmt.Sprintf("r%03d", r)}
		for g := range 1 + rng.IntN(3) {
			inst := 1 + rng.IntN(10)
			healthy := inst
			if rng.IntN(4) == 0 {
				healthy = rng.IntN(inst + 1)
			}
			c := math.Round(rng.Float64()*1000) / 10
			capacity += c
			region.Groups = append(region.Groups, Group{
				Name: fmt.Sprintf("r%03d-%c", r, 'a'+g), Zone: string(rune('a' + g)),
				Instances: inst, Healthy: healthy, Capacity: c,
			})
		}
		w.Regions = append(w.Regions, region)
	}
	ns := 1 + rng.IntN(40)
	ratio := 0.3 + 1.4*rng.Float64()
	partial := rng.IntN(3) == 0
	ulps := rng.IntN(2) == 0
	for s := range ns {
		st := Site{Name: fmt.Sprintf("s%02d", s), RTT: map[string]float64{}}
		if rng.IntN(8) != 0 {
			st.Demand = rng.Float64() * 2 * ratio * capacity / float64(ns)
		}
		for _, r := range w.Regions {
			if partial && rng.IntN(10) < 4 {
				continue
			}
			v := float64(1 + rng.IntN(20))
			if ulps {
				v = 17
				for range rng.IntN(600) {
					v = math.Nextafter(v, 100)
				}
			}
			st.RTT[r.Name] = v
		}
		w.Sites = append(w.Sites, st)
	}
	return w
}

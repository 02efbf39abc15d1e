package waterfall

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestOrderPrefixMatchesRegionAt: orderPrefix, which finds several regions
// of a site's order in one scan, produces exactly the order of regionAt
// (one scan per region) and of siteReach (the whole site sorted): on
// random rows with many equal RTTs and unreachable regions, for every
// length asked, from every prefix already produced.
func TestOrderPrefixMatchesRegionAt(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := range 300 {
		nr := 1 + rng.IntN(12)
		w := World{Sites: []Site{{Name: "s", Demand: 1, RTTByRegion: make([]float64, nr)}}}
		for r := range nr {
			w.Regions = append(w.Regions, reg(fmt.Sprintf("r%02d", r), grp(fmt.Sprintf("g%02d", r), 1)))
			w.Sites[0].RTTByRegion[r] = float64(rng.IntN(4)) // many ties
			if rng.IntN(4) == 0 {
				w.Sites[0].RTTByRegion[r] = inf
			}
		}
		fresh := func() *model {
			m, err := newModel(w, DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
		want := slices.Clone(fresh().siteReach(0))
		for have := 0; have <= len(want); have++ {
			for n := 0; n <= nr+1; n++ {
				m := fresh()
				for i := range have {
					m.regionAt(0, i)
				}
				m.orderPrefix(0, n)
				got := m.ord[0]
				if l := min(max(n, have), len(want)); len(got) < l || !slices.Equal(got, want[:len(got)]) {
					t.Fatalf("trial %d (rtt %v): after %d regions, orderPrefix(%d) = %v, want a prefix of %v at least %d long", trial, w.Sites[0].RTTByRegion, have, n, got, want, l)
				}
			}
		}
	}
}

package sim

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/spillway-lb/spillway/config"
)

// FuzzParseScenario checks that ParseScenario never panics, that everything
// it accepts passes Validate, and that every baseline policy on an accepted
// scenario either reports ErrUnservable or ErrOverflow or returns a Result that conserves
// demand and encodes as JSON. The seed corpus is every scenario fixture.
func FuzzParseScenario(f *testing.F) {
	for _, pattern := range []string{"testdata/*.yaml", "../configs/scenarios/*.yaml"} {
		files, err := filepath.Glob(pattern)
		if err != nil {
			f.Fatal(err)
		}
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Add([]byte(baselineScenario))
	f.Add([]byte(""))
	f.Add([]byte("regions: [{name: r, groups: [{name: g, instances: 1, healthy: 1, rate_per_instance: 1e-300}]}]\n" +
		"sites: [{name: s, demand_rps: 1e300, rtt_ms: {r: 1}}]\n"))

	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseScenario(data, "fuzz.yaml")
		if err != nil {
			if !errors.Is(err, ErrInvalidScenario) {
				t.Fatalf("ParseScenario error %v does not wrap ErrInvalidScenario", err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("ParseScenario accepted a scenario that Validate rejects: %v", err)
		}
		for _, p := range config.Policies() {
			if p.IsPlanned() {
				continue
			}
			scopes := config.HashScopes()
			if p.OrdersRegions() {
				scopes = []config.HashScope{""} // it orders the regions itself
			}
			for _, sc := range scopes {
				res, err := s.ExpectedFlows(p, sc)
				if errors.Is(err, ErrUnservable) || errors.Is(err, ErrOverflow) {
					continue
				}
				if err != nil {
					t.Fatalf("ExpectedFlows(%s, %s): %v", p, sc, err)
				}
				checkResult(t, s, res)
				if _, err := json.Marshal(res); err != nil {
					t.Fatalf("json.Marshal(ExpectedFlows(%s, %s)): %v", p, sc, err)
				}
			}
		}
	})
}

package policybench

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/spillway-lb/spillway/sim"
)

// FuzzParseTimeline checks that ParseScenario never panics on scenarios with
// timelines; that what it accepts passes Validate and evaluates, at every
// step, to finite non-negative demand and consistent group states; and that
// a short Bench of a small accepted scenario either succeeds with a result
// that encodes as JSON or reports ErrTooLarge or ErrOverflow. The seed corpus is every
// timeline fixture and shipped scenario.
func FuzzParseTimeline(f *testing.F) {
	for _, pattern := range []string{"../testdata/bench/*.yaml", "../../configs/scenarios/*.yaml"} {
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
	f.Add([]byte(tinyRegions + "timeline: {duration_s: 3, step_s: 0.7, gossip_delay_s: 1.3, demand: [{site: '*', kind: flash_crowd, at_s: 0.5, rps: 1e12, hold_s: 0}]}\n"))
	f.Add([]byte(tinyRegions + "timeline: {duration_s: 4, events: [{at_s: 0, group: us-east-b, instances: 0}, {at_s: 1, group: us-east-b, instances: 3, cold_start_s: 0.5}]}\n"))
	f.Add([]byte("regions: [{name: r, groups: [{name: g, instances: 1, healthy: 1, rate_per_instance: 1e308}]}]\n" +
		"sites: [{name: s, demand_rps: 1e300, rtt_ms: {r: 1e300}}]\ntimeline: {duration_s: 2, model: {max_queue_ms: 1e-300}}\n"))

	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := sim.ParseScenario(data, "fuzz.yaml")
		if err != nil {
			if !errors.Is(err, sim.ErrInvalidScenario) {
				t.Fatalf("ParseScenario error %v does not wrap ErrInvalidScenario", err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("ParseScenario accepted a scenario that Validate rejects: %v", err)
		}
		tl := sim.DefaultTimeline()
		if s.Timeline != nil {
			tl = *s.Timeline
		}
		steps := min(tl.Steps(), 50)
		tr := s.NewTrace(&tl, steps)
		for k := range steps {
			for i, d := range tr.Demand[k] {
				if math.IsNaN(d) || math.IsInf(d, 0) || d < 0 || tr.Seen[k][i] < 0 {
					t.Fatalf("step %d site %d: demand %v, seen %v", k, i, d, tr.Seen[k][i])
				}
			}
			for g, st := range tr.Groups[k] {
				if st.Healthy < 0 || st.Healthy > st.Started || st.Pending < 0 || !(st.CapacityScaler >= 0 && st.CapacityScaler <= 1) {
					t.Fatalf("step %d group %d: state %+v", k, g, st)
				}
			}
		}
		instances := 0
		for _, r := range s.Regions {
			for _, g := range r.Groups {
				instances += g.Instances
			}
		}
		for _, e := range tl.Events {
			instances += e.Instances
		}
		if len(s.Sites) > 8 || instances > 200 {
			return
		}
		res, err := Run(s, Options{MaxSteps: 5})
		if errors.Is(err, ErrTooLarge) || errors.Is(err, sim.ErrOverflow) {
			return
		}
		if err != nil {
			t.Fatalf("Bench: %v", err)
		}
		if _, err := json.Marshal(res); err != nil {
			t.Fatalf("json.Marshal(Bench result): %v", err)
		}
	})
}

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/gfe/status"
	"github.com/spillway-lb/spillway/internal/topology"
)

// TestLocalSignalsEndToEnd drives real backends into each kind of trouble
// and checks, through every gfe's /status, that the gfe whose requests
// meet it shrinks the group's effective capacity with the right signal,
// that gossip brings the other gfes to the same factor, and that the
// overloaded site's plan then spills (docs/design.md §3 rule 8):
//
//   - the service runs in UTILIZATION mode (max_utilization 0.8 of 40
//     req/s per instance), us-east really serves 20 req/s per instance and
//     reports its load: nyc at 140 req/s (utilization 0.875) meets
//     load_report before any queue forms;
//   - eu-west also serves 20 req/s, without load reports: lon at 250 req/s
//     meets queueing (the queue of 64 per instance takes seconds to
//     fill, so rejections come later);
//   - asia-east-b answers 429: tokyo meets rejections;
//   - asia-east-c holds every request: tokyo meets in_flight (stopped
//     answering).
//
// First, under light load, no group may shrink at all.
func TestLocalSignalsEndToEnd(t *testing.T) {
	spec := threeSites(24)
	spec.Regions[0].MaxRPS = 20
	spec.Regions[1].MaxRPS = 20
	spec.Regions[1].InstanceKeys = ",load_reports=false"
	// UTILIZATION mode: groups are planned at max_utilization 0.8 of 40
	// req/s per instance, and load reports are held to 0.8.
	spec.EditConfig = func(y string) string {
		y = strings.ReplaceAll(y, "balancing_mode: RATE", "balancing_mode: UTILIZATION")
		return strings.ReplaceAll(y, "max_rate_per_instance: 40", "max_utilization: 0.8, utilization_rate_per_instance: 40")
	}
	c := startCluster(t, spec)
	ctx := context.Background()

	light := map[string]float64{"nyc": 40, "lon": 40, "tokyo": 40}
	l := c.StartLoad(light)
	if err := topology.WaitFor(ctx, 30*time.Second, func() (bool, error) {
		st := statuses(c)
		for site, s := range st {
			if s == nil || s.Services[0].DemandRPS < 36 {
				return false, fmt.Errorf("%s: demand not at 40 yet", site)
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("light load: %v", err)
	}
	// 3 s of light load: every group keeps its full capacity.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		for site, s := range statuses(c) {
			for _, g := range s.Services[0].Groups {
				if g.OwnFactor != 1 {
					t.Errorf("light load: %s shrank %s to %v (%s)", site, g.Name, g.OwnFactor, g.Signal)
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := l.Stop(); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name    string
		rates   map[string]float64
		setup   func(t *testing.T) // makes the trouble
		site    string             // the gfe that meets it
		region  string
		group   string // "" = every group of region
		signal  string
		spillTo string // the region the site's plan must spill to ("" = no check)
	}{
		{"a backend that reports high utilization", map[string]float64{"nyc": 140, "lon": 40, "tokyo": 40}, nil, "nyc", "us-east", "", "load_report", "eu-west"},
		{"a backend that queues", map[string]float64{"nyc": 40, "lon": 250, "tokyo": 40}, nil, "lon", "eu-west", "", "queueing", "us-east"},
		{"a backend that rejects", map[string]float64{"nyc": 40, "lon": 40, "tokyo": 100}, func(t *testing.T) {
			for i := 1; i <= 4; i++ {
				adminPost(t, c.Spec.Addr(2, 0, i), fmt.Sprintf("/admin/fault?instance=asia-east-b-%d&status=429", i))
			}
		}, "tokyo", "asia-east", "asia-east-b-web", "rejections", ""},
		{"a backend that stops answering", map[string]float64{"nyc": 40, "lon": 40, "tokyo": 100}, func(t *testing.T) {
			for i := 1; i <= 4; i++ {
				adminPost(t, c.Spec.Addr(2, 0, i), fmt.Sprintf("/admin/fault?instance=asia-east-b-%d&status=0", i))
				adminPost(t, c.Spec.Addr(2, 1, i), fmt.Sprintf("/admin/hold?instance=asia-east-c-%d&on=true", i))
			}
		}, "tokyo", "asia-east", "asia-east-c-web", "in_flight", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup(t)
			}
			l := c.StartLoad(tc.rates)
			defer l.Stop()
			var seen string
			var factor float64
			err := topology.WaitFor(ctx, 30*time.Second, func() (bool, error) {
				st := statuses(c)
				s := st[tc.site]
				if s == nil {
					return false, fmt.Errorf("no status from %s", tc.site)
				}
				shrunk := false
				for _, g := range s.Services[0].Groups {
					if g.Region == tc.region && (tc.group == "" || g.Name == tc.group) && g.OwnFactor < 1 {
						shrunk, factor = true, g.OwnFactor
						if seen == "" {
							seen = g.Signal
						}
					}
				}
				if !shrunk {
					return false, fmt.Errorf("%s has not shrunk %s", tc.site, tc.region)
				}
				// Gossip: every gfe plans the group below its full
				// capacity.
				for site, o := range st {
					for _, g := range o.Services[0].Groups {
						if g.Region == tc.region && (tc.group == "" || g.Name == tc.group) && g.Factor >= 1 {
							return false, fmt.Errorf("%s still plans %s at factor 1", site, g.Name)
						}
					}
				}
				if tc.spillTo != "" && share(s, tc.spillTo) == 0 {
					return false, fmt.Errorf("%s sends nothing to %s: %+v", tc.site, tc.spillTo, s.Services[0].Plan)
				}
				return true, nil
			})
			if err != nil {
				t.Fatalf("%v", err)
			}
			if seen != tc.signal {
				t.Errorf("%s shrank %s by %s, want %s", tc.site, tc.region, seen, tc.signal)
			}
			t.Logf("%s: %s shrank to %.2f by %s", tc.site, tc.region, factor, seen)
		})
	}
	for i := 1; i <= 4; i++ {
		adminPost(t, c.Spec.Addr(2, 1, i), fmt.Sprintf("/admin/hold?instance=asia-east-c-%d&on=false", i))
	}
}

// share returns the share of s's plan row that goes to region.
func share(s *status.Status, region string) float64 {
	var v float64
	for _, p := range s.Services[0].Plan {
		if p.Region == region {
			v += p.Share
		}
	}
	return v
}

// adminPost posts path to the test backend instance at addr and fails t
// unless it answers 200.
func adminPost(t *testing.T, addr, path string) {
	t.Helper()
	resp, err := http.Post("http://"+addr+path, "", nil)
	if err != nil {
		t.Fatalf("POST %s%s: %v", addr, path, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s%s: %s", addr, path, resp.Status)
	}
}

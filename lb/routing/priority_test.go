package routing_test

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/lb/routing"
)

// priorityConfig is a service under envoy_priority over three regions of
// five instances each, one group per region (us-east 127.0.0.1x, eu-west
// 127.0.0.2x, asia-east 127.0.0.3x), each instance at most maxConc
// requests in flight.
func priorityConfig(t *testing.T, maxConc int) *config.Config {
	t.Helper()
	var b strings.Builder
	b.WriteString("regions:\n")
	for ri, r := range []string{"us-east", "eu-west", "asia-east"} {
		fmt.Fprintf(&b, "  - name: %s\n    zones:\n      - name: %s-b\n        groups:\n          - name: %s-g\n            instances:\n", r, r, r)
		for j := range 5 {
			fmt.Fprintf(&b, "              - {address: 127.0.0.%d%d:80, max_concurrency: %d}\n", ri+1, j, maxConc)
		}
	}
	b.WriteString("services:\n  - name: web\n    policy: envoy_priority\n    backends:\n")
	for _, r := range []string{"us-east", "eu-west", "asia-east"} {
		fmt.Fprintf(&b, "      - {group: %s-g, max_rate_per_instance: 10}\n", r)
	}
	b.WriteString("routes:\n  - service: web\n")
	cfg, err := config.Parse([]byte(b.String()), "priority.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// buildPriority builds the service's table entry for a gfe at nyc with rtt,
// the given instances unhealthy, and every site's demand (this one's and a
// peer's) at demand requests/s.
func buildPriority(t *testing.T, cfg *config.Config, rtt map[string]float64, demand float64, unhealthy ...string) *routing.Service {
	t.Helper()
	b := routing.NewBuilder(routing.Config{Node: "gfe-nyc", Site: "nyc", Damping: 1}, routing.Options{Now: time.Now, Rand: lcg()})
	in := routing.Input{
		Fleet: routing.FromConfig("v1", cfg, unhealthy...),
		Peers: []routing.Peer{{Node: "gfe-lon", Site: "lon", RTT: map[string]float64{"eu-west": 5}, Demand: map[string]float64{"web": demand}}},
		Self:  routing.Peer{Node: "gfe-nyc", Site: "nyc", RTT: rtt, Demand: map[string]float64{"web": demand}},
		Now:   time.Unix(1e9, 0),
	}
	tbl, problems := b.Build(in)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	return tbl.Services["web"]
}

// levelLoads returns each level's regions, health counts and load.
func levelLoads(svc *routing.Service) []string {
	var out []string
	for _, lv := range svc.Priorities() {
		out = append(out, fmt.Sprintf("%s %d/%d %d%%", strings.Join(lv.Regions, "+"), lv.Healthy, lv.Total, lv.Load))
	}
	return out
}

// pickRegions picks n times (releasing each pick) and counts the picks per
// region.
func pickRegions(t *testing.T, svc *routing.Service, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	k := routing.Flow{Src: netip.MustParseAddrPort("127.0.3.4:5555"), Dst: netip.MustParseAddrPort("127.0.1.1:8080")}
	for i := range n {
		p, err := svc.Pick(uint64(i), k)
		if err != nil {
			t.Fatalf("pick %d: %v", i, err)
		}
		got[p.Region]++
		p.Done()
	}
	return got
}

// TestEnvoyPriorityLevels: the envoy_priority baseline on constructed
// worlds. The site's regions by RTT are its priorities; the loads are
// Envoy's from health alone, and the picks follow them to the request (the
// Weyl sequence spreads each hundred picks exactly).
func TestEnvoyPriorityLevels(t *testing.T) {
	cfg := priorityConfig(t, 0)
	rtt := map[string]float64{"us-east": 5, "eu-west": 80, "asia-east": 150}
	for _, tt := range []struct {
		name      string
		rtt       map[string]float64
		demand    float64
		unhealthy []string
		want      []string
		picks     map[string]int // of 1000
		// tol is the tolerance on picks: 2 between levels (the Weyl
		// sequence), more inside a level of several regions (least
		// request draws at random).
		tol int
	}{
		{
			name: "all healthy: everything to the nearest region", rtt: rtt, demand: 10,
			want:  []string{"us-east 5/5 100%", "eu-west 5/5 0%", "asia-east 5/5 0%"},
			picks: map[string]int{"us-east": 1000},
		},
		{
			name: "nearest 60% healthy: 84% there, 16% to the next", rtt: rtt, demand: 10,
			unhealthy: []string{"127.0.0.13:80", "127.0.0.14:80"},
			want:      []string{"us-east 3/5 84%", "eu-west 5/5 16%", "asia-east 5/5 0%"},
			picks:     map[string]int{"us-east": 840, "eu-west": 160},
		},
		{
			// 10 000 req/s against 50 req/s of capacity per region: a
			// healthy priority 0 keeps everything (no capacity spill).
			name: "nearest overloaded but healthy keeps all", rtt: rtt, demand: 10_000,
			want:  []string{"us-east 5/5 100%", "eu-west 5/5 0%", "asia-east 5/5 0%"},
			picks: map[string]int{"us-east": 1000},
		},
		{
			name: "nearest down, next 40% healthy: normalized", rtt: rtt, demand: 10,
			unhealthy: []string{"127.0.0.10:80", "127.0.0.11:80", "127.0.0.12:80", "127.0.0.13:80", "127.0.0.14:80", "127.0.0.20:80", "127.0.0.21:80", "127.0.0.22:80"},
			// health 0, 56, 100: normalized total 100.
			want:  []string{"us-east 0/5 0%", "eu-west 2/5 56%", "asia-east 5/5 44%"},
			picks: map[string]int{"eu-west": 560, "asia-east": 440},
		},
		{
			name: "order is the gfe's RTT", rtt: map[string]float64{"us-east": 90, "eu-west": 4, "asia-east": 30}, demand: 10,
			want:  []string{"eu-west 5/5 100%", "asia-east 5/5 0%", "us-east 5/5 0%"},
			picks: map[string]int{"eu-west": 1000},
		},
		{
			name: "regions without RTT are one last level", rtt: map[string]float64{"asia-east": 30}, demand: 10,
			unhealthy: []string{"127.0.0.30:80", "127.0.0.31:80", "127.0.0.32:80", "127.0.0.33:80", "127.0.0.34:80"},
			want:      []string{"asia-east 0/5 0%", "eu-west+us-east 10/10 100%"},
			picks:     map[string]int{"eu-west": 500, "us-east": 500}, tol: 60,
		},
		{
			name: "no RTT yet: one level over every region", rtt: nil, demand: 10,
			want:  []string{"asia-east+eu-west+us-east 15/15 100%"},
			picks: map[string]int{"us-east": 333, "eu-west": 333, "asia-east": 334}, tol: 60,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			svc := buildPriority(t, cfg, tt.rtt, tt.demand, tt.unhealthy...)
			if diff := cmp.Diff(tt.want, levelLoads(svc)); diff != "" {
				t.Errorf("levels (-want +got):\n%s", diff)
			}
			got := pickRegions(t, svc, 1000)
			for r, want := range tt.picks {
				tol := max(tt.tol, 2)
				if d := got[r] - want; d < -tol || d > tol {
					t.Errorf("%d of 1000 picks in %s, want %d ±%d (all: %v)", got[r], r, want, tol, got)
				}
			}
			for r, n := range got {
				if _, ok := tt.picks[r]; !ok && n > 0 {
					t.Errorf("%d picks in %s, want none (all: %v)", n, r, got)
				}
			}
		})
	}
}

// TestEnvoyPriorityNoCapacitySpill: with every instance of the healthy
// nearest region at its concurrency limit a pick is refused as busy; it
// does not spill to the next priority, which Envoy's model leaves idle.
func TestEnvoyPriorityNoCapacitySpill(t *testing.T) {
	svc := buildPriority(t, priorityConfig(t, 1), map[string]float64{"us-east": 5, "eu-west": 80, "asia-east": 150}, 10)
	for _, m := range svc.Priorities()[0].Members {
		if !m.B.TryAcquire() {
			t.Fatalf("%s: no slot", m.B.Addr())
		}
	}
	k := routing.Flow{Src: netip.MustParseAddrPort("127.0.3.4:5555"), Dst: netip.MustParseAddrPort("127.0.1.1:8080")}
	for i := range 100 {
		p, err := svc.Pick(uint64(i), k)
		if !errors.Is(err, routing.ErrAllBusy) {
			t.Fatalf("pick %d with us-east full: %s, %v; want ErrAllBusy", i, p.Region, err)
		}
	}
}

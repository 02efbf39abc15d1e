package routing_test

import (
	"strings"
	"testing"

	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/lb/backend"
	"github.com/spillway-lb/spillway/lb/outlier"
	"github.com/spillway-lb/spillway/lb/routing"
)

// TestRetryPick checks the order in which retries look for a backend.
// After a backend that failed before answering: another zone of the
// region, then another region of the scope, then the same zone. After an
// unreachable one (connect failure, per-try timeout): another region first,
// past the plan row if it must (the site's farther regions, nearest
// first), then another zone, then the same zone. Never a backend tried,
// full or ejected.
func TestRetryPick(t *testing.T) {
	regions := []gfetest.Region{
		{Name: "us-east", Zones: []gfetest.Zone{{Name: "us-east-b", Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}}, {Name: "us-east-c", Addrs: []string{"127.0.0.1:3"}}}},
		{Name: "eu-west", Zones: []gfetest.Zone{{Name: "eu-west-b", Addrs: []string{"127.0.0.1:4"}}}},
		{Name: "asia-east", Zones: []gfetest.Zone{{Name: "asia-east-b", Addrs: []string{"127.0.0.1:5"}}}},
	}
	const a1, a2, c1, w1, s1 = "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:4", "127.0.0.1:5"
	tests := []struct {
		name        string
		policy      string
		unreachable bool
		tried       []string // the last failed
		full        string   // a backend at its limit
		eject       string   // a backend ejected
		want        string   // "" = none; alternatives separated by |
	}{
		{"other zone first", "round_robin", false, []string{a1}, "", "", c1},
		{"then other region", "round_robin", false, []string{a1, c1}, "", "", w1},
		{"then the next region", "round_robin", false, []string{a1, c1, w1}, "", "", s1},
		{"then same zone", "round_robin", false, []string{a1, c1, w1, s1}, "", "", a2},
		{"none left", "round_robin", false, []string{a1, c1, w1, s1, a2}, "", "", ""},
		{"full skipped", "round_robin", false, []string{a1}, c1, "", w1},
		{"ejected skipped", "round_robin", false, []string{c1}, "", a1, a2},
		{"from other region back home", "round_robin", false, []string{w1}, "", "", a1 + "|" + a2 + "|" + c1},
		{"unreachable: other region first", "round_robin", true, []string{a1}, "", "", w1},
		{"unreachable: then the next region", "round_robin", true, []string{a1, w1}, "", "", s1},
		{"unreachable: then other zone", "round_robin", true, []string{a1, w1, s1}, "", "", c1},
		{"unreachable: then same zone", "round_robin", true, []string{a1, w1, s1, c1}, "", "", a2},
		{"unreachable: full region skipped", "round_robin", true, []string{a1}, w1, "", s1},
		// The waterfall plan of an idle site uses us-east only: a retry
		// keeps to it unless the backend was unreachable.
		{"plan row only", "waterfall", false, []string{a1, c1}, "", "", a2},
		{"plan row exhausted", "waterfall", false, []string{a1, c1, a2}, "", "", ""},
		{"unreachable: leaves the row for the nearest farther region", "waterfall", true, []string{a1}, "", "", w1},
		{"unreachable: then the next farther region", "waterfall", true, []string{a1, w1}, "", "", s1},
		{"unreachable: from a farther region back to the row", "waterfall", true, []string{w1}, "", "", a1 + "|" + a2 + "|" + c1},
		{"unreachable: full farther region skipped", "waterfall", true, []string{a1}, w1, "", s1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := gfetest.NewPlanner(gfetest.Rand())
			p.SetRTT("asia-east", 150)
			p.Apply(snapshot.FromConfig("v1", gfetest.SessionConfig(t, tt.policy, regions, "", "")))
			p.Step()
			clk := p.Clock
			svc := p.Table().Services["web"]
			member := func(addr string) *routing.Member {
				m, ok := svc.ReachMember(addr)
				if !ok {
					t.Fatalf("%s is not in the reach", addr)
				}
				return m
			}
			var tried []*backend.Backend
			for _, a := range tt.tried {
				tried = append(tried, member(a).B)
			}
			failed := routing.PickOf(member(tt.tried[len(tt.tried)-1]), routing.ReasonPolicy)
			if tt.full != "" {
				b := member(tt.full).B
				b.SetMaxConcurrency(1)
				b.TryAcquire()
			}
			if tt.eject != "" {
				h := member(tt.eject).Host
				for range 5 {
					h.Report(outlier.ServerError, clk.Now())
				}
			}
			for rnd := range uint64(8) { // any start position
				pk, ok := svc.RetryPick(&failed, tried, tt.unreachable, rnd, clk.Now())
				got := ""
				if ok {
					got = pk.Backend.Addr()
					pk.Done()
				}
				if !strings.Contains("|"+tt.want+"|", "|"+got+"|") || (got == "") != (tt.want == "") {
					t.Errorf("RetryPick(unreachable %t, rnd %d) after %v = %q, want %q", tt.unreachable, rnd, tt.tried, got, tt.want)
				}
			}
		})
	}
}

func TestAvailable(t *testing.T) {
	cfg := gfetest.TCPConfig(t, "waterfall", gfetest.Instances("127.0.0.1:1", "127.0.0.1:2"), gfetest.Instances("127.0.0.1:3"), 0)
	tests := []struct {
		name    string
		cs      *routing.Fleet
		service string
		addr    string
		want    bool
	}{
		{"no snapshot yet", nil, "db", "127.0.0.1:1", true},
		{"healthy", routing.FromConfig("", cfg), "db", "127.0.0.1:3", true},
		{"unhealthy", routing.FromConfig("", cfg, "127.0.0.1:1"), "db", "127.0.0.1:1", false},
		{"another is unhealthy", routing.FromConfig("", cfg, "127.0.0.1:1"), "db", "127.0.0.1:2", true},
		{"not an instance of the service", routing.FromConfig("", cfg), "db", "127.0.0.1:9", false},
		{"service removed", routing.FromConfig("", cfg), "gone", "127.0.0.1:1", false},
	}
	for _, tt := range tests {
		if got := routing.Available(tt.cs, tt.service, tt.addr); got != tt.want {
			t.Errorf("%s: Available(%q, %q) = %v, want %v", tt.name, tt.service, tt.addr, got, tt.want)
		}
	}
}

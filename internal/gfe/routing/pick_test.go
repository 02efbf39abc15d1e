package routing_test

import (
	"strings"
	"testing"

	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/internal/gfe/routing"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/lb/backend"
	"github.com/spillway-lb/spillway/lb/outlier"
)

// TestRetryPick checks the order in which retries look for a backend:
// another zone of the region, then another region of the scope, then the
// same zone; never a backend tried, full or ejected.
func TestRetryPick(t *testing.T) {
	regions := []gfetest.Region{
		{Name: "us-east", Zones: []gfetest.Zone{{Name: "us-east-b", Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}}, {Name: "us-east-c", Addrs: []string{"127.0.0.1:3"}}}},
		{Name: "eu-west", Zones: []gfetest.Zone{{Name: "eu-west-b", Addrs: []string{"127.0.0.1:4"}}}},
	}
	const a1, a2, c1, w1 = "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:4"
	tests := []struct {
		name   string
		policy string
		tried  []string // the first failed
		full   string   // a backend at its limit
		eject  string   // a backend ejected
		want   string   // "" = none
	}{
		{"other zone first", "round_robin", []string{a1}, "", "", c1},
		{"then other region", "round_robin", []string{a1, c1}, "", "", w1},
		{"then same zone", "round_robin", []string{a1, c1, w1}, "", "", a2},
		{"none left", "round_robin", []string{a1, c1, w1, a2}, "", "", ""},
		{"full skipped", "round_robin", []string{a1}, c1, "", w1},
		{"ejected skipped", "round_robin", []string{c1}, "", a1, a2},
		{"from other region back home", "round_robin", []string{w1}, "", "", a1 + "|" + a2 + "|" + c1},
		// The waterfall plan of an idle site uses us-east only.
		{"plan row only", "waterfall", []string{a1, c1}, "", "", a2},
		{"plan row exhausted", "waterfall", []string{a1, c1, a2}, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := gfetest.NewPlanner(gfetest.Rand())
			p.Apply(snapshot.FromConfig("v1", gfetest.SessionConfig(t, tt.policy, regions, "", "")))
			p.Step()
			clk := p.Clock
			svc := p.Table().Services["web"]
			member := func(addr string) *routing.Member {
				m, ok := svc.Member(addr)
				if !ok {
					t.Fatalf("%s is not in the scope", addr)
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
				pk, ok := svc.RetryPick(&failed, tried, rnd, clk.Now())
				got := ""
				if ok {
					got = pk.Backend.Addr()
					pk.Done()
				}
				if !strings.Contains("|"+tt.want+"|", "|"+got+"|") || (got == "") != (tt.want == "") {
					t.Errorf("RetryPick(rnd %d) after %v = %q, want %q", rnd, tt.tried, got, tt.want)
				}
			}
		})
	}
}

func TestAvailable(t *testing.T) {
	cfg := gfetest.TCPConfig(t, "waterfall", gfetest.Instances("127.0.0.1:1", "127.0.0.1:2"), gfetest.Instances("127.0.0.1:3"), 0)
	tests := []struct {
		name    string
		cs      *snapshot.Snapshot
		service string
		addr    string
		want    bool
	}{
		{"no snapshot yet", nil, "db", "127.0.0.1:1", true},
		{"healthy", snapshot.FromConfig("", cfg), "db", "127.0.0.1:3", true},
		{"unhealthy", snapshot.FromConfig("", cfg, "127.0.0.1:1"), "db", "127.0.0.1:1", false},
		{"another is unhealthy", snapshot.FromConfig("", cfg, "127.0.0.1:1"), "db", "127.0.0.1:2", true},
		{"not an instance of the service", snapshot.FromConfig("", cfg), "db", "127.0.0.1:9", false},
		{"service removed", snapshot.FromConfig("", cfg), "gone", "127.0.0.1:1", false},
	}
	for _, tt := range tests {
		if got := routing.Available(tt.cs, tt.service, tt.addr); got != tt.want {
			t.Errorf("%s: Available(%q, %q) = %v, want %v", tt.name, tt.service, tt.addr, got, tt.want)
		}
	}
}

package routing_test

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/lb/affinity"
	"github.com/spillway-lb/spillway/lb/routing"
)

// demotedConfig is two regions: us-east's group east with instances
// 127.0.0.1:1..3 and eu-west's group west with 127.0.0.1:4..5, every one
// with max_concurrency 1 and 100 req/s; the instances in demoted are
// demoted. policy is the service's.
func demotedConfig(t *testing.T, policy string, demoted ...string) *config.Config {
	t.Helper()
	return demotedConfigWith(t, policy, "", demoted...)
}

// demotedConfigWith is demotedConfig with extra, YAML lines of the
// service's (indented by 4 spaces).
func demotedConfigWith(t *testing.T, policy, extra string, demoted ...string) *config.Config {
	t.Helper()
	inst := func(from, to int) string {
		var b strings.Builder
		for i := from; i <= to; i++ {
			a := fmt.Sprintf("127.0.0.1:%d", i)
			d := false
			for _, x := range demoted {
				d = d || x == a
			}
			fmt.Fprintf(&b, "              - {address: %q, max_concurrency: 1, demoted: %v}\n", a, d)
		}
		return b.String()
	}
	y := fmt.Sprintf(`regions:
  - name: us-east
    zones:
      - name: us-east-b
        groups:
          - name: east
            instances:
%s  - name: eu-west
    zones:
      - name: eu-west-b
        groups:
          - name: west
            instances:
%sservices:
  - name: web
    policy: %s
%s    backends:
      - {group: east, max_rate_per_instance: 100}
      - {group: west, max_rate_per_instance: 100}
routes:
  - {host: "*", path_prefix: /, service: web}
`, inst(1, 3), inst(4, 5), policy, extra)
	c, err := config.Parse([]byte(y), "demoted.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// buildNYC builds the table of the gfe at site nyc (5 ms from us-east, 80
// from eu-west) with demand 50 req/s for web.
func buildNYC(t *testing.T, cs *routing.Fleet) *routing.Table {
	t.Helper()
	b := routing.NewBuilder(routing.Config{Node: "gfe-nyc", Site: "nyc", Damping: 1}, routing.Options{Now: time.Now, Rand: gfetest.Rand()})
	tbl, problems := b.Build(routing.Input{Fleet: cs, Self: routing.Peer{Node: "gfe-nyc", Site: "nyc", RTT: map[string]float64{"us-east": 5, "eu-west": 80}, Demand: map[string]float64{"web": 50}}, Now: time.Unix(1_000_000, 0)})
	if len(problems) > 0 {
		t.Fatalf("Build: %v", problems)
	}
	return tbl
}

// TestDemotedCapacity: a demoted instance counts for nothing in its
// group's capacity: healthy, instances and declared capacity count the
// active instances only.
func TestDemotedCapacity(t *testing.T) {
	tests := []struct {
		name          string
		demoted       []string
		unhealthy     []string
		wantHealthy   int
		wantInstances int
		wantDeclared  float64 // req/s
	}{
		{"none demoted", nil, nil, 3, 3, 300},
		{"3 healthy, 1 demoted: the capacity of 2", []string{"127.0.0.1:3"}, nil, 2, 2, 200},
		{"an unhealthy active one", []string{"127.0.0.1:3"}, []string{"127.0.0.1:1"}, 1, 2, 100},
		{"an unhealthy demoted one changes nothing", []string{"127.0.0.1:3"}, []string{"127.0.0.1:3"}, 2, 2, 200},
		{"every one demoted", []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}, nil, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := routing.FromConfig("v1", demotedConfig(t, "waterfall", tt.demoted...), tt.unhealthy...)
			svc := buildNYC(t, cs).Services["web"]
			var found bool
			for _, g := range svc.Capacity() {
				if g.Group != "east" {
					continue
				}
				found = true
				if g.Healthy != tt.wantHealthy || math.Abs(g.Declared-tt.wantDeclared) > 1e-9 || math.Abs(g.Planned-tt.wantDeclared*0.95) > 1e-9 {
					t.Errorf("Capacity() east = healthy %d, declared %v, planned %v; want %d, %v, %v", g.Healthy, g.Declared, g.Planned, tt.wantHealthy, tt.wantDeclared, tt.wantDeclared*0.95)
				}
			}
			if !found {
				t.Fatal("Capacity() has no group east")
			}
			for _, r := range svc.World().Regions {
				for _, g := range r.Groups {
					if g.Name == "east" && (g.Instances != tt.wantInstances || g.Healthy != tt.wantHealthy) {
						t.Errorf("World() east = %d of %d healthy, want %d of %d", g.Healthy, g.Instances, tt.wantHealthy, tt.wantInstances)
					}
				}
			}
			if err := routing.CheckPlannable(cs); err != nil {
				t.Errorf("CheckPlannable: %v", err)
			}
		})
	}
}

// TestDemotedPickedLastWaterfall: east has 2 active instances and 1
// demoted, each taking one request: the first 2 picks take the active
// ones, the third the demoted one, and only the fourth spills to west.
func TestDemotedPickedLastWaterfall(t *testing.T) {
	cs := routing.FromConfig("v1", demotedConfig(t, "waterfall", "127.0.0.1:3"))
	svc := buildNYC(t, cs).Services["web"]
	// One at a time, the demoted instance gets nothing.
	for i := range 100 {
		pk, err := svc.Pick(uint64(i), routing.Flow{})
		if err != nil {
			t.Fatalf("pick %d: %v", i, err)
		}
		if pk.Group != "east" || pk.Backend.Addr() == "127.0.0.1:3" {
			t.Fatalf("pick %d = %s (group %s) with both active instances free, want an active one of east", i, pk.Backend.Addr(), pk.Group)
		}
		pk.Done()
	}
	want := []string{"active", "active", "127.0.0.1:3", "west"}
	var held []routing.Pick
	defer func() {
		for i := range held {
			held[i].Done()
		}
	}()
	for i, w := range want {
		pk, err := svc.Pick(uint64(i), routing.Flow{})
		if err != nil {
			t.Fatalf("pick %d: %v", i, err)
		}
		held = append(held, pk)
		addr := pk.Backend.Addr()
		var ok bool
		switch w {
		case "active":
			ok = addr == "127.0.0.1:1" || addr == "127.0.0.1:2"
		case "west":
			ok = pk.Group == "west"
		default:
			ok = addr == w
		}
		if !ok {
			t.Errorf("pick %d = %s (group %s), want %s", i, addr, pk.Group, w)
		}
	}
	if held[0].Backend == held[1].Backend {
		t.Errorf("picks 0 and 1 both on %s, want both active instances", held[0].Backend.Addr())
	}
	if held[2].Group != "east" || held[2].Reason != routing.ReasonNearest {
		t.Errorf("demoted pick: group %s reason %v, want east nearest", held[2].Group, held[2].Reason)
	}
}

// TestDemotedPickedLastBaseline: the baseline policies pick among the
// active instances while one has a slot (hashing hashes over them only),
// and take a demoted one only when every active one is full.
func TestDemotedPickedLastBaseline(t *testing.T) {
	for _, policy := range []string{"round_robin", "least_request", "hash2", "hash5"} {
		t.Run(policy, func(t *testing.T) {
			cs := routing.FromConfig("v1", demotedConfig(t, policy, "127.0.0.1:3"))
			svc := buildNYC(t, cs).Services["web"]
			var pool []string
			for _, m := range svc.Pool() {
				pool = append(pool, m.B.Addr())
			}
			if got, want := strings.Join(pool, ","), "127.0.0.1:1,127.0.0.1:2,127.0.0.1:4,127.0.0.1:5,127.0.0.1:3"; got != want {
				t.Errorf("Pool() = %s, want %s (active first)", got, want)
			}
			// One at a time: never the demoted instance.
			count := map[string]int{}
			for i := range 2000 {
				src := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), uint16(1000+i))
				pk, err := svc.Pick(uint64(i)*0x9E3779B97F4A7C15, routing.Flow{Src: src, Dst: netip.MustParseAddrPort("10.9.9.9:443")})
				if err != nil {
					t.Fatalf("pick %d: %v", i, err)
				}
				count[pk.Backend.Addr()]++
				pk.Done()
			}
			if n := count["127.0.0.1:3"]; n != 0 {
				t.Errorf("demoted instance got %d of 2000 picks while the active ones were free, want 0 (%v)", n, count)
			}
			// Every active instance full: the demoted one takes the next.
			var held []routing.Pick
			for _, m := range svc.Pool() {
				if !m.Demoted && m.B.TryAcquire() {
					held = append(held, routing.Pick{Backend: m.B})
				}
			}
			if n := testing.AllocsPerRun(100, func() {
				pk, err := svc.Pick(7, routing.Flow{})
				if err != nil {
					panic(err)
				}
				pk.Done()
			}); n != 0 {
				t.Errorf("a pick of the demoted instance allocates %v times, want 0", n)
			}
			pk, err := svc.Pick(7, routing.Flow{})
			if err != nil || pk.Backend.Addr() != "127.0.0.1:3" {
				t.Errorf("pick with every active instance full = %v, %v; want 127.0.0.1:3", addrOf(pk), err)
			}
			if err == nil {
				held = append(held, pk)
			}
			if _, err := svc.Pick(8, routing.Flow{}); !errors.Is(err, routing.ErrAllBusy) {
				t.Errorf("pick with everything full: %v, want ErrAllBusy", err)
			}
			for i := range held {
				held[i].Done()
			}
		})
	}
}

// TestDemotedNearestFreeAndRetry: NearestFree and RetryPick prefer an
// active instance to a demoted one of the same region.
func TestDemotedNearestFreeAndRetry(t *testing.T) {
	cs := routing.FromConfig("v1", demotedConfig(t, "round_robin", "127.0.0.1:1"))
	svc := buildNYC(t, cs).Services["web"]
	rtt := map[string]float64{"us-east": 5, "eu-west": 80}
	// us-east's active instances each hold a request (limit raised to 2,
	// so they are not full); the demoted one holds none, and still loses.
	for _, a := range []string{"127.0.0.1:2", "127.0.0.1:3"} {
		m, _ := svc.Member(a)
		m.B.SetMaxConcurrency(2)
		m.B.TryAcquire()
		defer m.B.Release()
	}
	for i := range 10 {
		pk, err := svc.NearestFree(rtt, "", routing.ReasonPolicy)
		if err != nil || pk.Backend.Addr() != "127.0.0.1:2" {
			t.Fatalf("NearestFree #%d = %v, %v; want 127.0.0.1:2 (active, nearest, first in pool order)", i, addrOf(pk), err)
		}
		pk.Done()
	}
	// A request failed on west's 127.0.0.1:4 (the backend took it and
	// failed): the retry goes to a region not tried, us-east, whose
	// members 127.0.0.1:1 (demoted), :2 and :3 are all of the same tier —
	// and takes an active one, whatever the draw.
	m, ok := svc.Member("127.0.0.1:4")
	if !ok || !m.B.TryAcquire() {
		t.Fatal("127.0.0.1:4 not in scope, or full")
	}
	failed := routing.Pick{Backend: m.B, Group: m.Group, Region: m.Region, Reason: routing.ReasonPolicy}
	defer failed.Done()
	for rnd := range uint64(20) {
		pk, ok := svc.RetryPick(&failed, nil, false, rnd, time.Unix(1_000_000, 0))
		if !ok {
			t.Fatalf("RetryPick(rnd %d): none", rnd)
		}
		if pk.Region != "us-east" || pk.Backend.Addr() == "127.0.0.1:1" {
			t.Errorf("RetryPick(rnd %d) = %s in %s, want an active instance of us-east", rnd, pk.Backend.Addr(), pk.Region)
		}
		pk.Done()
	}
}

// TestDemotedNoAffinityPin: client-IP affinity pins no client to a
// demoted instance.
func TestDemotedNoAffinityPin(t *testing.T) {
	c := demotedConfigWith(t, "round_robin", "    session_affinity: {type: client_ip}\n", "127.0.0.1:3")
	svc := buildNYC(t, routing.FromConfig("v1", c)).Services["web"]
	if svc.Affinity() == nil {
		t.Fatal("no affinity")
	}
	for i := range 500 {
		ip := netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})
		pk, _, err := svc.PickAffinity(affinity.Request{ClientIP: ip, DestIP: netip.MustParseAddr("10.9.9.9")}, time.Unix(1_000_000, 0), gfetest.Rand())
		if err != nil {
			t.Fatalf("client %v: %v", ip, err)
		}
		if pk.Backend.Addr() == "127.0.0.1:3" {
			t.Fatalf("client %v pinned to the demoted instance", ip)
		}
		pk.Done()
	}
}

// addrOf returns the address of pk's backend, "<none>" without one.
func addrOf(pk routing.Pick) string {
	if pk.Backend == nil {
		return "<none>"
	}
	return pk.Backend.Addr()
}

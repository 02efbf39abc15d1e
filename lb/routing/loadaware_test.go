package routing_test

import (
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/lb/routing"
)

// laFleet is one region of one zone with the instances addrs, service web
// waterfall with serviceExtra (config lines of the service).
func laFleet(t *testing.T, addrs []string, serviceExtra string, unhealthy ...string) *routing.Fleet {
	t.Helper()
	cfg := gfetest.SessionConfig(t, "waterfall", []gfetest.Region{{Name: "r1", Zones: []gfetest.Zone{{Name: "z1", Addrs: addrs}}}}, serviceExtra, "")
	return routing.FromConfig("v1", cfg, unhealthy...)
}

// laBuild builds a table of fleet at now with nyc 5ms from r1 and the given
// demand of web.
func laBuild(t *testing.T, b *routing.Builder, fleet *routing.Fleet, now time.Time, demand float64) *routing.Service {
	t.Helper()
	tbl, problems := b.Build(routing.Input{Fleet: fleet, Self: routing.Peer{Node: "gfe-nyc", Site: "nyc", RTT: map[string]float64{"r1": 5}, Demand: map[string]float64{"web": demand}}, Now: now})
	if len(problems) > 0 {
		t.Fatalf("Build: %v", problems)
	}
	return tbl.Services["web"]
}

// laRun plays requests on virtual time from `from` for d, one every step,
// each answered after latency(addr, now) and reported to the pick; the
// table is rebuilt every second. It returns the requests per address.
func laRun(t *testing.T, b *routing.Builder, fleet func(time.Time) *routing.Fleet, from time.Time, d, step time.Duration, latency func(addr string, now time.Time) time.Duration) map[string]int {
	t.Helper()
	got := map[string]int{}
	k := routing.Flow{Src: netip.MustParseAddrPort("127.0.3.4:5555"), Dst: netip.MustParseAddrPort("127.0.1.1:8080")}
	rnd := lcg()
	var svc *routing.Service
	for now := from; now.Before(from.Add(d)); now = now.Add(step) {
		if svc == nil || now.Sub(from)%time.Second == 0 {
			svc = laBuild(t, b, fleet(now), now, 100)
		}
		pk, err := svc.PickAt(rnd(), k, now)
		if err != nil {
			t.Fatalf("pick at %v: %v", now.Sub(from), err)
		}
		addr := pk.Backend.Addr()
		got[addr]++
		l := latency(addr, now)
		pk.ObserveLatency(now.Add(l), l)
		pk.Done()
	}
	return got
}

// TestLoadAwareSlowInstance: with load_aware on, an instance that turns 20
// times slower loses its share within a second and gets a third back
// within a few seconds of recovering (probe_after 2s), on the injected
// time of Input.Now and PickAt; with it off (round robin inside the
// group), the slow instance keeps a third throughout.
func TestLoadAwareSlowInstance(t *testing.T) {
	addrs := []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}
	slow := addrs[2]
	t0 := time.Unix(1_000_000, 0)
	slowFrom, slowTo := t0.Add(2*time.Second), t0.Add(6*time.Second)
	latency := func(addr string, now time.Time) time.Duration {
		if addr == slow && !now.Before(slowFrom) && now.Before(slowTo) {
			return 200 * time.Millisecond
		}
		return 10 * time.Millisecond
	}
	share := func(m map[string]int) float64 {
		n := 0
		for _, c := range m {
			n += c
		}
		return float64(m[slow]) / float64(n)
	}
	for _, tt := range []struct {
		name  string
		extra string
		// slowMax bounds the slow instance's share while slow (from 1s
		// into its slow spell), backMin its share from 3s after it
		// recovered.
		slowMax, backMin float64
	}{
		{"load_aware", "load_aware: {enabled: true, slow_start: 0s}", 0.05, 0.25},
		{"load_aware with slow start", "load_aware: {enabled: true}", 0.05, 0.25},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fleet := laFleet(t, addrs, tt.extra)
			b := routing.NewBuilder(routing.Config{Node: "gfe-nyc", Site: "nyc", Damping: 1}, routing.Options{Rand: gfetest.Rand()})
			f := func(time.Time) *routing.Fleet { return fleet }
			const step = time.Millisecond
			before := laRun(t, b, f, t0, 2*time.Second, step, latency)
			// From the first slow answer on: one second to lose the share.
			laRun(t, b, f, slowFrom, time.Second, step, latency)
			during := laRun(t, b, f, slowFrom.Add(time.Second), 3*time.Second, step, latency)
			laRun(t, b, f, slowTo, 3*time.Second, step, latency)
			after := laRun(t, b, f, slowTo.Add(3*time.Second), 3*time.Second, step, latency)
			t.Logf("slow instance's share: before %.3f, slow %.3f, recovered %.3f", share(before), share(during), share(after))
			if s := share(before); s < 0.25 {
				t.Errorf("share before the slow spell %.3f, want about 1/3 (>= 0.25)", s)
			}
			if s := share(during); s > tt.slowMax {
				t.Errorf("share while 20x slower %.3f, want <= %v", s, tt.slowMax)
			}
			if s := share(after); s < tt.backMin {
				t.Errorf("share 3s after recovering %.3f, want >= %v", s, tt.backMin)
			}
		})
	}
	t.Run("off", func(t *testing.T) {
		fleet := laFleet(t, addrs, "")
		b := routing.NewBuilder(routing.Config{Node: "gfe-nyc", Site: "nyc", Damping: 1}, routing.Options{Rand: gfetest.Rand()})
		during := laRun(t, b, func(time.Time) *routing.Fleet { return fleet }, slowFrom.Add(time.Second), 3*time.Second, time.Millisecond, latency)
		if s := share(during); math.Abs(s-1.0/3) > 0.01 {
			t.Errorf("round robin: slow share %.3f, want 1/3", s)
		}
	})
}

// TestLoadAwareSlowStart: an instance that becomes healthy after the first
// build slow-starts: in the first 3s of its 30s window it gets well under
// an established instance's share (weight at most 0.1), and in the window's
// last 3s close to a full one.
func TestLoadAwareSlowStart(t *testing.T) {
	addrs := []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:4"}
	extra := "load_aware: {enabled: true, slow_start: 30s}"
	without, with := laFleet(t, addrs, extra, addrs[3]), laFleet(t, addrs, extra)
	t0 := time.Unix(1_000_000, 0)
	join := t0.Add(2 * time.Second)
	fleet := func(now time.Time) *routing.Fleet {
		if now.Before(join) {
			return without
		}
		return with
	}
	b := routing.NewBuilder(routing.Config{Node: "gfe-nyc", Site: "nyc", Damping: 1}, routing.Options{Rand: gfetest.Rand()})
	lat := func(string, time.Time) time.Duration { return 10 * time.Millisecond }
	const step = time.Millisecond
	laRun(t, b, fleet, t0, 2*time.Second, step, lat)
	early := laRun(t, b, fleet, join, 3*time.Second, step, lat)
	laRun(t, b, fleet, join.Add(3*time.Second), 24*time.Second, 10*step, lat)
	late := laRun(t, b, fleet, join.Add(27*time.Second), 3*time.Second, step, lat)
	later := laRun(t, b, fleet, join.Add(31*time.Second), 3*time.Second, step, lat)
	ratio := func(m map[string]int) float64 {
		// The new instance's requests over an established one's mean.
		est := float64(m[addrs[0]]+m[addrs[1]]+m[addrs[2]]) / 3
		return float64(m[addrs[3]]) / est
	}
	t.Logf("new instance over an established one: first 3s %.3f, last 3s of the window %.3f, after it %.3f", ratio(early), ratio(late), ratio(later))
	if r := ratio(early); r > 0.25 {
		t.Errorf("first 3s of the window: %.3f of an established share, want <= 0.25", r)
	}
	if r := ratio(late); r < 0.75 {
		t.Errorf("last 3s of the window: %.3f of an established share, want >= 0.75", r)
	}
	if r := ratio(later); math.Abs(r-1) > 0.15 {
		t.Errorf("after the window: %.3f of an established share, want 1 ± 0.15", r)
	}
}

// TestShedFromPlan: with overload.shed on, a service whose global demand
// is 1.2 times its capacity refuses 1 − 1/1.2 = 1/6 of its arrivals
// (Service.Shed); admit 0.9 refuses 1 − 0.9/1.2 = 1/4; with it off, or
// below capacity, nothing.
func TestShedFromPlan(t *testing.T) {
	addrs := []string{"127.0.0.1:1", "127.0.0.1:2"}
	const capacity = 2 * 1000 * 0.95 // max_rate_per_instance 1000, target_utilization 0.95
	for _, tt := range []struct {
		name   string
		extra  string
		demand float64
		want   float64
	}{
		{"λ=1.2", "overload: {shed: true}", 1.2 * capacity, 1.0 / 6},
		{"λ=1.2 admit 0.9", "overload: {shed: true, admit: 0.9}", 1.2 * capacity, 0.25},
		{"λ=0.9", "overload: {shed: true}", 0.9 * capacity, 0},
		{"off", "", 1.2 * capacity, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := routing.NewBuilder(routing.Config{Node: "gfe-nyc", Site: "nyc", Damping: 1}, routing.Options{Rand: gfetest.Rand()})
			svc := laBuild(t, b, laFleet(t, addrs, tt.extra), time.Unix(1_000_000, 0), tt.demand)
			rule := svc.Shed()
			if math.Abs(rule.Fraction()-tt.want) > 1e-9 {
				t.Fatalf("Shed().Fraction() = %v, want %v (plan λ %v)", rule.Fraction(), tt.want, svc.Plan().Lambda)
			}
			rnd := lcg()
			const n = 60000
			refused := 0
			for range n {
				if !rule.Admit(rnd()) {
					refused++
				}
			}
			if got := float64(refused) / n; math.Abs(got-tt.want) > 0.01 {
				t.Errorf("refused %.4f of %d arrivals, want %.4f ± 0.01", got, n, tt.want)
			}
		})
	}
}

// TestLoadAwarePickDoesNotAllocate: a load-aware pick, its latency report
// and its utilization report allocate nothing.
func TestLoadAwarePickDoesNotAllocate(t *testing.T) {
	b := routing.NewBuilder(routing.Config{Node: "gfe-nyc", Site: "nyc", Damping: 1}, routing.Options{Rand: gfetest.Rand()})
	now := time.Unix(1_000_000, 0)
	svc := laBuild(t, b, laFleet(t, []string{"127.0.0.1:1", "127.0.0.1:2"}, "load_aware: {enabled: true}\noverload: {shed: true}"), now, 100)
	k := routing.Flow{Src: netip.MustParseAddrPort("127.0.3.4:5555"), Dst: netip.MustParseAddrPort("127.0.1.1:8080")}
	n := testing.AllocsPerRun(1000, func() {
		if !svc.Shed().Admit(12345) {
			t.Fatal("refused below capacity")
		}
		pk, err := svc.PickAt(12345, k, now)
		if err != nil {
			t.Fatal(err)
		}
		if pk.Endpoint == nil {
			t.Fatal("load-aware pick without its Endpoint")
		}
		pk.ObserveLatency(now, 10*time.Millisecond)
		pk.ObserveUtilization(now, 0.5)
		pk.Done()
	})
	if n != 0 {
		t.Errorf("load-aware pick allocates %v times, want 0", n)
	}
}

// TestShedLyingPeerBounded plays a certified gfe that gossips a huge
// demand for its site while overload shedding is on. The plan believes it
// only within Bounds (at most MaxDemand × the declared capacity, rising by
// MaxDemandRise of it per second), so the fraction an honest gfe would
// refuse grows to 1 − capacity/(honest + the bound), 68% here, and
// without Bounds to almost everything; overload.max_shed (default 0.5)
// caps what the lie can make it refuse at half of its arrivals either way.
func TestShedLyingPeerBounded(t *testing.T) {
	addrs := []string{"127.0.0.1:1", "127.0.0.1:2"}
	const (
		declared = 2 * 1000.0      // two instances of max_rate_per_instance 1000: the bounds' base
		capacity = declared * 0.95 // what the plan gives them at target_utilization 0.95
		honest   = capacity        // this gfe's own demand: exactly what fits
	)
	liar := routing.Peer{Node: "gfe-lon", Site: "lon", RTT: map[string]float64{"r1": 5}, Demand: map[string]float64{"web": 1e12}}
	for _, tt := range []struct {
		name     string
		overload string
		bounds   routing.Bounds
		want     float64
	}{
		{"default bounds, default max_shed", "overload: {shed: true}", routing.DefaultBounds(), 0.5},
		{"no bounds, default max_shed", "overload: {shed: true}", routing.Bounds{}, 0.5},
		{"default bounds, max_shed 1", "overload: {shed: true, max_shed: 1}", routing.DefaultBounds(), 1 - capacity/(honest+2*declared)},
		{"no bounds, max_shed 1", "overload: {shed: true, max_shed: 1}", routing.Bounds{}, 1 - capacity/(honest+1e12)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := routing.NewBuilder(routing.Config{Node: "gfe-nyc", Site: "nyc", Damping: 1, Bounds: tt.bounds}, routing.Options{Rand: gfetest.Rand()})
			fleet := laFleet(t, addrs, tt.overload)
			now := time.Unix(1_000_000, 0)
			var got float64
			for range 20 { // 10 s of builds: the bound's ramp takes 2 s
				tbl, problems := b.Build(routing.Input{Fleet: fleet, Peers: []routing.Peer{liar},
					Self: routing.Peer{Node: "gfe-nyc", Site: "nyc", RTT: map[string]float64{"r1": 5}, Demand: map[string]float64{"web": honest}}, Now: now})
				if len(problems) > 0 {
					t.Fatalf("Build: %v", problems)
				}
				got = max(got, tbl.Services["web"].Shed().Fraction())
				now = now.Add(500 * time.Millisecond)
			}
			if math.Abs(got-tt.want) > 1e-6 {
				t.Errorf("largest refused fraction %.6f, want %.6f", got, tt.want)
			}
		})
	}
}

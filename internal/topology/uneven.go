package topology

import (
	"fmt"
	"time"
)

// The capacity of every instance of Uneven: UnevenSlots requests served at
// once, each holding its slot for UnevenServiceTime, so 37.5 requests/s at
// most; the config declares UnevenRate (max_rate_per_instance), two thirds
// of that, so that a region whose antagonized half is slowed 3× for half
// of the time (DefaultUnevenAntagonist) still serves 1.25× its declared
// capacity on average — `lbsim bench`'s utilization_at_capacity 0.8 — while
// each slowed instance, during its slow window, serves half of its
// declared capacity.
const (
	UnevenSlots       = 3
	UnevenServiceTime = 80 * time.Millisecond
	UnevenRate        = 25.0
)

// UnevenAntagonist is the slowdown of Uneven's antagonized instances: for
// Duty of every Period each request holds its slot Slowdown times longer,
// so the instance serves Slowdown times fewer requests/s meanwhile.
type UnevenAntagonist struct {
	Period   time.Duration
	Duty     float64
	Slowdown float64
}

// DefaultUnevenAntagonist slows an instance 3× for half of every 4 s.
var DefaultUnevenAntagonist = UnevenAntagonist{Period: 4 * time.Second, Duty: 0.5, Slowdown: 3}

// Uneven returns the deployment of the real benchmark's uneven story in
// 127.net.0.0/16: four regions of two zones — us-east, eu-west and sa-east
// with two instances per zone (100 req/s each region), asia-east with one
// (50 req/s, the least) — and sites nyc, lon, tokyo and sao, 8 ms from
// their own region and 35 to 130 ms from the others; tokyo, the site
// nearest the smallest region, is the one the story loads most. Every
// instance's capacity is real and time-bound (UnevenSlots slots of
// UnevenServiceTime, no rate limit, a queue of 64), so that an antagonist
// that multiplies the service time divides the capacity. In every region
// half of the instances (Antagonized) run with the antagonist a, each with
// a seed of its own, so that their slow windows do not coincide and a run
// repeats exactly.
func Uneven(net int, a UnevenAntagonist) Spec {
	ms := time.Millisecond
	s := Spec{
		Net:   net,
		Queue: 64,
		Sites: []Site{
			{Name: "nyc", RTT: map[string]time.Duration{"us-east": 8 * ms, "eu-west": 35 * ms, "asia-east": 90 * ms, "sa-east": 55 * ms}},
			{Name: "lon", RTT: map[string]time.Duration{"us-east": 35 * ms, "eu-west": 8 * ms, "asia-east": 80 * ms, "sa-east": 95 * ms}},
			{Name: "tokyo", RTT: map[string]time.Duration{"us-east": 90 * ms, "eu-west": 80 * ms, "asia-east": 8 * ms, "sa-east": 130 * ms}},
			{Name: "sao", RTT: map[string]time.Duration{"us-east": 55 * ms, "eu-west": 95 * ms, "asia-east": 130 * ms, "sa-east": 8 * ms}},
		},
	}
	keys := fmt.Sprintf(",max_concurrency=%d,max_rps=0,service_time=%v", UnevenSlots, UnevenServiceTime)
	for _, r := range []struct {
		name      string
		instances int
	}{{"us-east", 2}, {"eu-west", 2}, {"asia-east", 1}, {"sa-east", 2}} {
		s.Regions = append(s.Regions, Region{Name: r.name, Zones: []string{"b", "c"}, Instances: r.instances, Rate: UnevenRate, InstanceKeys: keys})
	}
	for ri := range s.Regions {
		s.Regions[ri].BackendArgs = unevenAntagonists(ri, &s.Regions[ri], a)
	}
	return s
}

// Antagonized reports whether instance i (from 1) of zone z (from 0) of a
// region with n instances per zone is slowed in Uneven: every second
// instance of the region counted zone by zone (the first of each zone when
// n is even; of two zones with one instance each, zone z = 0's).
func Antagonized(z, i, n int) bool { return (z*n+i-1)%2 == 0 }

// unevenAntagonists returns the --antagonist flags of region ri (r): one
// per antagonized instance, seed 1 + 100·ri + its number in the region.
func unevenAntagonists(ri int, r *Region, a UnevenAntagonist) []string {
	var args []string
	for zi, z := range r.Zones {
		for i := 1; i <= r.Instances; i++ {
			if !Antagonized(zi, i, r.Instances) {
				continue
			}
			k := zi*r.Instances + i - 1
			args = append(args, "--antagonist", fmt.Sprintf("%s-%s-%d:period=%v,duty=%g,slowdown=%gx,seed=%d",
				r.Name, z, i, a.Period, a.Duty, a.Slowdown, 1+100*ri+k))
		}
	}
	return args
}

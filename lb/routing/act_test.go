package routing_test

import (
	"testing"
	"time"

	"github.com/spillway-lb/spillway/config"
	"github.com/spillway-lb/spillway/internal/gfe/gfetest"
	"github.com/spillway-lb/spillway/lb/routing"
)

// actYAML is one autoscaled group of two instances of max concurrency 4
// (act_interval 1s, 90% / 70%).
const actYAML = `regions:
  - name: us-east
    zones:
      - name: us-east-b
        groups:
          - name: east
            instances:
              - {address: "127.0.0.1:1", max_concurrency: 4}
              - {address: "127.0.0.1:2", max_concurrency: 4}
            autoscaling: {max_instances: 5, max_concurrency_per_instance: 4}
services:
  - name: web
    backends: [{group: east, max_rate_per_instance: 100}]
routes:
  - {host: "*", path_prefix: /, service: web}
`

// TestACTTuning: on the Build's clock, an instance whose load reports say
// CPU above 90% loses a slot per second down to 1, the picker honouring
// the tuned limit; back at its limit below 70% for a second it gains one
// per second up to max_concurrency_per_instance; a second without a report
// changes nothing; ACTLimits gives the group's mean limit.
func TestACTTuning(t *testing.T) {
	c, err := config.Parse([]byte(actYAML), "act.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cs := routing.FromConfig("v1", c)
	b := routing.NewBuilder(routing.Config{Node: "gfe-nyc", Site: "nyc", Damping: 1}, routing.Options{Now: time.Now, Rand: gfetest.Rand()})
	now := time.Unix(1_000_000, 0)
	self := routing.Peer{Node: "gfe-nyc", Site: "nyc", RTT: map[string]float64{"us-east": 5}, Demand: map[string]float64{"web": 10}}
	build := func() {
		if _, problems := b.Build(routing.Input{Fleet: cs, Self: self, Now: now}); len(problems) > 0 {
			t.Fatalf("Build: %v", problems)
		}
	}
	build()
	hot, cool := b.Backend("127.0.0.1:1"), b.Backend("127.0.0.1:2")
	if hot.ACTLimit() != 4 || cool.ACTLimit() != 4 {
		t.Fatalf("initial ACT limits %d, %d, want 4 (max_concurrency_per_instance)", hot.ACTLimit(), cool.ACTLimit())
	}
	// Five seconds at 95% CPU: 4 → 3 → 2 → 1 → 1 → 1, checked at half
	// seconds (a Build between two intervals changes nothing).
	want := []int64{4, 3, 3, 2, 2, 1, 1, 1, 1, 1}
	for i, w := range want {
		hot.ObserveCPU(0.95)
		cool.ObserveCPU(0.5)
		now = now.Add(500 * time.Millisecond)
		build()
		if i > 0 && hot.ACTLimit() != w {
			t.Fatalf("t=%v: hot limit %d, want %d", time.Duration(i+1)*500*time.Millisecond, hot.ACTLimit(), w)
		}
	}
	if cool.ACTLimit() != 4 {
		t.Errorf("cool instance (50%%, never at its limit) limit %d, want 4", cool.ACTLimit())
	}
	// The picker's slots: 1 on the hot instance.
	if !hot.TryAcquire() || hot.TryAcquire() || hot.TryAcquireHard() {
		t.Fatalf("hot instance takes more than its tuned limit 1")
	}
	if got := b.ACTLimits(c)["east"]; got != 2.5 {
		t.Errorf("ACTLimits[east] = %v, want (1 + 4) / 2", got)
	}
	// A second without reports: unchanged. Then at its limit (1 in
	// flight) at 40%: +1 per whole second, up to 4.
	now = now.Add(time.Second)
	build()
	if hot.ACTLimit() != 1 {
		t.Fatalf("a second without reports changed the limit to %d", hot.ACTLimit())
	}
	// 1 in flight (the request acquired above) = its limit: +1 after the
	// first second; then no longer at its limit (1 < 2), nothing more.
	for range 3 {
		hot.ObserveCPU(0.4)
		now = now.Add(time.Second)
		build()
	}
	if hot.ACTLimit() != 2 {
		t.Fatalf("at its limit below 70%% for a second, then not at it: limit %d, want 2", hot.ACTLimit())
	}
	for range 6 {
		for hot.TryAcquireHard() { // keep it at its limit
		}
		hot.ObserveCPU(0.4)
		now = now.Add(time.Second)
		build()
	}
	if hot.ACTLimit() != 4 {
		t.Errorf("after seconds at its limit below 70%%: limit %d, want the ceiling 4", hot.ACTLimit())
	}
}

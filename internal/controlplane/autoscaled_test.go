package controlplane

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/internal/snapshot"
	"github.com/spillway-lb/spillway/lb/health"
	"github.com/spillway-lb/spillway/lb/routing"
)

// autoscaledYAML has group g00 with an active and a demoted instance, and
// group auto, autoscaled and without instances (at zero).
const autoscaledYAML = `regions:
  - name: r1
    zones:
      - name: z-g00
        groups:
          - name: g00
            instances:
              - address: 127.0.0.1:20000
              - {address: 127.0.0.1:20001, demoted: true}
  - name: r2
    zones:
      - name: z-auto
        groups:
          - name: auto
            instances: []
            autoscaling: {max_instances: 4}
services:
  - name: web
    backends:
      - {group: g00, max_rate_per_instance: 100}
      - {group: auto, max_rate_per_instance: 100}
    health_check: {interval: 1s, timeout: 500ms, jitter: 0, healthy_threshold: 1, unhealthy_threshold: 1}
routes:
  - service: web
`

// TestDaemonServesEmptyAutoscaledGroup: a config with an autoscaled group
// at zero and a demoted instance loads, is served to a gfe whose planner
// accepts it (routing.CheckPlannable, as the gfe checks before its ACK),
// and keeps both: the empty group and demoted: true.
func TestDaemonServesEmptyAutoscaledGroup(t *testing.T) {
	path := writeFile(t, t.TempDir(), "cp.yaml", autoscaledYAML)
	r := startDaemon(t, "cp-a", path, nil, clock.NewFake(epoch), newWorld(), true)
	c := r.client(t, func(s *snapshot.Snapshot) error { return routing.CheckPlannable(&s.Fleet) })
	s := waitSnapshot(t, c, "both instances healthy", func(s *snapshot.Snapshot) bool {
		return s.Healthy("127.0.0.1:20000") && s.Healthy("127.0.0.1:20001")
	})
	auto, ok := s.Config.Group("auto")
	if !ok || len(auto.Group.Instances) != 0 || !auto.Group.Autoscaling.Enabled() {
		t.Errorf("served group auto: found %v, %d instances, autoscaling %v; want found, 0, on", ok, len(auto.Group.Instances), auto.Group.Autoscaling.Enabled())
	}
	g00, _ := s.Config.Group("g00")
	if got := []bool{g00.Group.Instances[0].Demoted, g00.Group.Instances[1].Demoted}; !cmp.Equal(got, []bool{false, true}) {
		t.Errorf("served demoted flags of g00 = %v, want [false true]", got)
	}
	if capRPS, _ := s.Config.GroupCapacity("web", "g00", s.HealthyActiveCount(g00.Group.Instances)); capRPS != 100 {
		t.Errorf("g00 capacity = %v req/s, want 100 (the demoted instance counts for nothing)", capRPS)
	}
	waitUntil(t, "ACK of the snapshot", func() bool {
		n, ok := r.d.Node("gfe-1")
		return ok && n.Acked == s.Version
	})
}

// TestHealthManagerEmptyGroup: the health manager checks nothing in a
// group at zero, is ready on the other groups' verdicts, and gossips the
// empty group as 0 of 0; a demoted instance is checked like any other.
func TestHealthManagerEmptyGroup(t *testing.T) {
	r := newHealthRig(t, "cp-a", autoscaledYAML)
	r.prober.waitProbes(t, []string{"127.0.0.1:20000", "127.0.0.1:20001"})
	st := r.wait(t, "ready", func(s *State) bool { return s.Ready })
	for _, a := range []string{"127.0.0.1:20000", "127.0.0.1:20001"} {
		if got := statusOf(st, a); got != health.StatusHealthy {
			t.Errorf("%s is %s, want healthy", a, got)
		}
	}
	if len(st.Health) != 2 {
		t.Errorf("state has %d instances, want 2", len(st.Health))
	}
	pub, _, _ := r.gossip.lastPublished()
	want := []gossip.GroupState{
		{Group: "g00", Region: "r1", Zone: "z-g00", Instances: 2, Healthy: 2, HealthyInstances: []string{"127.0.0.1:20000", "127.0.0.1:20001"}},
		{Group: "auto", Region: "r2", Zone: "z-auto"},
	}
	if diff := cmp.Diff(want, pub.Groups); diff != "" {
		t.Errorf("published groups (-want +got):\n%s", diff)
	}
}

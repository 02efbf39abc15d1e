package controlplane

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spillway-lb/spillway/internal/clock"
	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/lb/health"
)

// healthRig runs a healthManager on a fake clock, fake gossip and a fake
// prober.
type healthRig struct {
	clk    *clock.Fake
	gossip *fakeGossip
	world  *world
	prober *fakeProber
	hub    *hub
	hm     *healthManager
	m      *metrics
}

// newHealthRig starts the manager; the instances in failing fail from the
// first probe on.
func newHealthRig(t *testing.T, self, yaml string, failing ...string) *healthRig {
	t.Helper()
	r := &healthRig{clk: clock.NewFake(epoch), gossip: newFakeGossip(self), world: newWorld(), hub: newHub()}
	for _, a := range failing {
		r.world.setFailing(a, true)
	}
	r.prober = newFakeProber(r.world)
	r.m = newMetrics(prometheus.NewRegistry())
	r.hm = newHealthManager(self, testReplicas, r.gossip, r.hub, Options{Clock: r.clk, Logger: testLogger(t), Prober: r.prober}, r.m)
	if err := r.hm.ApplyConfig(loaded(t, yaml, "hash1")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.hm.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v", err)
		}
	})
	return r
}

func (r *healthRig) wait(t *testing.T, what string, cond func(*State) bool) *State {
	t.Helper()
	return waitState(t, r.hub.Load, what, cond)
}

func TestHealthManagerChecksAndPublishes(t *testing.T) {
	const a0, a1, b0, b1 = "127.0.0.1:20000", "127.0.0.1:20001", "127.0.0.1:20002", "127.0.0.1:20003"
	r := newHealthRig(t, "cp-a", manyGroups(2).yaml(), b1)

	// Alone, cp-a owns both groups, probes all four at once (jitter 0)
	// and is ready as soon as all have a verdict (thresholds 1).
	r.prober.waitProbes(t, []string{a0, a1, b0, b1})
	st := r.wait(t, "ready with b1 down", func(s *State) bool { return s.Ready && statusOf(s, b1) == health.StatusUnhealthy })
	for _, a := range []string{a0, a1, b0} {
		if got := statusOf(st, a); got != health.StatusHealthy {
			t.Errorf("%s is %s, want healthy", a, got)
		}
	}
	if !strings.HasPrefix(st.Version, "hash1-") {
		t.Errorf("Version = %q, want the config hash first", st.Version)
	}
	pub, _, _ := r.gossip.lastPublished()
	want := []gossip.GroupState{
		{Group: "g00", Region: "r1", Zone: "z-g00", Instances: 2, Healthy: 2, HealthyInstances: []string{a0, a1}},
		{Group: "g01", Region: "r2", Zone: "z-g01", Instances: 2, Healthy: 1, HealthyInstances: []string{b0}},
	}
	if pub.Kind != gossip.KindControlPlane {
		t.Errorf("published kind %q, want controlplane", pub.Kind)
	}
	if diff := cmp.Diff(want, pub.Groups); diff != "" {
		t.Errorf("published groups mismatch (-want +got):\n%s", diff)
	}
	if got := metricValue(t, r.m.instances.WithLabelValues("healthy")); got != 3 {
		t.Errorf("instances{status=healthy} = %v, want 3", got)
	}
	if got := metricValue(t, r.m.checks.WithLabelValues("web", resultFail)); got != 1 {
		t.Errorf("health_checks_total{result=fail} = %v, want 1", got)
	}

	// a0 starts failing: one interval later it is down, with the probe's
	// error as detail, under a new version.
	r.world.setFailing(a0, true)
	advanceUntil(t, r.clk, time.Second, "a0 down", func() bool {
		st, _ := r.hub.Load()
		return statusOf(st, a0) == health.StatusUnhealthy
	})
	st2, _ := r.hub.Load()
	if st2.Version == st.Version {
		t.Errorf("version %s did not change when a0 went down", st.Version)
	}
	for _, ih := range st2.Health {
		if ih.Address == a0 {
			if !strings.Contains(ih.Detail, "fake: connection refused") || !ih.Since.After(epoch) {
				t.Errorf("a0 = %+v, want the probe error as detail and since after the start", ih)
			}
		}
	}
	waitUntil(t, "g00 published with one healthy instance", func() bool {
		p, _, _ := r.gossip.lastPublished()
		return len(p.Groups) == 2 && p.Groups[0].Healthy == 1 && len(p.Groups[0].HealthyInstances) == 1
	})
}

func TestHealthManagerSettleDeadline(t *testing.T) {
	yaml := strings.Replace(manyGroups(1).yaml(), "unhealthy_threshold: 1", "unhealthy_threshold: 3", 1)
	const a0, a1 = "127.0.0.1:20000", "127.0.0.1:20001"
	r := newHealthRig(t, "cp-a", yaml, a1)
	r.prober.waitProbes(t, []string{a0, a1})
	// a1 failed once of three: no verdict, so the view has not settled and
	// nothing is served or gossiped (beyond the announcement).
	st := r.wait(t, "a0 healthy", func(s *State) bool { return statusOf(s, a0) == health.StatusHealthy })
	if st.Ready {
		t.Fatalf("ready with a1 %s before the settle deadline", statusOf(st, a1))
	}
	if pub, n, _ := r.gossip.lastPublished(); n != 1 || len(pub.Groups) != 0 {
		t.Errorf("published %d states, last with %d groups; want only the empty announcement", n, len(pub.Groups))
	}
	// The deadline is Jitter·Interval + Timeout + margin = 600ms.
	r.clk.Advance(600 * time.Millisecond)
	st = r.wait(t, "ready", func(s *State) bool { return s.Ready })
	if got := statusOf(st, a1); got != health.StatusUnknown {
		t.Errorf("a1 is %s, want unknown (served as not healthy)", got)
	}
	waitUntil(t, "g00 published", func() bool {
		p, _, _ := r.gossip.lastPublished()
		return len(p.Groups) == 1 && slices.Equal(p.Groups[0].HealthyInstances, []string{a0})
	})
}

func TestHealthManagerSharesWithOtherControlPlane(t *testing.T) {
	tp := manyGroups(20)
	r := newHealthRig(t, "cp-a", tp.yaml())
	var all []string
	addrsOf := map[string][]string{}
	for _, g := range tp.groups {
		all = append(all, g.addrs...)
		addrsOf[g.name] = g.addrs
	}
	slices.Sort(all)
	r.prober.waitProbes(t, all)
	r.wait(t, "ready", func(s *State) bool { return s.Ready })

	// cp-b appears, with verdicts for every group: one failing instance
	// in each group it will own.
	own, err := newOwnership([]string{"cp-a", "cp-b"}, groupNames(20))
	if err != nil {
		t.Fatal(err)
	}
	bGroups := own.owned("cp-b")
	var bState gossip.NodeState
	bState.Kind = gossip.KindControlPlane
	for _, g := range bGroups {
		bState.Groups = append(bState.Groups, gossip.GroupState{Group: g, Region: "r", Instances: 2, Healthy: 1, HealthyInstances: addrsOf[g][1:]})
	}
	r.gossip.set("cp-b", &bState)
	waitUntil(t, "cp-a sees cp-b", func() bool {
		_, owned := r.hm.Ownership().Members, r.hm.Ownership().Owned
		return len(r.hm.Ownership().Members) == 2 && slices.Equal(owned, own.owned("cp-a"))
	})
	if n := len(bGroups); n < 5 || n > 15 {
		t.Errorf("cp-b owns %d of 20 groups, want about half", n)
	}
	st := r.wait(t, "cp-b's groups from its report", func(s *State) bool {
		for _, g := range bGroups {
			if statusOf(s, addrsOf[g][0]) != health.StatusUnhealthy {
				return false
			}
		}
		return true
	})
	for _, ih := range st.Health {
		if slices.Contains(bGroups, ih.Group) != (ih.Source == "cp-b") {
			t.Errorf("%s/%s decided by %q", ih.Group, ih.Address, ih.Source)
		}
	}
	// cp-a now probes only its own groups.
	r.prober.takeCounts()
	var mine []string
	for _, g := range own.owned("cp-a") {
		mine = append(mine, addrsOf[g]...)
	}
	slices.Sort(mine)
	advanceUntil(t, r.clk, time.Second, "cp-a probed its own groups", func() bool { return slices.Equal(r.prober.probedSet(), mine) })
	waitUntil(t, "cp-a publishes only its groups", func() bool {
		p, _, _ := r.gossip.lastPublished()
		var got []string
		for _, g := range p.Groups {
			got = append(got, g.Group)
		}
		slices.Sort(got) // published in file order
		return slices.Equal(got, own.owned("cp-a"))
	})

	// cp-b dies: cp-a takes its groups over and probes them at once; until
	// its own probes decide, cp-b's last verdicts stand, and they are
	// replaced by cp-a's (everything passes in the fake world).
	r.prober.takeCounts()
	r.gossip.set("cp-b", nil)
	var theirs []string
	for _, g := range bGroups {
		theirs = append(theirs, addrsOf[g]...)
	}
	slices.Sort(theirs)
	r.prober.waitProbed(t, theirs) // at once, without advancing the clock
	st = r.wait(t, "every instance healthy, checked by cp-a", func(s *State) bool {
		for _, ih := range s.Health {
			if ih.Status != health.StatusHealthy || ih.Source != "cp-a" {
				return false
			}
		}
		return true
	})
	if got := r.hm.Ownership().Owned; len(got) != 20 {
		t.Errorf("cp-a owns %d groups after cp-b left, want 20", len(got))
	}
	if len(st.Health) != 40 {
		t.Errorf("state has %d instances, want 40", len(st.Health))
	}
}

func TestSpecFor(t *testing.T) {
	yaml := manyGroups(1).yaml()
	yaml = strings.Replace(yaml, "health_check: {interval: 1s", "health_check: {protocol: https, path: /ready, port: 8443, interval: 1s", 1)
	l := loaded(t, yaml, "h")
	s := specFor(l.Config.Services[0].HealthCheck)
	want := checkSpec{https: true, port: 8443, cfg: health.Config{
		Protocol: health.ProtocolHTTP, Path: "/ready", ExpectedStatus: health.StatusRange{Min: 200, Max: 299},
		Interval: time.Second, Timeout: 500 * time.Millisecond, HealthyThreshold: 1, UnhealthyThreshold: 1,
		Jitter: 0, InitialStatus: health.StatusUnknown,
	}}
	if diff := cmp.Diff(want, s, cmp.AllowUnexported(checkSpec{})); diff != "" {
		t.Errorf("specFor() mismatch (-want +got):\n%s", diff)
	}
}

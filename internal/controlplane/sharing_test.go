package controlplane

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spillway-lb/spillway/internal/gossip"
	"github.com/spillway-lb/spillway/lb/health"
)

func groupNames(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("g%02d", i))
	}
	return out
}

func TestOwnership(t *testing.T) {
	groups := groupNames(40)
	abc, err := newOwnership([]string{"cp-a", "cp-b", "cp-c"}, groups)
	if err != nil {
		t.Fatal(err)
	}
	// Every group has exactly one owner, and the share is even enough.
	total := 0
	for _, m := range abc.members {
		n := len(abc.owned(m))
		total += n
		if n < 40/3/2 || n > 2*40/3 {
			t.Errorf("%s owns %d of 40 groups, want about a third", m, n)
		}
	}
	if total != 40 {
		t.Errorf("owned groups sum to %d, want 40", total)
	}
	// Removing cp-b moves only cp-b's groups.
	ac, err := newOwnership([]string{"cp-a", "cp-c"}, groups)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		if was, now := abc.owner[g], ac.owner[g]; was != "cp-b" && was != now {
			t.Errorf("group %s moved from %s to %s when cp-b left", g, was, now)
		}
	}
	// One member owns everything.
	solo, err := newOwnership([]string{"cp-a"}, groups)
	if err != nil {
		t.Fatal(err)
	}
	if got := solo.owned("cp-a"); !slices.Equal(got, groups) {
		t.Errorf("sole member owns %v, want all", got)
	}
}

func TestControlPlanes(t *testing.T) {
	snap := &gossip.Snapshot{States: map[string]gossip.NodeState{
		"gfe-1": {Node: "gfe-1", Kind: gossip.KindGFE, Site: "x"},
		"cp-b":  {Node: "cp-b", Kind: gossip.KindControlPlane},
		"cp-a":  {Node: "cp-a", Kind: gossip.KindControlPlane},
		"evil":  {Node: "evil", Kind: gossip.KindControlPlane},
	}}
	vouched := map[string]bool{"cp-a": true, "cp-b": true, "cp-c": true, "cp-d": true}
	if got, want := controlPlanes(snap, "cp-c", vouched), []string{"cp-a", "cp-b", "cp-c"}; !slices.Equal(got, want) {
		t.Errorf("controlPlanes() = %v, want %v", got, want)
	}
	if got, want := unvouched(snap, "cp-c", vouched), []string{"evil"}; !slices.Equal(got, want) {
		t.Errorf("unvouched() = %v, want %v", got, want)
	}
	if got, want := controlPlanes(snap, "cp-c", nil), []string{"cp-c"}; !slices.Equal(got, want) {
		t.Errorf("controlPlanes() without replicas = %v, want only self %v", got, want)
	}
	if got, want := controlPlanes(nil, "cp-a", vouched), []string{"cp-a"}; !slices.Equal(got, want) {
		t.Errorf("controlPlanes(nil) = %v, want %v", got, want)
	}
}

func TestReportsFrom(t *testing.T) {
	snap := &gossip.Snapshot{States: map[string]gossip.NodeState{
		"cp-b": {Node: "cp-b", Kind: gossip.KindControlPlane, Groups: []gossip.GroupState{
			{Group: "g1", Region: "r", Instances: 2, Healthy: 1, HealthyInstances: []string{"h:1"}},
			{Group: "g1", Region: "r", Instances: 2, Healthy: 1, HealthyInstances: []string{"h:1"}},
			{Group: "g2", Region: "r", Instances: 2, Healthy: 0},
			{Group: "g3", Region: "r", Instances: 2, Healthy: 2}, // says how many, not which: no report
		}},
		"cp-a":  {Node: "cp-a", Kind: gossip.KindControlPlane, Groups: []gossip.GroupState{{Group: "g9", Region: "r", Instances: 1}}},
		"gfe-1": {Node: "gfe-1", Kind: gossip.KindGFE, Site: "x"},
		"evil": {Node: "evil", Kind: gossip.KindControlPlane, Groups: []gossip.GroupState{
			{Group: "g1", Region: "r", Instances: 2, Healthy: 0},
		}},
	}}
	got := reportsFrom(snap, "cp-a", map[string]bool{"cp-a": true, "cp-b": true})
	want := map[string][]report{
		"g1": {{node: "cp-b", healthy: map[string]bool{"h:1": true}}},
		"g2": {{node: "cp-b", healthy: map[string]bool{}}},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(report{})); diff != "" {
		t.Errorf("reportsFrom() mismatch (-want +got):\n%s", diff)
	}
}

func TestMerge(t *testing.T) {
	// g00 (instances 127.0.0.1:20000, :20001) is owned by cp-a (self),
	// g01 (:20002, :20003) by cp-b.
	cfg := loaded(t, manyGroups(2).yaml(), "h")
	own := ownership{members: []string{"cp-a", "cp-b", "cp-c"}, owner: map[string]string{"g00": "cp-a", "g01": "cp-b"}}
	const a0, a1, b0, b1 = "127.0.0.1:20000", "127.0.0.1:20001", "127.0.0.1:20002", "127.0.0.1:20003"
	now := epoch.Add(time.Minute)
	earlier := epoch
	rep := func(node string, healthy ...string) report {
		r := report{node: node, healthy: map[string]bool{}}
		for _, h := range healthy {
			r.healthy[h] = true
		}
		return r
	}
	ih := func(group, addr string, s health.Status, source, detail string, since time.Time) InstanceHealth {
		return InstanceHealth{Group: group, Address: addr, Status: s, Source: source, Detail: detail, Since: since}
	}
	const (
		up   = health.StatusHealthy
		down = health.StatusUnhealthy
		unk  = health.StatusUnknown
	)
	tests := []struct {
		name     string
		verdicts map[string]ownVerdict
		reports  map[string][]report
		known    map[string]InstanceHealth
		want     []InstanceHealth
	}{
		{
			name:     "own checks decide owned groups; the owner's report the others",
			verdicts: map[string]ownVerdict{a0: {status: up}, a1: {status: down, detail: "refused"}},
			reports:  map[string][]report{"g01": {rep("cp-b", b1)}},
			want: []InstanceHealth{
				ih("g00", a0, up, "cp-a", "", time.Time{}),
				ih("g00", a1, down, "cp-a", "refused", time.Time{}),
				ih("g01", b0, down, "cp-b", "not healthy according to cp-b", time.Time{}),
				ih("g01", b1, up, "cp-b", "", time.Time{}),
			},
		},
		{
			name:     "nothing known yet",
			verdicts: map[string]ownVerdict{a0: {status: unk}},
			want: []InstanceHealth{
				ih("g00", a0, unk, "", "not checked yet", time.Time{}),
				ih("g00", a1, unk, "", "not checked yet", time.Time{}),
				ih("g01", b0, unk, "", "not checked yet", time.Time{}),
				ih("g01", b1, unk, "", "not checked yet", time.Time{}),
			},
		},
		{
			name: "new owner without verdicts starts from the previous owner's report, then from what it knew",
			// cp-c reported g00 (it owned it until now); g01's owner is gone
			// and nobody reports it: the last known verdicts stay.
			verdicts: map[string]ownVerdict{a0: {status: unk}, a1: {status: unk}},
			reports:  map[string][]report{"g00": {rep("cp-c", a0)}},
			known: map[string]InstanceHealth{
				a0: ih("g00", a0, up, "cp-c", "", earlier),
				a1: ih("g00", a1, up, "cp-c", "", earlier),
				b0: ih("g01", b0, down, "cp-b", "not healthy according to cp-b", earlier),
				b1: ih("g01", b1, up, "cp-b", "", time.Time{}),
			},
			want: []InstanceHealth{
				ih("g00", a0, up, "cp-c", "", earlier),
				ih("g00", a1, down, "cp-c", "not healthy according to cp-c", now),
				ih("g01", b0, down, "cp-b", "not healthy according to cp-b", earlier),
				ih("g01", b1, up, "cp-b", "", time.Time{}),
			},
		},
		{
			name:     "the owner's report beats another replica's",
			verdicts: map[string]ownVerdict{a0: {status: up}, a1: {status: up}},
			reports:  map[string][]report{"g01": {rep("cp-a2", b0, b1), rep("cp-b", b0)}},
			known:    map[string]InstanceHealth{b1: ih("g01", b1, up, "cp-b", "", earlier)},
			want: []InstanceHealth{
				ih("g00", a0, up, "cp-a", "", time.Time{}),
				ih("g00", a1, up, "cp-a", "", time.Time{}),
				ih("g01", b0, up, "cp-b", "", time.Time{}),
				ih("g01", b1, down, "cp-b", "not healthy according to cp-b", now),
			},
		},
		{
			name:     "without the owner's report another replica's counts",
			verdicts: map[string]ownVerdict{a0: {status: up}, a1: {status: up}},
			reports:  map[string][]report{"g01": {rep("cp-c", b0)}},
			want: []InstanceHealth{
				ih("g00", a0, up, "cp-a", "", time.Time{}),
				ih("g00", a1, up, "cp-a", "", time.Time{}),
				ih("g01", b0, up, "cp-c", "", time.Time{}),
				ih("g01", b1, down, "cp-c", "not healthy according to cp-c", time.Time{}),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := merge(mergeInput{
				self: "cp-a", groups: cfg.Config.Groups(), own: own,
				verdicts: tt.verdicts, reports: tt.reports, known: tt.known, now: now,
			})
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("merge() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckAddr(t *testing.T) {
	tests := []struct {
		addr string
		port int
		want string
	}{
		{"127.0.0.1:9101", 0, "127.0.0.1:9101"},
		{"127.0.0.1:9101", 8080, "127.0.0.1:8080"},
		{"[::1]:9101", 8080, "[::1]:8080"},
		{"backend.local:80", 81, "backend.local:81"},
	}
	for _, tt := range tests {
		if got := checkAddr(tt.addr, tt.port); got != tt.want {
			t.Errorf("checkAddr(%q, %d) = %q, want %q", tt.addr, tt.port, got, tt.want)
		}
	}
}

package controlplane

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/spillway-lb/spillway/config"
)

// TestStreamSendsAnOlderGFEAPolicyItKnows: the configuration runs a
// service under envoy_priority, a policy a gfe of an earlier release does
// not know: its strict parser would refuse the whole snapshot, and every
// service on that gfe would stay on its last configuration. The control
// plane negotiates the value as it does fields (config.Fields states
// "services[].policy=envoy_priority"): that gfe is sent the service
// without the policy — YAML it accepts, the service under the default
// waterfall — and /status names what it cannot honour
// ("services[0].policy=envoy_priority"); a gfe stating the value gets the
// canonical snapshot, as does nothing of it for a policy every release
// knows.
func TestStreamSendsAnOlderGFEAPolicyItKnows(t *testing.T) {
	r := newSvcRig(t)
	yaml := strings.Replace(manyGroups(2).yaml(), "  - name: web\n", "  - name: web\n    policy: envoy_priority\n", 1)
	r.cfg = loaded(t, yaml, "cfghash")
	if !strings.Contains(string(r.cfg.YAML), "policy: envoy_priority") {
		t.Fatalf("fixture: canonical YAML has no envoy_priority:\n%s", r.cfg.YAML)
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	v1 := r.state(true)
	earlier := slices.DeleteFunc(config.Fields(), func(p string) bool { return p == "services[].policy=envoy_priority" })

	cur := r.openAs(t, ctx, "gfe-new", "", config.Fields())
	if m := recv(t, cur, v1.Version, "1"); string(m.GetConfigYaml()) != string(r.cfg.YAML) {
		t.Errorf("gfe reading envoy_priority got\n%s\nwant the canonical\n%s", m.GetConfigYaml(), r.cfg.YAML)
	}
	ack(t, cur, v1.Version, "1")

	for _, tt := range []struct {
		id     string
		fields []string
	}{{"gfe-old", earlier}, {"gfe-baseline", nil}} {
		old := r.openAs(t, ctx, tt.id, "", tt.fields)
		m, err := old.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if m.GetVersion() == v1.Version {
			t.Errorf("%s: version %s, want one of its own", tt.id, m.GetVersion())
		}
		y := m.GetConfigYaml()
		if strings.Contains(string(y), "envoy_priority") {
			t.Errorf("%s was sent envoy_priority:\n%s", tt.id, y)
		}
		c, err := config.Parse(y, "old.yaml")
		if err != nil {
			t.Fatalf("%s: the YAML does not parse strictly: %v", tt.id, err)
		}
		if p := c.Services[0].Policy; p != config.PolicyWaterfall {
			t.Errorf("%s: service web under %s, want the default waterfall", tt.id, p)
		}
		ack(t, old, m.GetVersion(), m.GetNonce())
		ns := r.waitNode(t, tt.id, "acked", func(n NodeStatus) bool { return n.Acked == m.GetVersion() })
		if want := []string{"services[0].policy=envoy_priority"}; !slices.Equal(ns.Dropped, want) || ns.Lagging {
			t.Errorf("%s's status: dropped %q, lagging %v; want %q, false", tt.id, ns.Dropped, ns.Lagging, want)
		}
	}
	if n := r.waitNode(t, "gfe-new", "acked", func(n NodeStatus) bool { return n.Acked == v1.Version }); len(n.Dropped) != 0 {
		t.Errorf("gfe-new: dropped %q, want none", n.Dropped)
	}
}

// TestDroppedShownWithoutAPush: a gfe of an earlier release serves a
// service under waterfall; the operator switches it to envoy_priority.
// That gfe's form of the snapshot does not change (the policy left out is
// the waterfall it runs), so nothing is pushed to it, but its status must
// still name what it no longer honours, and stop naming it when the
// setting goes.
func TestDroppedShownWithoutAPush(t *testing.T) {
	r := newSvcRig(t)
	// Real hashes, as the reloader makes them: a form equal to the
	// canonical YAML has the canonical version.
	real := func(yaml string) *LoadedConfig {
		c := loaded(t, yaml, "")
		c.Hash = configHash(c.YAML)
		return c
	}
	r.cfg = real(manyGroups(2).yaml())
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	v1 := r.state(true)
	earlier := slices.DeleteFunc(config.Fields(), func(p string) bool { return p == "services[].policy=envoy_priority" })
	old := r.openAs(t, ctx, "gfe-old", "", earlier)
	recv(t, old, v1.Version, "1")
	ack(t, old, v1.Version, "1")
	r.waitNode(t, "gfe-old", "acked", func(n NodeStatus) bool { return n.Acked == v1.Version && len(n.Dropped) == 0 })

	base := r.cfg
	r.cfg = real(strings.Replace(manyGroups(2).yaml(), "  - name: web\n", "  - name: web\n    policy: envoy_priority\n", 1))
	r.state(true)
	want := []string{"services[0].policy=envoy_priority"}
	ns := r.waitNode(t, "gfe-old", "naming envoy_priority", func(n NodeStatus) bool { return slices.Equal(n.Dropped, want) })
	if ns.Pushed != v1.Version || ns.Acked != v1.Version || ns.Lagging {
		t.Errorf("gfe-old: pushed %q, acked %q, lagging %v; want %s for both (its form did not change), false", ns.Pushed, ns.Acked, ns.Lagging, v1.Version)
	}

	r.cfg = base
	r.state(true)
	r.waitNode(t, "gfe-old", "no longer naming it", func(n NodeStatus) bool { return len(n.Dropped) == 0 })
}
